// MergedTree: read-only access to a sandbox's merged view straight from its
// layers (no mount), through fs/layer's lookup rules. The git bridge reads
// the sandbox's .git, its .gitignore files and its changed files with it.
// Every path is relative to the layer roots, '/'-separated, "" = the root;
// no symlink is ever followed (a symlink is reported as one).
// Thread-safety: const methods may run on any thread; the Layers must
// outlive the MergedTree.
#ifndef ACQFS_GITBRIDGE_MERGED_TREE_H_
#define ACQFS_GITBRIDGE_MERGED_TREE_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "fs/layer.h"

namespace acqfs::gitbridge {

struct MergedNode {
  bool exists = false;
  bool in_upper = false;  // the visible object is the upper one
  struct stat st {};      // of the visible object
  DirView dir;            // when S_ISDIR(st.st_mode): its view
};

class MergedTree {
 public:
  explicit MergedTree(const Layers& layers) : layers_(layers) {}

  // Resolves `rel` component by component. exists=false (and Ok) when any
  // component is missing, whited out, or not a directory on the way.
  Result<MergedNode> Resolve(const std::string& rel) const;
  // The content of a regular file (ENOENT when missing, EISDIR/EINVAL when
  // not a regular file, EFBIG when larger than `limit`).
  Result<std::string> ReadFile(const std::string& rel,
                               size_t limit = SIZE_MAX) const;
  // The target of a symlink.
  Result<std::string> ReadLink(const std::string& rel) const;
  // The merged listing of a directory (ENOENT/ENOTDIR as for Resolve).
  Result<std::vector<MergedEntry>> List(const std::string& rel) const;
  // Opens the visible regular file read-only (O_NOFOLLOW, O_NOATIME where
  // permitted) from the layer that holds it.
  Result<UniqueFd> OpenFile(const std::string& rel) const;

  const Layers& layers() const { return layers_; }

 private:
  const Layers& layers_;
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_MERGED_TREE_H_
