// acqfs mount: validates, lays out the sandbox's state folder, registers the
// sandbox-<name> remote when the lower is a git checkout, starts the daemon.
// Every refusal (exit 1) happens before anything is written: the state
// directory and the host checkout stay byte for byte as they were. A sandbox
// whose daemon died (a stale mount) is cleaned up and mounted again.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/podman_namespace.h"
#include "cli/policy_args.h"
#include "cli/sandbox.h"
#include "common/handle.h"
#include "common/sys.h"
#include "daemon/allow_other.h"
#include "daemon/daemon.h"
#include "fs/layer.h"
#include "fs/layer_format.h"
#include "gitbridge/export.h"
#include "gitbridge/git_base.h"
#include "gitbridge/index_objects.h"
#include "gitbridge/remote.h"
#include "state/as_owner.h"
#include "state/liveness.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

// Applies -o options acqfs understands to the mount config; allow_other
// and noallow_other go to `allow_other`.
int ApplyOptions(const std::vector<std::string>& opts, MountConfig* c,
                 AllowOtherRequest* allow_other) {
  for (const auto& list : opts) {
    std::stringstream ss(list);
    std::string o;
    while (std::getline(ss, o, ',')) {
      if (o.empty()) continue;
      bool taken = false;
      if (Status s = allow_other->TakeOption(o, &taken); !s)
        return Fail(kExitBadInput, "mount", s.error().path, s.error().op);
      if (taken) continue;
      if (Status s = ApplyMountOption(o, c); !s)
        return Fail(kExitBadInput, "mount: " + s.error().op, "-o " + o,
                    std::strerror(s.err()));
    }
  }
  return 0;
}

// Who may use the mount (allow_other.h): --allow-other, --no-allow-other
// and -o allow_other / noallow_other, else the default for this user.
// Refused before anything is made when fusermount3 would refuse it.
int ChooseAllowOther(const MountArgs& a, MountConfig* config) {
  auto request = AllowOtherRequest::FromFlags(a.allow_other, a.no_allow_other);
  if (!request)
    return Fail(kExitBadInput, "mount", request.error().path,
                request.error().op);
  if (int rc = ApplyOptions(a.options, config, &*request)) return rc;
  auto allow = request->Decide(::geteuid());
  if (!allow) return Fail(kExitBadInput, "mount", allow.error());
  config->allow_other = *allow;
  return 0;
}

// A lower whose .git is a file naming a repository outside the lower (a
// `git worktree` or a checkout made with --separate-git-dir): git inside the
// sandbox would follow that absolute path and write to the host's repository
// directly, outside the overlay. acqfs refuses rather than mount a sandbox
// with that hole. (Relative gitdirs, as submodules use, stay inside.)
int CheckGitFile(const std::string& lower) {
  std::string gitfile = lower + "/.git";
  struct stat st;
  if (::lstat(gitfile.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  std::ifstream in(gitfile);
  std::string line;
  std::getline(in, line);
  if (line.rfind("gitdir:", 0) != 0) return 0;
  std::string dir = line.substr(7);
  while (!dir.empty() && (dir.front() == ' ' || dir.front() == '\t'))
    dir.erase(dir.begin());
  while (!dir.empty() && (dir.back() == '\r' || dir.back() == ' '))
    dir.pop_back();
  if (dir.empty() || dir.front() != '/') return 0;
  auto real = RealPath(dir);
  if (real && Within(*real, lower)) return 0;
  return Fail(kExitBadInput, "mount: lower directory", lower,
              ".git is a file pointing at a repository outside it (" + dir +
                  "): git in the sandbox would write there directly; mount "
                  "the main checkout instead");
}

// The checked, canonical operands of a mount.
struct MountTarget {
  std::string lower, mountpoint, name;
  std::string state;        // as other commands compute it (paths, remote URL)
  std::string state_canon;  // canonical, for the containment checks
};

// The lower, the mountpoint's place and the name; nothing is looked at below
// the mountpoint yet (it may hold a dead mount, see CheckMountpoint).
int CheckOperands(const MountArgs& a, MountTarget* t) {
  auto lower = RealPath(a.lower);
  if (!lower)
    return Fail(kExitBadInput, "mount: lower directory", lower.error());
  if (!IsDir(*lower))
    return Fail(kExitBadInput, "mount: lower directory", *lower,
                "not a directory");
  std::string mnt = CanonicalPath(a.mountpoint);
  if (Within(mnt, *lower))
    return Fail(kExitBadInput, "mount: mountpoint", mnt,
                "is inside the lower directory " + *lower);
  if (Within(*lower, mnt))
    return Fail(kExitBadInput, "mount: mountpoint", mnt,
                "contains the lower directory " + *lower);
  std::string name = a.name_given ? a.name : sys::Basename(mnt);
  if (!ValidSandboxName(name))
    return Fail(kExitBadInput, "mount: sandbox name", "'" + name + "'",
                "use 1-64 letters, digits, '.', '_' or '-' (not . or ..)");
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  std::string state_canon = CanonicalPath(state);
  if (Within(mnt, state_canon))
    return Fail(kExitBadInput, "mount: mountpoint", mnt,
                "is inside the state directory " + state_canon);
  if (Within(state_canon, mnt))
    return Fail(kExitBadInput, "mount: mountpoint", mnt,
                "contains the state directory " + state_canon);
  // The merged view would show every sandbox's layers, bridge and logs
  // (this sandbox's own upper layer included) to the sandbox.
  if (Within(state_canon, *lower))
    return Fail(kExitBadInput, "mount: state directory", state_canon,
                "is inside the lower directory " + *lower +
                    " (the sandbox would see every sandbox's layers); choose "
                    "another --state-dir");
  *t = MountTarget{*lower, mnt, name, state, state_canon};
  return 0;
}

// What is known of the sandbox before anything is written (its metadata,
// when it exists, is the Sandbox's, updated for this mount).
struct SandboxFacts {
  SandboxMeta original;  // the metadata as it was, to put back on failure
  bool existed = false;  // meta.json was there
  bool stale = false;    // its daemon died and left its mount behind
};

// A daemon that `acqfs mount` did not start (mount.fuse.acqfs) may serve
// the sandbox's layers; it holds their claim (fs/layer.h, LayersClaim).
int CheckLayersFree(const MountTarget& t, const SandboxPaths& paths) {
  for (const std::string& dir : {paths.upper, paths.work}) {
    auto pid = LayersHolder(dir);
    if (!pid) continue;
    return Fail(kExitBadInput, "mount: sandbox", t.name,
                "its " +
                    std::string(dir == paths.upper ? "upper layer "
                                                   : "work directory ") +
                    dir + " is served by " +
                    (*pid > 0 ? "acqfs daemon pid " + std::to_string(*pid)
                              : std::string("an acqfs daemon")) +
                    ", which acqfs mount did not start (a mount through "
                    "mount.fuse.acqfs?); unmount that mount first");
  }
  return 0;
}

// Reads the sandbox's metadata and liveness when it exists; refuses a
// different lower and a sandbox that is mounted (or being mounted).
int CheckSandbox(const MountTarget& t, Sandbox* sandbox, SandboxFacts* f) {
  const SandboxPaths& paths = sandbox->paths();
  if (!sandbox->HasFolder()) return 0;
  if (!sandbox->HasMeta()) {
    auto held = sandbox->LockHeld();
    if (held && *held)  // a first mount that has not written it yet
      return Fail(
          kExitBadInput, "mount: sandbox", t.name,
          "is being mounted right now (its lock " + paths.lock + " is held)");
    // A first mount killed before it wrote meta.json: nothing of it was
    // ever mounted, so this mount makes the sandbox, over what it left.
    if (held) return CheckLayersFree(t, paths);
  }
  if (Status loaded = sandbox->Load(); !loaded) {
    auto held = sandbox->LockHeld();
    if (held && *held)  // a first mount that has not written it yet
      return Fail(
          kExitBadInput, "mount: sandbox", t.name,
          "is being mounted right now (its lock " + paths.lock + " is held)");
    return Fail(kExitBadInput, "mount: sandbox metadata", loaded.error());
  }
  const SandboxMeta& meta = sandbox->meta();
  if (meta.lower != t.lower)
    return Fail(kExitBadInput, "mount: sandbox", t.name,
                "exists over a different lower directory (" + meta.lower + ")");
  f->original = meta;
  f->existed = true;
  auto live = sandbox->Probe();
  if (!live) return Fail(kExitFailed, "mount: sandbox state", live.error());
  if (live->state == MountState::kMounted)
    return Fail(kExitBadInput, "mount: sandbox", t.name,
                "is already mounted at " + meta.mountpoint);
  if (live->daemon_alive)
    return Fail(kExitBadInput, "mount: sandbox", t.name,
                "is being mounted or unmounted right now (its lock " +
                    paths.lock + " is held)");
  f->stale = live->state == MountState::kStale;
  return CheckLayersFree(t, paths);
}

// The mountpoint must be a directory and hold no acqfs mount, except the
// sandbox's own dead one, which the mount cleans up first.
int CheckMountpoint(const MountArgs& a, const MountTarget& t,
                    const Sandbox& sandbox, const SandboxFacts& f) {
  if (f.stale && sandbox.meta().mountpoint == t.mountpoint) return 0;
  if (IsAcqfsMounted(t.mountpoint))
    return Fail(kExitBadInput, "mount: mountpoint", t.mountpoint,
                "already holds an acqfs mount");
  auto mnt = RealPath(a.mountpoint);
  if (!mnt) return Fail(kExitBadInput, "mount: mountpoint", mnt.error());
  if (!IsDir(*mnt))
    return Fail(kExitBadInput, "mount: mountpoint", *mnt, "not a directory");
  return 0;
}

// A rootless Podman namespace of this user that was made before the mount
// and would not receive it (cli/podman_namespace.h): a container given the
// mountpoint would see the empty directory under it and write there,
// outside the sandbox. Refused unless --ignore-podman-namespace.
// Root's Podman is rootful: it keeps no pause process.
int CheckPodmanNamespace(const MountArgs& a, const MountTarget& t) {
  if (a.ignore_podman_namespace || ::getuid() == 0) return 0;
  const auto missing = PausesMissingMountAt(::getuid(), t.mountpoint);
  if (missing.empty()) return 0;
  const PodmanPause* pause = &missing.front();
  return Fail(
      kExitBadInput, "mount: mountpoint", t.mountpoint,
      "rootless Podman's namespace, kept by your process " +
          std::to_string(pause->pid) + " (" + pause->command +
          ") since before this mount, would not see it: a container given "
          "this mountpoint would see the empty directory under it and "
          "write outside the sandbox. Mount before your first podman "
          "command, or end that namespace with `podman system migrate` "
          "(it stops your running containers) and mount again, or mount "
          "under a shared mount (`podman unshare` then shows it); pass "
          "--ignore-podman-namespace when no container will use it");
}

// Creates the sandbox's folder (`*created` tells whether this call did) and
// takes its lock, which the daemon inherits.
int CreateAndLock(const MountTarget& t, const Sandbox& sandbox, bool* created,
                  UniqueFd* lock) {
  const SandboxPaths& paths = sandbox.paths();
  if (Status s = MakeDirs(t.state); !s)
    return Fail(kExitFailed, "mount: state directory", s.error());
  *created = ::mkdir(paths.dir.c_str(), 0700) == 0;
  if (!*created && errno != EEXIST)
    return Fail(kExitFailed, "mount: state directory", paths.dir,
                std::strerror(errno));
  auto locked = sandbox.Lock(/*create=*/true);
  if (locked) {
    *lock = std::move(*locked);
    return 0;
  }
  const int e = locked.err();
  // Contention means another mount owns the folder now: leave it alone.
  if (e == EWOULDBLOCK)
    return Fail(kExitBadInput, "mount: sandbox", t.name,
                "is already mounted or being mounted (its daemon holds " +
                    paths.lock + ")");
  if (*created) (void)sys::RemoveTree(AT_FDCWD, paths.dir, paths.dir);
  return Fail(kExitFailed, "mount: lock", paths.lock, std::strerror(e));
}

// Creates the layer directories: the work directory, and the stack
// (docs/stack.md), whose new upper root takes the lower root's attributes
// (a legacy sandbox's upper moves into the store).
int PrepareLayers(const MountTarget& t, Sandbox& sandbox) {
  if (Status s = MakeDirs(sandbox.paths().work); !s)
    return Fail(kExitFailed, "mount: state directory", s.error());
  struct stat like;
  if (::stat(t.lower.c_str(), &like) != 0)
    return Fail(kExitFailed, "mount: lower", Error::Errno("stat", t.lower));
  if (Status s = sandbox.PrepareStack(like); !s)
    return Fail(
        s.err() == EINVAL || s.err() == EBUSY ? kExitBadInput : kExitFailed,
        "mount: layer stack", s.error());
  return 0;
}

// The sandbox's xattr namespace: the one it was created with, else the
// default; a "trusted" sandbox needs root.
int ChooseNamespace(const MountTarget& t, MountConfig* config,
                    SandboxMeta* meta) {
  if (meta->xattr_namespace.empty())
    meta->xattr_namespace =
        LayerFormat::DefaultNamespace(config->force_userxattr) ==
                XattrNamespace::kTrusted
            ? "trusted"
            : "user";
  if (meta->xattr_namespace == "trusted" && ::geteuid() != 0)
    return Fail(kExitBadInput, "mount: sandbox", t.name,
                "its layers use trusted.overlay xattrs; mount it as root");
  config->force_userxattr = meta->xattr_namespace == "user";
  return 0;
}

// The sandbox's policy: the one it was created with (a remount may repeat
// it but not change it), else the one given now.
int ChoosePolicy(const MountArgs& a, const MountTarget& t, MountConfig* config,
                 SandboxMeta* meta) {
  const bool exists = !meta->name.empty();
  if (a.policy.given() || !exists) {
    auto rec = ResolvePolicy(a.policy);
    if (!rec) return Fail(kExitBadInput, "mount", rec.error());
    if (exists && !(*rec == meta->policy))
      return Fail(kExitBadInput, "mount: sandbox", t.name,
                  "was created with the policy \"" + meta->policy.Summary() +
                      "\"; a remount cannot change it (remount without "
                      "policy options, or `acqfs rm` it and mount anew)");
    // The mount's, not a flag's.
    const bool own_git = meta->policy.own_git;
    std::vector<std::string> modules = meta->policy.own_git_modules;
    meta->policy = *rec;
    meta->policy.own_git = own_git;
    meta->policy.own_git_modules = std::move(modules);
  }
  auto policy = meta->policy.Build();
  if (!policy)
    return Fail(kExitBadInput, "mount: sandbox policy", policy.error());
  config->policy = *policy;
  config->audit_reads = meta->policy.audit_reads;
  config->audit_max = meta->policy.audit_max;
  if (Status s = CheckPolicyEnforceable(*config); !s)
    return Fail(kExitBadInput, "mount: " + s.error().op, "-o " + s.error().path,
                std::strerror(s.err()));
  return 0;
}

// Every check that can refuse the mount, in order; nothing is written yet.
int CheckAll(const MountArgs& a, MountTarget* t, MountConfig* config,
             std::optional<Sandbox>* sandbox, SandboxFacts* f) {
  if (int rc = CheckOperands(a, t)) return rc;
  if (int rc = CheckGitFile(t->lower)) return rc;
  if (int rc = ChooseAllowOther(a, config)) return rc;
  sandbox->emplace(t->state, t->name);
  const SandboxPaths& paths = (*sandbox)->paths();
  if (int rc = CheckSandbox(*t, &**sandbox, f)) return rc;
  if (int rc = CheckMountpoint(a, *t, **sandbox, *f)) return rc;
  if (int rc = CheckPodmanNamespace(a, *t)) return rc;
  if (gitbridge::IsGitCheckout(t->lower)) {
    if (Status s = gitbridge::CheckRemoteFree(t->lower, t->name, paths.bridge);
        !s) {
      if (s.err() != EEXIST)  // a checkout acqfs cannot open as git
        return Fail(kExitBadInput, "mount: lower directory", s.error());
      return Fail(kExitBadInput, "mount: " + s.error().op, t->lower,
                  "remove it or choose another --name");
    }
  }
  if (int rc = ChooseNamespace(*t, config, &(*sandbox)->meta())) return rc;
  return ChoosePolicy(a, *t, config, &(*sandbox)->meta());
}

// Copies what the sandbox's copy of the index names beyond the base's
// HEAD into its upper (gitbridge/index_objects.h) and records it in
// `base`; returns the bytes added. Says on stderr (the daemon's log) what
// could not be kept.
Result<uint64_t> KeepBaseIndexObjects(const std::string& xattr_namespace,
                                      const std::string& lower,
                                      const std::string& upper,
                                      const std::vector<std::string>& frozen,
                                      const std::string& work,
                                      const std::string& anchor,
                                      gitbridge::GitBase* base) {
  auto layers = Layers::OpenForReading(lower, upper,
                                       xattr_namespace == "trusted"
                                           ? XattrNamespace::kTrusted
                                           : XattrNamespace::kUser,
                                       frozen, anchor);
  if (!layers) return layers.error();
  auto kept = gitbridge::KeepIndexObjects(*layers, lower, base->head, work);
  if (!kept) return kept.error();
  base->index_objects += kept->copied;
  for (const std::string& n : kept->not_kept) {
    base->index_objects_not_kept.push_back(n);
    std::fprintf(stderr,
                 "acqfs: the base's index names object %s, which is not kept "
                 "in the sandbox: once the host's gc prunes it, the "
                 "sandbox's git reports it missing\n",
                 n.c_str());
  }
  if (kept->split_index)
    std::fprintf(stderr,
                 "acqfs: the host's index is split (core.splitIndex): the "
                 "objects its shared part names beyond HEAD are not kept in "
                 "the sandbox\n");
  return kept->bytes;
}

// The base (gitbridge/git_base.h): recorded at the first mount of a sandbox
// over a git checkout, finished by a mount after one that was interrupted
// (killed while it copied the host's .git), kept by every later mount.
// Sets `*index` to the host's index when the daemon is to copy it, and
// the policy's own-git rule once the sandbox's .git is its own.
class BaseRecorder {
 public:
  BaseRecorder(const MountTarget& t, Sandbox& sandbox)
      : t_(t), sandbox_(sandbox), base_(sandbox.meta().base) {}

  Status Run(UniqueFd* index) {
    using State = gitbridge::GitBase::State;
    if (base_.state == State::kNone) {
      auto layers = Open(false);
      if (!layers) return layers.error();
      auto has = gitbridge::OwnLayersHaveGit(*layers);
      if (!has) return has.error();
      if (*has) {
        // Made before bases: its own layers hold a .git the agent wrote,
        // over the host's. Its git keeps following the host's; the base
        // is the host's HEAD now (docs/git-bridge.md, "The base").
        base_ = gitbridge::GitBase{};
        ACQFS_TRY(gitbridge::ReadHostRefs(t_.lower, &base_));
        base_.time_ns = gitbridge::NowNs();
        base_.index_state = "none";
        base_.state = State::kRecorded;
        ACQFS_TRY(Keep());
        return sandbox_.Save();
      }
      ACQFS_TRY(Begin(index));
    } else if (base_.state == State::kRecording) {
      auto layers = Open(false);
      if (!layers) return layers.error();
      auto has = gitbridge::OwnLayersHaveGit(*layers);
      if (!has) return has.error();
      // Killed before the copy was published: nothing of it was ever
      // seen, so the base is recorded anew, now.
      if (!*has) ACQFS_TRY(Begin(index));
    } else {
      if (base_.own_git && base_.index_state == "pending")
        return ResumeIndex(index);
      return Ok();
    }
    // The copy is in the upper: the base is what it says.
    auto layers = Open(true);
    if (!layers) return layers.error();
    ACQFS_TRY(gitbridge::ReadBaseRefs(*layers, &base_));
    ACQFS_TRY(Keep());
    ACQFS_TRY(
        gitbridge::KeepBranches(t_.lower, t_.name, base_.branches, base_.head));
    auto tips = gitbridge::ReadBaseTips(*layers, base_);
    if (!tips) return tips.error();
    auto written = gitbridge::KeepTips(t_.lower, t_.name, *tips);
    if (!written) return written.error();
    // The submodules' repositories, copied with .git: their own from now
    // on too, kept on the host likewise, and what their indexes name
    // beyond their HEADs copied (their indexes are in the copy already).
    auto modules = gitbridge::ListOwnModules(*layers);
    if (!modules) return modules.error();
    if (!modules->empty()) {
      layers = Open(true, *modules);
      if (!layers) return layers.error();
    }
    for (const std::string& m : *modules) {
      ACQFS_TRY(gitbridge::KeepModuleBase(*layers, t_.lower, m, t_.name));
      gitbridge::GitBase mb;
      ACQFS_TRY(gitbridge::ReadBaseRefs(*layers, &mb, m));
      auto kept = gitbridge::KeepIndexObjects(*layers, t_.lower, mb.head,
                                              sandbox_.paths().work, m);
      if (!kept) return kept.error();
      base_.index_objects += kept->copied;
      for (const std::string& n : kept->not_kept)
        base_.index_objects_not_kept.push_back(m + ": " + n);
    }
    sandbox_.meta().policy.own_git_modules = *modules;
    base_.own_git = true;
    base_.state = State::kRecorded;
    sandbox_.meta().policy.own_git = true;
    ACQFS_TRY(sandbox_.Save());
    if (base_.index_state == "pending" && !*index) return ResumeIndex(index);
    return Ok();
  }

 private:
  // Step one: the instant, the host's index (opened now, so that the
  // daemon copies this inode whatever the host writes later), written down
  // before anything is copied; then the copy of the host's .git.
  Status Begin(UniqueFd* index) {
    using State = gitbridge::GitBase::State;
    base_ = gitbridge::GitBase{};
    base_.state = State::kRecording;
    base_.time_ns = gitbridge::NowNs();
    auto fd = gitbridge::OpenHostIndex(t_.lower, &base_.index);
    if (!fd) return fd.error();
    base_.index_state = *fd ? "pending" : "none";
    // The sandbox's copy of the index counts against its quota: one the
    // copy alone would fill is refused, not mounted full.
    const uint64_t quota = sandbox_.meta().policy.quota_bytes;
    if (*fd && quota) {
      struct stat st;
      if (::fstat((*fd)->get(), &st) == 0 &&
          static_cast<uint64_t>(st.st_blocks) * 512 >= quota)
        return Error::Of(
            EDQUOT,
            "the quota (" + FormatBytes(quota) +
                ") is no larger than the sandbox's copy of the "
                "host's index (" +
                FormatBytes(static_cast<uint64_t>(st.st_blocks) * 512) +
                "); give it more",
            t_.lower + "/.git/index");
    }
    if (*fd) *index = std::move(**fd);
    ACQFS_TRY(sandbox_.Save());
    // The ref that keeps the base on the host is written before the copy,
    // so that the copy holds it too: the sandbox's .git then is the host's
    // as it was once the mount began, and the kernel overlayfs shows the
    // same layers alike (Keep() moves it in the rare case the host's HEAD
    // moved in between).
    auto kept = gitbridge::KeepHostHead(t_.lower, t_.name);
    if (!kept) return kept.error();
    kept_head_ = *kept;
    auto layers = Open(false);
    if (!layers) return layers.error();
    layers->sync_copy_up = false;  // FreezeGitDir syncs in one pass
    return gitbridge::FreezeGitDir(*layers, sandbox_.paths().work, t_.name);
  }

  // The daemon's copy of the index did not finish: copied now if the
  // host's index is still the one of the base, else rebuilt from the
  // base's HEAD (its staged changes are lost; said on stderr).
  Status ResumeIndex(UniqueFd* index) {
    auto layers = Open(true);
    if (!layers) return layers.error();
    if (HasOwnIndex(*layers)) {
      // The daemon's copy was in place; what it names beyond HEAD may not
      // have been kept yet (kept again: what is there already is skipped).
      const SandboxMeta& m = sandbox_.meta();
      auto kept = KeepBaseIndexObjects(
          m.xattr_namespace, t_.lower, sandbox_.paths().upper,
          sandbox_.paths().frozen, sandbox_.paths().work, sandbox_.state_dir(),
          &base_);
      if (!kept) return kept.error();
      base_.index_state = "copied";
      return sandbox_.Save();
    }
    gitbridge::FileIdentity now;
    auto fd = gitbridge::OpenHostIndex(t_.lower, &now);
    if (!fd) return fd.error();
    if (*fd && now == base_.index) {
      *index = std::move(**fd);
      return Ok();
    }
    ACQFS_TRY(gitbridge::RebuildIndex(*layers, t_.lower, base_.head,
                                      sandbox_.paths().work));
    base_.index_state = "rebuilt";
    std::fprintf(stderr,
                 "acqfs: mount: sandbox %s: the copy of the host's index "
                 "made at its first mount was interrupted and the host's "
                 "index has changed since; the sandbox's index was rebuilt "
                 "from its HEAD %s (changes staged on the host then are not "
                 "staged in the sandbox)\n",
                 t_.name.c_str(), base_.head.c_str());
    return sandbox_.Save();
  }

  // The host's gc keeps the base commit (and its history and tree) while
  // the sandbox lives: a ref of the host's names it (gitbridge/remote.h).
  Status Keep() {
    if (base_.head.empty() || base_.head == kept_head_) return Ok();
    ACQFS_TRY(gitbridge::KeepBase(t_.lower, t_.name, base_.head));
    kept_head_ = base_.head;
    return Ok();
  }

  static bool HasOwnIndex(const Layers& layers) {
    for (unsigned i = 1; i <= layers.upper_number(); ++i) {
      struct stat st;
      bool found = false;
      const Layer& l = layers.At(i);
      if (sys::StatAtIfExists(l.root(), ".git/index", &st, &found,
                              l.Shown(".git/index")) &&
          found)
        return true;
    }
    return false;
  }

  Result<Layers> Open(bool own_git,
                      const std::vector<std::string>& modules = {}) {
    const SandboxMeta& m = sandbox_.meta();
    auto layers = Layers::OpenForReading(
        t_.lower, sandbox_.paths().upper,
        m.xattr_namespace == "trusted" ? XattrNamespace::kTrusted
                                       : XattrNamespace::kUser,
        sandbox_.paths().frozen, sandbox_.state_dir());
    if (!layers) return layers.error();
    PolicyRecord rec = m.policy;
    rec.own_git = own_git;
    rec.own_git_modules = modules;
    auto policy = rec.Build();
    if (!policy) return policy.error();
    layers->policy = *policy;
    return layers;
  }

  const MountTarget& t_;
  Sandbox& sandbox_;
  gitbridge::GitBase& base_;
  std::string kept_head_;  // what refs/acqfs-base/<name> names now
};

// Where the daemon records that its copy of the base's index is done.
std::function<Status(const Status&, Quota*)> IndexInstalled(
    const MountTarget& t, const Sandbox& sandbox) {
  const std::string meta_path = sandbox.paths().meta;
  const std::string lower = t.lower;
  const std::string upper = sandbox.paths().upper;
  const std::string work = sandbox.paths().work;
  const std::vector<std::string> frozen = sandbox.paths().frozen;
  const std::string anchor = sandbox.state_dir();
  return [meta_path, lower, upper, work, frozen, anchor](
             const Status& copied, Quota* quota) -> Status {
    auto meta = ReadMeta(meta_path);
    if (!meta) return meta.error();
    Status outcome = copied;
    if (copied) {
      // Before "copied" is written: a daemon killed in between leaves
      // "pending", and the next mount keeps them (ResumeIndex).
      auto kept = KeepBaseIndexObjects(meta->xattr_namespace, lower, upper,
                                       frozen, work, anchor, &meta->base);
      if (!kept) return kept.error();
      if (quota) quota->Force(*kept);
      meta->base.index_state = "copied";
    } else if (copied.err() != EEXIST) {
      // The sandbox must not run without an index: one is made from the
      // base's HEAD.
      auto layers = Layers::OpenForReading(lower, upper,
                                           meta->xattr_namespace == "trusted"
                                               ? XattrNamespace::kTrusted
                                               : XattrNamespace::kUser,
                                           frozen, anchor);
      if (!layers) return layers.error();
      Status r = gitbridge::RebuildIndex(*layers, lower, meta->base.head, work);
      if (!r) return r;
      meta->base.index_state = "rebuilt";
      outcome =
          Error::Of(copied.err(),
                    "copy the host's index (rebuilt from HEAD " +
                        meta->base.head + " instead): " + copied.error().op,
                    copied.error().path);
    }
    // Read, changed and written while a command may do the same (an
    // export's time): the loser's field is recorded again at the next
    // mount (ResumeIndex finds the copy).
    if (Status w = WriteMeta(meta_path, *meta); !w) return w;
    return outcome;
  };
}

}  // namespace

int RunMount(const MountArgs& a) {
  // `acqfs fork --mount` acted as the state folder's owner until here; the
  // daemon keeps root's ids.
  AsOwner::DropActive();
  MountTarget t;
  MountConfig config;
  SandboxFacts facts;
  std::optional<Sandbox> found;
  if (int rc = CheckAll(a, &t, &config, &found, &facts)) return rc;
  Sandbox& sandbox = *found;
  const SandboxPaths& paths = sandbox.paths();
  SandboxMeta& meta = sandbox.meta();
  bool created = false;
  UniqueFd lock;
  if (int rc = CreateAndLock(t, sandbox, &created, &lock)) return rc;
  const bool git = gitbridge::IsGitCheckout(t.lower);
  bool meta_written = false;
  auto fail = [&](int rc) {
    if (created && git) {
      for (const std::string& m : meta.policy.own_git_modules)
        (void)gitbridge::DropKeepRefs(sys::Join(t.lower, m), t.name);
      (void)gitbridge::UnregisterRemote(t.lower, t.name, paths.bridge);
    }
    if (created) (void)sys::RemoveTree(AT_FDCWD, paths.dir, paths.dir);
    if (!created && facts.existed && meta_written)
      (void)WriteMeta(paths.meta, facts.original);
    return rc;
  };
  // Only the sandbox's owner may reach its layers (docs/sandboxes.md): a
  // folder made before, or by hand, with wider permissions is narrowed.
  if (Status s = SecureSandboxDir(paths.dir); !s)
    return fail(Fail(kExitFailed, "mount: state directory", s.error()));
  if (facts.stale) {
    if (int rc = sandbox.CleanUpStale("mount")) return fail(rc);
  }
  if (int rc = PrepareLayers(t, sandbox)) return fail(rc);
  meta.name = t.name;
  meta.lower = t.lower;
  meta.mountpoint = t.mountpoint;
  if (Status s = sandbox.Save(); !s)
    return fail(Fail(kExitFailed, "mount: sandbox metadata", s.error()));
  meta_written = true;
  UniqueFd base_index;  // the daemon copies it (MountConfig::install_fd)
  if (git) {
    {
      // The bridge is in the state folder: root writes it as the folder's
      // owner (state/as_owner.h), so a bridge.git the owner pointed at
      // another repository (a symlink) is not written as root.
      auto owner = AsOwner::Of(t.state);
      if (!owner)
        return fail(Fail(kExitFailed, "mount: git bridge", owner.error()));
      auto bridge_config = sandbox.ExportConfig();
      if (!bridge_config)
        return fail(
            Fail(kExitBadInput, "mount: git bridge", bridge_config.error()));
      if (Status s = gitbridge::PrepareBridge(*bridge_config); !s)
        return fail(Fail(kExitFailed, "mount: git bridge", s.error()));
    }
    if (Status s = BaseRecorder(t, sandbox).Run(&base_index); !s)
      return fail(Fail(s.err() == EDQUOT ? kExitBadInput : kExitFailed,
                       "mount: the sandbox's base", s.error()));
    auto policy = meta.policy.Build();
    if (!policy)
      return fail(Fail(kExitBadInput, "mount: sandbox policy", policy.error()));
    config.policy = *policy;
    if (base_index) {
      config.install_fd = base_index.get();
      config.install_rel = ".git/index";
      config.installed = IndexInstalled(t, sandbox);
    }
  }
  if (git && meta.base.recorded() && meta.base.own_git) {
    config.sources_dir = paths.sources;
    config.sources_since_ns = meta.base.time_ns;
  }
  config.lower = t.lower;
  config.upper = paths.upper;
  config.anchor = sandbox.state_dir();
  config.audit_dir = paths.dir;
  config.frozen = paths.frozen;
  config.work = paths.work;
  config.mountpoint = t.mountpoint;
  // A source that tells this sandbox's mount from another's (findmnt,
  // `umount acqfs:NAME`); the fstype, fuse.acqfs, is what acqfs itself
  // finds its mounts by (state/liveness.h).
  config.fsname = "acqfs:" + t.name;
  DaemonOptions d;
  d.config = config;
  d.log_path = paths.log;
  d.pid_path = paths.pid;
  d.log_level = a.log_level;
  d.foreground = a.foreground;
  d.state_dir = sandbox.state_dir();
  d.sandbox = sandbox.name();
  if (Status s = StartDaemon(d); !s) {
    // EBUSY: a daemon acqfs mount did not start took the layers meanwhile.
    const int code = s.err() == EBUSY ? kExitBadInput : kExitFailed;
    return fail(Fail(code, "mount", t.mountpoint, s.error().op));
  }
  return 0;
}

int RunRemount(const RemountArgs& a) {
  std::string mnt = CanonicalPath(a.mountpoint);
  std::vector<std::string> options;
  for (const auto& list : a.options) {
    std::stringstream ss(list);
    for (std::string o; std::getline(ss, o, ',');) options.push_back(o);
  }
  if (options.empty())
    return Fail(kExitBadInput, "remount", mnt,
                "nothing to change (give -o ro, -o rw, ...)");
  if (Status s = Remount(mnt, options, ::geteuid() == 0); !s)
    return Fail(
        s.err() == EINVAL || s.err() == EPERM ? kExitBadInput : kExitFailed,
        "remount: " + s.error().op,
        s.error().path.rfind('/', 0) == 0 ? s.error().path
                                          : "-o " + s.error().path,
        std::strerror(s.err()));
  return 0;
}

}  // namespace acqfs::cli
