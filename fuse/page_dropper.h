// PageDropper: asks the kernel to drop the cached pages of a file whose
// delayed write the daemon refused.
//
// A write that reaches the daemon from the page cache (a shared writable
// mmap, or the writeback cache) has already changed the pages every reader
// of the file sees. When the daemon refuses it (a read-only path, the
// quota, a full disk), the kernel only records the error; its clean pages
// would go on showing bytes that were never stored, until a remount. So a
// refused delayed write queues its inode here, and a thread of its own
// sends FUSE_NOTIFY_INVAL_INODE for it (offset 0, length 0: every page):
// the kernel unmaps and drops those pages, and the next read or fault asks
// the daemon for what is really stored.
//
// The notification cannot be sent from the worker that refused the write:
// the kernel holds the page under writeback until that reply, and dropping
// it waits for the writeback. The thread writes the notification through
// KernelNotify (its own duplicate of the session's /dev/fuse descriptor,
// the same message libfuse sends), so it shares nothing with the session
// that a shutdown destroys.
// Thread-safety: Drop() may be called from any thread.
#ifndef ACQFS_FUSE_PAGE_DROPPER_H_
#define ACQFS_FUSE_PAGE_DROPPER_H_

#include <cstdint>
#include <memory>

#include "common/error.h"

namespace acqfs {

class KernelNotify;

class PageDropper {
 public:
  // Starts the thread, notifying through `notify`.
  static Result<std::unique_ptr<PageDropper>> Start(
      std::shared_ptr<const KernelNotify> notify);
  // Stops the thread: waits up to a second for a notification in flight
  // (the kernel may need a worker to write a page back first), then leaves
  // the thread to finish alone.
  ~PageDropper();
  PageDropper(const PageDropper&) = delete;
  PageDropper& operator=(const PageDropper&) = delete;

  // Queues `ino` (a node id); returns at once. Queued ids coalesce; past
  // 4,096 waiting, further ones are dropped and counted in the log.
  void Drop(uint64_t ino);

  struct State;

 private:
  explicit PageDropper(std::shared_ptr<State> state)
      : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace acqfs

#endif  // ACQFS_FUSE_PAGE_DROPPER_H_
