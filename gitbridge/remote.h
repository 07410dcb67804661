// The sandbox-<name> remote on the host checkout: the one write acqfs makes
// to the host's .git/config, made by the person's own `acqfs mount`, and
// undone by `acqfs rm`. Its fetch refspecs bring the sandbox's branches and
// working-tree commit back as sandbox-<name>/... remote-tracking refs and
// keep a copy under refs/sandboxes/<name>/..., which survives the removal of
// the remote (docs/git-bridge.md).
// Thread-safety: call from one thread.
#ifndef ACQFS_GITBRIDGE_REMOTE_H_
#define ACQFS_GITBRIDGE_REMOTE_H_

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

// Adds the remote (URL = the bridge's absolute path). Refuses (EEXIST) when
// a remote of that name exists with another URL; accepts one that already
// points at `bridge_path`.
Status RegisterRemote(const std::string& host_workdir,
                      const std::string& sandbox,
                      const std::string& bridge_path);
// Checks, without writing, that RegisterRemote would succeed.
Status CheckRemoteFree(const std::string& host_workdir,
                       const std::string& sandbox,
                       const std::string& bridge_path);
// Removes the remote's configuration and its refs/remotes/sandbox-<name>/
// refs; refs/sandboxes/<name>/ stays. Ok when there is no such remote.
Status UnregisterRemote(const std::string& host_workdir,
                        const std::string& sandbox);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_REMOTE_H_
