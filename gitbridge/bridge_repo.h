// BridgeRepo: the bare repository acqfs owns for one sandbox
// (<state>/<name>/bridge.git): created and configured by acqfs alone (no
// template, no hooks, core.protectHFS and core.protectNTFS on), reading the
// host's objects through objects/info/alternates, never writing to the host.
// Objects cross into it only through CopyReachable, which verifies each
// object's hash and refuses unsafe trees.
// Thread-safety: one BridgeRepo per thread (libgit2 rule).
#ifndef ACQFS_GITBRIDGE_BRIDGE_REPO_H_
#define ACQFS_GITBRIDGE_BRIDGE_REPO_H_

#include <git2.h>

#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/git_ptr.h"
#include "gitbridge/git_names.h"

namespace acqfs::gitbridge {

class BridgeRepo {
 public:
  // Creates the bare repository at `path` if missing (and (re)writes its
  // alternates to `host_objects_dir`, an absolute path, when not empty).
  static Result<BridgeRepo> OpenOrCreate(const std::string& path,
                                         const std::string& host_objects_dir);
  // Opens an existing bridge (ENOENT when there is none).
  static Result<BridgeRepo> Open(const std::string& path);

  git_repository* repo() const { return repo_.get(); }
  const std::string& path() const { return path_; }

  // Copies into the bridge every object reachable from `tips` in `source`
  // that the bridge (with its alternates) does not have yet, stopping at
  // commits reachable from `hide`. Each object is read from `source`
  // (hash-verified), checked, and written; the id written must equal the id
  // read. Trees are refused (EPERM, naming the commit and the path) when
  // CheckRawTree refuses them (git_names.h: the rules git's fsck applies).
  // Nothing is written when a check fails before the copy of that object.
  Status CopyReachable(git_repository* source, const std::vector<git_oid>& tips,
                       const std::vector<git_oid>& hide);

  // Checks that `git fetch` can read from the bridge what `tips` (commits
  // about to be published) need: every object reachable from them that the
  // bridge stores itself (loose or packed in its objects/, not through the
  // alternates) is read and its hash checked; the walk continues through
  // those and stops at objects only the alternates (the host) hold, which
  // must exist. Gitlinks are not followed. Cost: the bridge's own objects
  // reachable from `tips`, never the host's history. EIO naming the bridge
  // and the object when one is missing, unreadable or damaged.
  Status VerifyPublished(const std::vector<git_oid>& tips) const;

  // refs under `prefix` (e.g. "refs/heads/"), names without the prefix.
  Result<std::map<std::string, git_oid>> Refs(const std::string& prefix) const;
  Status SetRef(const std::string& name, const git_oid& id,
                const std::string& message);
  Status DeleteRef(const std::string& name);

 private:
  BridgeRepo(GitRepository repo, std::string path)
      : repo_(std::move(repo)), path_(std::move(path)) {}
  GitRepository repo_;
  std::string path_;
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_BRIDGE_REPO_H_
