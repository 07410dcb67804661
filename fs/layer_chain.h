// The merge rule of one name down a stack of layers, the one place that
// answers "which layers' directories merge here, and what number does the
// object report" (the kernel overlayfs lookup,
// Documentation/filesystems/overlayfs.rst). Three walks use it: the lookup
// (ResolveChild, fs/layer.h), the walk of the sandbox's own layers
// (WalkUpper, fs/upper_walk.h) and the squash of frozen layers
// (SquashLayers, fs/layer_squash.h).
//
// ReadLayerEntry reads what one layer's directory holds under a name: a
// whiteout (either form, LayerFormat::IsWhiteoutEntry), a non-directory or a
// directory with its opaque marker, and, when asked, its origin marker. An
// entry that vanishes while it is read (ENOENT from its stat or from the
// read of a marker: a name listed, then removed or renamed away) is
// kAbsent, as if the layer had never held it. The host checkout (`plain`)
// holds plain objects: no whiteouts and no markers are read there.
//
// NameChain takes the entries of a name layer by layer, topmost first, and
// applies the rule: the topmost entry that is not absent decides. A
// whiteout hides the name in every layer below. A non-directory is the
// object and hides everything below. A directory merges with the
// directories of that name below it down to and including the first opaque
// one; a whiteout or a non-directory below it stops the chain (it hides
// what lies below, as an opaque one does).
// The number (st_ino) the object is reported with: a host object's own
// st_ino; else the first origin marker down the chain; else, for a
// non-directory, its own number; for a directory, the number of the
// lowest directory of its chain (the one it was merged with when its layer
// was the upper), so the number survives a freeze and a squash.
//
// No FUSE, no git; no state beyond the object. Thread-safety: a NameChain
// is one thread's; ReadLayerEntry only reads the layer.
#ifndef ACQFS_FS_LAYER_CHAIN_H_
#define ACQFS_FS_LAYER_CHAIN_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "common/error.h"
#include "fs/layer_format.h"

namespace acqfs {

// What one layer's directory holds under one name.
struct LayerEntry {
  enum Kind { kAbsent, kWhiteout, kNonDir, kDir };
  Kind kind = kAbsent;
  struct stat st {};  // its lstat (all but kAbsent)
  // kDir of a layer with markers (not plain): its opaque marker.
  OpaqueMark opaque = OpaqueMark::kNone;
  // kNonDir, kDir of a layer with markers, when asked for: its origin
  // marker (0: none).
  uint64_t origin = 0;
};

// How ReadLayerEntry reads a layer's entry.
struct EntryRead {
  bool plain = false;  // the host checkout: no whiteouts, no markers
  // The directory's opaque marker is "x": a zero-size regular file may be a
  // whiteout (one getxattr, only for such a file).
  bool xattr_whiteouts = false;
  bool origin = false;  // read the origin marker (one getxattr)
};

// What `dirfd` (a layer's directory, any descriptor *at calls accept, O_PATH
// included) holds under `name`. At most one fstatat and one getxattr per
// marker asked for. A failure other than ENOENT/ENOTDIR is an error naming
// the operation and `shown` (callers that pass "" name it themselves, to
// build no path on the hot path).
Result<LayerEntry> ReadLayerEntry(const LayerFormat& format, int dirfd,
                                  const std::string& name, const EntryRead& how,
                                  const std::string& shown);

// The rule above, fed one layer at a time, topmost first. Layer numbers are
// the caller's (any numbering below 64 that grows upwards).
class NameChain {
 public:
  using LayerSet = uint64_t;
  static LayerSet Bit(unsigned layer) { return LayerSet{1} << layer; }

  NameChain() = default;
  NameChain(const NameChain&) = delete;
  NameChain& operator=(const NameChain&) = delete;

  // Takes the entry of `layer` under the name. `own_number` is the number
  // the entry reports when no marker gives it one (the host's st_ino, a
  // frozen layer's Layers::TagStore(st_ino); 0 when the caller wants no
  // number). `plain`: the entry is the host's (its number is final).
  // Returns false once the layers below cannot matter: stop feeding.
  bool Add(unsigned layer, const LayerEntry& e, uint64_t own_number,
           bool plain = false);

  // Should the next entry be read with its origin marker (EntryRead::
  // origin)? While nothing was found, or the number may still change.
  bool wants_origin() const { return !done_ && (!found_ || pending_); }

  // A non-whiteout object was found: the topmost one, in top_layer().
  bool found() const { return found_; }
  // The topmost entry that was not absent was a whiteout.
  bool whited_out() const { return whited_out_; }
  // The topmost entry that was not absent (when found() or whited_out()).
  const LayerEntry& top() const { return top_; }
  unsigned top_layer() const { return top_layer_; }
  bool is_dir() const { return found_ && top_.kind == LayerEntry::kDir; }

  // Directories: the layers whose directory takes part in the merge, and
  // of those the ones whose marker is "x" (may hold xattr whiteouts).
  LayerSet dirs() const { return dirs_; }
  LayerSet xattr_whiteouts() const { return xw_; }
  // Directories: an opaque directory, a whiteout or a non-directory ended
  // the chain, so it hides what lies below the layers fed.
  bool stopped() const { return stopped_; }

  // The number the object reports, as far as the layers fed tell it.
  uint64_t number() const { return number_; }
  // It came from a marker, from the host or from a stopped chain: no layer
  // below can change it. (A directory whose chain goes on below the layers
  // fed takes the number of the lowest directory there.)
  bool number_known() const { return found_ && (!pending_ || stopped_); }

 private:
  bool found_ = false;
  bool whited_out_ = false;
  bool done_ = false;
  bool stopped_ = false;
  bool pending_ = false;  // number_ may still be replaced from below
  LayerEntry top_;
  unsigned top_layer_ = 0;
  LayerSet dirs_ = 0;
  LayerSet xw_ = 0;
  uint64_t number_ = 0;
};

}  // namespace acqfs

#endif  // ACQFS_FS_LAYER_CHAIN_H_
