// ChangeScan (see change_scan.h): one recursive walk of the upper layer. Each
// directory is held as a pair of O_PATH descriptors, the upper directory and
// the lower directory at the same path, so every lookup below it is a single
// fstatat/openat2 relative to one of them and never follows a symlink.
// The sys helpers are called with an empty `shown`; Named() gives a failure
// the absolute path of the entry, so the walk builds such paths only for
// errors.
#include "fs/change_scan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "common/sys.h"

namespace acqfs {

char ChangeCode(PathChange::Kind kind) {
  switch (kind) {
    case PathChange::kAdded:
      return 'A';
    case PathChange::kModified:
      return 'M';
    case PathChange::kDeleted:
      return 'D';
    case PathChange::kTypeChanged:
      return 'T';
    case PathChange::kMetadata:
      return 'm';
  }
  return '?';
}

const char* ChangeKindName(PathChange::Kind kind) {
  switch (kind) {
    case PathChange::kAdded:
      return "added";
    case PathChange::kModified:
      return "modified";
    case PathChange::kDeleted:
      return "deleted";
    case PathChange::kTypeChanged:
      return "type-changed";
    case PathChange::kMetadata:
      return "metadata";
  }
  return "?";
}

namespace {

constexpr size_t kChunk = 256 * 1024;      // bytes compared per read
constexpr uint64_t kProgressEvery = 1000;  // upper entries between reports
const std::string kNoName;                 // `shown` for the sys helpers

// An error of a sys helper called with kNoName, naming `rel` in `layer`.
Error Named(Error e, const Layer& layer, const std::string& rel) {
  e.path = layer.Shown(rel);
  return e;
}

// Is `path` equal to `base` or below it?
bool AtOrBelow(std::string_view path, std::string_view base) {
  if (path.size() < base.size() || path.compare(0, base.size(), base) != 0)
    return false;
  return path.size() == base.size() || path[base.size()] == '/';
}

// "trusted.overlay.*" and "user.overlay.*": the format's own markers, in
// either namespace, never part of what a user changed.
bool IsOverlayXattr(std::string_view name) {
  return name.starts_with("trusted.overlay.") ||
         name.starts_with("user.overlay.");
}

// Reads up to `n` bytes, fewer only at the end of the file.
Result<size_t> ReadFull(int fd, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("read", "");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

// One directory of the walk.
struct Dir {
  std::string path;         // relative, "" = the root
  int upper = -1;           // O_PATH fd of the upper directory (borrowed)
  int lower = -1;           // O_PATH fd of the lower directory at `path`, or
                            // -1 when the lower has no directory there
  bool merged = false;      // that lower directory shows through (no opaque
                            // mark here or on an ancestor)
  bool xwhiteouts = false;  // may hold xattr whiteouts (opaque mark "x")
};

PathChange MakeChange(PathChange::Kind kind, const std::string& rel,
                      const struct stat* lower, const struct stat* upper) {
  PathChange c;
  c.kind = kind;
  c.path = rel;
  if (lower) {
    c.old_mode = lower->st_mode;
    c.old_size = static_cast<uint64_t>(lower->st_size);
  }
  if (upper) {
    c.new_mode = upper->st_mode;
    c.new_size = static_cast<uint64_t>(upper->st_size);
  }
  return c;
}

class Scanner {
 public:
  Scanner(const Layers& layers, const ChangeScanOptions& options);
  Scanner(const Scanner&) = delete;
  Scanner& operator=(const Scanner&) = delete;

  Result<std::vector<PathChange>> Run();

 private:
  // The walk of the upper layer.
  Status ScanDir(const Dir& dir);
  Status ScanEntry(const Dir& dir, const std::string& name, bool* present);
  Status Compare(const Dir& dir, const std::string& name,
                 const std::string& rel, const struct stat& up,
                 const struct stat& lo);
  Status Descend(const Dir& dir, const std::string& name,
                 const std::string& rel, bool lower_is_dir);
  Result<bool> IsWhiteout(const Dir& dir, const std::string& name,
                          const struct stat& st);
  // Lower objects the merged view no longer shows.
  Status ListHidden(const Dir& dir,
                    const std::unordered_set<std::string>& present);
  Status ReportDeleted(int lower_parent, const std::string& name,
                       const std::string& rel, const struct stat& lo);
  Status DeleteLowerTree(int lower_parent, const std::string& name,
                         const std::string& rel);
  // Comparing one object of each layer.
  Result<bool> SameContent(const Dir& dir, const std::string& name,
                           const std::string& rel, const struct stat& up,
                           const struct stat& lo);
  Result<bool> SameBytes(const Dir& dir, const std::string& name,
                         const std::string& rel);
  Result<unsigned> MetadataDiff(const Dir& dir, const std::string& name,
                                const std::string& rel, const struct stat& up,
                                const struct stat& lo);
  Result<bool> SameXattrs(const Dir& dir, const std::string& name,
                          const std::string& rel);
  // The filter, .git and progress.
  bool Selected(const std::string& rel) const;
  bool Relevant(const std::string& rel) const;
  bool Skipped(const std::string& dir_path, const std::string& name) const;
  void Add(PathChange c);
  void CountVisit();

  const Layers& layers_;
  const ChangeScanOptions& options_;
  std::vector<std::string> filters_;  // empty: everything
  std::vector<PathChange> out_;
  uint64_t visited_ = 0;
  std::vector<char> upper_buf_, lower_buf_;  // kChunk each, when needed
};

Scanner::Scanner(const Layers& layers, const ChangeScanOptions& options)
    : layers_(layers), options_(options) {
  for (std::string p : options.paths) {
    while (p.starts_with("./")) p.erase(0, 2);
    while (!p.empty() && p.back() == '/') p.pop_back();
    if (p.empty() || p == ".") {  // the whole tree
      filters_.clear();
      return;
    }
    filters_.push_back(std::move(p));
  }
}

Result<std::vector<PathChange>> Scanner::Run() {
  auto root = RootView(layers_);
  if (!root) return root.error();
  auto ufd = layers_.upper.OpenDir("");
  if (!ufd) return ufd.error();
  auto lfd = layers_.lower.OpenDir("");
  if (!lfd) return lfd.error();
  Dir top;
  top.upper = ufd->get();
  top.lower = lfd->get();
  top.merged = root->merged;
  top.xwhiteouts = root->xwhiteouts;
  ACQFS_TRY(ScanDir(top));
  // Byte order puts "a" before "a-b" and "a/b": a directory's own entry
  // comes before everything below it. Paths are unique.
  std::sort(
      out_.begin(), out_.end(),
      [](const PathChange& a, const PathChange& b) { return a.path < b.path; });
  if (options_.progress) options_.progress(visited_);
  return std::move(out_);
}

Status Scanner::ScanDir(const Dir& dir) {
  auto ents = sys::ReadDir(dir.upper, kNoName);
  if (!ents) return Named(ents.error(), layers_.upper, dir.path);
  std::unordered_set<std::string> present;  // upper names the view shows
  for (const sys::DirEntry& e : *ents) {
    if (Skipped(dir.path, e.name)) continue;
    bool shown = false;
    ACQFS_TRY(ScanEntry(dir, e.name, &shown));
    if (shown) present.insert(e.name);
  }
  // In a merged directory the lower names without an upper entry show
  // through; in an opaque one they are gone.
  if (dir.lower >= 0 && !dir.merged) return ListHidden(dir, present);
  return Ok();
}

Status Scanner::ScanEntry(const Dir& dir, const std::string& name,
                          bool* present) {
  std::string rel = sys::Join(dir.path, name);
  if (!Relevant(rel)) return Ok();
  struct stat up;
  bool found = false;
  Status s = sys::StatAtIfExists(dir.upper, name, &up, &found, kNoName);
  if (!s) return Named(s.error(), layers_.upper, rel);
  if (!found) return Ok();  // removed while we scan
  CountVisit();
  auto whiteout = IsWhiteout(dir, name, up);
  if (!whiteout) return whiteout.error();
  struct stat lo;
  bool in_lower = false;
  if (dir.lower >= 0 && (dir.merged || !*whiteout)) {
    s = sys::StatAtIfExists(dir.lower, name, &lo, &in_lower, kNoName);
    if (!s) return Named(s.error(), layers_.lower, rel);
  }
  if (*whiteout) {
    // A whiteout of a name the lower lacks changes nothing; in an opaque
    // directory ListHidden reports the lower name with the others.
    if (in_lower) return ReportDeleted(dir.lower, name, rel, lo);
    return Ok();
  }
  *present = true;
  if (in_lower) return Compare(dir, name, rel, up, lo);
  Add(MakeChange(PathChange::kAdded, rel, nullptr, &up));
  if (S_ISDIR(up.st_mode)) return Descend(dir, name, rel, false);
  return Ok();
}

// Both layers hold `name`: compares type, content and metadata. Opaque or
// not, the merged object is compared with the lower object at its path.
Status Scanner::Compare(const Dir& dir, const std::string& name,
                        const std::string& rel, const struct stat& up,
                        const struct stat& lo) {
  bool is_dir = S_ISDIR(up.st_mode);
  if ((up.st_mode & S_IFMT) != (lo.st_mode & S_IFMT)) {
    Add(MakeChange(PathChange::kTypeChanged, rel, &lo, &up));
    if (S_ISDIR(lo.st_mode)) ACQFS_TRY(DeleteLowerTree(dir.lower, name, rel));
    return is_dir ? Descend(dir, name, rel, false) : Ok();
  }
  // Only a directory on the way to a filtered path: nothing to compare.
  if (Selected(rel)) {
    auto same = SameContent(dir, name, rel, up, lo);
    if (!same) return same.error();
    auto meta = MetadataDiff(dir, name, rel, up, lo);
    if (!meta) return meta.error();
    PathChange c = MakeChange(PathChange::kModified, rel, &lo, &up);
    c.meta = *meta;
    if (!*same || c.meta != 0) {
      if (*same) c.kind = PathChange::kMetadata;
      Add(std::move(c));
    }
  }
  return is_dir ? Descend(dir, name, rel, true) : Ok();
}

// Scans the upper directory `name` of `dir`, with the lower directory of the
// same name when `lower_is_dir`.
Status Scanner::Descend(const Dir& dir, const std::string& name,
                        const std::string& rel, bool lower_is_dir) {
  auto mark = layers_.format.ReadOpaque(dir.upper, name, kNoName);
  if (!mark) return Named(mark.error(), layers_.upper, rel);
  auto ufd =
      sys::OpenBeneath(dir.upper, name, O_PATH | O_DIRECTORY, 0, kNoName);
  if (!ufd) return Named(ufd.error(), layers_.upper, rel);
  UniqueFd lfd;
  if (lower_is_dir) {
    auto l =
        sys::OpenBeneath(dir.lower, name, O_PATH | O_DIRECTORY, 0, kNoName);
    if (!l) return Named(l.error(), layers_.lower, rel);
    lfd = std::move(*l);
  }
  Dir sub;
  sub.path = rel;
  sub.upper = ufd->get();
  sub.lower = lfd ? lfd.get() : -1;
  // Below an opaque directory every upper directory is opaque too.
  sub.merged = dir.merged && lower_is_dir && *mark != OpaqueMark::kOpaque;
  sub.xwhiteouts = *mark == OpaqueMark::kMayHoldXattrWhiteouts;
  return ScanDir(sub);
}

// A whiteout in either form: a 0/0 character device, or (in a directory
// marked "x") a zero-size regular file carrying the whiteout xattr.
Result<bool> Scanner::IsWhiteout(const Dir& dir, const std::string& name,
                                 const struct stat& st) {
  if (LayerFormat::IsWhiteout(st)) return true;
  if (!dir.xwhiteouts || !S_ISREG(st.st_mode) || st.st_size != 0) return false;
  auto xw = layers_.format.IsXattrWhiteout(dir.upper, name, kNoName);
  if (!xw) return Named(xw.error(), layers_.upper, sys::Join(dir.path, name));
  return *xw;
}

// Every lower name of the opaque `dir` that the upper does not show.
Status Scanner::ListHidden(const Dir& dir,
                           const std::unordered_set<std::string>& present) {
  auto ents = sys::ReadDir(dir.lower, kNoName);
  if (!ents) return Named(ents.error(), layers_.lower, dir.path);
  for (const sys::DirEntry& e : *ents) {
    if (Skipped(dir.path, e.name) || present.count(e.name)) continue;
    std::string rel = sys::Join(dir.path, e.name);
    if (!Relevant(rel)) continue;
    struct stat lo;
    bool found = false;
    Status s = sys::StatAtIfExists(dir.lower, e.name, &lo, &found, kNoName);
    if (!s) return Named(s.error(), layers_.lower, rel);
    if (found) ACQFS_TRY(ReportDeleted(dir.lower, e.name, rel, lo));
  }
  return Ok();
}

// The lower object `name` of the lower directory `lower_parent` is gone, and
// with it everything below it.
Status Scanner::ReportDeleted(int lower_parent, const std::string& name,
                              const std::string& rel, const struct stat& lo) {
  Add(MakeChange(PathChange::kDeleted, rel, &lo, nullptr));
  if (!S_ISDIR(lo.st_mode)) return Ok();
  return DeleteLowerTree(lower_parent, name, rel);
}

// Reports everything below the lower directory `name` as deleted.
Status Scanner::DeleteLowerTree(int lower_parent, const std::string& name,
                                const std::string& rel) {
  auto fd =
      sys::OpenBeneath(lower_parent, name, O_PATH | O_DIRECTORY, 0, kNoName);
  if (!fd) return Named(fd.error(), layers_.lower, rel);
  auto ents = sys::ReadDir(fd->get(), kNoName);
  if (!ents) return Named(ents.error(), layers_.lower, rel);
  for (const sys::DirEntry& e : *ents) {
    std::string child = sys::Join(rel, e.name);
    if (!Relevant(child)) continue;
    struct stat lo;
    bool found = false;
    Status s = sys::StatAtIfExists(fd->get(), e.name, &lo, &found, kNoName);
    if (!s) return Named(s.error(), layers_.lower, child);
    if (found) ACQFS_TRY(ReportDeleted(fd->get(), e.name, child, lo));
  }
  return Ok();
}

// Same type on both sides: the bytes of a regular file, the target of a
// symlink, the device number of a device.
Result<bool> Scanner::SameContent(const Dir& dir, const std::string& name,
                                  const std::string& rel, const struct stat& up,
                                  const struct stat& lo) {
  if (S_ISREG(up.st_mode)) {
    if (up.st_size != lo.st_size) return false;
    if (up.st_size == 0) return true;
    return SameBytes(dir, name, rel);
  }
  if (S_ISLNK(up.st_mode)) {
    if (up.st_size != lo.st_size) return false;
    auto a = sys::ReadLinkAt(dir.upper, name, kNoName);
    if (!a) return Named(a.error(), layers_.upper, rel);
    auto b = sys::ReadLinkAt(dir.lower, name, kNoName);
    if (!b) return Named(b.error(), layers_.lower, rel);
    return *a == *b;
  }
  if (S_ISCHR(up.st_mode) || S_ISBLK(up.st_mode))
    return up.st_rdev == lo.st_rdev;
  return true;  // directories, fifos and sockets hold no content
}

// Compares two regular files of equal size chunk by chunk, stopping at the
// first difference.
Result<bool> Scanner::SameBytes(const Dir& dir, const std::string& name,
                                const std::string& rel) {
  const int flags = O_RDONLY | O_NOFOLLOW;
  auto ufd = sys::OpenBeneath(dir.upper, name, flags, 0, kNoName);
  if (!ufd) return Named(ufd.error(), layers_.upper, rel);
  // Reading the host's files leaves their atimes alone where we may.
  auto lfd = sys::OpenBeneath(dir.lower, name, flags | O_NOATIME, 0, kNoName);
  if (!lfd && lfd.err() == EPERM)
    lfd = sys::OpenBeneath(dir.lower, name, flags, 0, kNoName);
  if (!lfd) return Named(lfd.error(), layers_.lower, rel);
  if (upper_buf_.empty()) {
    upper_buf_.resize(kChunk);
    lower_buf_.resize(kChunk);
  }
  for (;;) {
    auto a = ReadFull(ufd->get(), upper_buf_.data(), kChunk);
    if (!a) return Named(a.error(), layers_.upper, rel);
    auto b = ReadFull(lfd->get(), lower_buf_.data(), kChunk);
    if (!b) return Named(b.error(), layers_.lower, rel);
    if (*a != *b) return false;  // one changed size while we read
    if (std::memcmp(upper_buf_.data(), lower_buf_.data(), *a) != 0)
      return false;
    if (*a < kChunk) return true;
  }
}

Result<unsigned> Scanner::MetadataDiff(const Dir& dir, const std::string& name,
                                       const std::string& rel,
                                       const struct stat& up,
                                       const struct stat& lo) {
  unsigned meta = 0;
  if ((up.st_mode & 07777) != (lo.st_mode & 07777)) meta |= PathChange::kMode;
  if (up.st_uid != lo.st_uid || up.st_gid != lo.st_gid)
    meta |= PathChange::kOwner;
  auto same = SameXattrs(dir, name, rel);
  if (!same) return same.error();
  if (!*same) meta |= PathChange::kXattrs;
  return meta;
}

// The two objects carry the same extended attributes with the same values,
// the overlay markers left out.
Result<bool> Scanner::SameXattrs(const Dir& dir, const std::string& name,
                                 const std::string& rel) {
  std::string upath = sys::XattrPath(dir.upper, name);
  std::string lpath = sys::XattrPath(dir.lower, name);
  auto un = sys::ListXattrs(upath, kNoName);
  if (!un) return Named(un.error(), layers_.upper, rel);
  auto ln = sys::ListXattrs(lpath, kNoName);
  if (!ln) return Named(ln.error(), layers_.lower, rel);
  std::erase_if(*un, [](const std::string& k) { return IsOverlayXattr(k); });
  std::erase_if(*ln, [](const std::string& k) { return IsOverlayXattr(k); });
  std::sort(un->begin(), un->end());
  std::sort(ln->begin(), ln->end());
  if (*un != *ln) return false;
  for (const std::string& key : *un) {
    auto a = sys::GetXattr(upath, key, kNoName);
    if (!a) return Named(a.error(), layers_.upper, rel);
    auto b = sys::GetXattr(lpath, key, kNoName);
    if (!b) return Named(b.error(), layers_.lower, rel);
    if (*a != *b) return false;
  }
  return true;
}

bool Scanner::Selected(const std::string& rel) const {
  if (filters_.empty()) return true;
  for (const std::string& f : filters_)
    if (AtOrBelow(rel, f)) return true;
  return false;
}

// Selected, or on the way to a selected path.
bool Scanner::Relevant(const std::string& rel) const {
  if (Selected(rel)) return true;
  for (const std::string& f : filters_)
    if (AtOrBelow(f, rel)) return true;
  return false;
}

bool Scanner::Skipped(const std::string& dir_path,
                      const std::string& name) const {
  return dir_path.empty() && name == ".git" && !options_.include_git_dir;
}

void Scanner::Add(PathChange c) {
  // Paths the policy hides are outside the scan: the sandbox cannot see
  // their host content, so neither its status nor its diff may show it
  // (the git bridge leaves them out too).
  if (layers_.policy && layers_.policy->hides_anything() &&
      layers_.policy->HiddenPath(c.path,
                                 S_ISDIR(c.old_mode) || S_ISDIR(c.new_mode)))
    return;
  if (Selected(c.path)) out_.push_back(std::move(c));
}

void Scanner::CountVisit() {
  ++visited_;
  if (options_.progress && visited_ % kProgressEvery == 0)
    options_.progress(visited_);
}

}  // namespace

Result<std::vector<PathChange>> ScanChanges(const Layers& layers,
                                            const ChangeScanOptions& options) {
  Scanner scanner(layers, options);
  return scanner.Run();
}

}  // namespace acqfs
