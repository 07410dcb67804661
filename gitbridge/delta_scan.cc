#include "gitbridge/delta_scan.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <memory>

#include "common/sys.h"
#include "fs/layer_walk.h"
#include "gitbridge/git_names.h"

namespace acqfs::gitbridge {
namespace {

struct XxhStateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using XxhState = std::unique_ptr<XXH3_state_t, XxhStateFree>;

// The walk is depth first and iterative (an explicit stack of frames, so a
// tree 100,000 directories deep needs no C++ stack in proportion), on a
// LayerStack (fs/layer_walk.h): the current directory is held open in the
// upper layer and, while the lower directory at the same path shows
// through, in the lower, with at most 2 x LayerStack::kOpenPerLayer
// descriptors open however deep the tree is (closed ancestors are reopened
// through ".." on the way back up), plus at most two while a file is
// compared. Every object is opened or stat'ed relative to its directory's
// descriptor, never by a path from a layer root. One path string, the
// current entry's, is extended and cut back as the walk goes; failures name
// the absolute path (Named), which is built only then.
const std::string kNoName;  // `shown` for the sys helpers

// One directory on the walk's path: its upper listing and how far the walk
// got in it.
struct Frame {
  std::vector<sys::DirEntry> entries;
  size_t next = 0;
  size_t path_len = 0;      // path's length while in this directory
  bool lower = false;       // the lower directory at this path shows through
  bool xwhiteouts = false;  // may hold xattr whiteouts (opaque mark "x")
};

struct ScanState {
  const Layers& layers;
  ScanStats stats;
  std::vector<Change> out;
  const ProgressFn& progress;
  LayerStack stack;
  std::vector<Frame> frames;  // root first
  std::string path;           // the current entry's (or directory's) path

  int upper() const { return stack.upper(); }
  // The lower directory of the current one, or -1 when it does not show.
  int lower() const { return frames.back().lower ? stack.lower() : -1; }
};

// `e` naming the current entry (s->path) in `layer`.
Error Named(Error e, const Layer& layer, const std::string& rel) {
  e.path = layer.Shown(rel);
  return e;
}

void AppendName(std::string* path, const std::string& name) {
  if (!path->empty()) path->push_back('/');
  path->append(name);
}

// The mode git records for an object of `st_mode`.
uint32_t GitMode(mode_t st_mode) {
  if (S_ISDIR(st_mode)) return kModeTree;
  if (S_ISLNK(st_mode)) return kModeLink;
  return (st_mode & S_IXUSR) ? kModeExecutable : kModeBlob;
}

// Hashes the whole file `name` of the directory `dirfd` with XXH3-64,
// streaming.
Result<XXH64_hash_t> HashFile(int dirfd, const std::string& name,
                              bool no_atime) {
  const int flags = O_RDONLY | O_NOFOLLOW;
  auto fd = sys::OpenBeneath(dirfd, name, flags | (no_atime ? O_NOATIME : 0), 0,
                             kNoName);
  if (!fd && no_atime && fd.err() == EPERM)
    fd = sys::OpenBeneath(dirfd, name, flags, 0, kNoName);
  if (!fd) return fd.error();
  XxhState state(XXH3_createState());
  if (!state) return Error::Of(ENOMEM, "XXH3_createState", "");
  XXH3_64bits_reset(state.get());
  std::unique_ptr<char[]> buf(new char[1 << 16]);
  for (;;) {
    ssize_t n = ::read(fd->get(), buf.get(), 1 << 16);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("read", "");
    }
    if (n == 0) break;
    XXH3_64bits_update(state.get(), buf.get(), static_cast<size_t>(n));
  }
  return XXH3_64bits_digest(state.get());
}

// Stats the lower object `name` of the current directory when the lower
// directory shows through; *found is false otherwise.
Status StatLower(ScanState* s, const std::string& name, struct stat* st,
                 bool* found) {
  *found = false;
  if (s->lower() < 0) return Ok();
  Status r = sys::StatAtIfExists(s->lower(), name, st, found, kNoName);
  if (!r) return Named(r.error(), s->layers.lower, s->path);
  return Ok();
}

// Is the upper object `name` (stat `up`) a byte-for-byte copy of the lower
// object of the same name?
Result<bool> SameAsLower(ScanState* s, const std::string& name,
                         const struct stat& up) {
  const std::string& rel = s->path;
  struct stat lo;
  bool found = false;
  ACQFS_TRY(StatLower(s, name, &lo, &found));
  if (!found || (lo.st_mode & S_IFMT) != (up.st_mode & S_IFMT) ||
      lo.st_size != up.st_size ||
      (lo.st_mode & S_IXUSR) != (up.st_mode & S_IXUSR))
    return false;
  if (S_ISLNK(up.st_mode)) {
    auto a = sys::ReadLinkAt(s->upper(), name, kNoName);
    if (!a) return Named(a.error(), s->layers.upper, rel);
    auto b = sys::ReadLinkAt(s->lower(), name, kNoName);
    if (!b) return Named(b.error(), s->layers.lower, rel);
    return *a == *b;  // the targets themselves, shorter than any hash
  }
  auto a = HashFile(s->upper(), name, false);
  if (!a) return Named(a.error(), s->layers.upper, rel);
  auto b = HashFile(s->lower(), name, true);
  if (!b) return Named(b.error(), s->layers.lower, rel);
  return *a == *b;
}

// A regular file or symlink of the upper: an upsert unless it is an
// unchanged copy-up.
Status ScanLeaf(ScanState* s, const std::string& name, const struct stat& st) {
  auto same = SameAsLower(s, name, st);
  if (!same) return same.error();
  if (*same) {
    ++s->stats.unchanged_copies;
    return Ok();
  }
  s->out.push_back(Change{Change::kUpsert, s->path, st.st_mode,
                          static_cast<uint64_t>(st.st_size)});
  return Ok();
}

// Lists the stack's current directory into a new frame.
Status OpenFrame(ScanState* s, bool lower, bool xwhiteouts) {
  Frame f;
  f.lower = lower;
  f.xwhiteouts = xwhiteouts;
  f.path_len = s->path.size();
  auto ents = sys::ReadDir(s->upper(), kNoName);
  if (!ents) return Named(ents.error(), s->layers.upper, s->path);
  f.entries = std::move(*ents);
  s->frames.push_back(std::move(f));
  return Ok();
}

// An upper directory: reported as a delete when it is opaque or hides a
// lower non-directory, then entered with the lower directory it merges with
// (the walk goes on in it).
Status EnterSubdir(ScanState* s, const std::string& name) {
  auto mark = s->layers.format.ReadOpaque(s->upper(), name, kNoName);
  if (!mark) return Named(mark.error(), s->layers.upper, s->path);
  struct stat lo;
  bool found = false;
  ACQFS_TRY(StatLower(s, name, &lo, &found));
  bool opaque = *mark == OpaqueMark::kOpaque;
  // An opaque directory replaces whatever was there; a merged one replaces
  // only a lower non-directory.
  if (opaque || (found && !S_ISDIR(lo.st_mode)))
    s->out.push_back(Change{Change::kDelete, s->path});
  bool lower_dir = found && S_ISDIR(lo.st_mode) && !opaque;
  ACQFS_TRY(s->stack.Push(name, true, lower_dir));
  return OpenFrame(s, lower_dir, *mark == OpaqueMark::kMayHoldXattrWhiteouts);
}

// Is the upper entry a whiteout, in either form?
Result<bool> IsWhiteoutEntry(ScanState* s, const std::string& name,
                             const struct stat& st) {
  if (LayerFormat::IsWhiteout(st)) return true;
  if (!s->frames.back().xwhiteouts || !S_ISREG(st.st_mode) || st.st_size != 0)
    return false;
  auto xw = s->layers.format.IsXattrWhiteout(s->upper(), name, kNoName);
  if (!xw) return Named(xw.error(), s->layers.upper, s->path);
  return *xw;
}

// Scans the entry `name` of the current directory (s->path is its path);
// *entered when the walk went into it.
Status ScanEntry(ScanState* s, const std::string& name, bool* entered) {
  const std::string& rel = s->path;
  struct stat st;
  bool found = false;
  Status r = sys::StatAtIfExists(s->upper(), name, &st, &found, kNoName);
  if (!r) return Named(r.error(), s->layers.upper, rel);
  if (!found) return Ok();  // removed while we scan
  if (++s->stats.upper_entries % 1000 == 0)
    Report(s->progress, "scanning the upper layer", s->stats.upper_entries);
  auto whiteout = IsWhiteoutEntry(s, name, st);
  if (!whiteout) return whiteout.error();
  if (*whiteout) {
    s->out.push_back(Change{Change::kDelete, rel});
    return Ok();
  }
  if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
    // A name git refuses is never published, so nothing below it is read.
    std::string why = UnsafeTreeEntry(name, GitMode(st.st_mode));
    if (!why.empty()) {
      s->out.push_back(Change{Change::kUnsafe, rel, st.st_mode, 0, why});
      return Ok();
    }
  }
  if (S_ISDIR(st.st_mode)) {
    ACQFS_TRY(EnterSubdir(s, name));
    *entered = true;
    return Ok();
  }
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return ScanLeaf(s, name, st);
  // Fifos, sockets and devices are not recorded by git, but they hide the
  // lower object of their name.
  struct stat lo;
  ACQFS_TRY(StatLower(s, name, &lo, &found));
  if (found) s->out.push_back(Change{Change::kDelete, rel});
  return Ok();
}

// The walk, from the layer roots (the stack at depth 0).
Status Walk(ScanState* s, bool lower, bool xwhiteouts) {
  ACQFS_TRY(OpenFrame(s, lower, xwhiteouts));
  while (!s->frames.empty()) {
    Frame& f = s->frames.back();
    if (f.next == f.entries.size()) {
      s->frames.pop_back();
      if (s->frames.empty()) break;
      ACQFS_TRY(s->stack.Pop());
      s->path.resize(s->frames.back().path_len);
      continue;
    }
    const std::string name = std::move(f.entries[f.next++].name);
    if (name == ".git") continue;  // the sandbox's repository, not content
    const size_t len = f.path_len;
    AppendName(&s->path, name);
    bool entered = false;
    ACQFS_TRY(ScanEntry(s, name, &entered));  // `f` is stale once entered
    if (!entered) s->path.resize(len);
  }
  return Ok();
}

// An opaque upper root hides the whole lower: every top-level lower name is
// deleted (the root itself cannot be).
Status DeleteLowerRoot(ScanState* s) {
  auto ents = sys::ReadDir(s->layers.lower.root(), s->layers.lower.Shown(""));
  if (!ents) return ents.error();
  for (const sys::DirEntry& e : *ents) {
    if (e.name != ".git") s->out.push_back(Change{Change::kDelete, e.name});
  }
  return Ok();
}

}  // namespace

Result<std::vector<Change>> ScanUpper(const Layers& layers, ScanStats* stats,
                                      const ProgressFn& progress) {
  ScanState s{layers, {}, {}, progress, LayerStack(layers), {}, {}};
  auto root = RootView(layers);
  if (!root) return root.error();
  if (!root->merged) ACQFS_TRY(DeleteLowerRoot(&s));
  ACQFS_TRY(Walk(&s, root->merged, root->xwhiteouts));
  // Path order: a directory's own kDelete ("a") sorts before its content
  // ("a/..."), since a prefix sorts first; the sort is stable, so the
  // kDelete of a lower name hidden by an opaque root stays before the
  // kUpsert of the same name.
  std::stable_sort(
      s.out.begin(), s.out.end(),
      [](const Change& a, const Change& b) { return a.path < b.path; });
  if (layers.policy) {
    // The bridge never publishes a change at a hidden path (the sandbox
    // never saw the host's object there) or under a read-only one.
    const Policy& p = *layers.policy;
    auto outside = [&](const Change& c) {
      bool dir = S_ISDIR(c.mode);
      bool maybe_dir = c.kind == Change::kDelete || dir;
      return p.HiddenPath(c.path, dir) || p.ReadOnly(c.path, dir) ||
             (maybe_dir &&
              (p.HiddenPath(c.path, true) || p.ReadOnly(c.path, true)));
    };
    s.out.erase(std::remove_if(s.out.begin(), s.out.end(), outside),
                s.out.end());
  }
  if (stats) *stats = s.stats;
  return std::move(s.out);
}

}  // namespace acqfs::gitbridge
