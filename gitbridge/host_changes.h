// What the host did, since a sandbox's base, to the paths the sandbox
// changed: the paths where merging the agent's work meets a change of the
// host's (docs/git-bridge.md, "Before the merge"). For `acqfs status` and
// `acqfs export`, which tell the user before git does.
//   committed    the host's HEAD now differs from the base commit at the
//                path (a commit, an amend, a pull, a reset, a branch
//                switch): changed, deleted, or renamed (git's rename
//                detection between the two trees);
//   uncommitted  the host's working tree differs from its HEAD at the path
//                and the file changed after the base was recorded (its
//                ctime is not before it), or it is gone from there.
// The host's uncommitted work from before the base is not reported: the
// sandbox saw it, so the agent's version of the path starts from it.
// Costs a diff of two trees (what changed between them) and a status of
// each path given; never the whole working tree.
// Thread-safety: as libgit2 (one call per thread).
#ifndef ACQFS_GITBRIDGE_HOST_CHANGES_H_
#define ACQFS_GITBRIDGE_HOST_CHANGES_H_

#include <string>
#include <vector>

#include "common/error.h"
#include "gitbridge/git_base.h"

namespace acqfs::gitbridge {

// A file the sandbox wrote after the host had edited it since the base,
// which an export records whole, host edit included (worktree_snapshot.h),
// and why.
struct HostEditKept {
  std::string path, why;
};

struct HostChange {
  std::string path;  // the sandbox's path (a directory covers what is below)
  // "committed", "committed-deleted", "committed-renamed", "uncommitted",
  // "uncommitted-deleted".
  std::string how;
  std::string renamed_to;  // for "committed-renamed"
  std::string host_path;   // the host's path the change is at (below `path`
                           // for a directory)
};

// One entry for each host change under each of `paths`, in path order.
// EINVAL when the base is not recorded.
Result<std::vector<HostChange>> HostChangesSince(
    const std::string& lower, const GitBase& base,
    const std::vector<std::string>& paths);

// "committed since the base", "deleted in a commit since the base",
// "renamed to X in a commit since the base", "changed, uncommitted",
// "deleted, uncommitted".
std::string DescribeHostChange(const HostChange& c);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_HOST_CHANGES_H_
