// acqfs rm: removes a sandbox (its folder and its remote), refusing while it
// holds work that would be lost: changes never exported, or exported commits
// the host has not fetched. --force removes anyway, after the same list.
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
#include "cli/progress.h"
#include "cli/sandbox.h"
#include "cli/state.h"
#include "common/handle.h"
#include "common/sys.h"
#include "fs/layer.h"
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
  // By name only: a mountpoint may name another sandbox than one expects,
  // and rm removes what it finds.
  auto found = Sandbox::FindByName(state, a.name);
  if (!found) return FailFind("rm", a.name, found.error());
  const Sandbox& sandbox = *found;
  const SandboxPaths& paths = sandbox.paths();
  const SandboxMeta& meta = sandbox.meta();
  // Only the sandbox's own mount: another sandbox may be mounted at the
  // mountpoint this one used last.
  auto live = sandbox.Probe();
  if (!live) return Fail(kExitFailed, "rm: sandbox state", live.error());
  if (live->state == MountState::kStale) {
    if (Status s = DetachStaleMount(*live->mount); !s)
      return Fail(kExitFailed, "rm: clean up a stale mount", s.error());
  } else if (live->state == MountState::kMounted) {
    if (Status s = Unmount(*live->mount); !s)
      return Fail(kExitFailed, "rm: umount", s.error());
  }
  if (live->daemon_alive) {
    if (Status s = WaitForDaemonExit(paths, 15.0); !s)
      return Fail(kExitFailed, "rm: umount", s.error());
  }
  // From here on the sandbox is this command's: its lock keeps `acqfs
  // mount` out, and the claim on its layers any other daemon (a daemon
  // acqfs mount did not start, mount.fuse.acqfs, may serve them already:
  // never remove them from under it).
  for (const std::string& dir : {paths.upper, paths.work}) {
    if (auto pid = LayersHolder(dir))
      return Fail(kExitBadInput, "rm", a.name,
                  dir + " is in use by " +
                      (*pid > 0 ? "acqfs daemon pid " + std::to_string(*pid)
                                : std::string("an acqfs daemon")) +
                      "; unmount its mount first");
  }
  auto lock = sandbox.Lock(/*create=*/true);
  if (!lock) {
    if (lock.err() == EWOULDBLOCK)
      return Fail(
          kExitBadInput, "rm", a.name,
          "is being mounted right now (its lock " + paths.lock + " is held)");
    return Fail(kExitFailed, "rm: lock", lock.error());
  }
  auto claim = LayersClaim::Take(paths.upper, paths.work, 0);
  if (!claim && claim.err() == EBUSY)
    return Fail(
        kExitBadInput, "rm", a.name,
        "a daemon took its layers meanwhile: " + claim.error().Message());
  // Another failure (a folder without its layers) does not stop the removal.
  if (Status st = sandbox.StackOk(); !st) {
    if (!a.force)
      return Fail(kExitBadInput, "rm", a.name,
                  "its layer stack cannot be read (" + st.error().Message() +
                      "); repair it, or --force removes the sandbox anyway");
    std::fprintf(stderr,
                 "acqfs: rm: %s: --force: its layer stack cannot be read "
                 "(%s): removing it unread\n",
                 a.name.c_str(), st.error().Message().c_str());
  } else if (sandbox.IsGit()) {
    auto pending = gitbridge::Pending(sandbox.ExportConfig());
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
    // The keep refs in the submodules' repositories first: a failure
    // leaves the remote, so a second rm finds the sandbox whole.
    for (const std::string& m : meta.policy.own_git_modules)
      if (Status d = gitbridge::DropKeepRefs(sys::Join(meta.lower, m), a.name);
          !d && d.err() != ENOENT)
        return Fail(kExitFailed, "rm: remove the keep refs of a submodule",
                    d.error());
    auto foreign =
        gitbridge::UnregisterRemote(meta.lower, a.name, paths.bridge);
    if (!foreign)
      return Fail(kExitFailed, "rm: remove remote", foreign.error());
    if (!foreign->empty())
      std::fprintf(stderr,
                   "acqfs: rm: %s: left the host's remote %s in place: it "
                   "points to %s, not to this sandbox's bridge\n",
                   a.name.c_str(), gitbridge::RemoteName(a.name).c_str(),
                   foreign->c_str());
  }
  Progress progress("rm " + a.name);
  Status removed = sys::RemoveTree(
      AT_FDCWD, paths.dir, paths.dir,
      [&](const std::string& phase, uint64_t n) { progress.Update(phase, n); });
  progress.Finish();
  if (!removed) return Fail(kExitFailed, "rm", removed.error());
  // Its layers go with it, but for those another sandbox's stack (a fork)
  // still uses (docs/stack.md, garbage collection).
  auto gc = CollectGarbage(sandbox.state_dir());
  if (!gc)
    return Fail(kExitFailed, "rm: remove its layers (run `acqfs gc` later)",
                gc.error());
  return 0;
}

}  // namespace acqfs::cli
