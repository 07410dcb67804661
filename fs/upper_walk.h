// UpperWalk: the one walk of a sandbox's upper layer against its lower, under
// every "what did the sandbox change" question: fs/change_scan.h (`acqfs
// status`, `diff`, `ls`) and gitbridge/delta_scan.h (`acqfs export`) are
// interpretations of it and of fs/same_object.h. What "changed" means for
// each, and which `.git` paths each leaves out and why: docs/changes.md.
//
// What is visited, depth first:
//   kUpper      every upper object that is not a whiteout, with the lower
//               object at the same path when the lower has one there,
//               whether or not the merged view shows it (under an opaque
//               directory it does not: each path is still paired with the
//               lower object at that path);
//   kWhiteout   every whiteout, in either form (LayerFormat::IsWhiteoutEntry),
//               with the lower object it hides; a whiteout of a name the
//               lower lacks is visited too (!in_lower: it changes nothing).
//               In an opaque directory a whiteout is not paired: the lower
//               name comes as kLowerOnly with the others the directory
//               lacks;
//   kLowerOnly  lower objects the merged view lost that no upper entry
//               names: the lower names an opaque upper directory lacks (the
//               walk lists that one lower directory), and, only where the
//               visitor asks (Below::kEnter), everything below a lower
//               directory the upper removed (a whiteout over it, a
//               non-directory over it, a kLowerOnly directory in turn).
// So the walk reads the lower only at the paths the upper names, in the
// lower directories of opaque upper ones, and below removed lower
// directories the visitor asks for: its cost follows the upper layer, not
// the checkout.
//
// `.git`: with GitDirs::kSkip an entry named ".git" at any depth, in either
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
// absolute path.
//
// Bounds: iterative (a stack of frames in memory, no recursion per level), on
// one LayerStack (fs/layer_walk.h), lower-only trees included: at most 2 x
// LayerStack::kOpenPerLayer directory descriptors, plus one while a
// directory is listed, however deep the tree. One path string, the current
// entry's, is extended and cut back; the walk builds other paths only for
// errors.
// Order: a directory's upper entries in listing order, then its kLowerOnly
// entries; every directory before what lies below it. Callers sort.
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
  struct stat upper {};     // kUpper, kWhiteout: lstat of the upper entry
  bool in_lower = false;    // the lower has an object at `path` (kLowerOnly:
                            // always)
  struct stat lower {};     // when in_lower: its lstat
  OpaqueMark opaque = OpaqueMark::kNone;  // kUpper directories
  bool in_git = false;  // `path` is a ".git" or below one (GitDirs::kVisit)
  int upper_dir = -1;   // the parent directory in the upper (kUpper,
                        // kWhiteout), for comparing or reading the entry
  int lower_dir = -1;   // the parent directory in the lower (when in_lower)
};

// What the visitor wants below the entry it was given.
enum class Below {
  kSkip,
  // For an upper directory: walk it, with the lower directory at its path
  // when the lower has one. For an entry whose lower object is a directory
  // the merged view lost (a whiteout over it, an upper non-directory over
  // it, a kLowerOnly directory): visit everything below that lower
  // directory, as kLowerOnly. Otherwise the same as kSkip.
  kEnter,
};

using UpperVisitor = std::function<Result<Below>(const UpperEntry&)>;

struct UpperWalkOptions {
  GitDirs git_dirs = GitDirs::kSkip;
  // Asked for each listed path before anything of it is read; false leaves
  // it out with everything below it (a path filter). Null: every path.
  std::function<bool(const std::string& path)> wanted;
  // Called with the number of upper entries visited so far, every 1,000.
  std::function<void(uint64_t upper_entries)> progress;
  // For tests: called once a directory's listing was read ("" for the root),
  // before any of its entries is looked at.
  std::function<void(const std::string& dir)> listed;
};

// Walks the upper layer of `layers`, calling `visit` for each entry as above.
// Returns the number of upper entries visited (kUpper and kWhiteout).
Result<uint64_t> WalkUpper(const Layers& layers,
                           const UpperWalkOptions& options,
                           const UpperVisitor& visit);

}  // namespace acqfs

#endif  // ACQFS_FS_UPPER_WALK_H_
