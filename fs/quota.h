// The size cap on a sandbox's upper layer (docs/sandboxes.md, "Quota").
// What counts: the bytes of the upper layer's regular files (their apparent
// size, each inode once however many names it has) and of its symlink
// targets. Directories, whiteouts and xattrs do not count. Every change that
// could grow the count is charged before it happens and refused with EDQUOT
// when it would pass the limit; what is freed is given back.
// Thread-safety: all methods may be called concurrently; growth of one file
// is settled under a per-file stripe lock, so concurrent writers of one file
// are charged exactly once.
#ifndef ACQFS_FS_QUOTA_H_
#define ACQFS_FS_QUOTA_H_

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "common/error.h"

namespace acqfs {

class Quota {
 public:
  Quota(uint64_t limit, uint64_t used) : limit_(limit), used_(used) {}
  Quota(const Quota&) = delete;
  Quota& operator=(const Quota&) = delete;

  // The use of the upper layer rooted at `upper_fd` (the definition above).
  // Fails, naming the path, on any entry it cannot stat: a quota is never
  // enforced on a guess.
  static Result<uint64_t> Measure(int upper_fd, const std::string& shown);

  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_.load(); }

  // Takes `bytes`; EDQUOT naming `shown` when used + bytes > limit.
  Status Reserve(uint64_t bytes, const std::string& shown);
  // Takes `bytes` whatever the limit (growth that already happened).
  void Force(uint64_t bytes) { used_.fetch_add(bytes); }
  void Release(uint64_t bytes);

  // Runs `op`, which may grow the regular file open as `fd` up to `end`
  // bytes (or, for a truncate, to exactly `end`): the growth is reserved
  // first (EDQUOT, and `op` does not run, when it would pass the limit),
  // then settled to the size the file really has afterwards. `key` names
  // the file (any stable pointer) for the stripe lock. `op` returns a
  // negative errno-style value on failure, as the system calls do.
  Result<int64_t> Charged(const void* key, int fd, off_t end,
                          const std::function<int64_t()>& op,
                          const std::string& shown);

 private:
  std::mutex& StripeFor(const void* key);

  const uint64_t limit_;
  std::atomic<uint64_t> used_;
  std::array<std::mutex, 64> stripes_;
};

}  // namespace acqfs

#endif  // ACQFS_FS_QUOTA_H_
