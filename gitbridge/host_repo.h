// HostRepo: what the bridge reads from the host checkout, read-only. It
// never writes to the host's .git: blobs and trees it has to make go into
// the bridge repository.
// Thread-safety: one HostRepo per thread (libgit2 rule).
#ifndef ACQFS_GITBRIDGE_HOST_REPO_H_
#define ACQFS_GITBRIDGE_HOST_REPO_H_

#include <git2.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/git_ptr.h"
#include "gitbridge/git_names.h"

namespace acqfs::gitbridge {

class HostRepo {
 public:
  // Opens the checkout at `workdir` (no search upwards). ENOENT when it is
  // not a git checkout.
  static Result<HostRepo> Open(const std::string& workdir);

  git_repository* repo() const { return repo_.get(); }
  const std::string& workdir() const { return workdir_; }
  std::string gitdir() const;       // absolute, with trailing '/'
  std::string objects_dir() const;  // absolute

  // HEAD's commit; nullopt when unborn.
  Result<std::optional<git_oid>> Head() const;
  // refs/heads/* -> commit ids.
  Result<std::map<std::string, git_oid>> Branches() const;
  // Does the host's own object database hold `id` (alternates included)?
  bool HasObject(const git_oid& id) const;

  // The host's uncommitted work as one commit made in `bridge`, like
  // `git stash create --include-untracked` collapsed to a single commit:
  // tree = HEAD's tree + staged and unstaged changes of tracked files +
  // untracked files that are not ignored (by the host's rules); parent =
  // HEAD. nullopt when the working tree and index equal HEAD. The host's
  // index and files are read, never written. A path whose name git refuses
  // in a tree (git_names.h) is left out and added to `skipped` (when not
  // null), once for its first refused component.
  Result<std::optional<git_oid>> DirtyCommit(
      git_repository* bridge,
      std::vector<SkippedPath>* skipped = nullptr) const;

 private:
  HostRepo(GitRepository repo, std::string workdir)
      : repo_(std::move(repo)), workdir_(std::move(workdir)) {}
  GitRepository repo_;
  std::string workdir_;
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_HOST_REPO_H_
