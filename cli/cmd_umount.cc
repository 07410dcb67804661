// acqfs umount: detaches a sandbox's mount, waits for its daemon, then
// exports it (unless --no-export) when its lower is a git checkout. A stale
// sandbox (its daemon died, its mount answers ENOTCONN) is cleaned up: the
// dead mount is detached and the pid file removed, and the export follows as
// usual.
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/sandbox.h"
#include "common/handle.h"
#include "daemon/daemon.h"
#include "gitbridge/export.h"
#include "state/liveness.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

constexpr double kDaemonExitSeconds = 15.0;
// How long a daemon whose mount is gone from here may go on serving a copy
// of it in another mount namespace before it is asked to end.
constexpr double kForeignCopySeconds = 2.0;

// The sandbox's daemon, whose mount this namespace no longer has, is still
// running: the kernel ends a FUSE connection when the last copy of its mount
// goes, and a copy in another mount namespace (one made after the mount:
// rootless podman's, whose pause process copies the user's mounts; `unshare
// -m`) keeps it serving there. It would never end, the export would read a
// sandbox still being written, and the sandbox could not be mounted again.
// So after kForeignCopySeconds the daemon is asked to end with SIGTERM (its
// clean shutdown), through a pidfd opened while its lock is held, so no
// other process gets the signal; those copies then answer ENOTCONN. Says so
// on stderr.
Status EndDaemon(const Sandbox& sandbox) {
  const SandboxPaths& paths = sandbox.paths();
  if (WaitForDaemonExit(paths, kForeignCopySeconds).ok()) return Ok();
  auto record = ReadDaemonRecord(paths.pid);
  // No record, or one of a daemon that has not mounted yet: nothing of it
  // serves anywhere, so only wait.
  if (!record || !record->mount_dev)
    return WaitForDaemonExit(paths, kDaemonExitSeconds);
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, record->pid, 0)));
  if (!pidfd.is_valid()) {
    if (errno == ESRCH) return WaitForDaemonExit(paths, kDaemonExitSeconds);
    return Error::Errno("pidfd_open of daemon " + std::to_string(record->pid),
                        paths.pid);
  }
  auto held = LockHeld(paths.lock);
  if (!held) return held.error();
  if (!*held) return WaitForDaemonExit(paths, kDaemonExitSeconds);
  std::fprintf(stderr,
               "acqfs: umount: %s: its mount lives on in another mount "
               "namespace (made after the mount, e.g. rootless podman's); "
               "ending daemon %d, so that copy now fails with ENOTCONN\n",
               sandbox.name().c_str(), static_cast<int>(record->pid));
  if (::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGTERM, nullptr, 0) != 0 &&
      errno != ESRCH)
    return Error::Errno("signal daemon " + std::to_string(record->pid),
                        paths.pid);
  return WaitForDaemonExit(paths, kDaemonExitSeconds);
}

// Detaches the mount the sandbox's dead daemon left and removes its pid
// file. This happens under the sandbox's lock, as `acqfs mount` cleans up,
// so a mount starting meanwhile is never taken for the dead one.
int CleanUpStale(const Sandbox& sandbox) {
  auto lock = sandbox.Lock(/*create=*/false);
  if (!lock) {
    if (lock.err() == EWOULDBLOCK)
      return Fail(kExitBadInput, "umount", sandbox.name(),
                  "is being mounted right now (its lock " +
                      sandbox.paths().lock + " is held)");
    return Fail(kExitFailed, "umount: clean up a stale mount", lock.error());
  }
  return sandbox.CleanUpStale("umount");
}

// Ends the sandbox's mount, whatever state it is in; 0 when it is over.
int Detach(const std::string& target, const Sandbox& sandbox) {
  auto live = sandbox.Probe();
  if (!live) return Fail(kExitFailed, "umount: sandbox state", live.error());
  switch (live->state) {
    case MountState::kStale:
      return CleanUpStale(sandbox);
    case MountState::kMounted:
      if (Status s = Unmount(*live->mount); !s)
        return Fail(kExitFailed, "umount", s.error());
      break;
    case MountState::kNotMounted:
      // A daemon whose mount went (unmounted by hand) may still be ending,
      // or serving a copy of its mount elsewhere.
      if (!live->daemon_alive)
        return Fail(kExitBadInput, "umount", target, "not mounted");
      break;
  }
  if (Status s = EndDaemon(sandbox); !s)
    return Fail(kExitFailed, "umount", s.error());
  return 0;
}

}  // namespace

int RunUmount(const UmountArgs& a) {
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  auto found = Sandbox::Find(state, a.target);
  if (!found && found.err() != ENOENT && found.err() != ENOTUNIQ)
    return FailFind("umount", a.target, found.error());
  // A mountpoint where no sandbox's own mount is, but an acqfs mount made
  // outside the state directory (mount.fuse.acqfs): that one goes.
  if (!found || (!found->by_name() && !found->mounted_at())) {
    std::string mnt = MountpointPath(a.target);
    if (IsAcqfsMounted(mnt)) {
      if (Status s = UnmountAcqfsAt(mnt); !s)
        return Fail(kExitFailed, "umount", s.error());
      return 0;
    }
  }
  if (!found && found.err() == ENOENT)
    return Fail(kExitBadInput, "umount", a.target,
                "no such sandbox or acqfs mount");
  if (!found) return FailFind("umount", a.target, found.error());
  if (int rc = Detach(a.target, *found)) return rc;
  if (a.no_export || !found->IsGit()) return 0;
  return ExportAndReport("umount: export", found->name(), state, a.json);
}

}  // namespace acqfs::cli
