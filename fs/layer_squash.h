// Squashing frozen layers (docs/stack.md, "Squash"): the layers numbered
// `bottom`..`top` of a stack (fs/layer.h: 1..n are the frozen ones) merged
// into one new layer, in the same kernel overlayfs upper format, that shows
// over what lies below `bottom` exactly what they showed together.
//
// The rule, per directory, for each name the squashed layers hold: the
// topmost entry decides. A whiteout stays a whiteout (a 0/0 device); a
// non-directory is hard-linked from its layer (the same inode: its data,
// its attributes, its origin marker and so its st_ino, at no copy); a
// directory is made anew with the topmost one's attributes and merges the
// directories of that name down the squashed layers until an opaque one, a
// whiteout or a non-directory stops the chain, in which case the new one is
// opaque (it hides what lies below, as the chain did). The chain and the
// numbers are fs/layer_chain.h's: a directory's origin marker is the first
// one down its chain; an opaque one without any gets the number it was
// reported with (Layers::TagStore of the st_ino of the lowest directory of
// its chain), so its st_ino survives too; so does one whose chain ends in
// the squashed layers with nothing below them (no directory of its path
// under `bottom`: a directory the sandbox made). Only a directory that
// merges with a directory below the squashed layers goes without a marker:
// that one gives its number, before the squash and after. An entry that
// vanishes while the squash reads it (a name listed, then gone) is left out, as
// if it had not been listed: the entry of that name below it decides; a
// squashed directory gone before it is opened lists nothing. Thread-safety: one
// thread; the layers must be frozen (nothing writes them).
#ifndef ACQFS_FS_LAYER_SQUASH_H_
#define ACQFS_FS_LAYER_SQUASH_H_

#include <cstdint>
#include <string>

#include "common/error.h"
#include "fs/layer.h"

namespace acqfs {

struct SquashStats {
  uint64_t linked = 0;     // non-directories hard-linked (or copied)
  uint64_t dirs = 0;       // directories made
  uint64_t whiteouts = 0;  // whiteouts made
};

// Writes into the empty directory `out` (the new layer's root, made by the
// caller with the top layer root's attributes) the merge of lower layers
// bottom..top of `layers` (1 <= bottom <= top < layers.lower_layers()),
// then syncs the file system holding it (syncfs), so that the new layer is
// durable before a manifest names it.
Result<SquashStats> SquashLayers(const Layers& layers, unsigned bottom,
                                 unsigned top, const std::string& out);

}  // namespace acqfs

#endif  // ACQFS_FS_LAYER_SQUASH_H_
