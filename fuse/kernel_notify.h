// KernelNotify: FUSE notifications (FUSE_NOTIFY_INVAL_ENTRY and
// FUSE_NOTIFY_INVAL_INODE) written to a /dev/fuse descriptor of its own,
// for threads that are not the session's workers: the page dropper and the
// host watch (fs/host_watch.h). Its descriptor is a duplicate of the
// session's, so it stays valid, and never names another file, for as long
// as a holder of the object lives, even when the session has closed its
// own at unmount. A notification may wait in the kernel (dropping a page
// that a read under way holds), so the caller must hold no lock a worker
// needs. The messages are the kernel's (include/uapi/linux/fuse.h): an out
// header with `unique` 0 and the notify code in `error`, then the code's
// argument.
// Thread-safety: any thread; the descriptor is immutable after Open.
#ifndef ACQFS_FUSE_KERNEL_NOTIFY_H_
#define ACQFS_FUSE_KERNEL_NOTIFY_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "common/error.h"
#include "common/handle.h"

namespace acqfs {

class KernelNotify {
 public:
  static Result<std::shared_ptr<KernelNotify>> Open(int fuse_fd);

  // The kernel forgets `name` in the directory `parent` (a node id): the
  // next use looks it up again. 0, or the errno (ENOENT: the kernel knows
  // no such directory or name).
  int InvalEntry(uint64_t parent, std::string_view name) const;
  // The kernel drops the cached attributes of `ino`, and its pages from
  // `off` for `len` bytes (len 0: to the end); `off` < 0: the attributes
  // only (no page is touched, so it never waits for a read).
  int InvalInode(uint64_t ino, int64_t off, int64_t len) const;

  int fd() const { return fd_.get(); }

 private:
  explicit KernelNotify(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace acqfs

#endif  // ACQFS_FUSE_KERNEL_NOTIFY_H_
