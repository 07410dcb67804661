// ProgressFn: how a long operation reports what it is doing, for a caller
// that shows progress (cli/progress.h). `phase` names the step; `done` counts
// its items so far (0 when the step is not counted). May be empty.
// Thread-safety: called from the operation's thread.
#ifndef ACQFS_COMMON_PROGRESS_FN_H_
#define ACQFS_COMMON_PROGRESS_FN_H_

#include <cstdint>
#include <functional>
#include <string>

namespace acqfs {

using ProgressFn = std::function<void(const std::string& phase, uint64_t done)>;

inline void Report(const ProgressFn& fn, const std::string& phase,
                   uint64_t done = 0) {
  if (fn) fn(phase, done);
}

}  // namespace acqfs

#endif  // ACQFS_COMMON_PROGRESS_FN_H_
