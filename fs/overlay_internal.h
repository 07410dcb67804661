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
// The tree lock taken to change something. Taken with the tree generation,
// it moves the generation on, which retires every directory descriptor
// cached under the previous one (Layer::DirFd): for a change that may
// rename, replace or remove a directory of a layer (rename, rmdir, a name
// found gone from the disk, a checkpoint or rewind). A change that only
// adds names or changes objects in place (create, mkdir, link, copy-up,
// setattr, xattrs, write, unlink of a non-directory) leaves every cached
// directory valid, so it takes the lock alone: a tar x then opens its
// directory once, not once a request.
//
// A reshaping change moves the generation on both when it takes the lock
// and before it lets go, so that no descriptor cached while it ran (its
// own lookups, before it moved a directory) outlives it.
class ExclusiveLock {
 public:
  explicit ExclusiveLock(std::shared_mutex& mu) : l_(mu) {}
  ExclusiveLock(std::shared_mutex& mu, std::atomic<uint64_t>& gen,
                bool reshapes = true)
      : l_(mu), gen_(reshapes ? &gen : nullptr) {
    if (gen_) gen_->fetch_add(1, std::memory_order_relaxed);
  }
  ~ExclusiveLock() {
    if (gen_) gen_->fetch_add(1, std::memory_order_relaxed);
  }
  ExclusiveLock(const ExclusiveLock&) = delete;
  ExclusiveLock& operator=(const ExclusiveLock&) = delete;

 private:
  std::unique_lock<std::shared_mutex> l_;  // released after the bump
  std::atomic<uint64_t>* gen_ = nullptr;
};
using TableLock = std::lock_guard<std::mutex>;

inline Status MakeCall(int rc, const char* op, const std::string& shown) {
  if (rc != 0) return Error::Errno(op, shown);
  return Ok();
}

}  // namespace acqfs

#endif  // ACQFS_FS_OVERLAY_INTERNAL_H_
