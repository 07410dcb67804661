// UpperWalk: the one walk of a sandbox's own layers against the host
// checkout, under every "what did the sandbox change" question:
// fs/change_scan.h (`acqfs status`, `diff`, `ls`) and gitbridge/delta_scan.h
// (`acqfs export`) are interpretations of it and of fs/same_object.h. What
// "changed" means for each, and which `.git` paths each leaves out and why:
// docs/changes.md.
//
// The sandbox's own layers are the frozen layers and the upper (Layers::At
// numbers 1..upper_number()); the host is layer 0 (the "lower" below). The
// walk sees the own layers as ONE upper layer, as if they were squashed into
// it: in a directory a name's topmost own entry decides (a whiteout, either
// form, deletes it; a non-directory hides everything below it; a directory
// merges with the own directories of that name below it, down to and
// including the first opaque one, and a whiteout or non-directory below
// stops that chain). The merged own directory hides the host's directory
// (is opaque with respect to the host) when a directory of its chain is
// opaque or its chain was stopped; else it merges with the host's directory
// when its parent does. With no frozen layers this is the upper alone.
//
// What is visited, depth first:
//   kUpper      every object of the merged own view that is not a whiteout,
//               with the lower object at the same path when the lower has
//               one there, whether or not the merged view shows it (under
//               an opaque directory it does not: each path is still paired
//               with the lower object at that path);
//   kWhiteout   every whiteout that is a name's topmost own entry, in either
//               form (LayerFormat::IsWhiteoutEntry), with the lower object it
//               hides; a whiteout of a name the lower lacks is visited too
//               (!in_lower: it changes nothing). In an opaque directory a
//               whiteout is not paired: the lower name comes as kLowerOnly
//               with the others the directory lacks;
//   kLowerOnly  lower objects the merged view lost that no own entry
//               names: the lower names an opaque own directory lacks (the
//               walk lists that one lower directory), and, only where the
//               visitor asks (Below::kEnter), everything below a lower
//               directory the own layers removed (a whiteout over it, a
//               non-directory over it, a kLowerOnly directory in turn).
// Own entries hidden by a higher own layer (a whiteout, a non-directory, an
// opaque directory above them) are not visited: the merged view lacks them.
// So the walk reads the lower only at the paths the own layers name, in the
// lower directories of opaque own ones, and below removed lower directories
// the visitor asks for: its cost follows the own layers, not the checkout.
//
// `.git`: with GitDirs::kSkip an entry named ".git" at any depth, in any
// layer and of any type (a repository, a gitfile, a whiteout), is left out
// with everything below it, never stat'ed; with kVisit it is visited like
// any other and `in_git` marks it and everything below it.
//
// Entries that vanish while the walk runs (the layers may be in use, the host
// may edit the lower): a listed name gone (ENOENT) by the time the walk stats
// it, checks it for the whiteout xattr or reads its opaque marker is skipped
// as if it had not been listed (not visited, not counted); a directory gone
// by the time the walk enters it has been visited, as its stat saw it, and
// nothing below it is. (fs/same_object.h reports an object gone during the
// comparison as `vanished`; both scans then leave the path out.) A directory
// renamed during the walk may still fail it (ESTALE, from LayerStack). Any
// other failure stops the walk with an error naming the operation and the
// absolute path (in the layer that holds it).
//
// Bounds: iterative (a stack of frames in memory, no recursion per level), on
// one LayerStack (fs/layer_walk.h), lower-only trees included: at most
// (layers) x LayerStack::kOpenPerLayer directory descriptors, plus one while
// a directory is listed, however deep the tree. One path string, the current
// entry's, is extended and cut back; the walk builds other paths only for
// errors. With no frozen layers it makes the system calls it made before
// there were any: a merged own directory of one layer is listed once and
// its entries are not looked up in other layers.
// Order: a directory's own entries (the topmost own layer's in listing
// order, then each lower own layer's names not seen above), then its
// kLowerOnly entries; every directory before what lies below it. Callers
// sort.
// Thread-safety: one thread per walk; the layers are only read.
#ifndef ACQFS_FS_UPPER_WALK_H_
#define ACQFS_FS_UPPER_WALK_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/error.h"
#include "fs/layer.h"
#include "fs/layer_format.h"

namespace acqfs {

enum class GitDirs { kSkip, kVisit };

struct UpperEntry {
  enum Kind { kUpper, kWhiteout, kLowerOnly };
  UpperEntry(Kind k, const std::string& p, const std::string& n)
      : kind(k), path(p), name(n) {}

  Kind kind;
  const std::string& path;  // relative, '/'-separated, no leading '/'
  const std::string& name;  // its last component
  struct stat upper {};     // kUpper, kWhiteout: lstat of the own entry
  // kUpper, kWhiteout: the own layer holding the entry (a Layers::At number,
  // 1..upper_number(): a frozen layer or the upper).
  unsigned layer = 0;
  bool in_lower = false;  // the lower has an object at `path` (kLowerOnly:
                          // always)
  struct stat lower {};   // when in_lower: its lstat
  // kUpper directories: the opaque marker of the entry itself (the topmost
  // directory of its chain).
  OpaqueMark opaque = OpaqueMark::kNone;
  bool in_git = false;  // `path` is a ".git" or below one (GitDirs::kVisit)
  int upper_dir = -1;   // the parent directory in `layer` (kUpper,
                        // kWhiteout), for comparing or reading the entry
  int lower_dir = -1;   // the parent directory in the lower (when in_lower)
};

// What the visitor wants below the entry it was given.
enum class Below {
  kSkip,
  // For an own directory: walk it (its merged own directory), with the
  // lower directory at its path when the lower has one. For an entry whose
  // lower object is a directory the merged view lost (a whiteout over it, an
  // own non-directory over it, a kLowerOnly directory): visit everything below
  // that lower directory, as kLowerOnly. Otherwise the same as kSkip.
  kEnter,
};

using UpperVisitor = std::function<Result<Below>(const UpperEntry&)>;

struct UpperWalkOptions {
  GitDirs git_dirs = GitDirs::kSkip;
  // Asked for each listed path before anything of it is read; false leaves
  // it out with everything below it (a path filter). Null: every path.
  std::function<bool(const std::string& path)> wanted;
  // Called with the number of own entries visited so far, every 1,000.
  std::function<void(uint64_t upper_entries)> progress;
  // For tests: called once a directory's listing was read ("" for the root),
  // before any of its entries is looked at.
  std::function<void(const std::string& dir)> listed;
};

// Walks the own layers of `layers`, calling `visit` for each entry as above.
// Returns the number of own entries visited (kUpper and kWhiteout).
Result<uint64_t> WalkUpper(const Layers& layers,
                           const UpperWalkOptions& options,
                           const UpperVisitor& visit);

}  // namespace acqfs

#endif  // ACQFS_FS_UPPER_WALK_H_
