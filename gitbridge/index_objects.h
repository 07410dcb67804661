// The objects the base's copy of the host's index names beyond the base's
// HEAD, kept in the sandbox (docs/git-bridge.md, "The base is kept").
//
// The sandbox's index is the host's as it was at the mount. Its entries
// name blobs: those of HEAD's tree, which the base's ref keeps on the host
// (gitbridge/remote.h), and those the host had staged (`git add`), in a
// conflict's stages, or in resolve-undo, which only the host's index
// names. Once the host unstages them and its gc prunes (`git gc
// --prune=now`, or an automatic gc two weeks later), the sandbox's `git
// commit`, `git diff --cached` and `git stash` fail on a missing object,
// where a clone's would not. So these objects are copied, as loose objects,
// into the upper layer's `.git/objects`: the sandbox's own store, which the
// host's gc never touches. Copying costs O(what was staged), never the
// whole index: the index is scanned in place, and a directory whose cache
// tree (the index's TREE extension) is HEAD's own tree at that path is
// skipped whole; HEAD's tree is read only along the directories that
// differ.
//
// Thread-safety: plain function; libgit2 as one repository per thread. It
// writes below the upper's `.git/objects`: call it while nothing else
// does (before the daemon serves `.git`, or with no daemon).
#ifndef ACQFS_GITBRIDGE_INDEX_OBJECTS_H_
#define ACQFS_GITBRIDGE_INDEX_OBJECTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "fs/layer.h"

namespace acqfs::gitbridge {

struct IndexObjectsKept {
  size_t entries = 0;  // entries of the index
  size_t checked = 0;  // entries compared with HEAD one by one
  size_t named = 0;    // distinct objects HEAD's tree does not hold there
  size_t copied = 0;   // written into the upper now
  uint64_t bytes = 0;  // their size on disk (the quota's measure)
  // Objects not kept, hex and why: the host no longer had it (pruned
  // between the mount and now), or it is larger than the limit below.
  std::vector<std::string> not_kept;
  bool split_index = false;  // a split index: its shared part not read
};

// Objects larger than this are not copied (each is read whole into
// memory); they are listed in `not_kept`.
inline constexpr uint64_t kMaxKeptObject = uint64_t{256} << 20;

// Scans the upper's `<gitdir>/index` (nothing to do when the upper has
// none) against `head` (hex; "" when the base's HEAD was unborn: every
// object is named), and copies what the host's object store holds of what
// it names into the upper's `<gitdir>/objects`, made durable. `lower` is
// the host checkout; `gitdir` ".git", or a submodule's repository in it
// (".git/modules/x"); `work` the sandbox's work directory, for temporary
// files.
Result<IndexObjectsKept> KeepIndexObjects(const Layers& layers,
                                          const std::string& lower,
                                          const std::string& head,
                                          const std::string& work,
                                          const std::string& gitdir = ".git");

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_INDEX_OBJECTS_H_
