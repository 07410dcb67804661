// DeltaScan: what a sandbox changed that git records, read from its own
// layers (the frozen layers and the upper, merged as one: fs/upper_walk.h)
// against the host, so the cost grows with the change and not with the
// checkout: export's reading of the upper walk (fs/upper_walk.h) and of the
// object comparison (fs/same_object.h). What "changed" means for export
// (content, exec bit, link targets; not owner, xattrs or other mode bits)
// and why `.git` is left out at any depth: docs/changes.md. Reported:
//   kDelete  a lower object the merged view lost (one for a whole
//            directory);
//   kUpsert  a regular file or symlink git would record differently from
//            the lower object at the same path;
//   kUnsafe  a regular file, symlink or directory whose name git refuses
//            in a tree (git_names.h: UnsafeTreeEntry; ".GIT", "git~1", a
//            symlinked ".gitmodules.", ...), with the reason; the scan does
//            not look below such a directory. The other kinds never name a
//            path below a kUnsafe one.
// Directories themselves, fifos, sockets and devices are never upserted.
// Which entries and paths are left out (.git, fifos and the like, refused
// names, the policy's hidden and read-only paths) is the publish rule's
// answer (publish_rule.h: EntryVerdict, PolicyVerdict).
// Thread-safety: reentrant.
#ifndef ACQFS_GITBRIDGE_DELTA_SCAN_H_
#define ACQFS_GITBRIDGE_DELTA_SCAN_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/progress_fn.h"
#include "fs/layer.h"

namespace acqfs::gitbridge {

struct Change {
  enum Kind { kDelete, kUpsert, kUnsafe };
  Kind kind;
  std::string path;  // relative, '/'-separated
  // kUpsert, kUnsafe: the upper object's st_mode; kDelete: the st_mode of
  // the lower object that is gone.
  mode_t mode = 0;
  uint64_t size = 0;     // kUpsert: its size
  std::string reason{};  // kUnsafe: why git refuses the name
  // kUpsert, kUnsafe: the own layer holding the object (a Layers::At
  // number: a frozen layer or the upper), where its blob is read.
  unsigned layer = 0;
};

struct ScanStats {
  uint64_t upper_entries = 0;     // entries visited in the own layers
  uint64_t unchanged_copies = 0;  // copy-ups found equal to the lower
};

// Changes in path order, each directory's kDelete before its content.
// `progress` hears "scanning the upper layer" with the entries visited, every
// 1,000 entries.
Result<std::vector<Change>> ScanUpper(const Layers& layers,
                                      ScanStats* stats = nullptr,
                                      const ProgressFn& progress = {});

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_DELTA_SCAN_H_
