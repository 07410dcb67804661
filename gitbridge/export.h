// Export: turns a sandbox's state into refs of its bridge repository, from
// the layers alone (mounted or not).
//   refs/heads/<branch>   every branch the sandbox created or moved, with
//                         the objects it needs, copied in and verified;
//                         branches it deleted (or moved back to the host's
//                         tip) are removed from the bridge;
//   refs/acqfs/worktree   a commit of the sandbox's working tree (see
//                         docs/git-bridge.md for its parents), chained onto
//                         the previous export's commit.
// Pending() answers, without writing a ref, what an export would publish
// and which published commits the host has not fetched (for `acqfs rm`).
// Thread-safety: call from one thread.
#ifndef ACQFS_GITBRIDGE_EXPORT_H_
#define ACQFS_GITBRIDGE_EXPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/progress_fn.h"
#include "fs/layer_format.h"
#include "fs/policy.h"
#include "gitbridge/git_base.h"
#include "gitbridge/host_changes.h"

namespace acqfs::gitbridge {

struct ExportConfig {
  std::string sandbox;              // the sandbox's name
  std::string lower;                // the host checkout (absolute)
  std::string upper;                // the sandbox's upper layer
  std::vector<std::string> frozen;  // its frozen layers, bottom first
  // The state directory its layers lie below (Layer::OpenUnder: no symlink
  // followed beneath it); "" to open them by path.
  std::string anchor;
  // The checkpoints of its current stack, oldest first (docs/stack.md):
  // each is exported as a commit of the tree at that point, on the one
  // before, under the working tree's commit.
  struct CheckpointRef {
    uint32_t number = 0;
    std::string message;
    int64_t time_ns = 0;
    std::vector<std::string> layers;  // its frozen layers, bottom first
    std::string id;                   // its top layer's id (the cache key)
  };
  std::vector<CheckpointRef> checkpoints;
  // The checkpoints off its current stack: an undo point a rewind left
  // ("auto-rewind"), the checkpoints a rewind went back past, another
  // branch of the history. Each is given as its own chain (the checkpoints
  // whose layers its layers begin with, oldest first, itself last) and
  // exported as commits like the current stack's, so that no work lives
  // only in a checkpoint: every checkpoint, on the stack or off it, is
  // published as refs/acqfs/checkpoints/<number> (docs/git-bridge.md).
  std::vector<std::vector<CheckpointRef>> off_stack;
  std::string bridge;  // <state>/<name>/bridge.git
  // Its copy-up sources (fs/copy_up_source.h; "": none).
  std::string sources;
  XattrNamespace xattr_namespace = XattrNamespace::kUser;
  ProgressFn progress;  // hears each step of Export (may be empty)
  // The sandbox's policy: changes at hidden or read-only paths are never
  // published (null: none).
  std::shared_ptr<const Policy> policy;
  // What the sandbox started from (git_base.h). Branches are published when
  // they differ from their tips there, and the working-tree commit's tree
  // is the base commit's with the sandbox's changes laid over it. Not
  // recorded (a sandbox no mount has recorded it for): the host's HEAD and
  // branches as they are now stand in.
  GitBase base;
};

struct RefUpdate {
  std::string ref;     // full ref name in the bridge
  std::string old_id;  // "" when created
  std::string new_id;  // "" when deleted
};

// A path left out of what an export publishes because git refuses its name
// in a tree (git_names.h).
struct SkippedExport {
  std::string path;    // relative to the checkout; its first refused part
  std::string reason;  // why git refuses it
  bool host = false;   // in the host's own uncommitted work (not the sandbox)
};

struct ExportResult {
  std::vector<RefUpdate> updates;      // what changed in the bridge
  std::vector<std::string> refused;    // "<branch>: <reason>"
  std::vector<SkippedExport> skipped;  // left out of the commits
  std::string worktree_commit;         // current refs/acqfs/worktree
  std::string worktree_parent;         // its first parent (sandbox HEAD)
  std::string base_commit;             // the base's HEAD ("" when unborn)
  // The checkpoints' commits, oldest first (number, commit id).
  std::vector<std::pair<uint32_t, std::string>> checkpoint_commits;
  uint64_t changed_paths = 0;  // changes the upper layer holds
  // Files the sandbox wrote after the host had edited them since the base
  // (fs/copy_up_source.h): how many went out without the host's edit, and
  // those recorded whole, host edit included, with the reason.
  uint64_t host_edits_separated = 0;
  std::vector<HostEditKept> host_edits_kept;
  // The paths it changed that the host changed too since the base
  // (host_changes.h): where a merge meets the host's work.
  std::vector<HostChange> host_changed;
  std::string host_changed_error;  // why they could not be read ("": ok)
  std::string fetch_command;       // what the host runs to fetch
  bool nothing_new() const { return updates.empty(); }
};

// Exports the sandbox. A refused branch (unsafe tree, reserved name, a name
// `git check-ref-format --branch` refuses) is listed in `refused` and not
// published; a path whose name git refuses is left out of the working-tree
// (or host working state) commit and listed in `skipped`; everything else
// still is. Before any ref moves, what the refs will name is verified in
// the bridge (BridgeRepo::VerifyPublished): a damaged bridge fails the
// export (EIO naming it) and leaves its refs as they were.
Result<ExportResult> Export(const ExportConfig& config);

// The working-tree commit's tree as an export would build it now, without
// moving a ref (its objects are written into the bridge): for `acqfs
// apply`. `refused` says why there is none (the working tree refused).
struct PlannedWorktree {
  std::string base_commit;  // the base's HEAD ("" when unborn)
  std::string tree;         // the working tree's tree ("" when refused)
  std::vector<std::string> refused;
};
Result<PlannedWorktree> PlanWorktreeOnly(const ExportConfig& config);

struct PendingWork {
  std::vector<std::string> unexported;    // what an export would publish
  std::vector<std::string> unfetched;     // bridge refs the host lacks
  std::vector<std::string> unexportable;  // refused branches, skipped paths
  bool empty() const {
    return unexported.empty() && unfetched.empty() && unexportable.empty();
  }
};
Result<PendingWork> Pending(const ExportConfig& config);
// PendingWork::unfetched alone: the bridge's published refs whose commits
// the host lacks. Reads refs only: no scan of the layers, no plan (for
// `acqfs ls`).
Result<std::vector<std::string>> Unfetched(const ExportConfig& config);

// Is `dir` the top level of a git checkout? Also true for one libgit2
// refuses to open (another user's, a damaged config): the git operations
// that follow then fail and say why, so such a checkout is never taken for
// a plain directory whose work needs no export.
bool IsGitCheckout(const std::string& dir);

// Creates the bridge repository (alternates to the host's objects) and
// registers the sandbox-<name> remote on the host. Idempotent.
Status PrepareBridge(const ExportConfig& config);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_EXPORT_H_
