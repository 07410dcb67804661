#include "stack/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "common/atomic_file.h"
#include "common/dir_walk.h"
#include "common/sys.h"

namespace acqfs::cli {
namespace {

using nlohmann::json;

constexpr char kStatsSuffix[] = ".stats";
constexpr char kLockName[] = "lock";
constexpr size_t kMaxStatsBytes = 4096;

// ---- stats

json StatsToJson(const LayerStats& s) {
  return json{{"version", 1}, {"paths", s.paths}, {"bytes", s.bytes}};
}

std::optional<LayerStats> ParseStats(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("version") ||
      j["version"] != 1 || !j.contains("paths") || !j.contains("bytes") ||
      !j["paths"].is_number_unsigned() || !j["bytes"].is_number_unsigned())
    return std::nullopt;
  return LayerStats{j["paths"].get<uint64_t>(), j["bytes"].get<uint64_t>()};
}

// The sidecar's stats when it exists and parses.
std::optional<LayerStats> ReadCachedStats(const std::string& sidecar) {
  UniqueFd fd(::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return std::nullopt;
  auto text = sys::ReadAll(fd.get(), kMaxStatsBytes, sidecar);
  if (!text) return std::nullopt;
  return ParseStats(*text);
}

// ".<id>.stats.<16 hex>": the temporary file of WriteFileAtomically for a
// sidecar.
bool IsStatsTemp(const std::string& n) {
  const size_t suf = std::string_view(kStatsSuffix).size();
  return n.size() == 1 + kLayerIdLen + suf + 1 + 16 && n[0] == '.' &&
         ValidLayerId(std::string_view(n).substr(1, kLayerIdLen)) &&
         n.compare(1 + kLayerIdLen, suf, kStatsSuffix) == 0 &&
         n[1 + kLayerIdLen + suf] == '.' &&
         ValidLayerId(std::string_view(n).substr(2 + kLayerIdLen + suf));
}

// Is `e` (in `dirfd`) a directory with an overlay opaque xattr?
Result<bool> IsOpaque(int dirfd, const std::string& name,
                      const std::string& shown) {
  const std::string xpath = sys::XattrPath(dirfd, name);
  for (const char* key : {"trusted.overlay.opaque", "user.overlay.opaque"}) {
    auto v = sys::GetXattr(xpath, key, shown);
    if (v) return true;
    if (v.err() != ENODATA && v.err() != ENOTSUP && v.err() != EOPNOTSUPP)
      return v.error();
  }
  return false;
}

// Measures the tree below the directory `name` in `dirfd`.
Result<LayerStats> Measure(int dirfd, const std::string& name,
                           const std::string& shown) {
  LayerStats s;
  TreeVisitor visit;
  visit.entry = [&](int dir, const sys::DirEntry& e,
                    const std::string& dir_shown) -> Result<bool> {
    struct stat st;
    if (::fstatat(dir, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return Error::Errno("stat", dir_shown + "/" + e.name);
    s.bytes += static_cast<uint64_t>(st.st_blocks) * 512;
    if (!S_ISDIR(st.st_mode)) {
      ++s.paths;
      return false;
    }
    auto opaque = IsOpaque(dir, e.name, dir_shown + "/" + e.name);
    if (!opaque) return opaque.error();
    if (*opaque) ++s.paths;
    return true;
  };
  ACQFS_TRY(WalkTree(dirfd, name, shown, visit));
  return s;
}

}  // namespace

// ---------------------------------------------------------------- store

Result<StoreLock> StoreLock::Take(const std::string& state,
                                  std::chrono::milliseconds timeout) {
  LayerStore store(state);
  ACQFS_TRY(store.Ensure());
  const std::string path = store.Dir() + "/" + kLockName;
  UniqueFd fd(
      ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return Error::Errno("open layer store lock", path);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0)
      return StoreLock(std::move(fd));
    if (errno != EWOULDBLOCK && errno != EINTR)
      return Error::Errno("lock layer store", path);
    if (std::chrono::steady_clock::now() >= deadline)
      return Error::Of(ETIMEDOUT,
                       "lock layer store (held by another acqfs for " +
                           std::to_string(timeout.count()) + " ms)",
                       path);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string LayerStore::Dir() const { return state_ + "/" + kLayerStoreDir; }

std::string LayerStore::Path(std::string_view ref) const {
  return state_ + "/" + std::string(ref);
}

Status LayerStore::Ensure() const {
  const std::string dir = Dir();
  if (::mkdir(dir.c_str(), 0700) == 0) return sys::SyncDirPath(state_);
  if (errno != EEXIST) return Error::Errno("mkdir", dir);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Error::Errno("stat", dir);
  if (!S_ISDIR(st.st_mode)) return Error::Of(ENOTDIR, "layer store", dir);
  return Ok();
}

namespace {

// Gives the new, empty directory `name` in `parent` (shown as `path`) the
// shape of a layer root: `like`'s permission bits, times and (as root)
// owner, or 0755 without `like`; then makes it durable. Opened with no
// symlink followed.
Status ShapeLayerRoot(int parent, const std::string& name,
                      const std::string& path, const struct stat* like) {
  UniqueFd fd(::openat(parent, name.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Error::Errno("open", path);
  mode_t mode = 0755;
  if (like != nullptr) {
    mode = like->st_mode & 07777;
    if (::geteuid() == 0 && ::fchown(fd.get(), like->st_uid, like->st_gid) != 0)
      return Error::Errno("chown", path);
  }
  if (::fchmod(fd.get(), mode) != 0) return Error::Errno("chmod", path);
  if (like != nullptr) {
    const struct timespec times[2] = {like->st_atim, like->st_mtim};
    if (::futimens(fd.get(), times) != 0) return Error::Errno("utimens", path);
  }
  if (::fsync(fd.get()) != 0) return Error::Errno("fsync", path);
  if (::fsync(parent) != 0) return Error::Errno("fsync", sys::Dirname(path));
  return Ok();
}

// Makes "<prefix><new id>" in `parent` (shown as `dir`), 0700, and returns
// the id.
Result<std::string> MakeFreshDir(int parent, const std::string& dir,
                                 const std::string& prefix) {
  for (;;) {
    auto id = NewLayerId();
    if (!id) return id.error();
    if (::mkdirat(parent, (prefix + *id).c_str(), 0700) == 0) return *id;
    if (errno != EEXIST) return Error::Errno("mkdir", dir + "/" + prefix + *id);
  }
}

}  // namespace

Result<std::string> LayerStore::Create(const struct stat* like) const {
  ACQFS_TRY(Ensure());
  const std::string dir = Dir();
  auto store = sys::OpenDirPath(dir, O_RDONLY);
  if (!store) return store.error();
  auto id = MakeFreshDir(store->get(), dir, "");
  if (!id) return id.error();
  ACQFS_TRY(ShapeLayerRoot(store->get(), *id, dir + "/" + *id, like));
  return StoreRef(*id);
}

std::string LayerStore::BuildPath(const std::string& folder,
                                  std::string_view id) {
  return folder + "/" + std::string(kBuildPrefix) + std::string(id);
}

Result<std::string> LayerStore::StartBuild(const std::string& folder,
                                           const struct stat& like,
                                           bool sweep) const {
  auto dir = sys::OpenDirPath(folder, O_RDONLY);
  if (!dir) return dir.error();
  if (sweep) {
    auto entries = sys::ReadDir(dir->get(), folder);
    if (!entries) return entries.error();
    for (const auto& e : *entries)
      if (e.name.rfind(kBuildPrefix, 0) == 0)
        ACQFS_TRY(sys::RemoveTree(dir->get(), e.name, folder + "/" + e.name));
  }
  auto id = MakeFreshDir(dir->get(), folder, kBuildPrefix);
  if (!id) return id.error();
  const std::string name = std::string(kBuildPrefix) + *id;
  if (Status s = ShapeLayerRoot(dir->get(), name, folder + "/" + name, &like);
      !s) {
    (void)sys::RemoveTree(dir->get(), name, folder + "/" + name);
    return s.error();
  }
  return *id;
}

Result<std::string> LayerStore::Adopt(const std::string& built,
                                      std::string_view id) const {
  if (!ValidLayerId(id) ||
      sys::Basename(built) != std::string(kBuildPrefix) + std::string(id))
    return Error::Of(EINVAL, "adopt layer (not a layer built for the store)",
                     built);
  ACQFS_TRY(Ensure());
  const std::string dir = Dir();
  auto store = sys::OpenDirPath(dir, O_RDONLY);
  if (!store) return store.error();
  auto from = sys::OpenDirPath(sys::Dirname(built), O_RDONLY);
  if (!from) return from.error();
  // RENAME_NOREPLACE: an id is never reused, and a layer already in the
  // store under it is never replaced.
  ACQFS_TRY(sys::Renameat2(from->get(), sys::Basename(built), store->get(),
                           std::string(id), RENAME_NOREPLACE, built));
  // The rename durable before any manifest names the layer.
  if (::fsync(store->get()) != 0) return Error::Errno("fsync", dir);
  return StoreRef(id);
}

Status LayerStore::Remove(std::string_view ref) const {
  constexpr std::string_view kStore = ".layers/";
  if (ref.substr(0, kStore.size()) != kStore ||
      !ValidLayerId(ref.substr(kStore.size())))
    return Error::Of(EINVAL, "remove layer (not a store layer)",
                     std::string(ref));
  const std::string id(ref.substr(kStore.size()));
  const std::string dir = Dir();
  auto store = sys::OpenDirPath(dir, O_RDONLY);
  if (!store) {
    if (store.err() == ENOENT) return Ok();
    return store.error();
  }
  ACQFS_TRY(sys::RemoveTree(store->get(), id, dir));
  // The sidecar after the layer: a crash between leaves a sidecar without a
  // layer, which the next collection removes.
  const std::string sidecar = id + kStatsSuffix;
  if (::unlinkat(store->get(), sidecar.c_str(), 0) != 0 && errno != ENOENT)
    return Error::Errno("unlink", dir + "/" + sidecar);
  return Ok();
}

Result<LayerStats> LayerStore::StatsOf(std::string_view ref) const {
  if (!ValidLayerRef(ref))
    return Error::Of(EINVAL, "layer stats (malformed ref)", std::string(ref));
  const std::string path = Path(ref);
  if (IsLegacyRef(ref)) return Measure(AT_FDCWD, path, path);
  const std::string id(ref.substr(std::string_view(".layers/").size()));
  const std::string sidecar = Dir() + "/" + id + kStatsSuffix;
  UniqueFd cached(::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (cached) {
    auto text = sys::ReadAll(cached.get(), kMaxStatsBytes, sidecar);
    if (text) {
      if (auto s = ParseStats(*text)) return *s;
    }
    // An unreadable or malformed cache is measured again and replaced.
  } else if (errno != ENOENT) {
    return Error::Errno("open", sidecar);
  }
  auto s = Measure(AT_FDCWD, path, path);
  if (!s) return s.error();
  // Best effort: a cache that cannot be written (a read-only state dir, a
  // collection removing the temporary file) costs only a later re-measure.
  (void)WriteFileAtomically(sidecar, StatsToJson(*s).dump() + "\n", 0600);
  return s;
}

namespace {

// A fork's or an rm's folder (ForkFolderName, a trash folder) in the state
// directory `state_fd`: removed when no command holds its flock (true);
// false when its command is still at work, or the name is gone or no
// directory.
Result<bool> RemoveIfAbandoned(int state_fd, const std::string& name,
                               const std::string& state) {
  const std::string shown = state + "/" + name;
  UniqueFd fd(::openat(state_fd, name.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return false;
    return Error::Errno("open", shown);
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return false;
    return Error::Errno("lock", shown);
  }
  ACQFS_TRY(sys::RemoveTree(state_fd, name, state));
  return true;
}

}  // namespace

Result<GcReport> LayerStore::CollectGarbage(
    std::chrono::milliseconds lock_timeout) const {
  GcReport report;
  // The trash an rm that died left (its flock free), removed before the
  // store lock is taken: a sandbox's folder may be large, and a trash
  // folder is never anything's but the rm's that made it.
  if (auto fd = sys::OpenDirPath(state_, O_RDONLY)) {
    if (auto names = sys::ReadDir(fd->get(), state_)) {
      for (const sys::DirEntry& e : *names) {
        if (!IsTrashFolderName(e.name)) continue;
        auto removed = RemoveIfAbandoned(fd->get(), e.name, state_);
        if (!removed) return removed.error();
        if (*removed) ++report.folders_removed;
      }
    }
  }
  auto lock = StoreLock::Take(state_, lock_timeout);
  if (!lock) return lock.error();

  // Everything any manifest references; refuse on any unreadable one.
  std::set<std::string> live;
  auto state_fd = sys::OpenDirPath(state_, O_RDONLY);
  if (!state_fd) return state_fd.error();
  auto sandboxes = sys::ReadDir(state_fd->get(), state_);
  if (!sandboxes) return sandboxes.error();
  for (const sys::DirEntry& e : *sandboxes) {
    if (e.name == kLayerStoreDir) continue;
    // A fork or an rm that died left its folder: removed first, so that the
    // layers only it names go in this pass. One whose command is still at
    // work is left alone, a fork's manifest read (its new upper is named
    // nowhere else yet).
    if (IsForkFolderName(e.name) || IsTrashFolderName(e.name)) {
      auto removed = RemoveIfAbandoned(state_fd->get(), e.name, state_);
      if (!removed) return removed.error();
      if (*removed) {
        ++report.folders_removed;
        continue;
      }
      if (IsTrashFolderName(e.name)) continue;
    }
    struct stat st;
    if (::fstatat(state_fd->get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) !=
        0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      return Error::Errno("stat", state_ + "/" + e.name);
    }
    if (!S_ISDIR(st.st_mode)) continue;
    const std::string path = StackPath(state_, e.name);
    auto m = ReadStack(path);
    if (!m) {
      if (m.err() == ENOENT && m.error().path == path) continue;  // legacy
      return m.error();
    }
    ++report.manifests;
    for (std::string& r : m->Referenced()) live.insert(std::move(r));
  }

  const std::string dir = Dir();
  auto store = sys::OpenDirPath(dir, O_RDONLY);
  if (!store) return store.error();
  auto entries = sys::ReadDir(store->get(), dir);
  if (!entries) return entries.error();
  std::vector<std::string> doomed_layers, doomed_files;
  std::set<std::string> present;
  for (const sys::DirEntry& e : *entries) {
    if (ValidLayerId(e.name)) {
      present.insert(e.name);
      if (live.count(StoreRef(e.name)))
        ++report.layers_kept;
      else
        doomed_layers.push_back(e.name);
    }
  }
  for (const sys::DirEntry& e : *entries) {
    const std::string& n = e.name;
    const size_t suf = std::string_view(kStatsSuffix).size();
    if (n.size() == kLayerIdLen + suf &&
        n.substr(kLayerIdLen) == kStatsSuffix &&
        ValidLayerId(n.substr(0, kLayerIdLen))) {
      if (!present.count(n.substr(0, kLayerIdLen))) doomed_files.push_back(n);
    } else if (IsStatsTemp(n)) {
      // ".<id>.stats.<random>": WriteFileAtomically's temporary file that a
      // crash left behind (we hold the lock, but a StatsOf may run without
      // it; it then only fails to cache).
      doomed_files.push_back(n);
      ++report.temps_removed;
    }
  }
  std::sort(doomed_layers.begin(), doomed_layers.end());
  for (const std::string& id : doomed_layers) {
    // Its size: the sidecar's when there is one, else measured (not
    // cached: it is about to go). A layer that cannot be measured (a dir it
    // may not read) is removed all the same: RemoveTree makes it enterable.
    uint64_t bytes = 0;
    if (auto cached = ReadCachedStats(dir + "/" + id + kStatsSuffix)) {
      bytes = cached->bytes;
    } else if (auto s = Measure(store->get(), id, dir)) {
      bytes = s->bytes;
    }
    ACQFS_TRY(Remove(StoreRef(id)));
    report.bytes_freed += bytes;
    ++report.layers_removed;
    report.removed.push_back(StoreRef(id));
  }
  for (const std::string& n : doomed_files) {
    struct stat st;
    if (::fstatat(store->get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      report.bytes_freed += static_cast<uint64_t>(st.st_blocks) * 512;
    if (::unlinkat(store->get(), n.c_str(), 0) != 0 && errno != ENOENT)
      return Error::Errno("unlink", dir + "/" + n);
    if (n[0] != '.') ++report.sidecars_removed;
  }
  return report;
}

Result<GcReport> CollectGarbage(const std::string& state) {
  return LayerStore(state).CollectGarbage();
}

// ---------------------------------------------------------------- folders

std::string ForkFolderName(std::string_view sandbox) {
  return std::string(kForkFolderPrefix) + std::string(sandbox);
}

bool IsForkFolderName(std::string_view name) {
  constexpr std::string_view p = kForkFolderPrefix;
  return name.size() > p.size() && name.substr(0, p.size()) == p;
}

bool IsTrashFolderName(std::string_view name) {
  constexpr std::string_view p = kTrashFolderPrefix;
  return name.size() > p.size() && name.substr(0, p.size()) == p;
}

namespace {

// Opens the directory `name` of `state_fd` and takes its flock without
// waiting: EBUSY naming it when another open file holds it.
Result<UniqueFd> LockFolder(int state_fd, const std::string& name,
                            const std::string& shown) {
  UniqueFd fd(::openat(state_fd, name.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Error::Errno("open", shown);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Error::Of(EBUSY, "in use by another acqfs command", shown);
    return Error::Errno("lock", shown);
  }
  return fd;
}

}  // namespace

Result<HeldFolder> ReserveForkFolder(const std::string& state,
                                     const std::string& sandbox) {
  auto state_fd = sys::OpenDirPath(state, O_RDONLY);
  if (!state_fd) return state_fd.error();
  const std::string name = ForkFolderName(sandbox);
  const std::string shown = state + "/" + name;
  // Under the store lock, which every collection holds: it never finds the
  // folder made and not yet locked.
  auto lock = StoreLock::Take(state);
  if (!lock) return lock.error();
  if (::mkdirat(state_fd->get(), name.c_str(), 0700) != 0) {
    if (errno != EEXIST) return Error::Errno("mkdir", shown);
    // A fork to the same name is at work, or one died and left it.
    auto old = LockFolder(state_fd->get(), name, shown);
    if (!old) {
      if (old.err() == EBUSY)
        return Error::Of(EBUSY, "another acqfs fork is making it", shown);
      return old.error();
    }
    ACQFS_TRY(sys::RemoveTree(state_fd->get(), name, state));
    if (::mkdirat(state_fd->get(), name.c_str(), 0700) != 0)
      return Error::Errno("mkdir", shown);
  }
  auto fd = LockFolder(state_fd->get(), name, shown);
  if (!fd) return fd.error();
  return HeldFolder{std::move(*fd), name};
}

Status CommitForkFolder(const std::string& state, HeldFolder* folder,
                        const std::string& sandbox) {
  auto state_fd = sys::OpenDirPath(state, O_RDONLY);
  if (!state_fd) return state_fd.error();
  {
    auto lock = StoreLock::Take(state);
    if (!lock) return lock.error();
    ACQFS_TRY(sys::Renameat2(state_fd->get(), folder->name, state_fd->get(),
                             sandbox, RENAME_NOREPLACE,
                             state + "/" + folder->name));
  }
  folder->name = sandbox;
  return sys::Fsync(state_fd->get(), state);
}

Result<HeldFolder> MoveToTrash(const std::string& state,
                               const std::string& name) {
  auto state_fd = sys::OpenDirPath(state, O_RDONLY);
  if (!state_fd) return state_fd.error();
  auto fd = LockFolder(state_fd->get(), name, state + "/" + name);
  if (!fd) return fd.error();
  std::string trash;
  for (;;) {
    auto id = NewLayerId();
    if (!id) return id.error();
    trash = std::string(kTrashFolderPrefix) + *id;
    Status moved = sys::Renameat2(state_fd->get(), name, state_fd->get(), trash,
                                  RENAME_NOREPLACE, state + "/" + name);
    if (moved) break;
    if (moved.err() != EEXIST) return moved.error();
  }
  ACQFS_TRY(sys::Fsync(state_fd->get(), state));
  return HeldFolder{std::move(*fd), trash};
}

Status RemoveHeldFolder(const std::string& state, const HeldFolder& folder) {
  auto state_fd = sys::OpenDirPath(state, O_RDONLY);
  if (!state_fd) return state_fd.error();
  return sys::RemoveTree(state_fd->get(), folder.name, state);
}

}  // namespace acqfs::cli
