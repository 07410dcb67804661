// The sandbox-<name> remote on the host checkout: the one write acqfs makes
// to the host's .git/config, made by the person's own `acqfs mount`, and
// undone by `acqfs rm`. Its fetch refspecs bring the sandbox's branches and
// working-tree commit back as sandbox-<name>/... remote-tracking refs and
// keep a copy under refs/sandboxes/<name>/..., which survives the removal of
// the remote (docs/git-bridge.md).
//
// Many sandboxes of one checkout start and end at once, so every change to
// the host's remotes is serialised: RegisterRemote and UnregisterRemote run
// under an flock of the host repository's directory (held by acqfs
// processes only; it writes nothing to disk), and each writes .git/config
// once, atomically, under git's own config.lock. A config.lock held by
// something else (a git command) is waited for, a bounded time, as git waits
// for its own locks; termination signals are held back while the lock file
// exists, so acqfs never leaves one behind.
// Thread-safety: call from one thread.
#ifndef ACQFS_GITBRIDGE_REMOTE_H_
#define ACQFS_GITBRIDGE_REMOTE_H_

#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace acqfs::gitbridge {

// "sandbox-<name>".
std::string RemoteName(const std::string& sandbox);
// The bridge ref holding the working-tree commit, and the name it gets on
// the host below refs/remotes/sandbox-<name>/ (a name acqfs never publishes
// as a branch, so it cannot collide with one). The refspecs map
// refs/acqfs/<x> to sandbox-<name>/acqfs-<x> and refs/sandboxes/<name>/<x>.
inline constexpr const char* kWorktreeRef = "refs/acqfs/worktree";
inline constexpr const char* kWorktreeBranchName = "acqfs-worktree";
// The refspecs the remote is registered with.
std::vector<std::string> RemoteFetchSpecs(const std::string& sandbox);

// Adds the remote (URL = the bridge's absolute path) with all its refspecs
// in one write. Refuses (EEXIST) when a remote of that name exists with
// another URL; accepts one that already points at `bridge_path`, adding any
// refspec it lacks.
Status RegisterRemote(const std::string& host_workdir,
                      const std::string& sandbox,
                      const std::string& bridge_path);
// Checks, without writing, that RegisterRemote would succeed.
Status CheckRemoteFree(const std::string& host_workdir,
                       const std::string& sandbox,
                       const std::string& bridge_path);
// The ref that keeps a sandbox's base commit (docs/git-bridge.md, "The
// base") in the host's repository, where the host's `git gc` sees it:
// refs/acqfs-base/<name>. Outside refs/sandboxes/<name>/, which the
// remote's refspecs fill (a `git fetch --prune` would delete it there).
std::string BaseRefName(const std::string& sandbox);
// Sets it to `commit` (hex; a commit the host has), under the same locks
// as RegisterRemote: the second write acqfs makes to the host's .git, made
// by the person's own `acqfs mount` (or `acqfs fork`).
Status KeepBase(const std::string& host_workdir, const std::string& sandbox,
                const std::string& commit);
// The same for the host's HEAD now, which it returns (hex; "" when HEAD is
// unborn, and then no ref is written).
Result<std::string> KeepHostHead(const std::string& host_workdir,
                                 const std::string& sandbox);

// The refs that keep the base's other branch tips (those of the sandbox's
// copy of .git that are not its HEAD's commit) from the host's gc, as
// BaseRefName keeps HEAD's: refs/acqfs-keep/<name>/<branch>. Without them
// a branch the host deletes and prunes leaves the sandbox's copy naming
// objects that are gone: its `git checkout` of it, `git gc` and `git fsck`
// fail where a clone's succeed. Written under the same locks as KeepBase;
// a tip the host no longer has is skipped.
std::string KeepRefPrefix(const std::string& sandbox);
Status KeepBranches(const std::string& host_workdir, const std::string& sandbox,
                    const std::map<std::string, std::string>& branches,
                    const std::string& head);

// The refs that keep every other object a ref of the sandbox's copy of
// .git names (tags, remote-tracking refs, notes, each entry of the stash),
// one a distinct object: refs/acqfs-tips/<name>/<hex>. Without them a tag
// the host deletes, a remote branch its `git fetch --prune` drops, or a
// stash entry it pops is pruned by its gc, and the sandbox's `git log
// v1.0`, `git checkout origin/x` or `git stash pop` fail where a clone's
// work. Written under the same locks as KeepBase; an object the host no
// longer has is skipped. Returns how many were written.
std::string TipsRefPrefix(const std::string& sandbox);
Result<size_t> KeepTips(const std::string& host_workdir,
                        const std::string& sandbox,
                        const std::vector<std::string>& tips);

// Deletes the sandbox's keep refs (BaseRefName, KeepRefPrefix,
// TipsRefPrefix) in the repository at `repo_path`: what UnregisterRemote
// does for the checkout's, for a submodule's repository.
Status DropKeepRefs(const std::string& repo_path, const std::string& sandbox);

// Removes the remote's configuration (its whole section, and the upstream
// settings of branches that track it), its refs/remotes/sandbox-<name>/
// refs and the base's ref (BaseRefName), the keep refs (KeepRefPrefix,
// TipsRefPrefix); refs/sandboxes/<name>/ stays. Only the remote that points at
// `bridge_path` is removed: a remote of that name pointing elsewhere is someone
// else's and is left alone; its URL is returned. Returns "" when the remote was
// removed or did not exist.
Result<std::string> UnregisterRemote(const std::string& host_workdir,
                                     const std::string& sandbox,
                                     const std::string& bridge_path);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_REMOTE_H_
