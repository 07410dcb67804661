#include "gitbridge/delta_scan.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <memory>

#include "common/sys.h"
#include "gitbridge/git_names.h"

namespace acqfs::gitbridge {
namespace {

struct XxhStateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using XxhState = std::unique_ptr<XXH3_state_t, XxhStateFree>;

// One directory of the upper layer being scanned.
struct DirScan {
  std::string path;         // relative, "" = the root
  UniqueFd upper;           // O_PATH fd of the upper directory
  UniqueFd lower;           // O_PATH fd of the lower directory, when it shows
  bool xwhiteouts = false;  // may hold xattr whiteouts (opaque mark "x")
};

struct ScanState {
  const Layers& layers;
  ScanStats stats;
  std::vector<Change> out;
  const ProgressFn& progress;
};

Status ScanDir(ScanState* s, const DirScan& dir);

// The mode git records for an object of `st_mode`.
uint32_t GitMode(mode_t st_mode) {
  if (S_ISDIR(st_mode)) return kModeTree;
  if (S_ISLNK(st_mode)) return kModeLink;
  return (st_mode & S_IXUSR) ? kModeExecutable : kModeBlob;
}

// Hashes a whole file with XXH3-64, streaming.
Result<XXH64_hash_t> HashFile(const Layer& layer, const std::string& rel,
                              bool no_atime) {
  auto fd = no_atime ? layer.OpenForReading(rel)
                     : layer.Open(rel, O_RDONLY | O_NOFOLLOW);
  if (!fd) return fd.error();
  XxhState state(XXH3_createState());
  if (!state) return Error::Of(ENOMEM, "XXH3_createState", layer.Shown(rel));
  XXH3_64bits_reset(state.get());
  std::unique_ptr<char[]> buf(new char[1 << 16]);
  for (;;) {
    ssize_t n = ::read(fd->get(), buf.get(), 1 << 16);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("read", layer.Shown(rel));
    }
    if (n == 0) break;
    XXH3_64bits_update(state.get(), buf.get(), static_cast<size_t>(n));
  }
  return XXH3_64bits_digest(state.get());
}

// Stats the lower object `name` of `dir` when the lower directory shows
// through; *found is false otherwise.
Status StatLower(ScanState* s, const DirScan& dir, const std::string& name,
                 struct stat* st, bool* found) {
  *found = false;
  if (!dir.lower) return Ok();
  return sys::StatAtIfExists(dir.lower.get(), name, st, found,
                             s->layers.lower.Shown(sys::Join(dir.path, name)));
}

// Is the upper object `name` (stat `up`) a byte-for-byte copy of the lower
// object of the same name in `dir`?
Result<bool> SameAsLower(ScanState* s, const DirScan& dir,
                         const std::string& name, const struct stat& up) {
  std::string rel = sys::Join(dir.path, name);
  struct stat lo;
  bool found = false;
  ACQFS_TRY(StatLower(s, dir, name, &lo, &found));
  if (!found || (lo.st_mode & S_IFMT) != (up.st_mode & S_IFMT) ||
      lo.st_size != up.st_size ||
      (lo.st_mode & S_IXUSR) != (up.st_mode & S_IXUSR))
    return false;
  if (S_ISLNK(up.st_mode)) {
    auto a = sys::ReadLinkAt(dir.upper.get(), name, s->layers.upper.Shown(rel));
    if (!a) return a.error();
    auto b = sys::ReadLinkAt(dir.lower.get(), name, s->layers.lower.Shown(rel));
    if (!b) return b.error();
    return *a == *b;  // the targets themselves, shorter than any hash
  }
  auto a = HashFile(s->layers.upper, rel, false);
  if (!a) return a.error();
  auto b = HashFile(s->layers.lower, rel, true);
  if (!b) return b.error();
  return *a == *b;
}

// A regular file or symlink of the upper: an upsert unless it is an
// unchanged copy-up.
Status ScanLeaf(ScanState* s, const DirScan& dir, const std::string& name,
                const struct stat& st) {
  auto same = SameAsLower(s, dir, name, st);
  if (!same) return same.error();
  if (*same) {
    ++s->stats.unchanged_copies;
    return Ok();
  }
  s->out.push_back(Change{Change::kUpsert, sys::Join(dir.path, name),
                          st.st_mode, static_cast<uint64_t>(st.st_size)});
  return Ok();
}

// An upper directory: reported as a delete when it is opaque or hides a
// lower non-directory, then scanned with the lower directory it merges with.
Status ScanSubdir(ScanState* s, const DirScan& dir, const std::string& name) {
  DirScan sub;
  sub.path = sys::Join(dir.path, name);
  std::string shown = s->layers.upper.Shown(sub.path);
  auto mark = s->layers.format.ReadOpaque(dir.upper.get(), name, shown);
  if (!mark) return mark.error();
  sub.xwhiteouts = *mark == OpaqueMark::kMayHoldXattrWhiteouts;
  struct stat lo;
  bool found = false;
  ACQFS_TRY(StatLower(s, dir, name, &lo, &found));
  bool opaque = *mark == OpaqueMark::kOpaque;
  // An opaque directory replaces whatever was there; a merged one replaces
  // only a lower non-directory.
  if (opaque || (found && !S_ISDIR(lo.st_mode)))
    s->out.push_back(Change{Change::kDelete, sub.path});
  bool lower_dir = found && S_ISDIR(lo.st_mode) && !opaque;
  auto ufd = s->layers.upper.OpenDir(sub.path);
  if (!ufd) return ufd.error();
  sub.upper = std::move(*ufd);
  if (lower_dir) {
    auto lfd = s->layers.lower.OpenDir(sub.path);
    if (!lfd) return lfd.error();
    sub.lower = std::move(*lfd);
  }
  return ScanDir(s, sub);
}

// Is the upper entry a whiteout, in either form?
Result<bool> IsWhiteoutEntry(ScanState* s, const DirScan& dir,
                             const std::string& name, const struct stat& st) {
  if (LayerFormat::IsWhiteout(st)) return true;
  if (!dir.xwhiteouts || !S_ISREG(st.st_mode) || st.st_size != 0) return false;
  return s->layers.format.IsXattrWhiteout(
      dir.upper.get(), name, s->layers.upper.Shown(sys::Join(dir.path, name)));
}

Status ScanEntry(ScanState* s, const DirScan& dir, const std::string& name) {
  std::string rel = sys::Join(dir.path, name);
  struct stat st;
  bool found = false;
  ACQFS_TRY(sys::StatAtIfExists(dir.upper.get(), name, &st, &found,
                                s->layers.upper.Shown(rel)));
  if (!found) return Ok();  // removed while we scan
  if (++s->stats.upper_entries % 1000 == 0)
    Report(s->progress, "scanning the upper layer", s->stats.upper_entries);
  auto whiteout = IsWhiteoutEntry(s, dir, name, st);
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
  if (S_ISDIR(st.st_mode)) return ScanSubdir(s, dir, name);
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))
    return ScanLeaf(s, dir, name, st);
  // Fifos, sockets and devices are not recorded by git, but they hide the
  // lower object of their name.
  struct stat lo;
  ACQFS_TRY(StatLower(s, dir, name, &lo, &found));
  if (found) s->out.push_back(Change{Change::kDelete, rel});
  return Ok();
}

Status ScanDir(ScanState* s, const DirScan& dir) {
  auto ents = sys::ReadDir(dir.upper.get(), s->layers.upper.Shown(dir.path));
  if (!ents) return ents.error();
  for (const sys::DirEntry& e : *ents) {
    if (e.name == ".git") continue;  // the sandbox's repository, not content
    ACQFS_TRY(ScanEntry(s, dir, e.name));
  }
  return Ok();
}

// An opaque upper root hides the whole lower: every top-level lower name is
// deleted (the root itself cannot be).
Status DeleteLowerRoot(ScanState* s) {
  auto lfd = s->layers.lower.OpenDir("");
  if (!lfd) return lfd.error();
  auto ents = sys::ReadDir(lfd->get(), s->layers.lower.Shown(""));
  if (!ents) return ents.error();
  for (const sys::DirEntry& e : *ents) {
    if (e.name != ".git") s->out.push_back(Change{Change::kDelete, e.name});
  }
  return Ok();
}

}  // namespace

Result<std::vector<Change>> ScanUpper(const Layers& layers, ScanStats* stats,
                                      const ProgressFn& progress) {
  ScanState s{layers, {}, {}, progress};
  auto root = RootView(layers);
  if (!root) return root.error();
  DirScan top;
  top.xwhiteouts = root->xwhiteouts;
  auto ufd = layers.upper.OpenDir("");
  if (!ufd) return ufd.error();
  top.upper = std::move(*ufd);
  if (root->merged) {
    auto lfd = layers.lower.OpenDir("");
    if (!lfd) return lfd.error();
    top.lower = std::move(*lfd);
  } else {
    ACQFS_TRY(DeleteLowerRoot(&s));
  }
  ACQFS_TRY(ScanDir(&s, top));
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
