// FUSE passthrough (Linux 6.9+): an open file whose OPEN reply carries
// FOPEN_PASSTHROUGH and a backing id is read, written and mapped by the
// kernel straight from that backing file, without a request to the daemon.
//
// The kernel's rules (fs/fuse/iomode.c, passthrough.c), and what they
// make of acqfs (docs/architecture.md, "FUSE passthrough"):
//   - every open of an inode that has a passthrough open must be a
//     passthrough open of the same backing file (else the caller's open
//     fails with EIO), and a passthrough open cannot join cached opens
//     (any open answered without FOPEN_PASSTHROUGH: EIO again);
//   - the kernel opens the backing file again for each open, with the
//     caller's flags and the daemon's credentials.
// So a node's opens are either all cached or all passed through, decided
// by the first while none is open; a backing file is only ever an upper
// file with one name (a lower file's backing would be opened for writing
// by the next open for writing: the host's file), and whatever moves that
// file out of the current upper while it is open (a checkpoint, a rewind)
// must move the open file with it (Overlay::SetLiveBackings).
//
// BackingTable keeps, per node, how its live opens were answered and its
// backing id, and owns the ids (FUSE_DEV_IOC_BACKING_OPEN / _CLOSE on
// /dev/fuse).
// Thread-safety: every member may be called from any thread; `mu_` is a
// leaf lock (nothing else is taken while it is held; the ioctls are made
// under it, which the kernel answers without a request to the daemon).
#ifndef ACQFS_FUSE_PASSTHROUGH_H_
#define ACQFS_FUSE_PASSTHROUGH_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "fs/live_files.h"

namespace acqfs {

// The answer to one open, decided from the node's live opens alone.
enum class OpenAnswer {
  kCached,  // no backing: the kernel's page cache, requests to the daemon
  kReuse,   // passed through, with the node's live backing id
  kCreate,  // passed through, with a backing id made now (if the node's
            // file may be one; else cached)
};

// `cached`: the node's live opens answered without passthrough;
// `passed`: those answered with it. Cached opens keep the node cached;
// passthrough ones keep it passed through; with none, a new backing.
OpenAnswer DecideOpen(uint32_t cached, uint32_t passed);

class BackingTable {
 public:
  // `dev_fd`: the session's /dev/fuse descriptor (not owned; it outlives
  // the table).
  explicit BackingTable(int dev_fd) : dev_fd_(dev_fd) {}
  ~BackingTable();
  BackingTable(const BackingTable&) = delete;
  BackingTable& operator=(const BackingTable&) = delete;

  // Whether the kernel took FUSE_PASSTHROUGH at INIT and no backing has
  // been refused for good since (EPERM: not CAP_SYS_ADMIN in the initial
  // namespace; ELOOP: the upper is itself stacked too deep).
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }
  void Enable() { enabled_.store(true, std::memory_order_release); }
  // Where the inode number of each backing file is kept while the kernel
  // may write it (fs/live_files.h): a backing id is made only once its
  // file is recorded there. Set before Enable; not owned.
  void SetRecord(LiveFileRecord* record) { record_ = record; }
  // Why it is off, for the log ("" while on or never asked).
  std::string off_reason() const;

  // An open of `node`: its backing id (> 0) when the open is to be passed
  // through, else 0 (cached). `backing_fd` gives a descriptor of the
  // node's upper file when the node may get a backing, else an error
  // (called without the table's lock; its descriptor is released by the
  // caller after this returns). The open is counted either way: Release
  // it with the same answer (`passed`: the id was non-zero).
  uint32_t Open(const void* node,
                const std::function<Result<int>()>& backing_fd);
  // Undoes one Open; the last passthrough open of a node closes its id.
  void Release(const void* node, bool passed);

  // The nodes with a live backing, at the time of the call.
  std::vector<const void*> Live() const;
  // Opens passed through so far (for the log and the tests).
  uint64_t passed_through() const {
    return passed_through_.load(std::memory_order_relaxed);
  }

 private:
  struct Entry {
    uint32_t cached = 0;
    uint32_t passed = 0;
    uint32_t id = 0;    // while passed > 0
    uint32_t slot = 0;  // its record slot, while passed > 0
  };
  void CloseId(uint32_t id);
  // Answers an open from the node's counts alone (cached, the live id, or
  // cached while passthrough is off), counting it: true. False: a backing
  // is to be made. mu_ held.
  bool AnswerFromCounts(Entry* e, uint32_t* id);

  const int dev_fd_;
  LiveFileRecord* record_ = nullptr;
  std::atomic<bool> enabled_{false};
  std::atomic<uint64_t> passed_through_{0};
  mutable std::mutex mu_;
  std::unordered_map<const void*, Entry> nodes_;  // guarded by mu_
  std::string off_reason_;                        // guarded by mu_
};

// The backing id the OPEN or CREATE reply written next on this thread is to
// carry (0: none): set around fuse_reply_open / fuse_reply_create, which
// write the reply on the calling thread; the session's writev hook
// (fuse/mount.cc) rewrites the reply with PassthroughReply.
class ReplyBacking {
 public:
  explicit ReplyBacking(uint32_t id);
  ~ReplyBacking();
  ReplyBacking(const ReplyBacking&) = delete;
  ReplyBacking& operator=(const ReplyBacking&) = delete;
  static uint32_t Current();
};

// A copy of the reply `iov[0..count)` whose fuse_open_out (the body's last
// 16 bytes: an OPEN's whole body, a CREATE's after its fuse_entry_out)
// carries FOPEN_PASSTHROUGH and `id`, and drops the flags the kernel refuses
// beside it (FOPEN_KEEP_CACHE); `body` holds the rewritten body. False
// (nothing done) for an error reply or one too short.
bool PassthroughReply(const struct iovec* iov, int count, uint32_t id,
                      std::vector<struct iovec>* out, std::vector<char>* body);

}  // namespace acqfs

#endif  // ACQFS_FUSE_PASSTHROUGH_H_
