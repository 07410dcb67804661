// FUSE over io_uring (Linux 6.14+;
// Documentation/filesystems/fuse-io-uring.rst): the kernel hands a request to a
// ring entry the daemon registered, and the daemon's reply and its fetch of the
// next request are one submission (COMMIT_AND_FETCH), instead of a writev(2)
// and a read(2) on /dev/fuse that each wake a thread.
//
// Shape: one queue per possible CPU (the kernel queues a request on the
// queue of the CPU its caller runs on, and takes the ring into use only
// once every queue has an entry); `workers_per_queue` threads per queue,
// pinned to the queue's CPU, each with an io_uring and one ring entry of its
// own, so that a request that blocks (a copy-up's fsync) holds up no other.
// A worker waits for its entry's request, lays it out as /dev/fuse would
// have (fuse_in_header, the operation's header, the payload, contiguous, in
// place), hands it to libfuse (fuse_session_process_buf), takes libfuse's
// reply from the session's writev hook on the same thread (CaptureReply),
// and commits it with the fetch of the next. A READ is read straight into
// the entry (ReplyBuffer): nothing is spliced on a worker.
//
// The /dev/fuse loop keeps running beside it: the kernel sends INIT there,
// every request until each queue has an entry, and for good FORGETs and
// INTERRUPTs; notifications (unique 0) go there too.
//
// Lifecycle: Create (before the session loop, after any fork), then exactly
// one of Begin (the INIT reply took the ring; called by the writev hook right
// after the kernel accepted it) or Decline; Stop ends the workers (the
// destructor too). The kernel ends the entries itself when the connection
// goes (unmount, abort): each worker's wait returns ENOTCONN.
//
// Thread-safety: Begin, Decline, Stop and Describe from any thread; the
// Capture* functions and ReplyBuffer on any thread (they act only on the
// calling thread's own worker, if it is one).
#ifndef ACQFS_FUSE_URING_TRANSPORT_H_
#define ACQFS_FUSE_URING_TRANSPORT_H_

#include <sys/uio.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

struct fuse_session;

namespace acqfs {

// Rewrites a request in place before libfuse sees it, as the session's read
// hook does for /dev/fuse (fuse/mount.cc): `buf` holds `n` bytes, room for
// `cap`; returns the request's new length.
using RequestHook = size_t (*)(void* arg, char* buf, size_t cap, size_t n);

struct UringOptions {
  // Queues: the kernel's num_possible_cpus() (PossibleCpus()).
  unsigned queues = 1;
  unsigned workers_per_queue = 1;
  RequestHook hook = nullptr;
  void* hook_arg = nullptr;
};

// The number of CPUs the kernel may ever run (/sys/devices/system/cpu/
// possible): the kernel makes one queue for each, and uses the ring only
// once each has an entry.
Result<unsigned> PossibleCpus();

// What /sys/module/fuse/parameters/enable_uring says: "Y", "N", or "" when
// the kernel has no such parameter (older than 6.14, or fuse built without
// it).
std::string EnableUringParameter();

class UringTransport {
 public:
  // Starts the workers, which wait for Begin or Decline.
  static Result<std::unique_ptr<UringTransport>> Create(fuse_session* se,
                                                        const UringOptions& o);
  ~UringTransport();
  UringTransport(const UringTransport&) = delete;
  UringTransport& operator=(const UringTransport&) = delete;

  // The INIT reply asked for the ring and the kernel took it: each worker
  // sets up its io_uring on `dev_fd` (the session's /dev/fuse descriptor,
  // which must outlive the workers) and registers its entry, with a payload
  // buffer of `payload_size` bytes (at least the kernel's: the largest of
  // 8 KiB, max_write and max_pages pages).
  void Begin(int dev_fd, size_t payload_size);
  // No ring for this session: the workers end; `why` is what Describe says.
  void Decline(const std::string& why);
  // Ends the workers and waits for them. Idempotent.
  void Stop();

  // "io_uring", or "/dev/fuse" (until Begin's entries are registered, or
  // when declined or failed).
  std::string Transport() const;
  // The transport and how it was reached, for the daemon log: "io_uring (2
  // queues x 2 workers, 1048576-byte payloads)", "/dev/fuse (WHY)".
  std::string Describe() const;
  // Requests answered through the ring so far.
  uint64_t served() const;

  // For the session's writev hook: when the calling thread is a worker
  // serving the request `iov` answers (the same unique), copies the reply
  // to the worker's entry (committed once libfuse returns), sets *n to the
  // bytes "written" and returns true; otherwise false (the reply goes to
  // /dev/fuse: a notification, an interrupt's answer).
  static bool CaptureReply(const struct iovec* iov, int count, ssize_t* n);
  // The calling worker's payload buffer, where a reply's data may be put
  // directly (a READ's; CaptureReply then copies nothing): null and 0 on
  // any other thread. At least as large as any READ the kernel sends.
  static char* ReplyBuffer(size_t* size);

  class Worker;

 private:
  UringTransport(fuse_session* se, const UringOptions& o);
  void Run(Worker* w);
  void Registered(Status s);
  std::string DescribeLocked() const;  // with mu_ held

  fuse_session* const se_;
  const UringOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;  // fixed after Create
  std::vector<std::thread> threads_;              // Create and Stop only

  // Guards everything below; cv_ wakes the workers (Begin, Decline, Stop).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  enum class State { kWaiting, kBegun, kDeclined, kStopped };
  State state_ = State::kWaiting;
  int dev_fd_ = -1;
  size_t payload_size_ = 0;
  unsigned registered_ = 0;  // workers whose entry the kernel took
  unsigned failed_ = 0;      // workers whose registration failed
  std::string why_;          // why not io_uring (Decline, a failure)
};

}  // namespace acqfs

#endif  // ACQFS_FUSE_URING_TRANSPORT_H_
