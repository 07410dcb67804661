#include "fs/layer_walk.h"

#include <cerrno>

namespace acqfs {

LayerStack::LayerStack(const Layers& layers, size_t open_per_layer)
    : upper_(layers.upper.root(), layers.upper.root_path(), open_per_layer,
             DirStack::kPathOnly) {
  for (unsigned i = 0; i < layers.lower_layers(); ++i) {
    const Layer& l = layers.LowerLayer(i);
    lower_.push_back(std::make_unique<DirStack>(
        l.root(), l.root_path(), open_per_layer, DirStack::kPathOnly));
  }
}

LowerMask LayerStack::lower_mask() const {
  LowerMask m = 0;
  for (unsigned i = 0; i < lower_.size(); ++i)
    if (lower_[i]->depth() == depth_) m |= LowerBit(i);
  return m;
}

LowerFds LayerStack::lower_fds() const {
  LowerFds f;
  for (unsigned i = 0; i < lower_.size(); ++i) f.fd[i] = lower(i);
  return f;
}

size_t LayerStack::open() const {
  size_t n = upper_.open();
  for (const auto& l : lower_) n += l->open();
  return n;
}

Status LayerStack::Push(const std::string& name, bool upper, LowerMask lower) {
  if (lower_.size() < kMaxLowerLayers) lower &= LowerBit(lower_.size()) - 1;
  if ((upper && this->upper() < 0) || (lower & ~lower_mask()) ||
      (!upper && !lower))
    return Error::Of(EINVAL, "enter directory (no such layer on the path)",
                     name);
  if (upper) ACQFS_TRY(upper_.Push(name));
  for (LowerMask m = lower; m;) {
    unsigned i = TopLowerLayer(m);
    m &= ~LowerBit(i);
    Status s = lower_[i]->Push(name);
    if (!s) {
      // Back where it was.
      if (upper) (void)upper_.Pop();
      for (LowerMask done = lower & ~(m | LowerBit(i)); done;) {
        unsigned j = TopLowerLayer(done);
        done &= ~LowerBit(j);
        (void)lower_[j]->Pop();
      }
      return s;
    }
  }
  ++depth_;
  return Ok();
}

Status LayerStack::Pop() {
  if (depth_ == 0) return Ok();
  if (upper_.depth() == depth_) ACQFS_TRY(upper_.Pop());
  for (auto& l : lower_)
    if (l->depth() == depth_) ACQFS_TRY(l->Pop());
  --depth_;
  return Ok();
}

}  // namespace acqfs
