#include "fs/layer_walk.h"

#include <cerrno>

namespace acqfs {

LayerStack::LayerStack(const Layers& layers, size_t open_per_layer)
    : upper_(layers.upper.root(), layers.upper.root_path(), open_per_layer,
             DirStack::kPathOnly),
      lower_(layers.lower.root(), layers.lower.root_path(), open_per_layer,
             DirStack::kPathOnly) {}

Status LayerStack::Push(const std::string& name, bool upper, bool lower) {
  if ((upper && this->upper() < 0) || (lower && this->lower() < 0) ||
      (!upper && !lower))
    return Error::Of(EINVAL, "enter directory (no such layer on the path)",
                     name);
  if (upper) ACQFS_TRY(upper_.Push(name));
  if (lower) {
    Status s = lower_.Push(name);
    if (!s) {
      if (upper) (void)upper_.Pop();  // back where it was
      return s;
    }
  }
  ++depth_;
  return Ok();
}

Status LayerStack::Pop() {
  if (depth_ == 0) return Ok();
  if (upper_.depth() == depth_) ACQFS_TRY(upper_.Pop());
  if (lower_.depth() == depth_) ACQFS_TRY(lower_.Pop());
  --depth_;
  return Ok();
}

}  // namespace acqfs
