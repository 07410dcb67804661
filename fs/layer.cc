#include "fs/layer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/owner_access.h"
#include "common/sys.h"
#include "fs/boundary_note.h"
#include "fs/layer_chain.h"
#include "fs/live_files.h"

namespace acqfs {

Result<Layer> Layer::Open(const std::string& path) {
  auto fd = sys::OpenDirPath(path, O_PATH);
  if (!fd) return fd.error();
  return Layer(std::move(*fd), path);
}

Result<Layer> Layer::OpenUnder(const std::string& anchor,
                               const std::string& path) {
  if (anchor.empty()) return Open(path);
  auto fd = sys::OpenBelow(anchor, path, O_PATH | O_DIRECTORY,
                           "open a layer below the state directory");
  if (!fd) return fd.error();
  return Layer(std::move(*fd), path);
}

namespace {
std::atomic<uint64_t> next_layer_id{1};

// The per-thread directory cache behind Layer::DirFd.
struct CachedDir {
  uint64_t layer = 0;
  uint64_t gen = 0;
  std::chrono::steady_clock::time_point made;
  std::string rel;
  UniqueFd fd;
};
constexpr size_t kCachedDirs = 4;
thread_local CachedDir tl_dirs[kCachedDirs];
thread_local size_t tl_next = 0;
std::atomic<size_t> g_cached_dirs{kCachedDirs};
}  // namespace

Layer::Layer(UniqueFd root, std::string root_path)
    : root_(std::move(root)),
      root_path_(std::move(root_path)),
      id_(next_layer_id.fetch_add(1)) {}

Result<int> Layer::DirFd(const std::string& rel, uint64_t gen,
                         UniqueFd* owned) const {
  const size_t slots = g_cached_dirs.load(std::memory_order_relaxed);
  if (gen == 0 || slots == 0) {
    auto fd = OpenDir(rel);
    if (!fd) return fd.error();
    *owned = std::move(*fd);
    return owned->get();
  }
  auto now = std::chrono::steady_clock::now();
  // A cached ancestor, the nearest one: the rest of the path is opened
  // beneath it (one name when a walk goes down a tree, however deep).
  const CachedDir* nearest = nullptr;
  for (const CachedDir& c : tl_dirs) {
    if (!c.fd || c.layer != id_ || c.gen != gen ||
        now - c.made >= std::chrono::seconds(1))
      continue;
    if (c.rel == rel) return c.fd.get();
    const bool below =
        c.rel.empty() ? !rel.empty()
                      : rel.size() > c.rel.size() && rel[c.rel.size()] == '/' &&
                            rel.compare(0, c.rel.size(), c.rel) == 0;
    if (below && (!nearest || c.rel.size() > nearest->rel.size())) nearest = &c;
  }
  auto fd =
      nearest
          ? sys::OpenBeneath(
                nearest->fd.get(),
                rel.substr(nearest->rel.empty() ? 0 : nearest->rel.size() + 1),
                O_PATH | O_DIRECTORY, 0, Shown(rel))
          : OpenDir(rel);
  if (!fd) return fd.error();
  CachedDir& slot = tl_dirs[tl_next++ % slots];
  slot.layer = id_;
  slot.gen = gen;
  slot.made = now;
  slot.rel = rel;
  slot.fd = std::move(*fd);
  return slot.fd.get();
}

void Layer::SetDirCacheSlots(size_t n) {
  g_cached_dirs = n < kCachedDirs ? n : kCachedDirs;
}

Result<struct stat> Layer::StatVia(const std::string& rel, uint64_t gen) const {
  if (rel.empty() || gen == 0) return Stat(rel);
  UniqueFd owned;
  auto dir = DirFd(sys::Dirname(rel), gen, &owned);
  if (!dir) return dir.error();
  return sys::StatAt(*dir, sys::Basename(rel), Shown(rel));
}

std::string Layer::Shown(const std::string& rel) const {
  return rel.empty() ? root_path_ : root_path_ + "/" + rel;
}

Result<UniqueFd> Layer::Open(const std::string& rel, int flags,
                             mode_t mode) const {
  return sys::OpenBeneath(root(), rel, flags, mode, Shown(rel));
}

Result<UniqueFd> Layer::OpenForReading(const std::string& rel,
                                       int extra) const {
  const int flags = O_RDONLY | O_NOFOLLOW | extra;
  auto fd = Open(rel, flags | O_NOATIME);
  if (!fd && fd.err() == EPERM) fd = Open(rel, flags);
  return fd;
}

Result<UniqueFd> Layer::OpenDir(const std::string& rel) const {
  return Open(rel, O_PATH | O_DIRECTORY);
}

Result<struct stat> Layer::Stat(const std::string& rel) const {
  auto fd = Open(rel, O_PATH | O_NOFOLLOW);
  if (!fd) return fd.error();
  return sys::Fstat(fd->get(), Shown(rel));
}

Status Layer::StatIfExists(const std::string& rel, struct stat* st,
                           bool* found) const {
  auto fd = Open(rel, O_PATH | O_NOFOLLOW);
  if (!fd) {
    *found = false;
    if (fd.err() == ENOENT || fd.err() == ENOTDIR) return Ok();
    return fd.error();
  }
  auto s = sys::Fstat(fd->get(), Shown(rel));
  if (!s) return s.error();
  *st = *s;
  *found = true;
  return Ok();
}

namespace {

// "maj:min:ino" of `st` as /proc/locks writes it (hexadecimal device
// numbers, decimal inode).
std::string LocksKey(const struct stat& st) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%llu", major(st.st_dev),
                minor(st.st_dev), static_cast<unsigned long long>(st.st_ino));
  return buf;
}

// The pid /proc/locks names for an flock on the inode `key`, if one is
// listed.
std::optional<pid_t> FlockHolderOf(const std::string& key) {
  std::ifstream in("/proc/locks");
  std::string line;
  while (std::getline(in, line)) {
    // "1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF"; a waiter's line
    // starts with "1: -> FLOCK".
    std::istringstream ss(line);
    std::string id, type, flavour, mode, pid, inode;
    if (!(ss >> id >> type)) continue;
    if (type == "->") continue;
    if (!(ss >> flavour >> mode >> pid >> inode)) continue;
    if (type != "FLOCK" || inode != key) continue;
    char* end = nullptr;
    long n = std::strtol(pid.c_str(), &end, 10);
    if (end == pid.c_str() || *end != '\0' || n < 0) n = 0;
    return static_cast<pid_t>(n);
  }
  return std::nullopt;
}

// Locks `dir` exclusively (flock of the directory), waiting at most until
// `deadline` for the holder to let go.
Result<UniqueFd> ClaimDir(const std::string& dir, const char* what,
                          std::chrono::steady_clock::time_point deadline) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Error::Errno("open", dir);
  auto step = std::chrono::milliseconds(1);
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return Error::Errno("lock", dir);
    if (std::chrono::steady_clock::now() >= deadline) {
      auto st = sys::Fstat(fd.get(), dir);
      std::optional<pid_t> pid;
      if (st) pid = FlockHolderOf(LocksKey(*st));
      std::string who = pid && *pid > 0
                            ? "acqfs daemon pid " + std::to_string(*pid)
                            : std::string(
                                  "another acqfs daemon (its pid is "
                                  "not visible here)");
      return Error::Of(EBUSY,
                       std::string("serve the layers: the ") + what +
                           " is in use: " + who +
                           " serves it (it holds the lock on the directory); "
                           "unmount that mount first",
                       dir);
    }
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::milliseconds(50));
  }
  return fd;
}

}  // namespace

Result<LayersClaim> LayersClaim::Take(const std::string& upper,
                                      const std::string& work, int wait_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  LayersClaim c;
  auto u = ClaimDir(upper, "upper layer", deadline);
  if (!u) return u.error();
  auto w = ClaimDir(work, "work directory", deadline);
  if (!w) return w.error();
  c.upper_ = std::move(*u);
  c.work_ = std::move(*w);
  // Before anything reads or changes the upper: no file of it may still be
  // written by the kernel for a daemon that is gone (fs/live_files.h).
  size_t fenced = 0;
  ACQFS_TRY(
      FenceLiveFiles(c.upper_.get(), upper, c.work_.get(), work, &fenced));
  if (fenced > 0)
    spdlog::warn(
        "{} upper file(s) were still open through passthrough when the last "
        "daemon ended: each is a copy now, and what the processes holding "
        "them write goes to no layer",
        fenced);
  return c;
}

Status LayersClaim::TakeUpper(const std::string& upper) {
  auto u = ClaimDir(upper, "upper layer", std::chrono::steady_clock::now());
  if (!u) return u.error();
  frozen_.push_back(std::move(upper_));
  upper_ = std::move(*u);
  return Ok();
}

std::optional<pid_t> LayersHolder(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return std::nullopt;
  return FlockHolderOf(LocksKey(st));
}

Status Layers::OpenFrozen(const std::vector<std::string>& paths) {
  if (paths.size() >= kMaxLowerLayers)
    return Error::Of(EMLINK,
                     "open the layers (more than " +
                         std::to_string(kMaxLowerLayers - 1) +
                         " frozen layers: squash them)",
                     paths.back());
  frozen.clear();
  for (const auto& p : paths) {
    auto f = Layer::OpenUnder(anchor, p);
    if (!f) return f.error();
    frozen.push_back(std::move(*f));
  }
  auto lst = sys::Fstat(lower.root(), lower.root_path());
  if (!lst) return lst.error();
  auto ust = sys::Fstat(upper.root(), upper.root_path());
  if (!ust) return ust.error();
  store_on_host_dev = lst->st_dev == ust->st_dev;
  return Ok();
}

Result<Layers> Layers::Open(const std::string& lower, const std::string& upper,
                            const std::string& work, XattrNamespace ns,
                            const std::vector<std::string>& frozen,
                            const std::string& anchor) {
  Layers l;
  l.anchor = anchor;
  // Before anything in the work directory is touched: a daemon that serves
  // these layers keeps its kept data in acqfs-tmp/.
  auto claim = LayersClaim::Take(upper, work, kClaimWaitMs);
  if (!claim) return claim.error();
  l.claim = std::move(*claim);
  auto lo = Layer::Open(lower);
  if (!lo) return lo.error();
  auto up = Layer::OpenUnder(anchor, upper);
  if (!up) return up.error();
  auto wk = Layer::OpenUnder(anchor, work);
  if (!wk) return wk.error();
  l.lower = std::move(*lo);
  l.upper = std::move(*up);
  l.work = std::move(*wk);
  ACQFS_TRY(l.OpenFrozen(frozen));
  l.format = LayerFormat(ns);
  l.privileged = ::geteuid() == 0;
  l.tmp_path = work + "/" + LayerFormat::kTempDirName;
  // A mode a killed daemon left widened (common/owner_access.h) is
  // restored before anything reads the upper.
  ACQFS_TRY(owner_access::Repair(l.upper.root(), l.work.root(), work));
  // Leftovers of an interrupted copy-up, and the kept data of the last
  // mount, are junk: remove them. The directory itself stays (emptied), so
  // the room it has grown is kept (ext4 directories never shrink): kept data
  // parked there needs no new block, which a full disk would refuse.
  struct stat st;
  bool found = false;
  ACQFS_TRY(l.work.StatIfExists(LayerFormat::kTempDirName, &st, &found));
  auto wfd = l.work.OpenDir("");
  if (!wfd) return wfd.error();
  if (found && !S_ISDIR(st.st_mode)) {
    ACQFS_TRY(
        sys::RemoveTree(wfd->get(), LayerFormat::kTempDirName, l.tmp_path));
    found = false;
  }
  if (!found && ::mkdirat(wfd->get(), LayerFormat::kTempDirName, 0700) != 0)
    return Error::Errno("mkdir", l.tmp_path);
  if (found) {
    auto old =
        sys::OpenBeneath(wfd->get(), LayerFormat::kTempDirName,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, l.tmp_path);
    if (!old) return old.error();
    auto junk = sys::ReadDir(old->get(), l.tmp_path);
    if (!junk) return junk.error();
    for (const auto& e : *junk)
      ACQFS_TRY(sys::RemoveTree(old->get(), e.name, l.tmp_path));
  }
  auto tfd = l.work.OpenDir(LayerFormat::kTempDirName);
  if (!tfd) return tfd.error();
  l.tmp = std::move(*tfd);
  return l;
}

Result<Layers> Layers::OpenForReading(const std::string& lower,
                                      const std::string& upper,
                                      XattrNamespace ns,
                                      const std::vector<std::string>& frozen,
                                      const std::string& anchor) {
  Layers l;
  l.anchor = anchor;
  auto lo = Layer::Open(lower);
  if (!lo) return lo.error();
  auto up = Layer::OpenUnder(anchor, upper);
  if (!up) return up.error();
  l.lower = std::move(*lo);
  l.upper = std::move(*up);
  ACQFS_TRY(l.OpenFrozen(frozen));
  l.format = LayerFormat(ns);
  l.privileged = ::geteuid() == 0;
  return l;
}

DirView ChildInfo::AsDir(const std::string& child_path) const {
  DirView v;
  v.path = child_path;
  v.upper = upper;
  bool lower_dir = lower && S_ISDIR(lower_st.st_mode);
  bool shows = lower_dir && (!upper || opaque != OpaqueMark::kOpaque);
  if (upper && !S_ISDIR(upper_st.st_mode)) shows = false;
  v.lower = shows ? lower_dirs : 0;
  v.lower_xw = shows ? lower_xw : 0;
  v.xwhiteouts = upper && opaque == OpaqueMark::kMayHoldXattrWhiteouts;
  return v;
}

Result<DirView> RootView(const Layers& layers) {
  DirView v;
  v.path = "";
  v.upper = true;
  auto mark = layers.format.ReadOpaque(layers.upper.root(), "",
                                       layers.upper.root_path());
  if (!mark) return mark.error();
  v.xwhiteouts = *mark == OpaqueMark::kMayHoldXattrWhiteouts;
  if (*mark == OpaqueMark::kOpaque) return v;
  // Down the frozen layers' roots to the first opaque one, then the host.
  for (unsigned i = layers.lower_layers(); i-- > 0;) {
    v.lower |= LowerBit(i);
    if (i == 0) break;
    const Layer& f = layers.LowerLayer(i);
    auto m = layers.format.ReadOpaque(f.root(), "", f.root_path());
    if (!m) return m.error();
    if (*m == OpaqueMark::kMayHoldXattrWhiteouts) v.lower_xw |= LowerBit(i);
    if (*m == OpaqueMark::kOpaque) break;
  }
  return v;
}

namespace {

// The path of `name` in `dir`, for a message or the policy.
std::string ChildPath(const DirView& dir, const std::string& name) {
  return sys::Join(dir.path, name);
}

// `e` with its path replaced by `name` of `dir` in `layer`.
Error NamedIn(Error e, const Layer& layer, const DirView& dir,
              const std::string& name) {
  e.path = layer.Shown(ChildPath(dir, name));
  return e;
}

// The sys and format helpers get no path: the child's path is built only
// when a call fails (or the policy asks), so resolving a child of a deep
// directory costs O(1) system calls and no O(depth) string.
const std::string kNoName;

// The upper half of the lookup rule: what the upper directory open as
// `ufd` holds under `name` (an entry gone since it was listed: nothing).
Status ResolveUpperChild(const Layers& layers, const DirView& dir, int ufd,
                         const std::string& name, ChildInfo* c) {
  const EntryRead how{.xattr_whiteouts = dir.xwhiteouts, .origin = true};
  auto e = ReadLayerEntry(layers.format, ufd, name, how, kNoName);
  if (!e) return NamedIn(e.error(), layers.upper, dir, name);
  if (e->kind == LayerEntry::kAbsent) return Ok();
  c->upper_st = e->st;
  if (e->kind == LayerEntry::kWhiteout) {
    c->whiteout = true;
    return Ok();
  }
  c->upper = true;
  c->origin = e->origin;
  c->opaque = e->opaque;
  return Ok();
}

// One lower layer's step of the lower half of the lookup rule, from the
// topmost layer of dir.lower down (fs/layer_chain.h): what lower layer
// `i`'s directory, open as `fd`, holds under `name`, given to `chain`.
// False when the layers below cannot matter. The host's objects are plain;
// one the policy hides (when `apply_policy`) is absent.
Result<bool> ResolveLowerStep(const Layers& layers, const DirView& dir,
                              unsigned i, int fd, const std::string& name,
                              NameChain* chain, bool apply_policy) {
  const bool host = i == 0;
  const EntryRead how{.plain = host,
                      .xattr_whiteouts = (dir.lower_xw & LowerBit(i)) != 0,
                      .origin = !host && chain->wants_origin()};
  auto e = ReadLayerEntry(layers.format, fd, name, how, kNoName);
  if (!e) return NamedIn(e.error(), layers.LowerLayer(i), dir, name);
  if (e->kind == LayerEntry::kAbsent) return true;
  if (host && apply_policy && layers.policy &&
      layers.policy->hides_anything() &&
      layers.HidesLower(ChildPath(dir, name), e->kind == LayerEntry::kDir)) {
    NoteBoundary(kRefusedHidden, ChildPath(dir, name));
    return false;
  }
  const uint64_t own = host ? e->st.st_ino : layers.TagStore(e->st.st_ino);
  return chain->Add(i, *e, own, host);
}

// The lower half of `c` from the chain the lower layers fed.
void FillLower(const NameChain& chain, ChildInfo* c) {
  if (!chain.found()) return;
  c->lower = true;
  c->lower_layer = chain.top_layer();
  c->lower_st = chain.top().st;
  c->lower_ino = chain.number();
  if (chain.is_dir()) {
    c->lower_dirs = static_cast<LowerMask>(chain.dirs());
    c->lower_xw = static_cast<LowerMask>(chain.xattr_whiteouts());
  }
}

}  // namespace

Result<ChildInfo> ResolveChildAt(const Layers& layers, const DirView& dir,
                                 int upper_fd, const LowerFds& lower,
                                 const std::string& name) {
  ChildInfo c;
  if (dir.upper) ACQFS_TRY(ResolveUpperChild(layers, dir, upper_fd, name, &c));
  NameChain chain;
  for (LowerMask m = dir.lower; m;) {
    unsigned i = TopLowerLayer(m);
    m &= ~LowerBit(i);
    if (lower.fd[i] < 0) continue;
    auto more = ResolveLowerStep(layers, dir, i, lower.fd[i], name, &chain,
                                 /*apply_policy=*/true);
    if (!more) return more.error();
    if (!*more) break;
  }
  FillLower(chain, &c);
  c.exists = c.upper || (c.lower && !c.whiteout);
  return c;
}

Result<ChildInfo> ResolveChild(const Layers& layers, const DirView& dir,
                               const std::string& name, uint64_t gen,
                               bool apply_policy) {
  // Each layer's directory is used before the next one's is asked for: a
  // descriptor DirFd lends from its per-thread cache may be closed by the
  // next DirFd call, which can take its slot.
  ChildInfo c;
  if (dir.upper) {
    UniqueFd owned;
    auto fd = layers.upper.DirFd(dir.path, gen, &owned);
    if (!fd) return fd.error();
    ACQFS_TRY(ResolveUpperChild(layers, dir, *fd, name, &c));
  }
  NameChain chain;
  for (LowerMask m = dir.lower; m;) {
    unsigned i = TopLowerLayer(m);
    m &= ~LowerBit(i);
    UniqueFd owned;
    auto fd = layers.LowerLayer(i).DirFd(dir.path, gen, &owned);
    if (!fd) {
      if (fd.err() != ENOENT && fd.err() != ENOTDIR) return fd.error();
      continue;
    }
    auto more =
        ResolveLowerStep(layers, dir, i, *fd, name, &chain, apply_policy);
    if (!more) return more.error();
    if (!*more) break;
  }
  FillLower(chain, &c);
  c.exists = c.upper || (c.lower && !c.whiteout);
  return c;
}

Result<std::vector<MergedEntry>> ListMerged(const Layers& layers,
                                            const DirView& dir) {
  UniqueFd ufd;
  if (dir.upper) {
    auto fd = layers.upper.OpenDir(dir.path);
    if (!fd) return fd.error();
    ufd = std::move(*fd);
  }
  UniqueFd owned[kMaxLowerLayers];
  LowerFds lower;
  for (LowerMask m = dir.lower; m;) {
    unsigned i = TopLowerLayer(m);
    m &= ~LowerBit(i);
    auto fd = layers.LowerLayer(i).OpenDir(dir.path);
    if (fd) {
      owned[i] = std::move(*fd);
      lower.fd[i] = owned[i].get();
    } else if (fd.err() != ENOENT && fd.err() != ENOTDIR) {
      return fd.error();
    }
  }
  return ListMergedAt(layers, dir, ufd ? ufd.get() : -1, lower);
}

namespace {

// Is the entry `e` of the directory `fd` (in `layer`, whose directory may
// hold xattr whiteouts when `xw`) a whiteout? Reads the entry only when its
// type may be one.
Result<bool> ListedWhiteout(const Layers& layers, const Layer& layer,
                            const DirView& dir, int fd, bool xw,
                            sys::DirEntry* e, bool* gone) {
  *gone = false;
  if (!(e->type == DT_CHR || e->type == DT_UNKNOWN ||
        (e->type == DT_REG && xw)))
    return false;
  struct stat st;
  bool found = false;
  std::string shown = layer.Shown(sys::Join(dir.path, e->name));
  ACQFS_TRY(sys::StatAtIfExists(fd, e->name, &st, &found, shown));
  if (!found) {
    *gone = true;
    return false;
  }
  auto whiteout = layers.format.IsWhiteoutEntry(fd, e->name, st, xw, shown);
  if (!whiteout) return whiteout.error();
  if (!*whiteout && e->type == DT_UNKNOWN) e->type = IFTODT(st.st_mode);
  return *whiteout;
}

}  // namespace

Result<std::vector<MergedEntry>> ListMergedAt(const Layers& layers,
                                              const DirView& dir, int upper_fd,
                                              const LowerFds& lower) {
  std::vector<MergedEntry> out;
  std::unordered_map<std::string, size_t> index;
  std::unordered_set<std::string> whiteouts;
  if (dir.upper) {
    const int ufd = upper_fd;
    auto ents = sys::ReadDir(ufd, layers.upper.Shown(dir.path));
    if (!ents) return ents.error();
    for (auto& e : *ents) {
      bool gone = false;
      auto w = ListedWhiteout(layers, layers.upper, dir, ufd, dir.xwhiteouts,
                              &e, &gone);
      if (!w) return w.error();
      if (gone) continue;
      if (*w) {
        whiteouts.insert(e.name);
        continue;
      }
      index[e.name] = out.size();
      out.push_back(MergedEntry{e.name, e.type, true, false, e.ino, 0});
    }
  }
  for (LowerMask m = dir.lower; m;) {
    const unsigned i = TopLowerLayer(m);
    m &= ~LowerBit(i);
    const int lfd = lower.fd[i];
    if (lfd < 0) continue;
    const Layer& layer = layers.LowerLayer(i);
    auto ents = sys::ReadDir(lfd, layer.Shown(dir.path));
    if (!ents) return ents.error();
    // This layer's whiteouts hide the names of the layers below it only.
    std::vector<std::string> hidden_below;
    for (auto& e : *ents) {
      if (i > 0) {
        bool gone = false;
        auto w = ListedWhiteout(layers, layer, dir, lfd,
                                (dir.lower_xw & LowerBit(i)) != 0, &e, &gone);
        if (!w) return w.error();
        if (gone) continue;
        if (*w) {
          if (!index.count(e.name)) hidden_below.push_back(e.name);
          continue;
        }
      } else if (layers.policy && layers.policy->hides_anything()) {
        std::string rel = sys::Join(dir.path, e.name);
        bool is_dir = e.type == DT_DIR;
        if (e.type == DT_UNKNOWN) {
          struct stat st;
          bool found = false;
          ACQFS_TRY(
              sys::StatAtIfExists(lfd, e.name, &st, &found, layer.Shown(rel)));
          if (!found) continue;
          is_dir = S_ISDIR(st.st_mode);
        }
        if (layers.HidesLower(rel, is_dir)) continue;
      }
      auto it = index.find(e.name);
      if (it != index.end()) {
        MergedEntry& known = out[it->second];
        if (!known.in_lower) {
          known.in_lower = true;
          known.lower_ino = e.ino;
          known.lower_layer = i;
        }
        continue;
      }
      if (whiteouts.count(e.name)) continue;
      index[e.name] = out.size();
      out.push_back(MergedEntry{e.name, e.type, false, true, 0, e.ino, i});
    }
    for (auto& n : hidden_below) whiteouts.insert(std::move(n));
  }
  return out;
}

}  // namespace acqfs
