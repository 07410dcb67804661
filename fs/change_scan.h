// ChangeScan: what a sandbox changed relative to its lower directory, path by
// path, read from the layers alone (mounted or not, git checkout or not). It
// backs `acqfs status`, `acqfs diff` and the change count of `acqfs ls`.
//
// The scan walks the upper layer only, so its cost grows with the change and
// not with the checkout; it reads the lower only at paths the upper names
// (and below directories the upper deletes or makes opaque, to list what
// disappeared). For each path whose merged object differs from the lower
// object at the same path it reports one PathChange:
//   kAdded        no lower object at the path and the merged view has one;
//   kDeleted      the lower has an object the merged view no longer shows (a
//                 whiteout, an opaque directory that lacks the name, or a
//                 non-directory in place of a lower directory); a deleted
//                 directory is reported itself and every lower object below
//                 it is reported too;
//   kTypeChanged  both exist with different file types (file <-> symlink,
//                 file <-> directory, ...);
//   kModified     both exist with the same type and different content: bytes
//                 of a regular file, target of a symlink, rdev of a device;
//   kMetadata     same type and content, but a different permission mode
//                 (07777 bits), owner, group or set of extended attributes
//                 (overlay markers excluded). kModified entries also carry
//                 these bits in `meta` when they apply.
// A copy-up left byte-for-byte equal to the lower with the same mode, owner
// and xattrs is not reported; times (atime, mtime, ctime) are never compared
// and link counts neither. Directories are reported only for their own
// change (added, deleted, type changed, metadata); an upper directory that
// exists only because something below it changed is not. Renames show as a
// deletion of the old path and an addition of the new one.
// Each path is compared with the lower object at that same path even where
// the upper hides the lower (a name made again after a whiteout, anything
// inside an opaque directory), so there is at most one PathChange per path:
// a file deleted and made again equal to the lower is not reported, one made
// again with other bytes is kModified, and the lower names an opaque
// directory lacks are kDeleted. The root directory itself is never reported.
// By default every entry named `.git` is skipped, at any depth: git's own
// data (the host's repository, a nested clone's, a submodule's gitfile);
// `include_git_dir` reports them like any other path (docs/changes.md).
//
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
  // Called now and then with the number of upper entries visited so far.
  std::function<void(uint64_t visited)> progress;
  // Called with the lstat of the upper root and of every upper entry
  // (whiteouts included, and below every .git even when include_git_dir is
  // false), once each: so `acqfs ls` measures the upper's disk use in the
  // walk that counts its changes. Needs `paths` empty (else EINVAL).
  std::function<void(const struct stat& st)> each_upper;
};

Result<std::vector<PathChange>> ScanChanges(
    const Layers& layers, const ChangeScanOptions& options = {});

}  // namespace acqfs

#endif  // ACQFS_FS_CHANGE_SCAN_H_
