// acqfs squash: merges a sandbox's bottom frozen layers into one
// (docs/stack.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/sandbox.h"
#include "cli/stack_command.h"
#include "common/sys.h"
#include "fs/layer.h"
#include "fs/layer_squash.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"

namespace acqfs::cli {

int RunSquash(const SquashArgs& a) {
  int rc = 0;
  auto s = FindSandbox("squash", a.state_dir, a.name, &rc);
  if (!s) return rc;
  const std::string what = "squash " + s->name();
  auto alive = DaemonAlive(*s);
  if (!alive) return Fail(kExitFailed, what, alive.error());
  // Mounted, the daemon owns the stack: the merged layer is built here all
  // the same (the layers it reads are frozen), and the daemon swaps it in.
  const bool mounted = *alive;
  Quiet held;
  if (!mounted) {
    if (Status q = HoldQuiet(*s, &held); !q)
      return Fail(q.err() == EBUSY ? kExitBadInput : kExitFailed, what,
                  q.error());
  }
  SquashPlan plan = PlanSquash(s->stack(), a.keep);
  if (!plan.nothing_to_do.empty()) {
    std::printf("acqfs: squash %s: nothing to do (%s)\n", s->name().c_str(),
                plan.nothing_to_do.c_str());
    return 0;
  }
  auto layers = s->OpenLayers();
  if (!layers) return Fail(kExitFailed, what, layers.error());
  LayerStore store(s->state_dir());
  // The merged layer is built in the sandbox's own folder, where no
  // garbage collection looks (the layers it reads are frozen, and the
  // sandbox's lock keeps its stack as it is), then moved into the store and
  // named by the manifest under the store lock. A squash interrupted before
  // leaves only that folder, which the next squash removes.
  struct stat like;
  const std::string top_layer = store.Path(plan.merge.back());
  if (::stat(top_layer.c_str(), &like) != 0)
    return Fail(kExitFailed, what, Error::Errno("stat", top_layer));
  // Unmounted, this command holds the sandbox's lock, so a "squash.*" in
  // its folder is an interrupted squash's; mounted, another client's squash
  // may be building one.
  auto id = store.StartBuild(s->paths().dir, like, /*sweep=*/!mounted);
  if (!id) return Fail(kExitFailed, what, id.error());
  const std::string building = LayerStore::BuildPath(s->paths().dir, *id);
  const unsigned top = static_cast<unsigned>(plan.merge.size());
  auto stats = SquashLayers(*layers, 1, top, building);
  if (!stats) {
    (void)sys::RemoveTree(AT_FDCWD, building, building);
    return Fail(kExitFailed, what, stats.error());
  }
  size_t frozen_now = 0;
  if (mounted) {
    auto r = AskDaemon(*s, {{"op", "squash"},
                            {"merge", plan.merge},
                            {"id", *id},
                            {"building", building}});
    if (!r) {
      (void)sys::RemoveTree(AT_FDCWD, building, building);
      return Fail(kExitFailed, what, r.error());
    }
    frozen_now = (*r)["frozen"].get<size_t>();
  } else {
    auto slock = StoreLock::Take(s->state_dir());
    if (!slock) return Fail(kExitFailed, what, slock.error());
    auto next =
        CommitSquash(store, s->stack(), plan, building, *id,
                     [&](const StackManifest& next, const std::string&) {
                       return s->SaveStack(next);
                     });
    if (!next) {
      (void)sys::RemoveTree(AT_FDCWD, building, building);
      return Fail(kExitFailed, what, next.error());
    }
  }
  if (!mounted) frozen_now = s->stack().frozen.size();
  auto gc = CollectGarbage(s->state_dir());
  if (!gc)
    return Fail(kExitFailed, what + ": remove the old layers", gc.error());
  std::printf(
      "acqfs: squash %s: %zu layers merged into one (%llu files linked, "
      "%llu directories, %llu whiteouts); %zu frozen layers now\n",
      s->name().c_str(), plan.merge.size(),
      static_cast<unsigned long long>(stats->linked),
      static_cast<unsigned long long>(stats->dirs),
      static_cast<unsigned long long>(stats->whiteouts), frozen_now);
  return 0;
}

}  // namespace acqfs::cli
