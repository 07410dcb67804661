#include "cli/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "cli/cli_util.h"
#include "common/git_ptr.h"
#include "daemon/daemon.h"
#include "gitbridge/bridge_repo.h"
#include "gitbridge/git_base.h"
#include "gitbridge/host_repo.h"
#include "gitbridge/remote.h"

namespace acqfs::cli {
namespace {

// The sandbox `name` when <state>/<name>/meta.json exists (nullopt when it
// does not), or the error reading it.
std::optional<Result<Sandbox>> Named(const std::string& state,
                                     const std::string& name) {
  if (!ValidSandboxName(name) || !Exists(state + "/" + name + "/meta.json"))
    return std::nullopt;
  Sandbox s(state, name);
  if (Status loaded = s.Load(); !loaded)
    return Result<Sandbox>(Error::Of(loaded.err(),
                                     "its metadata " + s.paths().meta + ": " +
                                         std::strerror(loaded.err()) + " (" +
                                         loaded.error().op + ")",
                                     name));
  return Result<Sandbox>(std::move(s));
}

// Every sandbox in `state` whose metadata records `mountpoint`, by name.
// Folders whose metadata cannot be read are skipped (`acqfs ls` shows
// them).
std::vector<Sandbox> RecordedAt(const std::string& state,
                                const std::string& mountpoint) {
  std::vector<Sandbox> found;
  UniqueDir dir(::opendir(state.c_str()));
  if (!dir) return found;
  while (struct dirent* e = ::readdir(dir.get())) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || !ValidSandboxName(n)) continue;
    Sandbox s(state, n);
    if (!s.Load() || s.meta().mountpoint != mountpoint) continue;
    found.push_back(std::move(s));
  }
  std::sort(found.begin(), found.end(), [](const Sandbox& a, const Sandbox& b) {
    return a.name() < b.name();
  });
  return found;
}

// "a", "a and b", "a, b and c".
std::string NameList(const std::vector<const Sandbox*>& sandboxes) {
  std::string s;
  for (size_t i = 0; i < sandboxes.size(); i++) {
    if (i > 0) s += i + 1 == sandboxes.size() ? " and " : ", ";
    s += sandboxes[i]->name();
  }
  return s;
}

Error Ambiguous(const std::string& arg, const std::string& mountpoint,
                const std::vector<const Sandbox*>& sandboxes,
                const std::string& how) {
  const std::string where = arg == mountpoint ? "" : " (" + mountpoint + ")";
  return Error::Of(ENOTUNIQ,
                   "is the recorded mountpoint" + where + " of the sandboxes " +
                       NameList(sandboxes) + ", " + how +
                       "; give the name of the one you mean (acqfs ls lists "
                       "them)",
                   arg);
}

// Of several sandboxes whose own mounts are all at `mountpoint` (stacked
// there by hand), the one whose mount the path leads to.
Result<Sandbox> Reached(
    const std::string& arg, const std::string& mountpoint,
    const std::vector<std::pair<Sandbox*, MountEntry>>& mounted) {
  auto reached = MountReachedAt(mountpoint);
  std::vector<const Sandbox*> all;
  for (const auto& [s, m] : mounted) {
    if (reached && reached->id == m.id && reached->dev == m.dev) return *s;
    all.push_back(s);
  }
  return Ambiguous(arg, mountpoint, all,
                   "all mounted there, none of them on top");
}

}  // namespace

Sandbox::Sandbox(const std::string& state, const std::string& name)
    : state_(state), paths_(state, name) {}

Result<Sandbox> Sandbox::FindByName(const std::string& state,
                                    const std::string& name) {
  if (auto named = Named(state, name)) {
    if (*named) (*named)->by_name_ = true;
    return std::move(*named);
  }
  return Error::Of(ENOENT, "no such sandbox", name);
}

Result<Sandbox> Sandbox::Find(const std::string& state,
                              const std::string& arg) {
  if (auto named = Named(state, arg)) {
    if (*named) (*named)->by_name_ = true;
    return std::move(*named);
  }
  const std::string target = MountpointPath(arg);
  std::vector<Sandbox> recorded = RecordedAt(state, target);
  if (recorded.empty()) return Error::Of(ENOENT, "no such sandbox", arg);
  // The sandboxes whose own mount is there now (a probe that fails counts
  // as not mounted there).
  std::vector<std::pair<Sandbox*, MountEntry>> mounted;
  for (Sandbox& s : recorded) {
    auto live = s.Probe();
    if (!live || !live->mount) continue;
    s.mounted_at_ = true;
    mounted.push_back({&s, *live->mount});
  }
  if (mounted.size() == 1) return *mounted[0].first;
  if (mounted.size() > 1) return Reached(arg, target, mounted);
  if (recorded.size() == 1) return recorded[0];
  std::vector<const Sandbox*> all;
  for (const Sandbox& s : recorded) all.push_back(&s);
  return Ambiguous(arg, target, all, "and none of them is mounted there now");
}

bool Sandbox::HasFolder() const { return Exists(paths_.dir); }
bool Sandbox::HasMeta() const { return Exists(paths_.meta); }

Status Sandbox::Load() {
  auto m = ReadMeta(paths_.meta);
  if (!m) return m.error();
  meta_ = std::move(*m);
  stack_error_.reset();
  auto st = LoadStack(state_, paths_.name, /*may_repair=*/false);
  if (!st) {
    if (st.err() != ENOENT) stack_error_ = st.error();
    has_stack_ = false;
    return Ok();
  }
  stack_ = std::move(*st);
  has_stack_ = true;
  UseStack();
  return Ok();
}

void Sandbox::UseStack() {
  LayerStore store(state_);
  paths_.upper = store.Path(stack_.UpperRef());
  paths_.frozen.clear();
  for (const auto& ref : stack_.manifest.frozen)
    paths_.frozen.push_back(store.Path(ref));
}

Status Sandbox::PrepareStack(const struct stat& like) {
  // A fork killed after its commit, an rm killed before its own: the
  // host-side steps are done now.
  if (HostStepsPending()) ACQFS_TRY(FinishHostSteps());
  auto st = LoadStack(state_, paths_.name, /*may_repair=*/true);
  if (!st && st.err() != ENOENT) return st.error();
  LayerStore store(state_);
  auto lock = StoreLock::Take(state_);
  if (!lock) return lock.error();
  // Only the owner reaches the layers, as the sandbox's folder (a store
  // widened by hand, or by an older acqfs, is narrowed).
  ACQFS_TRY(SecureSandboxDir(store.Dir()));
  // Before anything is written: its layers are its own.
  if (st) ACQFS_TRY(CheckLayerOwners(state_, paths_.name, st->manifest));
  StackManifest m;
  if (!st) {
    // A new sandbox: its upper in the store.
    auto ref = store.Create(&like);
    if (!ref) return ref.error();
    m.upper = *ref;
    ACQFS_TRY(WriteStack(paths_.stack, m));
  } else if (st->legacy) {
    ACQFS_TRY(MigrateLegacy(state_, paths_.name, &m));
  } else {
    m = st->manifest;
  }
  stack_ = LoadedStack{};
  stack_.manifest = std::move(m);
  has_stack_ = true;
  UseStack();
  return Ok();
}

Status Sandbox::SaveStack(const StackManifest& m) {
  ACQFS_TRY(WriteStack(paths_.stack, m));
  stack_ = LoadedStack{};
  stack_.manifest = m;
  has_stack_ = true;
  UseStack();
  return Ok();
}

Status Sandbox::Save() const { return WriteMeta(paths_.meta, meta_); }

Result<Layers> Sandbox::OpenLayers() const {
  ACQFS_TRY(StackOk());
  XattrNamespace ns = meta_.xattr_namespace == "trusted"
                          ? XattrNamespace::kTrusted
                          : XattrNamespace::kUser;
  auto layers = Layers::OpenForReading(meta_.lower, paths_.upper, ns,
                                       paths_.frozen, state_);
  if (!layers) return layers.error();
  auto policy = meta_.policy.Build();
  if (!policy) return policy.error();
  layers->policy = *policy;
  return layers;
}

Result<gitbridge::ExportConfig> Sandbox::ExportConfig() const {
  auto policy = meta_.policy.Build();
  if (!policy)
    return Error::Of(policy.err(),
                     "its recorded policy cannot be built (" +
                         policy.error().Message() +
                         "): nothing is published or applied without it",
                     paths_.meta);
  gitbridge::ExportConfig c;
  c.sandbox = paths_.name;
  c.lower = meta_.lower;
  c.upper = paths_.upper;
  c.anchor = state_;
  c.frozen = paths_.frozen;
  // The checkpoints of the current stack: those whose layers its frozen
  // layers begin with, oldest first; and each one off it, with its own
  // chain (those whose layers its layers begin with).
  if (has_stack_) {
    const StackManifest& m = stack_.manifest;
    LayerStore store(state_);
    std::map<std::vector<std::string>, const Checkpoint*> by_layers;
    for (const auto& cp : m.checkpoints) by_layers[cp.layers] = &cp;
    auto ref = [&](const Checkpoint& cp) {
      gitbridge::ExportConfig::CheckpointRef r;
      r.number = cp.number;
      r.message = cp.message;
      r.time_ns = cp.time_ns;
      for (const auto& l : cp.layers) r.layers.push_back(store.Path(l));
      r.id = cp.layers.back().substr(cp.layers.back().rfind('/') + 1);
      return r;
    };
    // The checkpoints whose layers are a prefix of `layers`, shortest
    // first.
    auto chain_of = [&](const std::vector<std::string>& layers) {
      std::vector<gitbridge::ExportConfig::CheckpointRef> chain;
      std::vector<std::string> prefix;
      for (const auto& l : layers) {
        prefix.push_back(l);
        auto it = by_layers.find(prefix);
        if (it != by_layers.end()) chain.push_back(ref(*it->second));
      }
      return chain;
    };
    c.checkpoints = chain_of(m.frozen);
    for (const auto& cp : m.checkpoints) {
      const bool on_stack =
          cp.layers.size() <= m.frozen.size() &&
          std::equal(cp.layers.begin(), cp.layers.end(), m.frozen.begin());
      if (!on_stack) c.off_stack.push_back(chain_of(cp.layers));
    }
  }
  c.bridge = paths_.bridge;
  c.sources = paths_.sources;
  c.xattr_namespace = meta_.xattr_namespace == "trusted"
                          ? XattrNamespace::kTrusted
                          : XattrNamespace::kUser;
  c.policy = *policy;
  c.base = meta_.base;
  return c;
}

bool Sandbox::IsGit() const { return gitbridge::IsGitCheckout(meta_.lower); }

Result<SandboxLiveness> Sandbox::Probe() const {
  return ProbeSandbox(paths_, meta_);
}

Result<bool> Sandbox::LockHeld() const { return cli::LockHeld(paths_.lock); }

Result<UniqueFd> Sandbox::Lock(bool create) const {
  UniqueFd fd(::open(paths_.lock.c_str(),
                     O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0),
                     0600));
  if (!fd) return Error::Errno("open", paths_.lock);
  // Made by root in another user's folder: the owner's, as the folder's
  // other files (its commands test the lock too).
  struct stat st, dir;
  if (::geteuid() == 0 && ::fstat(fd.get(), &st) == 0 && st.st_uid == 0 &&
      ::stat(paths_.dir.c_str(), &dir) == 0 && dir.st_uid != 0 &&
      ::fchown(fd.get(), dir.st_uid, dir.st_gid) != 0)
    return Error::Errno("chown", paths_.lock);
  if (Status locked = LockSandbox(fd.get(), paths_.lock); !locked)
    return locked.error();
  return fd;
}

int Sandbox::CleanUpStale(const std::string& command) const {
  const std::string what = command + ": clean up a stale mount";
  auto live = Probe();
  if (!live) return Fail(kExitFailed, what, live.error());
  if (live->mount) {
    if (Status s = DetachStaleMount(*live->mount); !s)
      return Fail(kExitFailed, what, s.error());
    std::fprintf(
        stderr, "acqfs: %s: %s: cleaned up a stale mount of sandbox %s\n",
        command.c_str(), meta_.mountpoint.c_str(), paths_.name.c_str());
  }
  if (::unlink(paths_.pid.c_str()) != 0 && errno != ENOENT)
    return Fail(kExitFailed, what, paths_.pid, std::strerror(errno));
  return 0;
}

bool Sandbox::HostStepsPending() const {
  return Exists(paths_.dir + "/" + kHostPending);
}

Status Sandbox::MarkHostStepsPending() const {
  const std::string marker = paths_.dir + "/" + kHostPending;
  UniqueFd fd(::open(marker.c_str(),
                     O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return Error::Errno("create", marker);
  UniqueFd dir(::open(paths_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir || ::fsync(dir.get()) != 0) return Error::Errno("fsync", paths_.dir);
  return Ok();
}

Status Sandbox::FinishHostSteps() {
  const std::string marker = paths_.dir + "/" + kHostPending;
  if (IsGit()) {
    const std::string& lower = meta_.lower;
    const std::string& name = paths_.name;
    ACQFS_TRY(gitbridge::RegisterRemote(lower, name, paths_.bridge));
    // Its base is its parent's; it keeps it on the host for itself.
    if (!meta_.base.head.empty())
      ACQFS_TRY(gitbridge::KeepBase(lower, name, meta_.base.head));
    if (meta_.base.own_git) {
      ACQFS_TRY(gitbridge::KeepBranches(lower, name, meta_.base.branches,
                                        meta_.base.head));
      // And every other object its copy of .git names by a ref (tags, the
      // stash...), as its layers show them now.
      auto layers = OpenLayers();
      if (!layers) return layers.error();
      auto tips = gitbridge::ReadBaseTips(*layers, meta_.base);
      if (!tips) return tips.error();
      auto kept = gitbridge::KeepTips(lower, name, *tips);
      if (!kept) return kept.error();
      for (const std::string& m : meta_.policy.own_git_modules)
        ACQFS_TRY(gitbridge::KeepModuleBase(*layers, lower, m, name));
    }
  }
  if (::unlink(marker.c_str()) != 0 && errno != ENOENT)
    return Error::Errno("unlink", marker);
  return Ok();
}

Status Sandbox::MakeBridge() const {
  GitLibrary lib;
  auto host = gitbridge::HostRepo::Open(meta_.lower);
  if (!host) return host.error();
  auto bridge =
      gitbridge::BridgeRepo::OpenOrCreate(paths_.bridge, host->objects_dir());
  if (!bridge) return bridge.error();
  return Ok();
}

int FailFind(const std::string& what, const std::string& arg, const Error& e) {
  return Fail(kExitBadInput, what, e.path.empty() ? arg : e.path, e.op);
}

}  // namespace acqfs::cli
