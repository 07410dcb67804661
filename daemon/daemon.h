// Starting and stopping the filesystem daemon.
// StartDaemon either runs the filesystem in this process (foreground) or
// forks a daemon and returns once the mount is usable, reporting the
// daemon's own error when it could not mount. The daemon writes its pid file
// (see DaemonRecord in liveness.h: its pid, then its mount's device once
// mounted), ends cleanly on SIGTERM, SIGINT and SIGHUP (unmounting), and
// removes the pid file as the last thing before it exits.
// Unmount detaches a live mount, DetachStaleMount a dead one;
// WaitForDaemonExit waits for a sandbox's daemon to end.
// Thread-safety: call from a single-threaded process (it forks).
#ifndef ACQFS_DAEMON_DAEMON_H_
#define ACQFS_DAEMON_DAEMON_H_

#include <string>

#include "common/error.h"
#include "fuse/mount.h"
#include "state/liveness.h"
#include "state/state.h"

namespace acqfs::cli {

struct DaemonOptions {
  MountConfig config;
  std::string log_path;  // daemon log ("" = stderr only)
  std::string pid_path;  // pid file ("" = none)
  std::string log_level = "info";
  bool foreground = false;
  // The sandbox (its state directory and name) whose control socket the
  // daemon serves in its folder (docs/control.md); "" for none (a mount of
  // layers that are no sandbox's).
  std::string state_dir, sandbox;
};

// On failure, the error's op holds the daemon's whole message ("<op>: <path>:
// <reason>") and err its errno (EBUSY: another daemon serves the layers).
Status StartDaemon(const DaemonOptions& options);

// True when `mountpoint` (absolute, canonical) is an acqfs mount right now.
bool IsAcqfsMounted(const std::string& mountpoint);

// Every unmount below acts only on a mount it has proven to be the one
// meant: CheckReaches (liveness.h) shows, right before the unmount, that
// the mountpoint leads to that mount (its mount id and device), so a mount
// made over it (a tmpfs over a dead sandbox's mountpoint) is never taken in
// its place; EBUSY naming what covers it instead. Afterwards the mount must
// be gone from the mount table (EIO otherwise: something mounted on top in
// between was unmounted instead, which is said rather than hidden).

// Unmounts the live mount `own` (umount2 as root, fusermount3 -u
// otherwise).
Status Unmount(const MountEntry& own);

// Unmounts the fuse.acqfs mount `mountpoint` leads to (for `acqfs umount
// MOUNTPOINT` of a mount made outside the state directory). EINVAL when
// there is none; EBUSY when one there is covered by another mount.
Status UnmountAcqfsAt(const std::string& mountpoint);

// Detaches the dead mount `own` (its daemon is gone): umount2, and
// umount2(MNT_DETACH) when something still uses it (EBUSY), as root;
// fusermount3 -u, then -u -z, otherwise. Ok when it is not mounted any
// more.
Status DetachStaleMount(const MountEntry& own);

// Waits up to `seconds` for the sandbox's daemon to end, that is until no
// process holds its lock (a pid alone may have been reused), then removes
// its pid file if the daemon left it behind.
Status WaitForDaemonExit(const SandboxPaths& paths, double seconds);
// The same for the daemon whose pid file is `pid_path`, with its lock file
// beside it ("lock", as in a sandbox folder); without one, waits for the
// process in the pid file to end.
Status WaitForDaemonExit(const std::string& pid_path, double seconds);

}  // namespace acqfs::cli

#endif  // ACQFS_DAEMON_DAEMON_H_
