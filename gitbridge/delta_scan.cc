// DeltaScan (see delta_scan.h): export's reading of the one upper walk
// (fs/upper_walk.h) and the one comparison (fs/same_object.h). The walk owns
// the layers, whiteouts, opaque directories, .git, descriptors and depth;
// this file keeps what git records, refuses the names git refuses, applies
// the policy and sorts.
#include "gitbridge/delta_scan.h"

#include <sys/stat.h>

#include <algorithm>

#include "fs/same_object.h"
#include "fs/upper_walk.h"
#include "gitbridge/git_names.h"

namespace acqfs::gitbridge {
namespace {

// The mode git records for an object of `st_mode`.
uint32_t GitMode(mode_t st_mode) {
  if (S_ISDIR(st_mode)) return kModeTree;
  if (S_ISLNK(st_mode)) return kModeLink;
  return (st_mode & S_IXUSR) ? kModeExecutable : kModeBlob;
}

struct ScanState {
  const Layers& layers;
  ScanStats stats;
  std::vector<Change> out;
  ObjectComparer compare;
};

// Git records regular files (bytes and the executable bit) and symlinks
// (targets): is the upper object `e` one git would record differently from
// the host object at its path?
Result<bool> RecordedChange(ScanState* s, const UpperEntry& e) {
  if (!e.in_lower) return true;
  auto d = s->compare.Compare(e, ObjectComparer::kContent);
  if (!d) return d.error();
  if (d->vanished) return false;
  return d->type || d->content || d->exec;
}

Result<Below> Visit(ScanState* s, const UpperEntry& e) {
  if (e.kind != UpperEntry::kUpper) {
    // The lower object is gone, with everything below it: one delete.
    if (e.in_lower) s->out.push_back(Change{Change::kDelete, e.path});
    return Below::kSkip;
  }
  const mode_t mode = e.upper.st_mode;
  const bool recorded = S_ISDIR(mode) || S_ISREG(mode) || S_ISLNK(mode);
  if (recorded) {
    // A name git refuses is never published, so nothing below it is read.
    std::string why = UnsafeTreeEntry(e.name, GitMode(mode));
    if (!why.empty()) {
      s->out.push_back(Change{Change::kUnsafe, e.path, mode, 0, why, e.layer});
      return Below::kSkip;
    }
  }
  if (S_ISDIR(mode)) {
    // A directory replaces a lower non-directory; git records no
    // directories of their own.
    if (e.in_lower && !S_ISDIR(e.lower.st_mode))
      s->out.push_back(Change{Change::kDelete, e.path});
    return Below::kEnter;
  }
  if (!recorded) {
    // Fifos, sockets and devices are not recorded by git, but they hide the
    // lower object of their name.
    if (e.in_lower) s->out.push_back(Change{Change::kDelete, e.path});
    return Below::kSkip;
  }
  auto changed = RecordedChange(s, e);
  if (!changed) return changed.error();
  if (*changed)
    s->out.push_back(Change{Change::kUpsert, e.path, mode,
                            static_cast<uint64_t>(e.upper.st_size), "",
                            e.layer});
  else
    ++s->stats.unchanged_copies;
  return Below::kSkip;
}

}  // namespace

Result<std::vector<Change>> ScanUpper(const Layers& layers, ScanStats* stats,
                                      const ProgressFn& progress) {
  ScanState s{layers, {}, {}, ObjectComparer(layers)};
  UpperWalkOptions walk;
  walk.git_dirs = GitDirs::kSkip;  // git never records an entry named .git
  walk.progress = [&progress](uint64_t n) {
    Report(progress, "scanning the upper layer", n);
  };
  auto visited = WalkUpper(layers, walk,
                           [&s](const UpperEntry& e) { return Visit(&s, e); });
  if (!visited) return visited.error();
  s.stats.upper_entries = *visited;
  // Path order: a directory's own kDelete ("a") sorts before its content
  // ("a/..."), since a prefix sorts first. Paths are unique.
  std::sort(s.out.begin(), s.out.end(),
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
