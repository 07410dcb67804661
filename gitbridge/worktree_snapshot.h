// WorktreeSnapshot: the tree of the sandbox's working state as `git add -A`
// would record it in the sandbox, built from a base tree (the host's working
// state) plus the changes of the sandbox's own layers, the frozen layers and
// the upper merged as one (DeltaScan; so a stack gives the tree its layers
// squashed into one upper would give):
//   - which paths are published is the publish rule's answer
//     (publish_rule.h); the scan leaves out .git, fifos and the like and
//     the policy's hidden and read-only paths, and this unit the rest;
//   - kDelete removes the path from the base; a directory the sandbox
//     removed keeps the tracked entries the policy hides or makes read-only
//     as the base has them (no change of them is published);
//   - kUpsert of a path the base does not have (untracked in the sandbox) is
//     skipped when the sandbox's ignore rules ignore it; a tracked path is
//     always recorded;
//   - file modes: 100755 when the owner may execute, else 100644; symlinks
//     as links (the blob is the target, never followed);
//   - gitlink (submodule) entries of the base are kept as they are, and the
//     scan never descends into them;
//   - blobs are hashed from the own layers' files (each read in the layer
//     the merged view shows it from) and written into `repo`;
//   - a file the sandbox wrote after the host had edited it since the base
//     (`host_changed_since_ns`, the base's instant; 0: only copy-ups' kept
//     sources tell) is recorded as the sandbox's change merged onto the
//     base tree's version (git's line merge: ancestor what the sandbox's
//     version started from, the copy-up's kept source (fs/copy_up_source.h)
//     or else the host's file now; ours the base tree's blob at the
//     ancestor's path; theirs the sandbox's file), so the host's edit stays
//     out; where that cannot be done (the lines conflict, the base has no
//     file there, a kept source is gone) the file is recorded whole and
//     listed in `host_edits_kept`;
//   - a path whose name git refuses in a tree (git_names.h; ".GIT/x", a
//     symlinked "GITMOD~1") is left out (also the base's entry there) and
//     listed in `skipped`, unless it is untracked and the sandbox's ignore
//     rules ignore it (git add -A would not add it either).
// Thread-safety: one repo per thread.
#ifndef ACQFS_GITBRIDGE_WORKTREE_SNAPSHOT_H_
#define ACQFS_GITBRIDGE_WORKTREE_SNAPSHOT_H_

#include <git2.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/progress_fn.h"
#include "fs/layer.h"
#include "gitbridge/git_names.h"
#include "gitbridge/host_changes.h"

namespace acqfs::gitbridge {

struct SnapshotStats {
  uint64_t changes = 0;               // changes the scan reported
  uint64_t blobs_written = 0;         // own files hashed into the repository
  uint64_t ignored_skipped = 0;       // untracked, ignored paths left out
  std::vector<SkippedPath> skipped;   // left out: names git refuses
  std::vector<std::string> paths;     // every path the scan reported
  uint64_t host_edits_separated = 0;  // host edits left out (see above)
  std::vector<HostEditKept> host_edits_kept;
};

// `base_tree` may be null (empty). Returns the new tree's id.
Result<git_oid> BuildWorktreeTree(git_repository* repo,
                                  const git_oid* base_tree,
                                  const Layers& layers,
                                  SnapshotStats* stats = nullptr,
                                  const ProgressFn& progress = {},
                                  int64_t host_changed_since_ns = 0);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_WORKTREE_SNAPSHOT_H_
