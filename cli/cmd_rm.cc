// acqfs rm: removes a sandbox (its folder and its remote), refusing while it
// holds work that would be lost: changes never exported, or exported commits
// the host has not fetched. --force removes anyway, after the same list.
// Its commit point is the rename of the folder to a trash name
// (docs/stack.md, "Sandbox folders in the making"); --force also removes a
// folder of the name that holds no meta.json.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/sandbox.h"
#include "common/handle.h"
#include "common/sys.h"
#include "daemon/daemon.h"
#include "fs/layer.h"
#include "gitbridge/export.h"
#include "gitbridge/remote.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"
#include "state/as_owner.h"
#include "state/liveness.h"
#include "state/state.h"

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

// The commit point of rm (docs/stack.md, "Commit points"): the folder
// <state>/<name> becomes <state>/.trash+<id>, a name no sandbox can have;
// from then on the sandbox does not exist, whatever happens. Then the trash
// is removed, and the layers no stack names any more with it; what a kill
// leaves of the trash, the next gc (or rm, or squash) removes.
int RemoveFolder(const std::string& state, const std::string& name) {
  auto trash = MoveToTrash(state, name);
  if (!trash) {
    if (trash.err() == EBUSY)
      return Fail(kExitBadInput, "rm", name,
                  "another acqfs command holds its folder (a fork still "
                  "finishing it); try again when it is done");
    return Fail(kExitFailed, "rm", trash.error());
  }
  const std::string dir = state + "/" + trash->name;
  Progress progress("rm " + name);
  Status removed = sys::RemoveTree(
      AT_FDCWD, dir, dir,
      [&](const std::string& phase, uint64_t n) { progress.Update(phase, n); });
  progress.Finish();
  if (!removed)
    return Fail(kExitFailed, "rm (run `acqfs gc` later)", removed.error());
  // Its layers go with it, but for those another sandbox's stack (a fork)
  // still uses (docs/stack.md, garbage collection).
  auto gc = CollectGarbage(state);
  if (!gc)
    return Fail(kExitFailed, "rm: remove its layers (run `acqfs gc` later)",
                gc.error());
  return 0;
}

// A folder of a sandbox's name without meta.json: what a command killed
// while it made a sandbox in place (an older acqfs's fork, a first mount)
// left. Removed by --force when no command holds its lock.
int RemoveUnfinished(const std::string& state, const RmArgs& a) {
  const std::string dir = state + "/" + a.name;
  if (!a.force)
    return Fail(kExitBadInput, "rm", a.name,
                "no such sandbox: the folder " + dir +
                    " holds no meta.json (an interrupted command left it); "
                    "`acqfs rm --force " +
                    a.name + "` removes it");
  Sandbox sandbox(state, a.name);
  auto lock = sandbox.Lock(/*create=*/true);
  if (!lock) {
    if (lock.err() == EWOULDBLOCK)
      return Fail(kExitBadInput, "rm", a.name,
                  "is being made right now (its lock " + sandbox.paths().lock +
                      " is held)");
    return Fail(kExitFailed, "rm: lock", lock.error());
  }
  std::fprintf(stderr,
               "acqfs: rm: %s: --force: removing a folder that holds no "
               "whole sandbox (no meta.json)\n",
               a.name.c_str());
  return RemoveFolder(state, a.name);
}

}  // namespace

int RunRm(const RmArgs& a) {
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  // By name only: a mountpoint may name another sandbox than one expects,
  // and rm removes what it finds.
  auto found = Sandbox::FindByName(state, a.name);
  if (!found) {
    struct stat st;
    if (found.err() == ENOENT && ValidSandboxName(a.name) &&
        ::lstat((state + "/" + a.name).c_str(), &st) == 0 &&
        S_ISDIR(st.st_mode))
      return RemoveUnfinished(state, a);
    return FailFind("rm", a.name, found.error());
  }
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
    // Read as the state folder's owner (state/as_owner.h): its bridge.git is
    // theirs to point anywhere, and libgit2 would create a repository there.
    auto pending = [&]() -> Result<gitbridge::PendingWork> {
      auto owner = AsOwner::Of(state);
      if (!owner) return owner.error();
      auto config = sandbox.ExportConfig();
      if (!config) return config.error();
      return gitbridge::Pending(*config);
    }();
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
    // Until the commit (the rename to trash), the sandbox is whole: its
    // next mount registers and keeps again what this removes, if rm dies
    // before (docs/stack.md, "Sandbox folders in the making").
    if (Status m = sandbox.MarkHostStepsPending(); !m)
      return Fail(kExitFailed, "rm", m.error());
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
  return RemoveFolder(state, a.name);
}

}  // namespace acqfs::cli
