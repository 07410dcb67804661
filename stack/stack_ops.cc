#include "stack/stack_ops.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "common/sys.h"

namespace acqfs::cli {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<CheckpointPlan> PlanCheckpoint(const std::string& state,
                                      const StackManifest& m,
                                      const std::string& upper_root,
                                      const std::string& message,
                                      CheckpointKind kind) {
  // Opened beneath the state directory (no symlink followed): the new
  // upper takes this one's mode, owner and times, never those of a
  // directory a symlink put in its place.
  auto upper = sys::OpenBelow(state, upper_root, O_PATH | O_DIRECTORY,
                              "open a layer below the state directory");
  if (!upper) return upper.error();
  auto like = sys::Fstat(upper->get(), upper_root);
  if (!like) return like.error();
  LayerStore store(state);
  auto ref = store.Create(&*like);
  if (!ref) return ref.error();
  CheckpointPlan p;
  p.time_ns = NowNs();
  auto next = TakeCheckpoint(m, *ref, message, p.time_ns, kind);
  if (!next) {
    (void)store.Remove(*ref);
    return next.error();
  }
  p.next = std::move(next->manifest);
  p.number = next->number;
  p.new_upper = store.Path(*ref);
  return p;
}

}  // namespace acqfs::cli
