// Starting and stopping the filesystem daemon.
// StartDaemon either runs the filesystem in this process (foreground) or
// forks a daemon and returns once the mount is usable, reporting the
// daemon's own error when it could not mount. Unmount detaches a mount and
// waits for its daemon to end.
// Thread-safety: call from a single-threaded process (it forks).
#ifndef ACQFS_CLI_DAEMON_H_
#define ACQFS_CLI_DAEMON_H_

#include <string>

#include "common/error.h"
#include "fs/mount.h"

namespace acqfs::cli {

struct DaemonOptions {
  MountConfig config;
  std::string log_path;  // daemon log ("" = stderr only)
  std::string pid_path;  // pid file ("" = none)
  std::string log_level = "info";
  bool foreground = false;
};

Status StartDaemon(const DaemonOptions& options);

// True when `mountpoint` (absolute, canonical) is an acqfs mount right now.
bool IsAcqfsMounted(const std::string& mountpoint);

// Unmounts `mountpoint` (umount2 as root, fusermount3 -u otherwise).
Status Unmount(const std::string& mountpoint);

// Waits up to `seconds` for the process in `pid_path` to end; removes the
// pid file when it has.
Status WaitForDaemonExit(const std::string& pid_path, double seconds);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_DAEMON_H_
