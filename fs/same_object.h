// SameObject: what differs between an object of the sandbox's own layers
// (the upper or a frozen layer: the one the merged view shows) and the host
// object at the same path. The one comparison behind "a copy-up left as it was
// is no change" for `acqfs status`/`diff`/`ls` (fs/change_scan.h) and for
// `acqfs export` (gitbridge/delta_scan.h); each reads the answer its own way
// (docs/changes.md).
//
// Compared, in this order:
//   type     the file types (S_IFMT); when they differ nothing else is;
//   content  a regular file's bytes, a symlink's target, a device's rdev
//            (directories, fifos and sockets hold none);
//   perm     the 07777 bits, and `exec`: the owner's execute bit of a
//            regular file, the one bit of them git records (100755/100644);
//   owner    uid or gid;
//   xattrs   the names and values of the extended attributes, the format's
//            markers (LayerFormat::IsOverlayXattr) left out.
// Times, link counts and inode numbers are never compared. Content and xattrs
// cost reads, so the caller says whether it wants them (kContent, kXattrs);
// perm, exec and owner come from the two lstats.
//
// A regular file's content: the sizes first, then the bytes of both files in
// 256 KiB chunks, stopping at the first difference (bytes, not a hash: why
// in docs/changes.md). The lower file is opened O_NOATIME where permitted.
// An object gone (ENOENT) while compared gives `vanished` (the other fields
// are then meaningless), not an error: the layers may be in use.
// Thread-safety: an ObjectComparer (it keeps its read buffers) is used by one
// thread at a time.
#ifndef ACQFS_FS_SAME_OBJECT_H_
#define ACQFS_FS_SAME_OBJECT_H_

#include <sys/stat.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "fs/layer.h"
#include "fs/upper_walk.h"

namespace acqfs {

struct ObjectDiff {
  bool vanished = false;  // one of the objects went away while compared
  bool type = false;
  bool content = false;
  bool perm = false;
  bool exec = false;  // implies perm
  bool owner = false;
  bool xattrs = false;

  bool same() const {
    return !vanished && !type && !content && !perm && !owner && !xattrs;
  }
};

class ObjectComparer {
 public:
  // What to read beyond the two lstats.
  static constexpr unsigned kContent = 1, kXattrs = 2, kAll = 3;

  explicit ObjectComparer(const Layers& layers) : layers_(layers) {}
  ObjectComparer(const ObjectComparer&) = delete;
  ObjectComparer& operator=(const ObjectComparer&) = delete;

  // `layer` meaning the upper (Layers::upper_number()); 0 (never an own
  // layer) means it too.
  static constexpr unsigned kUpperLayer = ~0u;

  // Compares the own object `name` of the directory `upper_dir` of own layer
  // `layer` (a Layers::At number; lstat `up`) with the host object `name` of
  // `lower_dir` (lstat `lo`); `rel`, their relative path, names them in
  // errors (in their layers).
  Result<ObjectDiff> Compare(int upper_dir, int lower_dir,
                             const std::string& name, const std::string& rel,
                             const struct stat& up, const struct stat& lo,
                             unsigned what, unsigned layer = kUpperLayer);
  // The same for an entry of the upper walk that has both objects (a kUpper
  // entry with in_lower), in the own layer that holds it.
  Result<ObjectDiff> Compare(const UpperEntry& e, unsigned what) {
    return Compare(e.upper_dir, e.lower_dir, e.name, e.path, e.upper, e.lower,
                   what, e.layer);
  }

 private:
  // Each leaves *vanished set instead of failing when an object is gone.
  Result<bool> SameContent(int upper_dir, int lower_dir,
                           const std::string& name, const std::string& rel,
                           const struct stat& up, const struct stat& lo,
                           bool* vanished);
  Result<bool> SameBytes(int upper_dir, int lower_dir, const std::string& name,
                         const std::string& rel, bool* vanished);
  Result<bool> SameXattrs(int upper_dir, int lower_dir, const std::string& name,
                          const std::string& rel, bool* vanished);

  const Layers& layers_;
  const Layer* own_ = nullptr;  // the own object's layer, for messages
  std::vector<char> upper_buf_, lower_buf_;  // allocated at the first file
};

}  // namespace acqfs

#endif  // ACQFS_FS_SAME_OBJECT_H_
