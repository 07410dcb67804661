#include "fuse/kernel_notify.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/uio.h>

#include <cerrno>

namespace acqfs {
namespace {

int Send(int fd, int code, struct iovec* args, int nargs, size_t len) {
  fuse_out_header head{};
  head.unique = 0;
  head.error = code;
  head.len = static_cast<uint32_t>(sizeof head + len);
  struct iovec iov[4];
  iov[0] = {&head, sizeof head};
  for (int i = 0; i < nargs; ++i) iov[i + 1] = args[i];
  for (;;) {
    if (::writev(fd, iov, nargs + 1) >= 0) return 0;
    if (errno != EINTR) return errno;
  }
}

}  // namespace

Result<std::shared_ptr<KernelNotify>> KernelNotify::Open(int fuse_fd) {
  int fd = ::fcntl(fuse_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Error::Errno("dup", "/dev/fuse");
  return std::shared_ptr<KernelNotify>(new KernelNotify(UniqueFd(fd)));
}

int KernelNotify::InvalEntry(uint64_t parent, std::string_view name) const {
  fuse_notify_inval_entry_out arg{};
  arg.parent = parent;
  arg.namelen = static_cast<uint32_t>(name.size());
  static const char kNul = '\0';
  struct iovec args[3] = {{&arg, sizeof arg},
                          {const_cast<char*>(name.data()), name.size()},
                          {const_cast<char*>(&kNul), 1}};
  return Send(fd_.get(), FUSE_NOTIFY_INVAL_ENTRY, args, 3,
              sizeof arg + name.size() + 1);
}

int KernelNotify::InvalInode(uint64_t ino, int64_t off, int64_t len) const {
  fuse_notify_inval_inode_out arg{};
  arg.ino = ino;
  arg.off = off;
  arg.len = len;
  struct iovec args[1] = {{&arg, sizeof arg}};
  return Send(fd_.get(), FUSE_NOTIFY_INVAL_INODE, args, 1, sizeof arg);
}

}  // namespace acqfs
