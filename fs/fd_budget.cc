#include "fs/fd_budget.h"

#include <sys/resource.h>

#include <algorithm>

namespace acqfs {

std::string FdBudget::Describe() const {
  return "limit " + std::to_string(limit) + ", bound " +
         std::to_string(bound()) + ": " + std::to_string(kFixed) + " fixed + " +
         std::to_string(serving()) + " serving threads x " +
         std::to_string(kPerRequest + kLeases) + " (" +
         std::to_string(kPerRequest) + " for a request, " +
         std::to_string(kLeases) + " leases) + " +
         std::to_string(threads + ring_workers) + " threads x " +
         std::to_string(dir_cache) + " cached directories + " +
         (ring_workers ? std::to_string(ring_workers) + " ring workers x " +
                             std::to_string(kPerRing) + " + "
                       : std::string()) +
         std::to_string(files) + " file cache + " + std::to_string(pinned) +
         " pinned object-store files + 2 x " + std::to_string(kept) +
         " kept unlinked files (half a reserve for a full disk)";
}

Result<FdBudget> FdBudget::Plan(size_t limit, size_t threads,
                                size_t ring_workers) {
  FdBudget b;
  b.limit = limit;
  b.ring_workers = ring_workers;
  b.threads = std::max<size_t>(threads, 1);
  constexpr size_t kMinFiles = 4;
  for (size_t dir_cache : {kDirCache, size_t{0}}) {
    b.dir_cache = dir_cache;
    size_t taken = b.bound_without_caches();
    if (limit < taken + 2 * kMinFiles) continue;
    // Half of the rest is shared out, half left as a margin.
    size_t share = (limit - taken) / 4;
    b.files = std::clamp(share, kMinFiles, kMaxFiles);
    b.kept = std::min(share / 2, kMaxKept);  // and as many in reserve
    b.pinned = std::min(share / 4, kMaxPinned);
    return b;
  }
  b.dir_cache = 0;
  size_t needed = b.bound_without_caches() + 2 * kMinFiles;
  return Error::Of(
      EMFILE,
      "plan descriptors (the open-files limit is " + std::to_string(limit) +
          "; " + std::to_string(b.threads) + " threads need at least " +
          std::to_string(needed) + ": raise `ulimit -n` or lower -o threads=N)",
      "RLIMIT_NOFILE");
}

Result<size_t> RaiseFdLimit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return Error::Errno("getrlimit", "RLIMIT_NOFILE");
  if (rl.rlim_cur != rl.rlim_max) {
    struct rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
  }
  // An unlimited limit is planned as a large one.
  if (rl.rlim_cur == RLIM_INFINITY) return size_t{1} << 20;
  return static_cast<size_t>(rl.rlim_cur);
}

}  // namespace acqfs
