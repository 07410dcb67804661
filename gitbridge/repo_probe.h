// RepoProbe: what the git bridge knows about a lower directory before the
// bridge proper (issue 3) exists: is it a git checkout, and where is its
// git directory. Reads only; never writes to the repository.
// Thread-safety: call from one thread (libgit2 objects stay on one thread).
#ifndef ACQFS_GITBRIDGE_REPO_PROBE_H_
#define ACQFS_GITBRIDGE_REPO_PROBE_H_

#include <string>

#include "common/error.h"

namespace acqfs::gitbridge {

struct RepoInfo {
  bool is_repo = false;
  std::string git_dir;  // absolute, when is_repo
  bool bare = false;
};

// Opens `dir` as a git working tree without searching parent directories.
Result<RepoInfo> ProbeRepository(const std::string& dir);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_REPO_PROBE_H_
