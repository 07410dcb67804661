// acqfs rewind: puts a sandbox back at a checkpoint, keeping what it held
// as an undo point (docs/stack.md).
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
#include "fs/layer.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"

namespace acqfs::cli {

int RunRewind(const RewindArgs& a) {
  int rc = 0;
  auto s = FindSandbox("rewind", a.state_dir, a.name, &rc);
  if (!s) return rc;
  const std::string what = "rewind " + s->name();
  auto alive = DaemonAlive(*s);
  if (!alive) return Fail(kExitFailed, what, alive.error());
  if (*alive) {
    auto r = AskDaemon(*s, {{"op", "rewind"}, {"number", a.checkpoint}});
    if (!r) {
      const int code =
          r.err() == ENOENT && r.error().path.rfind("checkpoint ", 0) == 0
              ? kExitBadInput
              : kExitFailed;
      return Fail(code, what, r.error());
    }
    PrintRewound(s->name(), a.checkpoint, (*r)["undo"].get<uint32_t>());
    return 0;
  }
  Quiet quiet;
  if (Status q = HoldQuiet(*s, &quiet); !q)
    return Fail(q.err() == EBUSY ? kExitBadInput : kExitFailed, what,
                q.error());
  const Checkpoint* target = s->stack().Find(a.checkpoint);
  if (!target)
    return Fail(
        kExitBadInput, what, "checkpoint " + std::to_string(a.checkpoint),
        "no such checkpoint (see `acqfs checkpoints " + s->name() + "`)");
  LayerStore store(s->state_dir());
  auto slock = StoreLock::Take(s->state_dir());
  if (!slock) return Fail(kExitFailed, what, slock.error());
  // The new upper's root looks like the checkpoint's.
  struct stat like;
  const std::string top = store.Path(target->layers.back());
  if (::stat(top.c_str(), &like) != 0)
    return Fail(kExitFailed, what, Error::Errno("stat", top));
  auto ref = store.Create(&like);
  if (!ref) return Fail(kExitFailed, what, ref.error());
  uint32_t undo = 0;
  auto next =
      RewindWithUndo(s->stack(), a.checkpoint, !UpperEmpty(s->paths().upper),
                     *ref, NowNs(), &undo);
  if (!next) {
    (void)store.Remove(*ref);
    return Fail(kExitBadInput, what, next.error());
  }
  if (Status w = s->SaveStack(*next); !w) {
    (void)store.Remove(*ref);
    return Fail(kExitFailed, what, w.error());
  }
  PrintRewound(s->name(), a.checkpoint, undo);
  return 0;
}

}  // namespace acqfs::cli
