// ChangeScan: what a sandbox changed relative to its host checkout (lower
// layer 0), path by path: the merged view of its own layers (the frozen
// layers and the upper, fs/upper_walk.h) against the host, read from the
// layers alone (mounted or not, git checkout or not). It
// backs `acqfs status`, `acqfs diff` and the CHANGES column of `acqfs ls`.
// It is status's reading of the upper walk (fs/upper_walk.h) and of the
// object comparison (fs/same_object.h); what each PathChange kind means, how
// it differs from what export records, and which .git paths are left out
// (every `.git`, at any depth, unless `include_git_dir`): docs/changes.md.
// The root directory itself is never reported; a directory is reported only
// for its own change; a deleted directory is reported with every lower
// object below it; renames show as a deletion and an addition.
// Results are sorted by path in byte order, with a directory's own entry
// before the entries below it. Paths are relative, '/'-separated, with no
// leading or trailing slash.
// Thread-safety: reentrant; the layers are only read.
#ifndef ACQFS_FS_CHANGE_SCAN_H_
#define ACQFS_FS_CHANGE_SCAN_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "fs/layer.h"

namespace acqfs {

struct PathChange {
  enum Kind { kAdded, kModified, kDeleted, kTypeChanged, kMetadata };
  // Bits of `meta`.
  static constexpr unsigned kMode = 1, kOwner = 2, kXattrs = 4;

  Kind kind = kModified;
  std::string path;
  unsigned meta = 0;      // kMode | kOwner | kXattrs that differ
  mode_t old_mode = 0;    // lower st_mode (type and bits), 0 when none
  mode_t new_mode = 0;    // merged st_mode, 0 when deleted
  uint64_t old_size = 0;  // lower st_size
  uint64_t new_size = 0;  // merged st_size
  // When new_mode != 0: the own layer holding the merged object (a
  // Layers::At number: a frozen layer or the upper), where a reader of the
  // new side (diff) reads it.
  unsigned layer = 0;
};

// The one-letter code `acqfs status` prints: A, M, D, T, or m (metadata only).
char ChangeCode(PathChange::Kind kind);
// "added", "modified", "deleted", "type-changed", "metadata" (JSON).
const char* ChangeKindName(PathChange::Kind kind);

struct ChangeScanOptions {
  // Report only these paths and what lies below them (relative, no leading
  // or trailing '/'); empty means everything.
  std::vector<std::string> paths;
  bool include_git_dir = false;
  // Called now and then with the number of own entries visited so far.
  std::function<void(uint64_t visited)> progress;
  // Called with the lstat of the upper root and of every entry of the upper
  // layer itself (whiteouts included, and below every .git even when
  // include_git_dir is false; not the frozen layers' entries), once each: so
  // `acqfs ls` measures the upper's disk use in the walk that counts its
  // changes. Needs `paths` empty (else EINVAL).
  std::function<void(const struct stat& st)> each_upper;
};

Result<std::vector<PathChange>> ScanChanges(
    const Layers& layers, const ChangeScanOptions& options = {});

}  // namespace acqfs

#endif  // ACQFS_FS_CHANGE_SCAN_H_
