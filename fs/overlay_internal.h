// Private to the Overlay's own files (fs/overlay*.cc): the lock guards and
// the small helpers they share. Nothing else includes it.
#ifndef ACQFS_FS_OVERLAY_INTERNAL_H_
#define ACQFS_FS_OVERLAY_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "common/error.h"

namespace acqfs {

using SharedLock = std::shared_lock<std::shared_mutex>;
// The tree lock taken to change something. Taking it moves the tree
// generation on, which retires every directory descriptor cached under the
// previous one (Layer::DirFd).
class ExclusiveLock {
 public:
  ExclusiveLock(std::shared_mutex& mu, std::atomic<uint64_t>& gen) : l_(mu) {
    gen.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::unique_lock<std::shared_mutex> l_;
};
using TableLock = std::lock_guard<std::mutex>;

inline Status MakeCall(int rc, const char* op, const std::string& shown) {
  if (rc != 0) return Error::Errno(op, shown);
  return Ok();
}

}  // namespace acqfs

#endif  // ACQFS_FS_OVERLAY_INTERNAL_H_
