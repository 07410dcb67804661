// acqfs checkpoint, checkpoints, rewind, fork and gc: a sandbox's history
// as a stack of frozen layers (docs/stack.md). A mounted sandbox is
// checkpointed by its daemon, through its control socket
// (docs/control.md); one not mounted, by the command itself, holding the
// sandbox's lock.
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
#include "cli/control.h"
#include "cli/liveness.h"
#include "cli/process.h"
#include "cli/sandbox.h"
#include "cli/stack.h"
#include "cli/stack_ops.h"
#include "cli/state.h"
#include "common/handle.h"
#include "common/sys.h"
#include "fs/layer.h"
#include "fs/layer_squash.h"
#include "gitbridge/export.h"
#include "gitbridge/remote.h"

namespace acqfs::cli {
namespace {

constexpr int kControlTimeoutMs = 60000;

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

// What a command that changes the stack of a sandbox no daemon serves
// holds until it ends: the sandbox's lock, and the claim on its upper and
// work directories (fs/layer.h), which keeps a daemon acqfs mount did not
// start (mount.fuse.acqfs) from serving them meanwhile.
struct Quiet {
  UniqueFd lock;
  std::optional<LayersClaim> claim;
};

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

}  // namespace

int RunCheckpoint(const CheckpointArgs& a) {
  int rc = 0;
  auto s = FindSandbox("checkpoint", a.state_dir, a.name, &rc);
  if (!s) return rc;
  double ms = 0;
  auto n = MakeCheckpoint(*s, a.message, CheckpointKind::kCheckpoint, &ms);
  if (!n)
    return Fail(n.err() == EBUSY ? kExitBadInput : kExitFailed,
                "checkpoint " + s->name(), n.error());
  if (a.json) {
    nlohmann::json j{{"sandbox", s->name()}, {"checkpoint", *n}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("acqfs: checkpoint %s: checkpoint %u\n", s->name().c_str(), *n);
  }
  return 0;
}

int RunCheckpoints(const CheckpointsArgs& a) {
  int rc = 0;
  auto s = FindSandbox("checkpoints", a.state_dir, a.name, &rc);
  if (!s) return rc;
  const StackManifest& m = s->stack();
  LayerStore store(s->state_dir());
  nlohmann::json list = nlohmann::json::array();
  if (!a.json)
    std::printf("%4s  %-20s  %-12s  %8s  %10s  %s\n", "#", "TIME", "KIND",
                "PATHS", "BYTES", "MESSAGE");
  for (const auto& c : m.checkpoints) {
    auto stats = store.StatsOf(c.layers.back());
    if (!stats)
      return Fail(kExitFailed, "checkpoints " + s->name(), stats.error());
    const bool current = c.number == m.base;
    if (a.json) {
      list.push_back({{"number", c.number},
                      {"time", Iso(c.time_ns)},
                      {"time_ns", c.time_ns},
                      {"kind", std::string(KindName(c.kind))},
                      {"message", c.message},
                      {"paths", stats->paths},
                      {"bytes", stats->bytes},
                      {"layers", c.layers.size()},
                      {"current", current}});
    } else {
      std::printf("%3u%c  %-20s  %-12s  %8llu  %10s  %s\n", c.number,
                  current ? '*' : ' ', Iso(c.time_ns).c_str(),
                  std::string(KindName(c.kind)).c_str(),
                  static_cast<unsigned long long>(stats->paths),
                  FormatBytes(stats->bytes).c_str(), c.message.c_str());
    }
  }
  if (a.json) {
    nlohmann::json j{
        {"sandbox", s->name()}, {"base", m.base}, {"checkpoints", list}};
    std::printf("%s\n",
                j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                    .c_str());
  }
  return 0;
}

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

// The fork's copy-up sources (fs/copy_up_source.h): the files of its
// frozen layers, shared with the parent, name sources kept in the parent's
// store, so each is hard-linked into the fork's own (which `acqfs rm` of
// either then leaves to the other).
static Status LinkSources(const std::string& from, const std::string& to) {
  auto src = sys::OpenDirPath(from, O_RDONLY | O_NOFOLLOW);
  if (!src) return src.err() == ENOENT ? Ok() : Status(src.error());
  if (::mkdir(to.c_str(), 0700) != 0 && errno != EEXIST)
    return Error::Errno("mkdir", to);
  auto dst = sys::OpenDirPath(to, O_RDONLY | O_NOFOLLOW);
  if (!dst) return dst.error();
  auto entries = sys::ReadDir(src->get(), from);
  if (!entries) return entries.error();
  for (const auto& e : *entries) {
    if (e.type != DT_REG || e.name[0] == '#') continue;  // '#': unfinished
    if (::linkat(src->get(), e.name.c_str(), dst->get(), e.name.c_str(), 0) !=
            0 &&
        errno != EEXIST)
      return Error::Errno("link", to + "/" + e.name);
  }
  return Ok();
}

int RunFork(const ForkArgs& a) {
  int rc = 0;
  auto s = FindSandbox("fork", a.state_dir, a.name, &rc);
  if (!s) return rc;
  const std::string what = "fork " + s->name();
  // Absolute: the fork's bridge path becomes its remote's URL in the
  // host's .git/config, which a relative --state-dir would leave naming a
  // path relative to wherever git runs (the host's fetch failed).
  const std::string state = CanonicalPath(s->state_dir());
  if (!ValidSandboxName(a.new_name))
    return Fail(kExitBadInput, what, a.new_name,
                "not a valid sandbox name (letters, digits, '.', '_', '-')");
  Sandbox child(state, a.new_name);
  auto exists = [&] {
    struct stat st;
    return ::lstat(child.paths().dir.c_str(), &st) == 0 || errno != ENOENT;
  };
  auto taken = [&](const std::string& why) {
    return Fail(kExitBadInput, what, a.new_name,
                "a sandbox of that name exists already" + why);
  };
  if (exists()) return taken("");
  // The child is built in <state>/.fork+NEW, a name no sandbox can have,
  // which this command holds (flock) until it ends, and it comes to exist
  // at one step, the rename of that folder to NEW (docs/stack.md, "Sandbox
  // folders in the making"). Killed before, it leaves only that folder and
  // an unnamed layer, which the next gc (or rm, or squash) removes; a fork
  // to the same name at the same time finds the folder held and stops
  // here, having touched nothing.
  auto folder = ReserveForkFolder(state, a.new_name);
  if (!folder) {
    if (folder.err() == EBUSY)
      return taken(" (another acqfs fork is making it)");
    return Fail(kExitFailed, what, folder.error());
  }
  Sandbox building(state, folder->name);
  LayerStore store(state);
  std::string new_upper;  // the child's upper, once made
  // Before the commit: removes what this command made, and only that (its
  // own folder and layer; never a folder of the new name).
  auto discard = [&] {
    (void)RemoveHeldFolder(state, *folder);
    if (!new_upper.empty())
      if (auto slock = StoreLock::Take(state)) (void)store.Remove(new_upper);
  };
  auto fail = [&](int code, const Error& e) {
    discard();
    return Fail(code, what, e);
  };
  // Made meanwhile by a fork that committed since the test above.
  if (exists()) {
    discard();
    return taken("");
  }
  uint32_t at = a.at;
  if (at == 0) {
    // The live state, upper included: frozen first (the parent's own
    // commit; it stays when the fork goes no further).
    auto n = MakeCheckpoint(*s, "fork " + a.new_name, CheckpointKind::kFork,
                            nullptr);
    if (!n)
      return fail(n.err() == EBUSY ? kExitBadInput : kExitFailed, n.error());
    at = *n;
    if (Status l = s->Load(); !l) return fail(kExitFailed, l.error());
  }
  if (!s->stack().Find(at)) {
    discard();
    return Fail(
        kExitBadInput, what, "checkpoint " + std::to_string(at),
        "no such checkpoint (see `acqfs checkpoints " + s->name() + "`)");
  }
  // Its own lock: after the commit it keeps a mount of the child out until
  // the host-side steps are done.
  auto lock = building.Lock(/*create=*/true);
  if (!lock) return fail(kExitFailed, lock.error());
  if (Status sec = SecureSandboxDir(building.paths().dir); !sec)
    return fail(kExitFailed, sec.error());
  if (Status w = MakeDirs(building.paths().work); !w)
    return fail(kExitFailed, w.error());
  {
    auto slock = StoreLock::Take(state);
    if (!slock) return fail(kExitFailed, slock.error());
    // Read again under the store lock: its layers cannot go meanwhile.
    auto m = ReadStack(s->paths().stack);
    if (!m) return fail(kExitFailed, m.error());
    const Checkpoint* c = m->Find(at);
    if (!c)
      return fail(kExitBadInput, Error::Of(ENOENT, "no such checkpoint",
                                           "checkpoint " + std::to_string(at)));
    struct stat like;
    const std::string top = store.Path(c->layers.back());
    if (::stat(top.c_str(), &like) != 0)
      return fail(kExitFailed, Error::Errno("stat", top));
    auto ref = store.Create(&like);
    if (!ref) return fail(kExitFailed, ref.error());
    new_upper = *ref;
    auto forked = Fork(*m, at, *ref);
    if (!forked) return fail(kExitBadInput, forked.error());
    // Names the new upper (and the shared frozen layers) for every garbage
    // collection from now on: one reads the stack.json of a fork folder
    // whose fork is at work.
    if (Status w = building.SaveStack(*forked); !w)
      return fail(kExitFailed, w.error());
  }
  if (Status l = LinkSources(s->paths().sources, building.paths().sources); !l)
    return fail(kExitFailed, l.error());
  building.meta() = s->meta();
  building.meta().name = a.new_name;
  building.meta().mountpoint = a.mountpoint;
  building.meta().last_export = 0;
  if (building.IsGit()) {
    // The host is written only after the commit; what it would refuse is
    // found out before.
    if (Status f = gitbridge::CheckRemoteFree(building.meta().lower, a.new_name,
                                              child.paths().bridge);
        !f)
      return fail(kExitFailed, f.error());
    if (Status b = building.MakeBridge(); !b)
      return fail(kExitFailed, b.error());
    if (Status m = building.MarkHostStepsPending(); !m)
      return fail(kExitFailed, m.error());
  }
  if (Status w = building.Save(); !w) return fail(kExitFailed, w.error());
  // Everything in the folder durable before the rename names it.
  if (::syncfs(folder->dir.get()) != 0)
    return fail(kExitFailed, Error::Errno("syncfs", building.paths().dir));
  // The commit point.
  if (Status c = CommitForkFolder(state, &*folder, a.new_name); !c) {
    if (c.err() == EEXIST) {
      discard();
      return taken("");
    }
    // Renamed, and the state dir's fsync failed: the child exists.
    if (folder->name == a.new_name) return Fail(kExitFailed, what, c.error());
    return fail(kExitFailed, c.error());
  }
  // The child exists. Its host-side steps: redone by its next mount (or
  // unmounted checkpoint, rewind or squash) while host.pending says they
  // are not all done, as when this command is killed now.
  if (Status l = child.Load(); !l) return Fail(kExitFailed, what, l.error());
  if (child.HostStepsPending()) {
    if (Status f = child.FinishHostSteps(); !f) {
      // Undone as `acqfs rm` would (the remote and keep refs are ours: the
      // remote was free).
      for (const std::string& m : child.meta().policy.own_git_modules)
        (void)gitbridge::DropKeepRefs(sys::Join(child.meta().lower, m),
                                      a.new_name);
      (void)gitbridge::UnregisterRemote(child.meta().lower, a.new_name,
                                        child.paths().bridge);
      folder->dir.reset();
      if (auto trash = MoveToTrash(state, a.new_name))
        (void)RemoveHeldFolder(state, *trash);
      (void)CollectGarbage(state);
      return Fail(kExitFailed, what, f.error());
    }
  }
  lock->reset();
  folder->dir.reset();
  std::printf("acqfs: fork %s: %s starts at checkpoint %u\n", s->name().c_str(),
              a.new_name.c_str(), at);
  if (!a.mountpoint.empty()) {
    MountArgs m;
    m.lower = child.meta().lower;
    m.mountpoint = a.mountpoint;
    m.name = a.new_name;
    m.name_given = true;
    m.state_dir = state;
    return RunMount(m);
  }
  return 0;
}

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

int RunGc(const GcArgs& a) {
  const std::string state = Absolute(ResolveStateDir(a.state_dir));
  auto r = CollectGarbage(state);
  if (!r) return Fail(kExitFailed, "gc", r.error());
  std::printf("acqfs: gc: removed %zu layers (%s), kept %zu", r->layers_removed,
              FormatBytes(r->bytes_freed).c_str(), r->layers_kept);
  if (r->folders_removed)
    std::printf("; removed %zu folders a dead fork or rm left",
                r->folders_removed);
  std::printf("\n");
  return 0;
}

}  // namespace acqfs::cli
