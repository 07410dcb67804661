// The parts of the kernel's FUSE protocol (include/uapi/linux/fuse.h) newer
// than Debian 12's <linux/fuse.h> (7.37, Linux 6.1): FUSE over io_uring
// (7.42, Linux 6.14) and passthrough (7.40, Linux 6.9). Layouts as the
// kernel's header and Documentation/filesystems/fuse-io-uring.rst give
// them; the static_asserts hold their sizes to the kernel's.
#ifndef ACQFS_FUSE_FUSE_UAPI_H_
#define ACQFS_FUSE_FUSE_UAPI_H_

#include <linux/fuse.h>
#include <sys/ioctl.h>

#include <cstdint>

namespace acqfs::fuse_uapi {

// fuse_init_in.flags2 / fuse_init_out.flags2 bits (the 64-bit flag minus
// 32), valid when FUSE_INIT_EXT is set in flags.
inline constexpr uint32_t kPassthrough2 = 1u << 5;  // FUSE_PASSTHROUGH
inline constexpr uint32_t kOverIoUring2 = 1u << 9;  // FUSE_OVER_IO_URING

// fuse_open_out.open_flags: reads and writes of the open file go to the
// backing file whose id is in fuse_open_out's last field (backing_id).
inline constexpr uint32_t kFopenPassthrough = 1u << 7;

// The commands of IORING_OP_URING_CMD on /dev/fuse (sqe->cmd_op).
inline constexpr uint32_t kCmdRegister = 1;        // REGISTER
inline constexpr uint32_t kCmdCommitAndFetch = 2;  // COMMIT_AND_FETCH

// What the kernel and the daemon exchange beside the request's headers.
struct RingEntInOut {
  uint64_t flags;
  // The request's id: the daemon commits its reply under it.
  uint64_t commit_id;
  // Bytes in the payload buffer: the request's, then the reply's.
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};
static_assert(sizeof(RingEntInOut) == 32);

// The header buffer of a ring entry (iov[0] of REGISTER).
struct RingReqHeader {
  // fuse_in_header of the request; fuse_out_header of the reply.
  char in_out[128];
  // The request's first argument, its per-operation header (fuse_write_in,
  // fuse_open_in...), when it has one; the rest is in the payload buffer.
  char op_in[128];
  RingEntInOut ring_ent_in_out;
};
static_assert(sizeof(RingReqHeader) == 288);

// The command area of a 128-byte SQE (sqe->cmd).
struct RingCmdReq {
  uint64_t flags;
  uint64_t commit_id;  // COMMIT_AND_FETCH: the reply's request
  uint16_t qid;        // the queue (a CPU number)
  uint8_t padding[6];
};
static_assert(sizeof(RingCmdReq) == 24);

// FUSE_DEV_IOC_BACKING_OPEN's argument: a descriptor the kernel takes a
// reference of; the ioctl returns the backing id (> 0).
struct BackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
inline constexpr unsigned long kDevIocBackingOpen =
    _IOW(229, 1, struct BackingMap);
inline constexpr unsigned long kDevIocBackingClose = _IOW(229, 2, uint32_t);

// fuse_init_out from 7.40 on: max_stack_depth follows flags2.
struct InitOut {
  uint32_t major;
  uint32_t minor;
  uint32_t max_readahead;
  uint32_t flags;
  uint16_t max_background;
  uint16_t congestion_threshold;
  uint32_t max_write;
  uint32_t time_gran;
  uint16_t max_pages;
  uint16_t map_alignment;
  uint32_t flags2;
  uint32_t max_stack_depth;
  uint32_t unused[6];
};
static_assert(sizeof(InitOut) == 64);
static_assert(sizeof(InitOut) == sizeof(fuse_init_out));

}  // namespace acqfs::fuse_uapi

#endif  // ACQFS_FUSE_FUSE_UAPI_H_
