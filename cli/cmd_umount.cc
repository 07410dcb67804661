// acqfs umount: detaches a sandbox's mount, waits for its daemon, then
// exports it (unless --no-export) when its lower is a git checkout. A stale
// sandbox (its daemon died, its mount answers ENOTCONN) is cleaned up: the
// dead mount is detached and the pid file removed, and the export follows as
// usual.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/daemon.h"
#include "cli/liveness.h"
#include "cli/sandbox.h"
#include "cli/state.h"
#include "common/handle.h"
#include "gitbridge/export.h"

namespace acqfs::cli {
namespace {

constexpr double kDaemonExitSeconds = 15.0;

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
      // A daemon whose mount went (unmounted by hand) may still be ending.
      if (!live->daemon_alive)
        return Fail(kExitBadInput, "umount", target, "not mounted");
      break;
  }
  if (Status s = WaitForDaemonExit(sandbox.paths(), kDaemonExitSeconds); !s)
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
