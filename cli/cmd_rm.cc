// acqfs rm: removes a sandbox (its folder and its remote), refusing while it
// holds work that would be lost: changes never exported, or exported commits
// the host has not fetched. --force removes anyway, after the same list.
#include <fcntl.h>

#include <cstdio>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/daemon.h"
#include "cli/liveness.h"
#include "cli/progress.h"
#include "cli/state.h"
#include "common/sys.h"
#include "gitbridge/export.h"
#include "gitbridge/remote.h"

namespace acqfs::cli {
namespace {

void PrintPending(const gitbridge::PendingWork& w, const char* verb) {
  for (const auto& u : w.unexported)
    std::fprintf(stderr, "  %s (never exported): %s\n", verb, u.c_str());
  for (const auto& u : w.unfetched)
    std::fprintf(stderr, "  %s (exported, not fetched by the host): %s\n", verb,
                 u.c_str());
  for (const auto& u : w.unexportable)
    std::fprintf(stderr, "  %s (cannot be exported): %s\n", verb, u.c_str());
}

}  // namespace

int RunRm(const RmArgs& a) {
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  SandboxPaths paths(state, "_");
  SandboxMeta meta;
  if (!ValidSandboxName(a.name) || !FindSandbox(state, a.name, &paths, &meta))
    return Fail(kExitBadInput, "rm", a.name, "no such sandbox");
  // Only the sandbox's own mount: another sandbox may be mounted at the
  // mountpoint this one used last.
  auto live = ProbeSandbox(paths, meta);
  if (!live) return Fail(kExitFailed, "rm: sandbox state", live.error());
  if (live->state == MountState::kStale) {
    if (Status s = DetachStaleMount(meta.mountpoint); !s)
      return Fail(kExitFailed, "rm: clean up a stale mount", s.error());
  } else if (live->state == MountState::kMounted) {
    if (Status s = Unmount(meta.mountpoint); !s)
      return Fail(kExitFailed, "rm: umount", s.error());
  }
  if (live->daemon_alive) {
    if (Status s = WaitForDaemonExit(paths, 15.0); !s)
      return Fail(kExitFailed, "rm: umount", s.error());
  }
  const bool git = gitbridge::IsGitCheckout(meta.lower);
  if (git) {
    auto pending = gitbridge::Pending(ExportConfigFor(paths, meta));
    if (!pending && !a.force)
      return Fail(kExitFailed, "rm: check for unsaved work", pending.error());
    if (pending && !pending->empty()) {
      if (!a.force) {
        Fail(kExitBadInput, "rm", a.name,
             "the sandbox holds work that would be lost; export it and run "
             "`git fetch " +
                 gitbridge::RemoteName(a.name) +
                 "` on the host, or use --force");
        PrintPending(*pending, "would lose");
        return kExitBadInput;
      }
      std::fprintf(stderr, "acqfs: rm: %s: --force: dropping:\n",
                   a.name.c_str());
      PrintPending(*pending, "dropped");
    }
    if (Status s = gitbridge::UnregisterRemote(meta.lower, a.name); !s)
      return Fail(kExitFailed, "rm: remove remote", s.error());
  }
  Progress progress("rm " + a.name);
  Status removed = sys::RemoveTree(
      AT_FDCWD, paths.dir, paths.dir,
      [&](const std::string& phase, uint64_t n) { progress.Update(phase, n); });
  progress.Finish();
  if (!removed) return Fail(kExitFailed, "rm", removed.error());
  return 0;
}

}  // namespace acqfs::cli
