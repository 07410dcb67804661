// ChangeScan (see change_scan.h): status's reading of the one upper walk
// (fs/upper_walk.h) and the one comparison (fs/same_object.h). Everything
// about layers, whiteouts, opaque directories, descriptors and depth is the
// walk's; this file turns what it visits into PathChanges, applies the path
// filter and the policy, and sorts.
#include "fs/change_scan.h"

#include <sys/stat.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "common/sys.h"
#include "fs/same_object.h"
#include "fs/upper_walk.h"

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

// Is `path` equal to `base` or below it?
bool AtOrBelow(std::string_view path, std::string_view base) {
  if (path.size() < base.size() || path.compare(0, base.size(), base) != 0)
    return false;
  return path.size() == base.size() || path[base.size()] == '/';
}

PathChange MakeChange(PathChange::Kind kind, const UpperEntry& e,
                      const struct stat* lower, const struct stat* upper) {
  const std::string& rel = e.path;
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
    c.layer = e.layer;
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
  Result<Below> Visit(const UpperEntry& e);
  Result<Below> VisitBoth(const UpperEntry& e);
  bool Selected(const std::string& rel) const;
  bool Relevant(const std::string& rel) const;
  void Add(PathChange c);

  const Layers& layers_;
  const ChangeScanOptions& options_;
  std::vector<std::string> filters_;  // empty: everything
  std::vector<PathChange> out_;
  ObjectComparer compare_;
};

Scanner::Scanner(const Layers& layers, const ChangeScanOptions& options)
    : layers_(layers), options_(options), compare_(layers) {
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
  UpperWalkOptions walk;
  // Git's own data, wherever it lives, unless asked for (docs/changes.md);
  // walked still (and not reported) when every upper entry is measured.
  walk.git_dirs = options_.include_git_dir || options_.each_upper
                      ? GitDirs::kVisit
                      : GitDirs::kSkip;
  if (options_.each_upper) {
    if (!filters_.empty())
      return Error::Of(EINVAL, "scan changes (each_upper with a path filter)",
                       layers_.upper.root_path());
    auto root = sys::Fstat(layers_.upper.root(), layers_.upper.root_path());
    if (!root) return root.error();
    options_.each_upper(*root);
  }
  if (!filters_.empty())
    walk.wanted = [this](const std::string& rel) { return Relevant(rel); };
  walk.progress = options_.progress;
  auto visited = WalkUpper(layers_, walk,
                           [this](const UpperEntry& e) { return Visit(e); });
  if (!visited) return visited.error();
  // Byte order puts "a" before "a-b" and "a/b": a directory's own entry
  // comes before everything below it. Paths are unique.
  std::sort(
      out_.begin(), out_.end(),
      [](const PathChange& a, const PathChange& b) { return a.path < b.path; });
  if (options_.progress) options_.progress(*visited);
  return std::move(out_);
}

// One entry of the walk: added, deleted, or compared with the lower object
// at its path. A deleted lower directory is entered, so that everything
// below it is reported too.
Result<Below> Scanner::Visit(const UpperEntry& e) {
  if (options_.each_upper && e.kind != UpperEntry::kLowerOnly &&
      e.layer == layers_.upper_number())
    options_.each_upper(e.upper);
  if (e.in_git && !options_.include_git_dir) {
    // Only measured: the own directories are walked, nothing reported.
    const bool upper_dir =
        e.kind == UpperEntry::kUpper && S_ISDIR(e.upper.st_mode);
    return upper_dir ? Below::kEnter : Below::kSkip;
  }
  switch (e.kind) {
    case UpperEntry::kWhiteout:
    case UpperEntry::kLowerOnly:
      // A whiteout of a name the lower lacks changes nothing.
      if (!e.in_lower) return Below::kSkip;
      Add(MakeChange(PathChange::kDeleted, e, &e.lower, nullptr));
      return Below::kEnter;
    case UpperEntry::kUpper:
      if (e.in_lower) return VisitBoth(e);
      Add(MakeChange(PathChange::kAdded, e, nullptr, &e.upper));
      return Below::kEnter;
  }
  return Below::kSkip;
}

// Both layers hold the path: type, then content, then metadata.
Result<Below> Scanner::VisitBoth(const UpperEntry& e) {
  // Only a directory on the way to a filtered path: nothing to compare.
  if (!Selected(e.path)) return Below::kEnter;
  auto d = compare_.Compare(e, ObjectComparer::kAll);
  if (!d) return d.error();
  if (d->vanished) return Below::kSkip;
  if (d->type) {
    Add(MakeChange(PathChange::kTypeChanged, e, &e.lower, &e.upper));
    return Below::kEnter;
  }
  PathChange c = MakeChange(PathChange::kModified, e, &e.lower, &e.upper);
  if (d->perm) c.meta |= PathChange::kMode;
  if (d->owner) c.meta |= PathChange::kOwner;
  if (d->xattrs) c.meta |= PathChange::kXattrs;
  if (d->content || c.meta != 0) {
    if (!d->content) c.kind = PathChange::kMetadata;
    Add(std::move(c));
  }
  return Below::kEnter;
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

}  // namespace

Result<std::vector<PathChange>> ScanChanges(const Layers& layers,
                                            const ChangeScanOptions& options) {
  Scanner scanner(layers, options);
  return scanner.Run();
}

}  // namespace acqfs
