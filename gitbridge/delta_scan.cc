// DeltaScan (see delta_scan.h): export's reading of the one upper walk
// (fs/upper_walk.h) and the one comparison (fs/same_object.h). The walk owns
// the layers, whiteouts, opaque directories, .git, descriptors and depth;
// this file keeps what git records, asks the publish rule (publish_rule.h)
// which entries and paths are published, and sorts.
#include "gitbridge/delta_scan.h"

#include <sys/stat.h>

#include <algorithm>

#include "fs/same_object.h"
#include "fs/upper_walk.h"
#include "gitbridge/publish_rule.h"

namespace acqfs::gitbridge {
namespace {

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
    if (e.in_lower)
      s->out.push_back(Change{Change::kDelete, e.path, e.lower.st_mode});
    return Below::kSkip;
  }
  const mode_t mode = e.upper.st_mode;
  std::string why;
  switch (EntryVerdict(e.name, mode, &why)) {
    case PublishVerdict::kRefusedName:
      // A name git refuses is never published, so nothing below it is read.
      s->out.push_back(Change{Change::kUnsafe, e.path, mode, 0, why, e.layer});
      return Below::kSkip;
    case PublishVerdict::kSpecialFile:
      // Fifos, sockets and devices are not recorded by git, but they hide
      // the lower object of their name.
      if (e.in_lower)
        s->out.push_back(Change{Change::kDelete, e.path, e.lower.st_mode});
      return Below::kSkip;
    default:
      break;
  }
  if (S_ISDIR(mode)) {
    // A directory replaces a lower non-directory; git records no
    // directories of their own.
    if (e.in_lower && !S_ISDIR(e.lower.st_mode))
      s->out.push_back(Change{Change::kDelete, e.path, e.lower.st_mode});
    return Below::kEnter;
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
  // The bridge never publishes a change at a path the policy hides (the
  // sandbox never saw the host's object there) or makes read-only; a
  // deletion is judged with the type of the host's object it removes.
  const Policy* policy = layers.policy.get();
  if (policy) {
    auto outside = [policy](const Change& c) {
      return PolicyVerdict(policy, c.path, c.mode) !=
             PublishVerdict::kPublished;
    };
    s.out.erase(std::remove_if(s.out.begin(), s.out.end(), outside),
                s.out.end());
  }
  if (stats) *stats = s.stats;
  return std::move(s.out);
}

}  // namespace acqfs::gitbridge
