// FUSE over io_uring spoken by hand, with no libfuse and no daemon: a mount
// of the test's own, its INIT answered on /dev/fuse, one ring entry per CPU
// queue registered as fuse/fuse_uapi.h lays the structures out, and the
// requests of a stat(2) answered through the ring. It holds the daemon's
// transport (fuse/uring_transport.h) to the kernel's protocol, and shows
// what the kernel does with a reply committed under an id it never sent:
// it refuses it (ENOENT) and changes nothing, so the request's real reply
// still lands.
//
// Needs root and /sys/module/fuse/parameters/enable_uring at Y: CTest runs
// it inside the acqfs_uring_on fixture (tests/CMakeLists.txt).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fuse/fuse_uapi.h"
#include "fuse/uring_transport.h"

namespace acqfs {
namespace {

using fuse_uapi::RingCmdReq;
using fuse_uapi::RingEntInOut;
using fuse_uapi::RingReqHeader;

constexpr size_t kMaxWrite = 65536;

struct Entry {
  alignas(4096) char header[4096];
  std::vector<char> payload = std::vector<char>(kMaxWrite);
  struct iovec iov[2];
};

class RawRing {
 public:
  ~RawRing() { Teardown(); }

  // Mounts, answers INIT asking for the ring, registers one entry per
  // queue. Fails the test on any step.
  void Start() {
    char dir[] = "/tmp/acqfs-uring-proto.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    mnt_ = dir;
    fd_ = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd_, 0) << std::strerror(errno);
    const std::string opts =
        "fd=" + std::to_string(fd_) + ",rootmode=40000,user_id=0,group_id=0";
    ASSERT_EQ(::mount("acqfs-proto", mnt_.c_str(), "fuse.acqfs-proto",
                      MS_NOSUID | MS_NODEV, opts.c_str()),
              0)
        << std::strerror(errno);
    mounted_ = true;
    AnswerInit();
    auto cpus = PossibleCpus();
    ASSERT_TRUE(cpus.ok());
    queues_ = *cpus;
    struct io_uring_params p;
    std::memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
    p.cq_entries = 4 * queues_;
    ASSERT_EQ(io_uring_queue_init_params(2 * queues_, &ring_, &p), 0);
    ring_up_ = true;
    int files[1] = {fd_};
    ASSERT_EQ(io_uring_register_files(&ring_, files, 1), 0);
    entries_.resize(queues_);
    for (unsigned q = 0; q < queues_; ++q) {
      Entry& e = entries_[q];
      e.iov[0] = {e.header, sizeof(RingReqHeader)};
      e.iov[1] = {e.payload.data(), e.payload.size()};
      Submit(q, fuse_uapi::kCmdRegister, 0);
    }
    ASSERT_EQ(io_uring_submit(&ring_), static_cast<int>(queues_));
    struct io_uring_cqe* cqe = nullptr;
    if (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      FAIL() << "a registration was refused: " << std::strerror(-res);
    }
  }

  // Queues a command of entry q (not submitted).
  void Submit(unsigned q, uint32_t cmd_op, uint64_t commit_id) {
    struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    ASSERT_NE(sqe, nullptr);
    std::memset(sqe, 0, 2 * sizeof *sqe);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->flags = IOSQE_FIXED_FILE;
    sqe->fd = 0;
    sqe->cmd_op = cmd_op;
    io_uring_sqe_set_data64(sqe, q);
    if (cmd_op == fuse_uapi::kCmdRegister) {
      sqe->addr = reinterpret_cast<uint64_t>(entries_[q].iov);
      sqe->len = 2;
    }
    RingCmdReq req;
    std::memset(&req, 0, sizeof req);
    req.qid = static_cast<uint16_t>(q);
    req.commit_id = commit_id;
    std::memcpy(sqe->cmd, &req, sizeof req);
  }

  // The next completion within `ms`: its entry and result; false on none.
  bool Next(unsigned* q, int* res, long ms = 10000) {
    struct __kernel_timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    struct io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe_timeout(&ring_, &cqe, &ts) != 0) return false;
    *q = static_cast<unsigned>(cqe->user_data);
    *res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    return true;
  }

  fuse_in_header Request(unsigned q) const {
    fuse_in_header in;
    std::memcpy(&in, entries_[q].header, sizeof in);
    return in;
  }
  uint64_t CommitId(unsigned q) const {
    RingEntInOut eio;
    std::memcpy(&eio,
                entries_[q].header + offsetof(RingReqHeader, ring_ent_in_out),
                sizeof eio);
    return eio.commit_id;
  }
  // Writes a reply into entry q: error, or `body` as its payload.
  void Reply(unsigned q, uint64_t unique, int error, const void* body,
             size_t size) {
    Entry& e = entries_[q];
    fuse_out_header out;
    out.len = static_cast<uint32_t>(sizeof out + size);
    out.error = error;
    out.unique = unique;
    std::memcpy(e.header, &out, sizeof out);
    if (size) std::memcpy(e.payload.data(), body, size);
    RingEntInOut eio;
    std::memcpy(&eio, e.header + offsetof(RingReqHeader, ring_ent_in_out),
                sizeof eio);
    eio.payload_sz = static_cast<uint32_t>(size);
    std::memcpy(e.header + offsetof(RingReqHeader, ring_ent_in_out), &eio,
                sizeof eio);
  }
  void Commit(unsigned q, uint64_t commit_id) {
    Submit(q, fuse_uapi::kCmdCommitAndFetch, commit_id);
    ASSERT_EQ(io_uring_submit(&ring_), 1);
  }

  const std::string& mnt() const { return mnt_; }

  void Teardown() {
    if (mounted_) ::umount2(mnt_.c_str(), MNT_DETACH);
    mounted_ = false;
    if (ring_up_) {
      (void)io_uring_unregister_files(&ring_);
      io_uring_queue_exit(&ring_);
    }
    ring_up_ = false;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!mnt_.empty()) ::rmdir(mnt_.c_str());
    mnt_.clear();
  }

 private:
  void AnswerInit() {
    std::vector<char> buf(1 << 20);
    ssize_t n = ::read(fd_, buf.data(), buf.size());
    ASSERT_GE(
        n, static_cast<ssize_t>(sizeof(fuse_in_header) + sizeof(fuse_init_in)));
    fuse_in_header h;
    std::memcpy(&h, buf.data(), sizeof h);
    ASSERT_EQ(h.opcode, FUSE_INIT);
    fuse_init_in in;
    std::memcpy(&in, buf.data() + sizeof h, sizeof in);
    ASSERT_TRUE(in.flags & FUSE_INIT_EXT);
    ASSERT_TRUE(in.flags2 & fuse_uapi::kOverIoUring2)
        << "the kernel does not offer FUSE_OVER_IO_URING: is "
           "/sys/module/fuse/parameters/enable_uring Y?";
    struct {
      fuse_out_header h;
      fuse_uapi::InitOut o;
    } reply;
    std::memset(&reply, 0, sizeof reply);
    reply.h.len = sizeof reply;
    reply.h.unique = h.unique;
    reply.o.major = FUSE_KERNEL_VERSION;
    reply.o.minor = 42;
    reply.o.max_readahead = in.max_readahead;
    reply.o.flags = FUSE_INIT_EXT | FUSE_MAX_PAGES;
    reply.o.flags2 = fuse_uapi::kOverIoUring2;
    reply.o.max_write = kMaxWrite;
    reply.o.max_pages = kMaxWrite / 4096;
    reply.o.max_background = 16;
    reply.o.congestion_threshold = 12;
    ASSERT_EQ(::write(fd_, &reply, sizeof reply),
              static_cast<ssize_t>(sizeof reply))
        << std::strerror(errno);
  }

  std::string mnt_;
  int fd_ = -1;
  bool mounted_ = false;
  struct io_uring ring_;
  bool ring_up_ = false;
  unsigned queues_ = 0;
  std::vector<Entry> entries_;
};

TEST(UringProtocol, RequestsComeThroughTheRingAndAnUnknownCommitIdIsRefused) {
  RawRing r;
  ASSERT_NO_FATAL_FAILURE(r.Start());
  std::atomic<int> stat_rc{1};
  std::atomic<int> stat_errno{0};
  struct stat st;
  std::memset(&st, 0, sizeof st);
  std::thread caller([&] {
    int rc = ::stat(r.mnt().c_str(), &st);
    stat_errno = errno;
    stat_rc = rc;
  });
  bool refused_once = false;
  int answered = 0;
  // Until the stat returns (it may, right after the last commit, while
  // this loop already waits for another request).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stat_rc.load() == 1) {
    unsigned q = 0;
    int res = 0;
    if (!r.Next(&q, &res, 100)) {
      if (std::chrono::steady_clock::now() < deadline) continue;
      ADD_FAILURE() << "the stat got no answer within 10 s";
      break;
    }
    if (res == -ENOENT) {
      EXPECT_FALSE(refused_once) << "a second ENOENT";
      continue;
    }
    ASSERT_EQ(res, 0) << std::strerror(-res);
    const fuse_in_header in = r.Request(q);
    const uint64_t id = r.CommitId(q);
    EXPECT_EQ(id, in.unique) << "the commit id is the request's id";
    if (!refused_once) {
      // A reply under an id the kernel never sent: refused, and the
      // entry and its request are left as they were.
      r.Reply(q, id + 1000003, -EIO, nullptr, 0);
      r.Commit(q, id + 1000003);
      unsigned q2 = 0;
      int res2 = 0;
      ASSERT_TRUE(r.Next(&q2, &res2));
      EXPECT_EQ(q2, q);
      EXPECT_EQ(res2, -ENOENT);
      refused_once = true;
    }
    if (in.opcode == FUSE_GETATTR) {
      fuse_attr_out out;
      std::memset(&out, 0, sizeof out);
      out.attr.ino = FUSE_ROOT_ID;
      out.attr.mode = S_IFDIR | 0751;
      out.attr.nlink = 2;
      out.attr_valid = 0;
      r.Reply(q, in.unique, 0, &out, sizeof out);
    } else {
      r.Reply(q, in.unique, -ENOSYS, nullptr, 0);
    }
    r.Commit(q, id);
    ++answered;
  }
  caller.join();
  EXPECT_TRUE(refused_once);
  EXPECT_GE(answered, 1);
  EXPECT_EQ(stat_rc.load(), 0) << std::strerror(stat_errno.load());
  EXPECT_EQ(st.st_mode, static_cast<mode_t>(S_IFDIR | 0751));
}

}  // namespace
}  // namespace acqfs
