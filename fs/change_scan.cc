// ChangeScan (see change_scan.h): one depth-first walk of the upper layer,
// iterative (an explicit stack of frames, so a tree 100,000 directories deep
// needs no C++ stack in proportion), on a LayerStack (fs/layer_walk.h): the
// current directory is held open in the upper layer and, where it has one,
// in the lower at the same path, so every lookup below it is a single
// fstatat/openat2 relative to one of them and never follows a symlink. The
// stack keeps at most 2 x LayerStack::kOpenPerLayer descriptors open
// however deep the walk goes (closed ancestors are reopened through ".."
// on the way back up); a lower tree the upper deletes is listed with
// WalkTree (common/dir_walk.h), which holds at most 8 more.
// The walk keeps one path string, the current entry's, extended and cut
// back as it goes: an entry costs O(length of its name) unless it is
// reported. The sys helpers are called with an empty `shown`; Named() gives
// a failure the absolute path of the entry, so the walk builds such paths
// only for errors.
#include "fs/change_scan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "common/dir_walk.h"
#include "common/sys.h"
#include "fs/layer_walk.h"

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

// Appends the component `name` to the relative path `*path`.
void AppendName(std::string* path, const std::string& name) {
  if (!path->empty()) path->push_back('/');
  path->append(name);
}

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
  // One directory on the walk's path (the stack's current one is the last):
  // its upper listing, how far the walk got in it, and its view.
  struct Frame {
    std::vector<sys::DirEntry> entries;
    size_t next = 0;
    std::unordered_set<std::string> present;  // upper names the view shows
    size_t path_len = 0;      // path_'s length while in this directory
    bool merged = false;      // the lower directory at this path shows
                              // through (no opaque mark here or above)
    bool xwhiteouts = false;  // may hold xattr whiteouts (opaque mark "x")
  };
  // What the entry just scanned asks of the walk: to be entered, with the
  // lower directory of its name or without.
  struct Descent {
    bool into = false;
    bool lower_is_dir = false;
  };

  // The walk of the upper layer. While an entry is scanned, path_ is its
  // path; upper()/lower() are its directory's descriptors.
  Status Walk(bool merged, bool xwhiteouts);
  Status OpenFrame(bool merged, bool xwhiteouts);
  Status FinishFrame();
  Status Descend(const std::string& name, bool lower_is_dir);
  Status ScanEntry(const std::string& name, bool* present, Descent* into);
  Status Compare(const std::string& name, const struct stat& up,
                 const struct stat& lo, Descent* into);
  Result<bool> IsWhiteout(const std::string& name, const struct stat& st);
  // Lower objects the merged view no longer shows.
  Status ListHidden(const Frame& f);
  Status ReportDeleted(int lower_parent, const std::string& name,
                       const struct stat& lo);
  Status DeleteLowerTree(int lower_parent, const std::string& name);
  // Comparing one object of each layer (`name` in the current directory,
  // path_ its path).
  Result<bool> SameContent(const std::string& name, const struct stat& up,
                           const struct stat& lo);
  Result<bool> SameBytes(const std::string& name);
  Result<unsigned> MetadataDiff(const std::string& name, const struct stat& up,
                                const struct stat& lo);
  Result<bool> SameXattrs(const std::string& name);
  // The filter, .git and progress.
  bool Selected(const std::string& rel) const;
  bool Relevant(const std::string& rel) const;
  bool Skipped(const std::string& name) const;
  void Add(PathChange c);
  void CountVisit();

  int upper() const { return stack_.upper(); }
  int lower() const { return stack_.lower(); }

  const Layers& layers_;
  const ChangeScanOptions& options_;
  std::vector<std::string> filters_;  // empty: everything
  std::vector<PathChange> out_;
  uint64_t visited_ = 0;
  std::vector<char> upper_buf_, lower_buf_;  // kChunk each, when needed
  LayerStack stack_;
  std::vector<Frame> frames_;  // one per directory on the path, root first
  std::string path_;           // the current entry's (or directory's) path
};

Scanner::Scanner(const Layers& layers, const ChangeScanOptions& options)
    : layers_(layers), options_(options), stack_(layers) {
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
  // At depth 0 the stack's descriptors are the layer roots: the lower root
  // is compared with even when the upper root is opaque.
  ACQFS_TRY(Walk(root->merged, root->xwhiteouts));
  // Byte order puts "a" before "a-b" and "a/b": a directory's own entry
  // comes before everything below it. Paths are unique.
  std::sort(
      out_.begin(), out_.end(),
      [](const PathChange& a, const PathChange& b) { return a.path < b.path; });
  if (options_.progress) options_.progress(visited_);
  return std::move(out_);
}

Status Scanner::Walk(bool merged, bool xwhiteouts) {
  ACQFS_TRY(OpenFrame(merged, xwhiteouts));
  while (!frames_.empty()) {
    Frame& f = frames_.back();
    if (f.next == f.entries.size()) {
      ACQFS_TRY(FinishFrame());
      continue;
    }
    const std::string name = std::move(f.entries[f.next++].name);
    if (Skipped(name)) continue;
    AppendName(&path_, name);
    bool shown = false;
    Descent d;
    ACQFS_TRY(ScanEntry(name, &shown, &d));
    if (shown) f.present.insert(name);
    if (d.into) {
      ACQFS_TRY(Descend(name, d.lower_is_dir));  // `f` is stale from here
      continue;
    }
    path_.resize(f.path_len);
  }
  return Ok();
}

// Lists the stack's current directory (path_) into a new frame.
Status Scanner::OpenFrame(bool merged, bool xwhiteouts) {
  Frame f;
  f.merged = merged;
  f.xwhiteouts = xwhiteouts;
  f.path_len = path_.size();
  auto ents = sys::ReadDir(upper(), kNoName);
  if (!ents) return Named(ents.error(), layers_.upper, path_);
  f.entries = std::move(*ents);
  frames_.push_back(std::move(f));
  return Ok();
}

// Everything in the current directory was scanned: in an opaque one the
// lower names are gone (in a merged one the lower names without an upper
// entry show through); then back to the parent.
Status Scanner::FinishFrame() {
  if (lower() >= 0 && !frames_.back().merged)
    ACQFS_TRY(ListHidden(frames_.back()));
  frames_.pop_back();
  if (frames_.empty()) return Ok();
  ACQFS_TRY(stack_.Pop());
  path_.resize(frames_.back().path_len);
  return Ok();
}

// Enters the upper directory `name` of the current one (path_ is its path),
// with the lower directory of the same name when `lower_is_dir`.
Status Scanner::Descend(const std::string& name, bool lower_is_dir) {
  auto mark = layers_.format.ReadOpaque(upper(), name, kNoName);
  if (!mark) return Named(mark.error(), layers_.upper, path_);
  // Below an opaque directory every upper directory is opaque too.
  const bool merged =
      frames_.back().merged && lower_is_dir && *mark != OpaqueMark::kOpaque;
  ACQFS_TRY(stack_.Push(name, true, lower_is_dir));
  return OpenFrame(merged, *mark == OpaqueMark::kMayHoldXattrWhiteouts);
}

Status Scanner::ScanEntry(const std::string& name, bool* present,
                          Descent* into) {
  const std::string& rel = path_;
  if (!Relevant(rel)) return Ok();
  struct stat up;
  bool found = false;
  Status s = sys::StatAtIfExists(upper(), name, &up, &found, kNoName);
  if (!s) return Named(s.error(), layers_.upper, rel);
  if (!found) return Ok();  // removed while we scan
  CountVisit();
  auto whiteout = IsWhiteout(name, up);
  if (!whiteout) return whiteout.error();
  struct stat lo;
  bool in_lower = false;
  if (lower() >= 0 && (frames_.back().merged || !*whiteout)) {
    s = sys::StatAtIfExists(lower(), name, &lo, &in_lower, kNoName);
    if (!s) return Named(s.error(), layers_.lower, rel);
  }
  if (*whiteout) {
    // A whiteout of a name the lower lacks changes nothing; in an opaque
    // directory ListHidden reports the lower name with the others.
    if (in_lower) return ReportDeleted(lower(), name, lo);
    return Ok();
  }
  *present = true;
  if (in_lower) return Compare(name, up, lo, into);
  Add(MakeChange(PathChange::kAdded, rel, nullptr, &up));
  if (S_ISDIR(up.st_mode)) *into = Descent{true, false};
  return Ok();
}

// Both layers hold `name`: compares type, content and metadata. Opaque or
// not, the merged object is compared with the lower object at its path.
Status Scanner::Compare(const std::string& name, const struct stat& up,
                        const struct stat& lo, Descent* into) {
  const std::string& rel = path_;
  bool is_dir = S_ISDIR(up.st_mode);
  if ((up.st_mode & S_IFMT) != (lo.st_mode & S_IFMT)) {
    Add(MakeChange(PathChange::kTypeChanged, rel, &lo, &up));
    if (S_ISDIR(lo.st_mode)) ACQFS_TRY(DeleteLowerTree(lower(), name));
    if (is_dir) *into = Descent{true, false};
    return Ok();
  }
  // Only a directory on the way to a filtered path: nothing to compare.
  if (Selected(rel)) {
    auto same = SameContent(name, up, lo);
    if (!same) return same.error();
    auto meta = MetadataDiff(name, up, lo);
    if (!meta) return meta.error();
    PathChange c = MakeChange(PathChange::kModified, rel, &lo, &up);
    c.meta = *meta;
    if (!*same || c.meta != 0) {
      if (*same) c.kind = PathChange::kMetadata;
      Add(std::move(c));
    }
  }
  if (is_dir) *into = Descent{true, true};
  return Ok();
}

// A whiteout in either form: a 0/0 character device, or (in a directory
// marked "x") a zero-size regular file carrying the whiteout xattr.
Result<bool> Scanner::IsWhiteout(const std::string& name,
                                 const struct stat& st) {
  if (LayerFormat::IsWhiteout(st)) return true;
  if (!frames_.back().xwhiteouts || !S_ISREG(st.st_mode) || st.st_size != 0)
    return false;
  auto xw = layers_.format.IsXattrWhiteout(upper(), name, kNoName);
  if (!xw) return Named(xw.error(), layers_.upper, path_);
  return *xw;
}

// Every lower name of the opaque current directory that the upper does not
// show.
Status Scanner::ListHidden(const Frame& f) {
  auto ents = sys::ReadDir(lower(), kNoName);
  if (!ents) return Named(ents.error(), layers_.lower, path_);
  for (const sys::DirEntry& e : *ents) {
    if (Skipped(e.name) || f.present.count(e.name)) continue;
    AppendName(&path_, e.name);
    Status s = Ok();
    if (Relevant(path_)) {
      struct stat lo;
      bool found = false;
      s = sys::StatAtIfExists(lower(), e.name, &lo, &found, kNoName);
      if (!s)
        s = Named(s.error(), layers_.lower, path_);
      else if (found)
        s = ReportDeleted(lower(), e.name, lo);
    }
    path_.resize(f.path_len);
    ACQFS_TRY(s);
  }
  return Ok();
}

// The lower object `name` of the lower directory `lower_parent` (path_ its
// path) is gone, and with it everything below it.
Status Scanner::ReportDeleted(int lower_parent, const std::string& name,
                              const struct stat& lo) {
  Add(MakeChange(PathChange::kDeleted, path_, &lo, nullptr));
  if (!S_ISDIR(lo.st_mode)) return Ok();
  return DeleteLowerTree(lower_parent, name);
}

// Reports everything below the lower directory `name` of `lower_parent`
// (path_ its path) as deleted: a WalkTree from that directory, iterative and
// holding at most 8 descriptors of its own, whose shown paths are the
// entries' relative paths.
Status Scanner::DeleteLowerTree(int lower_parent, const std::string& name) {
  TreeVisitor visit;
  visit.entry = [&](int dirfd, const sys::DirEntry& e,
                    const std::string& dir) -> Result<bool> {
    const std::string rel = dir + "/" + e.name;  // reported, or filtered
    if (!Relevant(rel)) return false;
    struct stat lo;
    bool found = false;
    Status s = sys::StatAtIfExists(dirfd, e.name, &lo, &found, kNoName);
    if (!s) {
      Error err = s.error();
      err.path = rel;
      return err;
    }
    if (!found) return false;
    Add(MakeChange(PathChange::kDeleted, rel, &lo, nullptr));
    return S_ISDIR(lo.st_mode);
  };
  auto fd =
      sys::OpenBeneath(lower_parent, name, O_PATH | O_DIRECTORY, 0, kNoName);
  if (!fd) return Named(fd.error(), layers_.lower, path_);
  Status s = WalkTree(fd->get(), "", path_, visit);
  if (!s) return Named(s.error(), layers_.lower, s.error().path);
  return Ok();
}

// Same type on both sides: the bytes of a regular file, the target of a
// symlink, the device number of a device.
Result<bool> Scanner::SameContent(const std::string& name,
                                  const struct stat& up,
                                  const struct stat& lo) {
  if (S_ISREG(up.st_mode)) {
    if (up.st_size != lo.st_size) return false;
    if (up.st_size == 0) return true;
    return SameBytes(name);
  }
  if (S_ISLNK(up.st_mode)) {
    if (up.st_size != lo.st_size) return false;
    auto a = sys::ReadLinkAt(upper(), name, kNoName);
    if (!a) return Named(a.error(), layers_.upper, path_);
    auto b = sys::ReadLinkAt(lower(), name, kNoName);
    if (!b) return Named(b.error(), layers_.lower, path_);
    return *a == *b;
  }
  if (S_ISCHR(up.st_mode) || S_ISBLK(up.st_mode))
    return up.st_rdev == lo.st_rdev;
  return true;  // directories, fifos and sockets hold no content
}

// Compares two regular files of equal size chunk by chunk, stopping at the
// first difference.
Result<bool> Scanner::SameBytes(const std::string& name) {
  const std::string& rel = path_;
  const int flags = O_RDONLY | O_NOFOLLOW;
  auto ufd = sys::OpenBeneath(upper(), name, flags, 0, kNoName);
  if (!ufd) return Named(ufd.error(), layers_.upper, rel);
  // Reading the host's files leaves their atimes alone where we may.
  auto lfd = sys::OpenBeneath(lower(), name, flags | O_NOATIME, 0, kNoName);
  if (!lfd && lfd.err() == EPERM)
    lfd = sys::OpenBeneath(lower(), name, flags, 0, kNoName);
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

Result<unsigned> Scanner::MetadataDiff(const std::string& name,
                                       const struct stat& up,
                                       const struct stat& lo) {
  unsigned meta = 0;
  if ((up.st_mode & 07777) != (lo.st_mode & 07777)) meta |= PathChange::kMode;
  if (up.st_uid != lo.st_uid || up.st_gid != lo.st_gid)
    meta |= PathChange::kOwner;
  auto same = SameXattrs(name);
  if (!same) return same.error();
  if (!*same) meta |= PathChange::kXattrs;
  return meta;
}

// The two objects carry the same extended attributes with the same values,
// the overlay markers left out.
Result<bool> Scanner::SameXattrs(const std::string& name) {
  const std::string& rel = path_;
  std::string upath = sys::XattrPath(upper(), name);
  std::string lpath = sys::XattrPath(lower(), name);
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

// The top-level .git, unless asked for.
bool Scanner::Skipped(const std::string& name) const {
  return stack_.depth() == 0 && name == ".git" && !options_.include_git_dir;
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
