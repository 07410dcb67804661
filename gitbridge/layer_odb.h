// LayerObjects: the object store of an untrusted layer (the sandbox's upper
// .git/objects) as libgit2 object-database backends that read it only
// through the layer's root descriptor.
//
// libgit2's own backends take a path and resolve it again on every read, so
// a sandbox could swap a directory of its store for a symlink between
// acqfs's check and libgit2's use, and have another repository's objects
// published. Here nothing is ever resolved by path:
//   loose objects  are opened with openat2(RESOLVE_BENEATH |
//                  RESOLVE_NO_SYMLINKS) below a duplicate of the layer's
//                  root descriptor at every read, inflated here, and checked
//                  against their id before libgit2 sees them;
//   packs          (pack-*.idx with its .pack) are opened the same way once,
//                  and libgit2's pack backend reads them through a private
//                  directory of /proc/self/fd links to those descriptors, so
//                  it reads exactly the files that were opened, whatever the
//                  sandbox renames or swaps afterwards. Every object it
//                  returns is hash-verified by libgit2 (strict verification
//                  is on by default).
// info/alternates, multi-pack-index and commit-graph are never read. A
// special file (a whiteout, a FIFO) reads as absent; a symlink anywhere on
// the way is never followed and fails the read with a message naming it.
// Thread-safety: the backends belong to one git_odb; libgit2 rules apply.
#ifndef ACQFS_GITBRIDGE_LAYER_ODB_H_
#define ACQFS_GITBRIDGE_LAYER_ODB_H_

#include <git2.h>

#include <string>

#include "common/error.h"
#include "fs/layer.h"

namespace acqfs::gitbridge {

// How many packs one store may hold (two descriptors each, held for the
// life of the object database). More is refused, naming the directory.
constexpr size_t kMaxLayerPacks = 256;

// Adds to `odb` the loose objects (at `loose_priority`) and packs (at
// `pack_priority`) of the object directory `rel` of `layer`. The backends
// own what they hold (a duplicate root descriptor, the pack descriptors and
// the private link directory) and release it when `odb` is freed; `layer`
// itself need not outlive them.
Status AddLayerObjects(git_odb* odb, const Layer& layer, const std::string& rel,
                       int pack_priority, int loose_priority);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_LAYER_ODB_H_
