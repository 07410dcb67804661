// Layer, Layers and the lookup rules of the merged view, without FUSE.
//
// A Layer is a directory tree reached only through its root directory fd:
// every path inside it is opened with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), so no walk ever follows a symlink or leaves the tree.
// The lower layer is only ever opened O_RDONLY or O_PATH.
//
// Layers bundles the lower layers (the host checkout and the frozen layers
// above it, docs/stack.md), the upper, the work area and the format. The
// lookup rules (ResolveChild) and the merged listing (ListMerged) are pure
// functions of the on-disk state, so the git bridge and the tests use them
// without a mount.
// Thread-safety: a Layers object is immutable after Open(); its functions may
// be called from any thread.
#ifndef ACQFS_FS_LAYER_H_
#define ACQFS_FS_LAYER_H_

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "common/sys.h"
#include "fs/layer_format.h"
#include "fs/policy.h"

namespace acqfs {

class CopyUpSources;

class Layer {
 public:
  Layer() = default;
  Layer(UniqueFd root, std::string root_path);
  Layer(Layer&&) = default;
  Layer& operator=(Layer&&) = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  static Result<Layer> Open(const std::string& path);
  // A sandbox's own layer (an upper, a frozen layer, a work directory) at
  // `path`, which lies below `anchor` (the state directory): `anchor` is
  // opened as given, and everything below it with no symlink followed at
  // any component (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). The state
  // directory is its owner's to change: a root command there must never
  // follow a name the owner replaced by a symlink (to /etc, to the host
  // checkout). ELOOP naming the path for a symlink on the way; EINVAL when
  // `path` is not below `anchor`. An empty `anchor` is Open(path).
  static Result<Layer> OpenUnder(const std::string& anchor,
                                 const std::string& path);

  int root() const { return root_.get(); }
  const std::string& root_path() const { return root_path_; }
  // The absolute path of `rel`, for messages only.
  std::string Shown(const std::string& rel) const;

  Result<UniqueFd> Open(const std::string& rel, int flags,
                        mode_t mode = 0) const;
  // Opens `rel` to read it: O_RDONLY|O_NOFOLLOW|`extra`, and O_NOATIME
  // where the kernel permits it (so reading the host does not even change
  // its atimes).
  Result<UniqueFd> OpenForReading(const std::string& rel, int extra = 0) const;
  // O_PATH descriptor of a directory.
  Result<UniqueFd> OpenDir(const std::string& rel) const;
  Result<struct stat> Stat(const std::string& rel) const;

  // An O_PATH descriptor of the directory `rel`, borrowed from a small
  // per-thread cache (do not close it). A cached descriptor is reused while
  // `gen` is unchanged and for at most a second: the caller passes a number
  // that changes whenever a directory below the root may have been renamed,
  // replaced or removed (Overlay's tree generation). gen 0 bypasses the
  // cache and returns a descriptor owned by `*owned`. On a miss the
  // directory is opened beneath the nearest cached ancestor that is still
  // valid by the same rule (so a walk down a tree opens one name per
  // level, however deep), else from the root.
  Result<int> DirFd(const std::string& rel, uint64_t gen,
                    UniqueFd* owned) const;
  // How many directories each thread's DirFd cache holds (at most 4; 0
  // turns it off). Set before serving requests.
  static void SetDirCacheSlots(size_t n);
  // Stat of `rel` through DirFd of its parent.
  Result<struct stat> StatVia(const std::string& rel, uint64_t gen) const;
  // found=false (and Ok) when the path or a parent does not exist.
  Status StatIfExists(const std::string& rel, struct stat* st,
                      bool* found) const;

 private:
  UniqueFd root_;
  std::string root_path_;
  uint64_t id_ = 0;  // tells Layer objects apart in the per-thread cache
};

// The exclusive claim a serving daemon holds on its upper and work
// directories, so that two daemons never serve one upper layer or share one
// work area (the second would empty acqfs-tmp/ under the first, and the
// first's files held open after their last name would lose their data): an
// flock(LOCK_EX) of each directory itself (upper first, then work), taken
// by the daemon's own process before anything in the work directory is
// touched and released when the last descriptor of it closes, that is when
// the daemon ends. Every way of starting a daemon goes through
// Layers::Open, which takes it. The descriptors are O_CLOEXEC: a program
// the daemon runs (fusermount3) never holds it. A lock writes nothing to
// disk, so the directories stay in the kernel overlayfs format.
class LayersClaim {
 public:
  LayersClaim() = default;
  // Takes the claim, waiting up to `wait_ms` for a daemon that is ending to
  // let go; EBUSY naming the directory and the pid of the daemon holding
  // it (see LayersHolder) when it stays taken.
  static Result<LayersClaim> Take(const std::string& upper,
                                  const std::string& work, int wait_ms);
  // Claims a new upper directory (a checkpoint froze the old one, whose
  // claim is kept while the daemon lives), without waiting.
  Status TakeUpper(const std::string& upper);

 private:
  UniqueFd upper_, work_;
  std::vector<UniqueFd> frozen_;
};

// The process holding the claim on `dir` (an upper or work directory), as
// /proc/locks tells it, without taking or testing the lock: nullopt when
// no process holds it (or /proc/locks does not show the holder, as from
// another pid namespace); pid 0 when it is held by a process whose pid this
// namespace cannot see.
std::optional<pid_t> LayersHolder(const std::string& dir);

// The lower layers are numbered from the bottom: 0 is the host checkout,
// 1..n the frozen layers (Layers::frozen[i - 1]), each a former upper layer
// in the kernel overlayfs upper format (its whiteouts and opaque markers
// count; the host's are plain files). A LowerMask has bit i set for lower
// layer i.
using LowerMask = uint32_t;
constexpr unsigned kMaxLowerLayers = 32;  // the host and 31 frozen layers
inline LowerMask LowerBit(unsigned i) { return LowerMask{1} << i; }
// The highest layer of a non-empty mask.
inline unsigned TopLowerLayer(LowerMask m) {
  return 31 - static_cast<unsigned>(__builtin_clz(m));
}

struct Layers {
  // Held for as long as this object lives; first, so that it is released
  // last, after every other descriptor of the layers.
  LayersClaim claim;
  Layer lower;                // the host checkout: lower layer 0
  std::vector<Layer> frozen;  // frozen layers, bottom first (layer i + 1)
  Layer upper;
  Layer work;    // <workdir>
  UniqueFd tmp;  // <workdir>/acqfs-tmp
  std::string tmp_path;
  LayerFormat format{XattrNamespace::kUser};
  bool privileged = false;  // may chown to others, set trusted xattrs
  // fsync every copy-up before publishing it, as the kernel overlayfs does
  // unless mounted "volatile" (acqfs: `-o volatile` clears it).
  bool sync_copy_up = true;
  // The sandbox's policy (hidden lower paths and the rest), or null for
  // none. The lookup rules below treat a hidden lower object as absent.
  std::shared_ptr<const Policy> policy;
  // Where copy-ups of host files the host changed since the sandbox's base
  // keep what they started from (fs/copy_up_source.h), or null for none.
  // The export reads them from here too.
  std::shared_ptr<const CopyUpSources> sources;

  // Lower layer `i` (0: the host).
  const Layer& LowerLayer(unsigned i) const {
    return i == 0 ? lower : frozen[i - 1];
  }
  unsigned lower_layers() const {
    return 1 + static_cast<unsigned>(frozen.size());
  }
  // Every layer by number: 0 the host, 1..n the frozen layers, n + 1
  // (upper_number()) the upper. The sandbox's own layers are 1..n + 1.
  unsigned upper_number() const { return lower_layers(); }
  const Layer& At(unsigned i) const {
    return i == upper_number() ? upper : LowerLayer(i);
  }
  // The number an object of a layer of the sandbox's own (the upper, a
  // frozen layer) is reported with when no lower object gives it one: its
  // st_ino, with the top bit set when those layers are on another device
  // than the host (so that it cannot collide with a host number).
  bool store_on_host_dev = false;  // set by Open and OpenForReading
  // The state directory the sandbox's own layers lie below (Layer::
  // OpenUnder), "" for layers given by the mount helper's options. Every
  // layer the stack later opens (a checkpoint's new upper, a rewind's, a
  // squash's) is opened under it too.
  std::string anchor;
  uint64_t TagStore(uint64_t ino) const {
    return store_on_host_dev ? ino : (ino | (uint64_t{1} << 63));
  }

  // Does the policy hide the lower object at `rel`?
  bool HidesLower(const std::string& rel, bool is_dir) const {
    return policy && policy->HidesLower(rel, is_dir);
  }

  // Takes the claim on upper and work (LayersClaim: EBUSY when another
  // daemon holds it), then opens the three directories and creates and
  // empties <workdir>/acqfs-tmp.
  static constexpr int kClaimWaitMs = 2000;
  // `frozen`: the frozen layers' directories, bottom first (at most
  // kMaxLowerLayers - 1).
  static Result<Layers> Open(const std::string& lower, const std::string& upper,
                             const std::string& work, XattrNamespace ns,
                             const std::vector<std::string>& frozen = {},
                             const std::string& anchor = "");
  // Opens lower and upper only, for readers (the git bridge, status) that
  // may run while a daemon serves the same layers: the work area is not
  // touched, and `tmp` stays invalid.
  static Result<Layers> OpenForReading(
      const std::string& lower, const std::string& upper, XattrNamespace ns,
      const std::vector<std::string>& frozen = {},
      const std::string& anchor = "");
  // Opens the frozen layers (and checks the host's device against the
  // upper's for TagStore); used by both.
  Status OpenFrozen(const std::vector<std::string>& paths);
};

// What the layers say about one directory of the merged view.
struct DirView {
  std::string path;         // relative to the layer roots, "" for the root
  bool upper = false;       // an upper directory exists at `path`
  bool xwhiteouts = false;  // the upper dir may hold xattr whiteouts
  // The lower layers whose directory at `path` shows through (from the
  // topmost one down to the first opaque one), and of those the frozen ones
  // whose directory may hold xattr whiteouts.
  LowerMask lower = 0;
  LowerMask lower_xw = 0;
  // Some lower directory at `path` shows through.
  bool merged() const { return lower != 0; }
};

// The descriptors of a merged directory's lower directories, by layer
// number (-1: none); only the layers of DirView::lower are read.
struct LowerFds {
  LowerFds() { std::fill(std::begin(fd), std::end(fd), -1); }
  // Only the host's directory (the layers without frozen ones).
  explicit LowerFds(int host) : LowerFds() { fd[0] = host; }
  int fd[kMaxLowerLayers];
};

// What the layers hold under one name of a merged directory.
struct ChildInfo {
  bool exists = false;       // visible in the merged view
  bool whiteout = false;     // upper holds a whiteout (name deleted)
  bool upper = false;        // upper object present (not a whiteout)
  bool lower = false;        // lower object present under a merged parent
  struct stat upper_st {};   // valid when upper
  struct stat lower_st {};   // valid when lower: the topmost lower object
  unsigned lower_layer = 0;  // valid when lower: the layer of lower_st
  // When lower_st is a directory: the lower layers whose directory of this
  // name shows through it (from lower_layer down to the first opaque one),
  // and those that may hold xattr whiteouts.
  LowerMask lower_dirs = 0;
  LowerMask lower_xw = 0;
  // Valid when lower: the number the lower object is reported with. A host
  // object's st_ino; a frozen layer's object's origin marker, else (a
  // directory merged with one below) the number of the one below, else its
  // own st_ino (Layers::TagStore) — what the object was reported with when
  // its layer was the upper.
  uint64_t lower_ino = 0;
  OpaqueMark opaque = OpaqueMark::kNone;  // upper directories only
  uint64_t origin = 0;  // upper origin marker (lower st_ino), or 0

  bool is_dir() const {
    return S_ISDIR(upper ? upper_st.st_mode : lower_st.st_mode);
  }
  // The child directory's own view (only meaningful when is_dir()).
  DirView AsDir(const std::string& child_path) const;
};

// Resolves `name` in `dir`: upper first (a whiteout hides the name; an upper
// non-directory hides the lower; an upper directory merges with a lower
// directory unless opaque), the lower only when `dir` is merged and the
// policy does not hide it.
// A frozen layer's whiteout hides the name in the layers below it, its
// opaque directory the directories below it; the host's are plain objects.
// The rule, and the number (lower_ino), are fs/layer_chain.h's; an entry
// that vanishes while it is read is absent in its layer.
// `gen`: see Layer::DirFd (0: no caching).
// `apply_policy` false: a lower object the policy hides counts too.
Result<ChildInfo> ResolveChild(const Layers& layers, const DirView& dir,
                               const std::string& name, uint64_t gen = 0,
                               bool apply_policy = true);
// The same rule with `dir` already open: `upper_fd` is its upper directory
// (used when dir.upper), `lower` its lower directories (those of
// dir.lower; -1 when a layer has none there). No path is opened from a
// layer root and `dir.path` is read only to name an error or to ask the
// policy, so walks of deep trees (fs/layer_walk.h) resolve each child in
// O(1) system calls.
Result<ChildInfo> ResolveChildAt(const Layers& layers, const DirView& dir,
                                 int upper_fd, const LowerFds& lower,
                                 const std::string& name);

// The view of the root directory.
Result<DirView> RootView(const Layers& layers);

struct MergedEntry {
  std::string name;
  unsigned char type;  // DT_*
  bool in_upper;
  bool in_lower;       // a lower entry of this name exists (maybe shadowed)
  uint64_t upper_ino;  // d_ino in the upper (when in_upper)
  // When in_lower: d_ino of the topmost lower entry of this name, and its
  // layer (a frozen layer's d_ino is not yet the number the object is
  // reported with: see ChildInfo::lower_ino).
  uint64_t lower_ino;
  unsigned lower_layer = 0;
};

// The merged listing: upper entries (whiteouts dropped), then the lower
// layers' entries, topmost layer first, neither shadowed, whited out (in the
// upper or a frozen layer above) nor hidden by the policy (none when the
// directory is not merged).
Result<std::vector<MergedEntry>> ListMerged(const Layers& layers,
                                            const DirView& dir);
// The same listing with `dir` already open (descriptors as for
// ResolveChildAt).
Result<std::vector<MergedEntry>> ListMergedAt(const Layers& layers,
                                              const DirView& dir, int upper_fd,
                                              const LowerFds& lower);

}  // namespace acqfs

#endif  // ACQFS_FS_LAYER_H_
