// LayerStack: where a walk of the layers is, held open in the upper and in
// each lower layer (the host, the frozen layers) at the same path, with a
// bounded number of descriptors however deep the walk goes.
//
// A walk of the layers (the change scan behind `acqfs status`, the git
// bridge's delta scan, the merged-view cursor of MergedTree) enters one
// directory at a time. Each layer's directories on the current path form a
// prefix of it: once a layer has no directory at some depth it has none
// deeper. LayerStack is one DirStack (common/dir_walk.h, O_PATH mode) per
// layer, rooted at the layer's root descriptor: each keeps the deepest
// kOpenPerLayer directories of its prefix open and reopens a closed parent
// through ".." of its child when the walk comes back up (checked to be the
// directory it left, same device and inode, else ESTALE). So a walk holds
// at most (layers) x kOpenPerLayer descriptors, plus the few it opens for one
// entry at a time, whether the tree is 10 or 100,000 directories deep, and
// each step down or up costs O(1) system calls. Paths longer than PATH_MAX
// need no special case: every open is of one name relative to its parent.
//
// The stack keeps no path string: its users keep the one they need (most
// build an entry's path only when they report it).
// Thread-safety: one thread; the Layers must outlive the stack.
#ifndef ACQFS_FS_LAYER_WALK_H_
#define ACQFS_FS_LAYER_WALK_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/dir_walk.h"
#include "common/error.h"
#include "fs/layer.h"

namespace acqfs {

class LayerStack {
 public:
  // Descriptors each layer's stack keeps open (the deepest levels).
  static constexpr size_t kOpenPerLayer = 8;

  explicit LayerStack(const Layers& layers,
                      size_t open_per_layer = kOpenPerLayer);
  LayerStack(const LayerStack&) = delete;
  LayerStack& operator=(const LayerStack&) = delete;

  // Enters the directory `name` of the current one: its upper directory
  // when `upper` (the current directory must have one, else EINVAL), its
  // directory in each lower layer of `lower` (likewise; a bool `true` is
  // the host alone). None is a directory with no descriptor (a name the
  // merged view has in no layer's prefix). On failure the stack is where
  // it was.
  Status Push(const std::string& name, bool upper, LowerMask lower);
  // Goes back to the parent directory.
  Status Pop();

  // Levels below the layer roots (0: at the roots).
  size_t depth() const { return depth_; }
  // The current directory's descriptor in each layer (O_PATH; at depth 0
  // the layer roots), or -1 when that layer has no directory on this path.
  int upper() const { return upper_.depth() == depth_ ? upper_.top() : -1; }
  int lower(unsigned layer = 0) const {
    const DirStack& l = *lower_[layer];
    return l.depth() == depth_ ? l.top() : -1;
  }
  // The lower layers that have a directory on this path.
  LowerMask lower_mask() const;
  // Their descriptors (LowerFds: -1 for the others).
  LowerFds lower_fds() const;
  // Descriptors the stack holds (for tests).
  size_t open() const;

 private:
  DirStack upper_;
  std::vector<std::unique_ptr<DirStack>> lower_;  // by layer number
  size_t depth_ = 0;
};

}  // namespace acqfs

#endif  // ACQFS_FS_LAYER_WALK_H_
