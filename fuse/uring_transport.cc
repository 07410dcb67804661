#include "fuse/uring_transport.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/handle.h"
#include "fuse/fuse_ops.h"  // libfuse, at the version the daemon uses
#include "fuse/fuse_uapi.h"

namespace acqfs {

using fuse_uapi::RingCmdReq;
using fuse_uapi::RingEntInOut;
using fuse_uapi::RingReqHeader;

namespace {

// user_data of a worker's two kinds of completion.
constexpr uint64_t kEntryTag = 1;  // its ring entry's command
constexpr uint64_t kStopTag = 2;   // the poll of its stop eventfd

// Room before the payload buffer for the request's fuse_in_header and its
// operation's header, so that libfuse gets the request contiguous with no
// copy of the payload (a WRITE's data).
constexpr size_t kPrefix = 4096;

// An anonymous mapping, unmapped by the owner.
class Mapping {
 public:
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (p_ != nullptr) ::munmap(p_, n_);
  }
  Status Map(size_t n, const char* what) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Error::Errno("mmap", what);
    p_ = static_cast<char*>(p);
    n_ = n;
    return Ok();
  }
  char* get() const { return p_; }

 private:
  char* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace

// One worker: a thread, its io_uring and its ring entry. The fields are the
// worker thread's alone, but for stop_ (written by Stop) and served_.
class UringTransport::Worker {
 public:
  Worker(unsigned qid, UniqueFd stop) : qid_(qid), stop_(std::move(stop)) {}
  // After the thread ended: its exit cancelled the entry's command (the
  // kernel ends a thread's cancelable io_uring commands as it exits).
  // The ring's reference to /dev/fuse goes now, synchronously, rather
  // than with the ring, which the kernel frees in the background: the
  // connection must end when the daemon's last descriptor of it closes,
  // as on /dev/fuse alone, not some time after the daemon exited.
  ~Worker() {
    if (!ring_up_) return;
    if (files_registered_) {
      int rc = io_uring_unregister_files(&ring_);
      if (rc < 0)
        spdlog::warn("fuse ring: queue {}: io_uring_unregister_files: {}", qid_,
                     std::strerror(-rc));
    }
    io_uring_queue_exit(&ring_);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  Status Setup(int dev_fd, size_t payload_size);
  // Serves requests until the connection ends or the stop eventfd fires.
  void Serve(fuse_session* se, const UringOptions& o);
  void WakeToStop() {
    uint64_t one = 1;
    if (::write(stop_.get(), &one, sizeof one) != sizeof one)
      spdlog::warn("fuse ring: wake a worker to stop: {}",
                   std::strerror(errno));
  }

  unsigned qid() const { return qid_; }
  std::atomic<uint64_t> served{0};

  // The request being served on this thread (CaptureReply and friends).
  bool Capture(const struct iovec* iov, int count, ssize_t* n);
  char* ReplyBuffer(size_t* size) {
    if (!serving_ || replied_) return nullptr;
    *size = payload_size_;
    return payload_;
  }

 private:
  RingReqHeader* header() const {
    return reinterpret_cast<RingReqHeader*>(header_.get());
  }
  void PrepareCommand(uint32_t cmd_op);
  void ServeOne(fuse_session* se, const UringOptions& o);
  void SetReply(int error, size_t payload_bytes);

  const unsigned qid_;
  UniqueFd stop_;
  struct io_uring ring_;
  bool ring_up_ = false;
  bool files_registered_ = false;
  Mapping header_;
  Mapping payload_map_;
  char* payload_ = nullptr;  // payload_map_ + kPrefix
  size_t payload_size_ = 0;
  struct iovec iov_[2];
  uint32_t last_cmd_ = 0;
  uint64_t commit_id_ = 0;  // the request being served: its id
  bool commit_pending_ = false;
  bool serving_ = false;  // inside fuse_session_process_buf
  bool replied_ = false;  // its reply is in the entry
};

namespace {
thread_local UringTransport::Worker* tls_worker = nullptr;
}  // namespace

Status UringTransport::Worker::Setup(int dev_fd, size_t payload_size) {
  struct io_uring_params p;
  std::memset(&p, 0, sizeof p);
  // 128-byte SQEs hold the command area (RingCmdReq); two SQEs suffice: the
  // entry's command and the stop poll.
  p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
  p.cq_entries = 4;
  int rc = io_uring_queue_init_params(2, &ring_, &p);
  if (rc < 0) return Error::Of(-rc, "io_uring_queue_init_params", "/dev/fuse");
  ring_up_ = true;
  int files[1] = {dev_fd};
  rc = io_uring_register_files(&ring_, files, 1);
  if (rc < 0) return Error::Of(-rc, "io_uring_register_files", "/dev/fuse");
  files_registered_ = true;
  ACQFS_TRY(header_.Map(4096, "a fuse ring entry's header buffer"));
  ACQFS_TRY(payload_map_.Map(kPrefix + payload_size,
                             "a fuse ring entry's payload buffer"));
  payload_ = payload_map_.get() + kPrefix;
  payload_size_ = payload_size;
  iov_[0].iov_base = header_.get();
  iov_[0].iov_len = sizeof(RingReqHeader);
  iov_[1].iov_base = payload_;
  iov_[1].iov_len = payload_size;

  PrepareCommand(fuse_uapi::kCmdRegister);
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) return Error::Of(EBUSY, "io_uring_get_sqe", "/dev/fuse");
  io_uring_prep_poll_add(sqe, stop_.get(), POLLIN);
  io_uring_sqe_set_data64(sqe, kStopTag);
  rc = io_uring_submit(&ring_);
  if (rc < 0) return Error::Of(-rc, "io_uring_submit", "/dev/fuse");
  commit_pending_ = false;
  // A refused registration completes at once (fuse_uring_cmd's checks).
  struct io_uring_cqe* cqe = nullptr;
  if (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe->user_data == kEntryTag &&
      cqe->res < 0) {
    int err = -cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    return Error::Of(err,
                     "register a fuse ring entry (FUSE_IO_URING_CMD_REGISTER)",
                     "/dev/fuse");
  }
  return Ok();
}

void UringTransport::Worker::PrepareCommand(uint32_t cmd_op) {
  // Never null: the ring has two SQEs and at most one command of the
  // entry's is ever outstanding.
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  std::memset(sqe, 0, 2 * sizeof *sqe);  // SQE128: two slots
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->flags = IOSQE_FIXED_FILE;
  sqe->fd = 0;  // the registered /dev/fuse
  sqe->cmd_op = cmd_op;
  io_uring_sqe_set_data64(sqe, kEntryTag);
  RingCmdReq req;
  std::memset(&req, 0, sizeof req);
  req.qid = static_cast<uint16_t>(qid_);
  if (cmd_op == fuse_uapi::kCmdRegister) {
    sqe->addr = reinterpret_cast<uint64_t>(iov_);
    sqe->len = 2;
  } else {
    req.commit_id = commit_id_;
  }
  std::memcpy(sqe->cmd, &req, sizeof req);
  last_cmd_ = cmd_op;
  commit_pending_ = true;
}

void UringTransport::Worker::SetReply(int error, size_t payload_bytes) {
  fuse_out_header out;
  out.len = static_cast<uint32_t>(sizeof out + payload_bytes);
  out.error = error;
  out.unique = commit_id_;
  std::memcpy(header()->in_out, &out, sizeof out);
  RingEntInOut eio;
  std::memcpy(&eio, &header()->ring_ent_in_out, sizeof eio);
  eio.payload_sz = static_cast<uint32_t>(payload_bytes);
  std::memcpy(&header()->ring_ent_in_out, &eio, sizeof eio);
  replied_ = true;
  // Committed at once, not when the handler returns: what a handler does
  // after its reply (a notification that drops cached attributes, the
  // page dropper's work) must reach the kernel after the reply, as it does
  // on /dev/fuse, where the reply's writev returns once the kernel has it.
  // The commit fetches the next request into the same buffers: nothing
  // reads them after the reply (libfuse's handlers and ServeOne don't).
  PrepareCommand(fuse_uapi::kCmdCommitAndFetch);
  int rc = io_uring_submit(&ring_);
  if (rc >= 0) commit_pending_ = false;
}

void UringTransport::Worker::ServeOne(fuse_session* se, const UringOptions& o) {
  fuse_in_header in;
  std::memcpy(&in, header()->in_out, sizeof in);
  RingEntInOut eio;
  std::memcpy(&eio, &header()->ring_ent_in_out, sizeof eio);
  commit_id_ = eio.commit_id;
  replied_ = false;
  const size_t payload = eio.payload_sz;
  // The request's length counts its header, its operation's header (in
  // op_in) and the payload.
  if (in.len < sizeof in + payload || payload > payload_size_ ||
      in.len - sizeof in - payload > sizeof header()->op_in ||
      in.unique != commit_id_) {
    spdlog::error(
        "fuse ring: a malformed request (opcode {}, length {}, payload {}, "
        "id {}, commit id {}): answered EIO",
        in.opcode, in.len, payload, in.unique, commit_id_);
    SetReply(-EIO, 0);
  } else {
    const size_t op = in.len - sizeof in - payload;
    char* start = payload_ - sizeof in - op;
    std::memcpy(start, &in, sizeof in);
    std::memcpy(start + sizeof in, header()->op_in, op);
    size_t n = in.len;
    if (o.hook != nullptr)
      n = o.hook(o.hook_arg, start, sizeof in + op + payload_size_, n);
    struct fuse_buf buf;
    std::memset(&buf, 0, sizeof buf);
    buf.mem = start;
    buf.size = n;
    serving_ = true;
    tls_worker = this;
    fuse_session_process_buf(se, &buf);
    tls_worker = nullptr;
    serving_ = false;
    if (!replied_) {
      spdlog::error("fuse ring: request {} (opcode {}) got no reply: EIO",
                    in.unique, in.opcode);
      SetReply(-EIO, 0);
    }
  }
  served.fetch_add(1, std::memory_order_relaxed);
}

bool UringTransport::Worker::Capture(const struct iovec* iov, int count,
                                     ssize_t* n) {
  if (!serving_ || replied_ || count < 1 ||
      iov[0].iov_len != sizeof(fuse_out_header))
    return false;
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  if (out.unique != commit_id_) return false;
  size_t total = 0;
  for (int i = 1; i < count; ++i) total += iov[i].iov_len;
  if (total > payload_size_) {
    spdlog::error(
        "fuse ring: a reply of {} bytes to request {} exceeds the entry's "
        "{}: EIO",
        total, out.unique, payload_size_);
    SetReply(-EIO, 0);
  } else {
    size_t at = 0;
    for (int i = 1; i < count; ++i) {
      if (iov[i].iov_base != payload_ + at)
        std::memmove(payload_ + at, iov[i].iov_base, iov[i].iov_len);
      at += iov[i].iov_len;
    }
    SetReply(out.error, out.error == 0 ? total : 0);
  }
  *n = static_cast<ssize_t>(sizeof out + total);
  return true;
}

void UringTransport::Worker::Serve(fuse_session* se, const UringOptions& o) {
  for (;;) {
    int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc >= 0) commit_pending_ = false;
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      spdlog::error("fuse ring: queue {}: io_uring_submit_and_wait: {}", qid_,
                    std::strerror(-rc));
      return;
    }
    bool stop = false;
    struct io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const uint64_t tag = cqe->user_data;
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (tag == kStopTag) {
        stop = true;
        continue;
      }
      if (res == -EINTR || res == -EAGAIN) {
        PrepareCommand(last_cmd_);  // the kernel asks for it again
        continue;
      }
      if (res < 0) {
        // The connection ended (unmount, abort): the entry is gone.
        if (res != -ENOTCONN && res != -ECONNABORTED && res != -ENODEV &&
            res != -ECANCELED)
          spdlog::error("fuse ring: queue {}: {} failed: {}", qid_,
                        last_cmd_ == fuse_uapi::kCmdRegister
                            ? "FUSE_IO_URING_CMD_REGISTER"
                            : "FUSE_IO_URING_CMD_COMMIT_AND_FETCH",
                        std::strerror(-res));
        return;
      }
      ServeOne(se, o);
    }
    if (stop) {
      // A reply made but not sent yet still goes: its caller waits for it.
      if (commit_pending_) (void)io_uring_submit(&ring_);
      return;
    }
  }
}

// ------------------------------------------------------------- transport

Result<unsigned> PossibleCpus() {
  const char* path = "/sys/devices/system/cpu/possible";
  std::ifstream f(path);
  std::string text;
  if (!f || !std::getline(f, text)) return Error::Errno("read", path);
  // "0-1", "0", "0-3,8-11"
  unsigned count = 0;
  std::stringstream ss(text);
  std::string range;
  while (std::getline(ss, range, ',')) {
    unsigned a = 0, b = 0;
    char dash = 0;
    std::stringstream rs(range);
    if (!(rs >> a)) return Error::Of(EINVAL, "parse (not a CPU list)", path);
    if (rs >> dash) {
      if (dash != '-' || !(rs >> b) || b < a)
        return Error::Of(EINVAL, "parse (not a CPU list)", path);
    } else {
      b = a;
    }
    count += b - a + 1;
  }
  if (count == 0) return Error::Of(EINVAL, "parse (no CPU)", path);
  return count;
}

std::string EnableUringParameter() {
  std::ifstream f("/sys/module/fuse/parameters/enable_uring");
  std::string v;
  if (!f || !std::getline(f, v)) return "";
  return v;
}

UringTransport::UringTransport(fuse_session* se, const UringOptions& o)
    : se_(se), options_(o) {}

Result<std::unique_ptr<UringTransport>> UringTransport::Create(
    fuse_session* se, const UringOptions& o) {
  std::unique_ptr<UringTransport> t(new UringTransport(se, o));
  for (unsigned q = 0; q < o.queues; ++q)
    for (unsigned i = 0; i < o.workers_per_queue; ++i) {
      int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (efd < 0) return Error::Errno("eventfd", "a fuse ring worker's stop");
      t->workers_.push_back(std::make_unique<Worker>(q, UniqueFd(efd)));
    }
  // The workers take no signal: SIGTERM and friends reach the thread that
  // runs the session loop, which libfuse's handlers wake.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (auto& w : t->workers_)
    t->threads_.emplace_back([tp = t.get(), wp = w.get()] { tp->Run(wp); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

UringTransport::~UringTransport() { Stop(); }

void UringTransport::Begin(int dev_fd, size_t payload_size) {
  std::lock_guard<std::mutex> l(mu_);
  if (state_ != State::kWaiting) return;
  state_ = State::kBegun;
  dev_fd_ = dev_fd;
  payload_size_ = payload_size;
  cv_.notify_all();
}

void UringTransport::Decline(const std::string& why) {
  std::lock_guard<std::mutex> l(mu_);
  if (state_ != State::kWaiting) return;
  state_ = State::kDeclined;
  why_ = why;
  cv_.notify_all();
  spdlog::info("fuse transport: /dev/fuse ({})", why);
}

void UringTransport::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (state_ == State::kWaiting) why_ = "stopped before INIT";
    if (state_ != State::kBegun) state_ = State::kStopped;
    cv_.notify_all();
  }
  for (auto& w : workers_) w->WakeToStop();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void UringTransport::Registered(Status s) {
  std::lock_guard<std::mutex> l(mu_);
  if (s) {
    ++registered_;
  } else {
    if (failed_++ == 0) why_ = s.error().Message();
  }
  if (registered_ + failed_ == workers_.size()) {
    if (failed_ == 0)
      spdlog::info("fuse transport: {}", DescribeLocked());
    else
      spdlog::warn(
          "fuse transport: /dev/fuse ({} of {} ring entries refused: {})",
          failed_, workers_.size(), why_);
  }
}

std::string UringTransport::Transport() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_ == State::kBegun && failed_ == 0 &&
                 registered_ == workers_.size()
             ? "io_uring"
             : "/dev/fuse";
}

std::string UringTransport::Describe() const {
  std::lock_guard<std::mutex> l(mu_);
  return DescribeLocked();
}

std::string UringTransport::DescribeLocked() const {
  if (state_ == State::kBegun && failed_ == 0)
    return "io_uring (" + std::to_string(options_.queues) + " queues x " +
           std::to_string(options_.workers_per_queue) + " workers, " +
           std::to_string(payload_size_) + "-byte payloads)";
  return "/dev/fuse (" + why_ + ")";
}

uint64_t UringTransport::served() const {
  uint64_t n = 0;
  for (const auto& w : workers_) n += w->served.load(std::memory_order_relaxed);
  return n;
}

void UringTransport::Run(Worker* w) {
  pthread_setname_np(pthread_self(), "acqfs-ring");
  // The kernel queues a caller's request on its CPU's queue: the queue's
  // workers run there, so that the request's wake-up stays on that CPU.
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(w->qid(), &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0 && w->qid() == 0)
    spdlog::info("fuse ring: workers not pinned to their CPUs: {}",
                 std::strerror(errno));
  int fd = -1;
  size_t payload = 0;
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return state_ != State::kWaiting; });
    if (state_ != State::kBegun) return;
    fd = dev_fd_;
    payload = payload_size_;
  }
  Status s = w->Setup(fd, payload);
  Registered(s);
  if (!s) return;
  w->Serve(se_, options_);
}

bool UringTransport::CaptureReply(const struct iovec* iov, int count,
                                  ssize_t* n) {
  return tls_worker != nullptr && tls_worker->Capture(iov, count, n);
}

char* UringTransport::ReplyBuffer(size_t* size) {
  *size = 0;
  return tls_worker != nullptr ? tls_worker->ReplyBuffer(size) : nullptr;
}

}  // namespace acqfs
