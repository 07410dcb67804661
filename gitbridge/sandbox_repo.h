// SandboxRepo: the sandbox's own git repository (its .git as the merged view
// shows it), read straight from the layers: the sandbox's branches and HEAD
// from its loose refs and packed-refs, and its objects from
// upper/.git/objects (through LayerObjects: only beneath the upper's root,
// no symlink followed, never by a path the sandbox can redirect between a
// check and a use) and lower/.git/objects. Nothing is ever written, and
// nothing from the sandbox's config or hooks is read: the sandbox is
// untrusted, so only refs and objects cross, and every object read is
// hash-verified by libgit2 (strict hash verification is on by default).
// Thread-safety: one SandboxRepo per thread (libgit2 rule).
#ifndef ACQFS_GITBRIDGE_SANDBOX_REPO_H_
#define ACQFS_GITBRIDGE_SANDBOX_REPO_H_

#include <git2.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/git_ptr.h"
#include "fs/layer.h"

namespace acqfs::gitbridge {

class SandboxRepo {
 public:
  // `gitdir` is the repository directory relative to the layer roots
  // (".git" for a checkout).
  static Result<SandboxRepo> Open(const Layers& layers,
                                  const std::string& gitdir = ".git");
  // The refs alone: no object database is opened (repo() is null).
  static Result<SandboxRepo> OpenRefsOnly(const Layers& layers,
                                          const std::string& gitdir = ".git");

  // refs/heads/* (names without "refs/heads/") -> commit ids. A loose ref
  // wins over packed-refs; symbolic or unreadable refs are skipped.
  Result<std::map<std::string, git_oid>> Branches() const;
  // Every ref below refs/ (full names) -> the object it names, as Branches.
  Result<std::map<std::string, git_oid>> AllRefs() const;
  // The objects the reflog of `ref` (e.g. "refs/stash") records, newest
  // last: each line's new value, the null id left out. Empty when there is
  // no reflog.
  Result<std::vector<git_oid>> ReflogIds(const std::string& ref) const;
  // The commit HEAD names (symbolic or detached); nullopt when unborn.
  Result<std::optional<git_oid>> Head() const;
  // The branch HEAD names ("" when detached or unborn).
  Result<std::string> HeadBranch() const;
  // A repository whose object database holds the sandbox's objects; it has
  // no refs, config or workdir of its own.
  git_repository* repo() const { return repo_.get(); }

 private:
  SandboxRepo(const Layers& layers, std::string gitdir)
      : layers_(&layers), gitdir_(std::move(gitdir)) {}
  Result<std::optional<git_oid>> ResolveRef(const std::string& name,
                                            int depth) const;

  const Layers* layers_;
  std::string gitdir_;
  GitRepository repo_;
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_SANDBOX_REPO_H_
