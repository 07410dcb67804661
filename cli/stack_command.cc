// What the stack commands (checkpoint, checkpoints, rewind, fork, squash)
// share: finding the sandbox, asking its daemon, and holding a sandbox no
// daemon serves quiet while the command changes its stack (docs/stack.md).
// A mounted sandbox's stack is changed by its daemon, through its control
// socket (docs/control.md); one not mounted, by the command itself, holding
// the sandbox's lock.
#include "cli/stack_command.h"

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
#include "cli/sandbox.h"
#include "common/sys.h"
#include "daemon/control.h"
#include "fs/layer.h"
#include "stack/manifest.h"
#include "stack/stack_ops.h"
#include "stack/store.h"
#include "state/liveness.h"
#include "state/process.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

constexpr int kControlTimeoutMs = 60000;

}  // namespace

std::string Iso(int64_t ns) {
  std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The sandbox `arg` names, found and loaded; exit code in *rc on failure.
std::optional<Sandbox> FindSandbox(const std::string& what,
                                   const std::string& state_dir,
                                   const std::string& arg, int* rc) {
  auto s = Sandbox::Find(Absolute(ResolveStateDir(state_dir)), arg);
  if (!s) {
    *rc = FailFind(what, arg, s.error());
    return std::nullopt;
  }
  if (Status st = s->StackOk(); !st) {
    *rc = Fail(kExitBadInput, what + " " + arg, st.error());
    return std::nullopt;
  }
  return std::move(*s);
}

// Is the sandbox's daemon alive (then it owns the stack)?
Result<bool> DaemonAlive(const Sandbox& s) {
  auto live = s.Probe();
  if (!live) return live.error();
  return live->daemon_alive;
}

// The sandbox's lock is held by a process that is not its daemon (another
// command: a squash, a fork, a mount starting): EBUSY naming it.
Error LockBusy(const Sandbox& s) {
  std::string who;
  for (pid_t pid : LockHolders(s.paths().lock)) {
    who += who.empty() ? "pid " : ", pid ";
    who += std::to_string(pid);
    if (auto st = ReadProcStat(pid)) who += " (" + st->comm + ")";
  }
  if (who.empty()) who = "another process";
  return Error::Of(EBUSY,
                   "is busy: its lock is held by " + who +
                       " (another acqfs command, or a mount starting); try "
                       "again when it is done",
                   s.paths().lock);
}

// Asks the sandbox's daemon for `request`.
Result<nlohmann::json> AskDaemon(const Sandbox& s,
                                 const nlohmann::json& request) {
  auto r = CallControl(s.paths().dir, SandboxPaths::kControlSocket, request,
                       kControlTimeoutMs);
  // Only when no daemon listens (CallControl's "connect"): an ENOENT the
  // daemon answered ("no such checkpoint") is said as it is.
  const bool unserved = !r && (r.err() == ENOENT || r.err() == ECONNREFUSED) &&
                        r.error().op.rfind("connect", 0) == 0;
  // The lock taken for a daemon: a command holds it, unless the pid that
  // daemon.pid records is among its holders.
  if (unserved) {
    auto record = ReadDaemonRecord(s.paths().pid);
    const std::vector<pid_t> holders = LockHolders(s.paths().lock);
    if (!record ||
        (!holders.empty() && std::find(holders.begin(), holders.end(),
                                       record->pid) == holders.end()))
      return LockBusy(s);
  }
  if (unserved)
    return Error::Of(r.err(),
                     "its daemon does not serve a control socket (mounted "
                     "by an older acqfs? unmount and mount it again)",
                     r.error().path);
  return r;
}

namespace {

// Its layers' claim, or why not: a daemon serves them.
Status ClaimLayers(const Sandbox& s, Quiet* q) {
  auto claim = LayersClaim::Take(s.paths().upper, s.paths().work, 0);
  if (claim) {
    q->claim = std::move(*claim);
    return Ok();
  }
  if (claim.err() != EBUSY) return claim.error();
  for (const std::string& dir : {s.paths().upper, s.paths().work}) {
    auto pid = LayersHolder(dir);
    if (!pid) continue;
    return Error::Of(EBUSY,
                     "is in use by " +
                         (*pid > 0 ? "acqfs daemon pid " + std::to_string(*pid)
                                   : std::string("an acqfs daemon")) +
                         ", which acqfs mount did not start (a mount through "
                         "mount.fuse.acqfs?); unmount that mount first",
                     dir);
  }
  return claim.error();
}

}  // namespace

// For a command that changes the stack of a sandbox no daemon serves: takes
// its lock and its layers' claim (into *q, held until the command ends),
// and makes its stack whole (Sandbox::PrepareStack, which also checks that
// its layers are its own).
Status HoldQuiet(Sandbox& s, Quiet* q) {
  auto l = s.Lock(/*create=*/true);
  if (!l) {
    if (l.err() == EWOULDBLOCK) return LockBusy(s);
    return l.error();
  }
  q->lock = std::move(*l);
  struct stat host;
  if (::stat(s.meta().lower.c_str(), &host) != 0)
    return Error::Errno("stat", s.meta().lower);
  ACQFS_TRY(s.PrepareStack(host));
  return ClaimLayers(s, q);
}

// With the sandbox's lock held and its stack whole (HoldQuiet), no daemon:
// a checkpoint by this command.
Result<CheckpointPlan> CheckpointQuiet(Sandbox& s, const std::string& message,
                                       CheckpointKind kind) {
  auto lock = StoreLock::Take(s.state_dir());
  if (!lock) return lock.error();
  auto plan =
      PlanCheckpoint(s.state_dir(), s.stack(), s.paths().upper, message, kind);
  if (!plan) return plan.error();
  ACQFS_TRY(s.SaveStack(plan->next));
  return plan;
}

// A checkpoint of the sandbox, by its daemon or by this command: the new
// checkpoint's number.
Result<uint32_t> MakeCheckpoint(Sandbox& s, const std::string& message,
                                CheckpointKind kind, double* ms) {
  auto alive = DaemonAlive(s);
  if (!alive) return alive.error();
  if (*alive) {
    auto r = AskDaemon(s, {{"op", "checkpoint"},
                           {"message", message},
                           {"kind", std::string(KindName(kind))}});
    if (!r) return r.error();
    if (ms && r->contains("ms")) *ms = (*r)["ms"].get<double>();
    return (*r)["number"].get<uint32_t>();
  }
  Quiet quiet;
  ACQFS_TRY(HoldQuiet(s, &quiet));
  auto plan = CheckpointQuiet(s, message, kind);
  if (!plan) return plan.error();
  return plan->number;
}

bool UpperEmpty(const std::string& dir) {
  auto fd = sys::OpenDirPath(dir, O_RDONLY);
  if (!fd) return false;
  auto entries = sys::ReadDir(fd->get(), dir);
  return entries && entries->empty();
}

void PrintRewound(const std::string& name, uint32_t at, uint32_t undo) {
  if (undo)
    std::printf(
        "acqfs: rewind %s: at checkpoint %u (what it held before is "
        "checkpoint %u: `acqfs rewind %s %u` undoes this)\n",
        name.c_str(), at, undo, name.c_str(), undo);
  else
    std::printf("acqfs: rewind %s: at checkpoint %u\n", name.c_str(), at);
}

}  // namespace acqfs::cli
