// A sandbox's layer stack on disk (docs/stack.md), part 3 of 3: the pure
// transformations of a manifest (checkpoint, rewind, fork, squash), and the
// one commit of a squash.
// Thread-safety: the transformations are pure functions of values;
// CommitSquash writes under the caller's StoreLock.
#ifndef ACQFS_STACK_TRANSFORM_H_
#define ACQFS_STACK_TRANSFORM_H_

#include <sys/stat.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "stack/manifest.h"
#include "stack/store.h"

namespace acqfs::cli {

// ---------------------------------------------------------------- transforms
// Pure functions: no disk access. The new refs they take must be valid and
// referenced nowhere in the manifest yet (EINVAL); a manifest in the middle
// of a migration (moved_from set) is refused (EINVAL: load it with repair
// first). Errors have op naming the operation and the checkpoint; path "".

struct CheckpointResult {
  StackManifest manifest;
  uint32_t number = 0;  // the new checkpoint's
};
// Freezes the upper: frozen += upper; a new checkpoint (next_number) with
// layers = the new frozen; base = it; upper = `new_upper`. EMLINK when the
// stack holds kMaxFrozen frozen layers already (squash first); EOVERFLOW
// when the numbers are exhausted.
Result<CheckpointResult> TakeCheckpoint(const StackManifest& m,
                                        const std::string& new_upper,
                                        const std::string& message,
                                        int64_t time_ns, CheckpointKind kind);

// frozen = checkpoint `number`'s layers; base = number; upper = `new_upper`
// (the old upper is dropped). ENOENT when there is no such checkpoint.
Result<StackManifest> Rewind(const StackManifest& m, uint32_t number,
                             const std::string& new_upper);

// Rewind that can be undone: when `upper_nonempty`, the current upper is
// first frozen as an "auto-rewind" checkpoint with the message "before
// rewind to N" (its number in *undo_number; 0 when none was taken), then
// the stack rewinds to `number` with `new_upper` as its upper.
Result<StackManifest> RewindWithUndo(const StackManifest& m, uint32_t number,
                                     bool upper_nonempty,
                                     const std::string& new_upper,
                                     int64_t time_ns,
                                     uint32_t* undo_number = nullptr);

// The manifest of a new sandbox forked from `m` at checkpoint `at` (0: at
// m's current frozen stack, i.e. m.base; the live upper is not included):
// the checkpoints of m whose layers are a prefix of (or equal to) the fork
// point's layers (same numbers, messages, times, kinds), frozen = the fork
// point's layers, base = the fork point, next_number = m.next_number,
// upper = `new_upper`. ENOENT when there is no checkpoint `at`.
Result<StackManifest> Fork(const StackManifest& m, uint32_t at,
                           const std::string& new_upper);

struct ForkResult {
  StackManifest parent;  // m with its upper frozen as a "fork" checkpoint
  StackManifest child;   // the new sandbox's manifest
  uint32_t number = 0;   // the fork checkpoint's number
};
// Forks m's current state, live upper included: freezes m's upper as a
// "fork" checkpoint (m gets `parent_new_upper`), then forks at it (the new
// sandbox gets `child_new_upper`). EMLINK as TakeCheckpoint.
Result<ForkResult> ForkCurrent(const StackManifest& m,
                               const std::string& parent_new_upper,
                               const std::string& child_new_upper,
                               const std::string& message, int64_t time_ns);

struct SquashPlan {
  size_t keep = 0;                 // top frozen layers kept as they are
  std::vector<std::string> merge;  // the layers to merge, bottom first
  std::string nothing_to_do;       // why not, when `merge` is empty
};
// With n frozen layers: when n <= keep + 1, nothing to do (`merge` empty,
// `nothing_to_do` says why); else the bottom n - keep layers are to be
// merged into one new layer (the caller builds it; lower layers first, the
// upper ones' whiteouts and opaque dirs applied).
SquashPlan PlanSquash(const StackManifest& m, size_t keep);
// The manifest with the plan's layers replaced by `merged`: frozen =
// [merged] + the kept layers. Checkpoints whose layers are a strict prefix
// of the merged range are dropped (merged away); one whose layers are
// exactly the merged range gets [merged]; those whose layers start with the
// whole merged range get it replaced by [merged]; all others (other
// branches) keep their layers untouched. EINVAL when the plan is not m's
// or is empty.
Result<StackManifest> ApplySquash(const StackManifest& m,
                                  const SquashPlan& plan,
                                  const std::string& merged);

// The one commit of a squash, for the command and for a daemon: the
// manifest with the plan applied (ApplySquash, checked before anything is
// written), the built layer `built` adopted into `store` under `id`, then
// `install(next, layer_path)` makes it current (it writes the manifest; a
// daemon swaps its layers first). When `install` fails the adopted layer is
// removed. Returns the new manifest. Caller holds the StoreLock.
Result<StackManifest> CommitSquash(
    const LayerStore& store, const StackManifest& m, const SquashPlan& plan,
    const std::string& built, std::string_view id,
    const std::function<Status(const StackManifest&, const std::string&)>&
        install);

}  // namespace acqfs::cli

#endif  // ACQFS_STACK_TRANSFORM_H_
