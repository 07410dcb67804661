// The stack operation both a command and a sandbox's daemon run
// (docs/stack.md): planning a checkpoint (a new upper in the store and the
// manifest that freezes the current one).
// Thread-safety: plain functions; the store lock serialises what they
// write.
#ifndef ACQFS_STACK_STACK_OPS_H_
#define ACQFS_STACK_STACK_OPS_H_

#include <cstdint>
#include <string>

#include "common/error.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"

namespace acqfs::cli {

struct CheckpointPlan {
  StackManifest next;     // the manifest with the upper frozen
  uint32_t number = 0;    // the new checkpoint's
  std::string new_upper;  // the new, empty upper's directory (absolute)
  int64_t time_ns = 0;
};
// Plans a checkpoint of the stack `m` of a sandbox of the state directory
// `state`: makes the new upper (its root like the directory `upper_root`,
// the current upper's) and the manifest. The caller holds the StoreLock
// until it has committed the plan (written `next`) or dropped it (the new
// upper is then an orphan the next garbage collection removes).
Result<CheckpointPlan> PlanCheckpoint(const std::string& state,
                                      const StackManifest& m,
                                      const std::string& upper_root,
                                      const std::string& message,
                                      CheckpointKind kind);

// The current time in nanoseconds since the epoch.
int64_t NowNs();

}  // namespace acqfs::cli

#endif  // ACQFS_STACK_STACK_OPS_H_
