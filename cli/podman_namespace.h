// Rootless Podman's pause process, and whether a sandbox mounted now would
// appear in the mount namespace it keeps.
//
// Rootless Podman makes a user and mount namespace of the user's with its
// first command and keeps it alive in a pause process (`catatonit -P`, or
// podman itself renamed "podman pause"); every later podman command and
// container joins it. That namespace copied the host's mounts when it was
// made. A FUSE mount made on the host afterwards appears in it only through
// mount propagation: when the host mount it lands on is shared and the
// namespace's copy of it receives from that peer group (mount_namespaces(7)).
// On a host whose "/" is private (podman warns: "/" is not a shared mount)
// it does not, and a container given the mountpoint sees the empty
// directory beneath it and writes there, outside the sandbox. `acqfs mount`
// refuses that (cli.md, "acqfs mount"; sandboxes.md, "Podman, rootless").
// Thread-safety: plain functions and values.
#ifndef ACQFS_CLI_PODMAN_NAMESPACE_H_
#define ACQFS_CLI_PODMAN_NAMESPACE_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace acqfs::cli {

struct PodmanPause {
  pid_t pid = 0;
  std::string command;  // "catatonit -P" or "podman pause"
};

// The processes under `proc` (a procfs) that are rootless Podman's pause
// processes of the user `uid` (real uid) and live in a mount namespace
// other than the caller's: named catatonit and given -P, or named "podman
// pause". In pid order; processes that end while they are read are left
// out.
std::vector<PodmanPause> FindPodmanPauses(uid_t uid,
                                          const std::string& proc = "/proc");

// Those of FindPodmanPauses(uid) whose namespace would not see a mount made
// now at `path` (absolute, canonical) in the caller's namespace
// (MountPropagates); also any whose mount table cannot be read, since it
// cannot be shown to. In pid order; empty when there is none.
std::vector<PodmanPause> PausesMissingMountAt(
    uid_t uid, const std::string& path, const std::string& proc = "/proc");

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_PODMAN_NAMESPACE_H_
