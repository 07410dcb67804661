// MergedTree: read-only access to a sandbox's merged view straight from its
// layers (no mount), through fs/layer's lookup rules. The git bridge reads
// the sandbox's .git, its .gitignore files and its changed files with it.
// Every path is relative to the layer roots, '/'-separated, "" = the root;
// no symlink is ever followed (a symlink is reported as one).
//
// A MergedTree is a cursor: it keeps the merged directory its last call
// reached open in every layer (a LayerStack, fs/layer_walk.h: at most
// LayerStack::kOpenPerLayer descriptors per layer, however deep) and resolves
// the next path from there: up to the deepest directory the two paths share,
// then down, each step one ResolveChildAt relative to the directory above
// it. Paths visited in sorted order (as the bridge visits changes) cost
// about one step per directory in all, and no path is ever opened whole
// from a layer root, so a tree deeper than PATH_MAX costs what a shallow
// one of the same size does. The Enter/Leave/Child calls drive the cursor
// one directory at a time (IgnoreRules does).
// Thread-safety: one thread (the cursor is state); the Layers must outlive
// the MergedTree.
#ifndef ACQFS_GITBRIDGE_MERGED_TREE_H_
#define ACQFS_GITBRIDGE_MERGED_TREE_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "fs/layer.h"
#include "fs/layer_walk.h"

namespace acqfs::gitbridge {

struct MergedNode {
  bool exists = false;
  bool in_upper = false;     // the visible object is the upper one
  unsigned lower_layer = 0;  // else the lower layer holding it
  struct stat st {};         // of the visible object
  DirView dir;               // when S_ISDIR(st.st_mode): its view
};

class MergedTree {
 public:
  explicit MergedTree(const Layers& layers);
  MergedTree(const MergedTree&) = delete;
  MergedTree& operator=(const MergedTree&) = delete;

  // Resolves `rel`. exists=false (and Ok) when any component is missing,
  // whited out, or not a directory on the way. Leaves the cursor at the
  // deepest directory of `rel`'s parent that exists.
  Result<MergedNode> Resolve(const std::string& rel);
  // The content of a regular file (ENOENT when missing, EISDIR/EINVAL when
  // not a regular file, EFBIG when larger than `limit`).
  Result<std::string> ReadFile(const std::string& rel, size_t limit = SIZE_MAX);
  // The target of a symlink.
  Result<std::string> ReadLink(const std::string& rel);
  // The merged listing of a directory (ENOENT/ENOTDIR as for Resolve).
  Result<std::vector<MergedEntry>> List(const std::string& rel);
  // Opens the visible regular file read-only (O_NOFOLLOW, O_NOATIME where
  // permitted) from the layer that holds it.
  Result<UniqueFd> OpenFile(const std::string& rel);

  // The cursor, one directory at a time. Enter goes into the directory
  // `name` of the cursor's directory; *entered is false (and the cursor
  // stays) when the merged view has no directory of that name there.
  Status Enter(const std::string& name, bool* entered);
  // Goes back to the parent (nothing at the root).
  Status Leave();
  // Directories below the root the cursor is at.
  size_t depth() const { return levels_.size(); }
  // `name` in the cursor's directory (as Resolve of its path).
  Result<MergedNode> Child(const std::string& name);
  // The content of the regular file `name` in the cursor's directory (the
  // errors of ReadFile).
  Result<std::string> ReadChildFile(const std::string& name,
                                    size_t limit = SIZE_MAX);

  const Layers& layers() const { return layers_; }

 private:
  // One directory the cursor went into: its name and the view of the
  // directory above it (restored by Leave).
  struct Level {
    std::string name;
    size_t parent_len = 0;
    bool parent_upper = false;
    LowerMask parent_lower = 0, parent_lower_xw = 0;
    bool parent_xwhiteouts = false;
  };
  Status EnsureRoot();
  // Moves the cursor to the directory made of the first `n` of `parts`;
  // *found is false when one of them is not a directory of the merged view.
  Status MoveTo(const std::vector<std::string>& parts, size_t n, bool* found);
  // The cursor directory's lower descriptors (those of view_.lower).
  LowerFds lower_fds() const {
    return view_.merged() ? stack_.lower_fds() : LowerFds();
  }
  // The layer and the cursor directory's descriptor in it holding `node`.
  const Layer& LayerOf(const MergedNode& node) const {
    return node.in_upper ? layers_.upper : layers_.LowerLayer(node.lower_layer);
  }
  int DirFdOf(const MergedNode& node) const {
    return node.in_upper ? stack_.upper() : stack_.lower(node.lower_layer);
  }
  // Opens `name` of the cursor's directory, visible as `node`, for reading.
  Result<UniqueFd> OpenChild(const std::string& name, const MergedNode& node);

  const Layers& layers_;
  LayerStack stack_;
  bool rooted_ = false;
  DirView view_;               // the cursor's directory (path included)
  std::vector<Level> levels_;  // root first
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_MERGED_TREE_H_
