// acqfs umount: detaches a sandbox's mount, waits for its daemon, then
// exports it (unless --no-export) when its lower is a git checkout.
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/daemon.h"
#include "cli/state.h"
#include "gitbridge/export.h"

namespace acqfs::cli {

int RunUmount(const UmountArgs& a) {
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  SandboxPaths paths(state, "_");
  SandboxMeta meta;
  if (!FindSandbox(state, a.target, &paths, &meta)) {
    auto real = RealPath(a.target);
    if (real && IsAcqfsMounted(*real)) {  // a mount made outside the state dir
      if (Status s = Unmount(*real); !s)
        return Fail(kExitFailed, "umount", s.error());
      return 0;
    }
    return Fail(kExitBadInput, "umount", a.target,
                "no such sandbox or acqfs mount");
  }
  if (IsAcqfsMounted(meta.mountpoint)) {
    if (Status s = Unmount(meta.mountpoint); !s)
      return Fail(kExitFailed, "umount", s.error());
  } else if (!Exists(paths.pid)) {
    return Fail(kExitBadInput, "umount", a.target, "not mounted");
  }
  if (Status s = WaitForDaemonExit(paths.pid, 15.0); !s)
    return Fail(kExitFailed, "umount", s.error());
  if (a.no_export || !gitbridge::IsGitCheckout(meta.lower)) return 0;
  return ExportAndReport("umount: export", paths.name, state, a.json);
}

}  // namespace acqfs::cli
