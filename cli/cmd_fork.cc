// acqfs fork: a new sandbox that starts at a checkpoint of another
// (docs/stack.md, "Commit points").
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
#include <set>
#include <string>
#include <vector>

#include "audit/log_file.h"
#include "audit/query.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/sandbox.h"
#include "cli/stack_command.h"
#include "common/sys.h"
#include "fs/layer.h"
#include "gitbridge/remote.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"

namespace acqfs::cli {
namespace {

// The child starts with its parent's audit log up to the fork point
// (docs/audit.md): all of it for a fork of the live state (its checkpoint
// was just made, and a mounted parent's daemon wrote its pending records
// before that), else the records of the layers checkpoint `at` is made of,
// and the records about the log itself up to that checkpoint's time.
Status ForkAuditLog(const Sandbox& parent, const Sandbox& child, uint32_t at,
                    bool whole) {
  auto from = sys::OpenBelow(parent.state_dir(), parent.paths().dir,
                             O_DIRECTORY | O_RDONLY, "open the audit log's");
  if (!from) return from.error();
  auto to = sys::OpenBelow(child.state_dir(), child.paths().dir,
                           O_DIRECTORY | O_RDONLY, "open the audit log's");
  if (!to) return to.error();
  if (whole)
    return audit::CopyLog(from->get(), parent.paths().dir, to->get(),
                          child.paths().dir);
  auto m = ReadStack(parent.paths().stack);
  if (!m) return m.error();
  const Checkpoint* c = m->Find(at);
  if (c == nullptr)
    return Error::Of(ENOENT, "no such checkpoint",
                     "checkpoint " + std::to_string(at));
  std::set<std::string> ids;
  for (const auto& l : c->layers) ids.insert(sys::Basename(l));
  auto log = audit::ReadLog(from->get(), parent.paths().dir);
  if (!log) return log.error();
  auto w = audit::Writer::Open(to->get(), child.paths().dir, {});
  if (!w) return w.error();
  for (auto& r : log->records) {
    const bool keep = audit::IsMetaOp(r.op) ? r.time_ns <= c->time_ns
                                            : ids.count(r.layer) > 0;
    if (keep) (*w)->Append(std::move(r));
  }
  return (*w)->Flush();
}

}  // namespace

// The fork's copy-up sources (fs/copy_up_source.h): the files of its
// frozen layers, shared with the parent, name sources kept in the parent's
// store, so each is hard-linked into the fork's own (which `acqfs rm` of
// either then leaves to the other).
namespace {

Status LinkSources(const std::string& from, const std::string& to) {
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

}  // namespace

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
  if (Status l = ForkAuditLog(*s, building, at, a.at == 0); !l)
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

}  // namespace acqfs::cli
