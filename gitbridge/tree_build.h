// TreeBuild: applies path edits to a git tree, rebuilding only the subtrees
// on the edited paths (so the cost grows with the edits, not the tree), with
// git_treebuilder, which refuses unsafe entry names. Handles a path that
// turns from a file into a directory or back within one call (the case
// git_tree_create_updated refuses as a "D/F conflict"), drops subtrees left
// empty, and writes the new trees into `repo`. A kPut whose path git would
// refuse (git_names.h: UnsafeTreePath) is refused with EPERM naming it;
// callers leave such paths out first and report them.
// Thread-safety: one repo per thread (libgit2 rule).
#ifndef ACQFS_GITBRIDGE_TREE_BUILD_H_
#define ACQFS_GITBRIDGE_TREE_BUILD_H_

#include <git2.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace acqfs::gitbridge {

struct TreeEdit {
  enum Kind { kRemove, kPut };
  Kind kind;
  std::string path;  // '/'-separated, no leading or trailing '/'
  // kPut: the entry to place (blob, executable blob, link, or gitlink).
  git_filemode_t mode = GIT_FILEMODE_BLOB;
  git_oid id{};
};

// Edits are applied in order (a later edit of the same path wins; a kRemove
// of a directory removes its whole subtree; a kPut below a path that is a
// file replaces the file by a directory). `base` may be null (empty tree).
Result<git_oid> ApplyTreeEdits(git_repository* repo, const git_oid* base,
                               const std::vector<TreeEdit>& edits);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_TREE_BUILD_H_
