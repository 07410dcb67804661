// The warm walk: right after mount, a child process of the daemon lists
// every directory of the mount, so the kernel fills its dentry, inode and
// readdir caches through READDIRPLUS (dozens of entries per request)
// before the agent's first command asks for them one LOOKUP at a time
// (docs/architecture.md, "The warm walk"; docs/benchmarks.md).
//
// Why a child process in a mount namespace of its own: a directory the walk
// holds open would make the mount busy, so an unmount at that instant would
// fail with EBUSY. The child lists through a private copy of the mount (same
// superblock, same FUSE connection), which pins only the copy: the
// sandbox's own mount unmounts whatever the walk is doing. The daemon's
// supervisor thread sees the unmount (the mount gone from its mountinfo)
// and kills the child, which releases the copy, which ends the session.
//
// Bounds: at most `max_entries` entries and `max_seconds` seconds; one
// directory descriptor and one 128 KiB buffer a thread (`threads` of them,
// default 32) at a time; the child runs at the daemon's priority unless
// `nice` says otherwise. It skips directories named .git. It never writes.
//
// Thread-safety: Start once, from the daemon's thread before it serves
// requests (the child is forked there, while the process has no other
// thread); Stop (or the destructor) from the same thread.
#ifndef ACQFS_FUSE_WARM_WALK_H_
#define ACQFS_FUSE_WARM_WALK_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/handle.h"

namespace acqfs {

struct WarmWalkOptions {
  std::string mountpoint;
  uint64_t max_entries = 1000000;
  double max_seconds = 30;
  // Threads of the child listing side by side. Most of them wait for an
  // answer at any instant: what they buy is enough READDIRPLUS requests in
  // the kernel's queue that the walk is not stuck behind the lookups of a
  // parallel `git status` (20 threads), and the daemon's workers never
  // idle between listings (docs/benchmarks.md, "The warm walk in 32
  // threads").
  unsigned threads = 32;
  // The child's nice value (0: the daemon's own).
  int nice = 0;
};

// What the child reports when it ends (also logged by the daemon).
struct WarmWalkResult {
  uint64_t entries = 0;  // directory entries listed, "." and ".." left out
  uint64_t dirs = 0;     // directories listed
  double seconds = 0;
  unsigned threads = 0;  // threads that listed (fewer than asked if one
                         // could not be made)
  unsigned peak = 0;     // the most of them listing at one instant
  std::string ended;     // "done", "entry limit", "time limit", or an error
};

// While the agent writes (a request that creates, removes, renames or
// changes something came in the last kWriterWindowMs), the walk starts no
// new listing; its threads wait, holding nothing, and go on once the
// writes pause. The walk helps readers (their lookups find its entries),
// not writers: a `tar x` started at the mount of a 1,000,000-file checkout
// waited behind the walk's listings for as long as it ran
// (docs/benchmarks.md, "The warm walk in 32 threads").
inline constexpr int64_t kWriterWindowMs = 100;

// Does a request of this FUSE opcode change the file system? (What makes
// the walk give way, WarmWalk::NoteWrite.)
bool ChangesTheFileSystem(uint32_t opcode);

class WarmWalk {
 public:
  // Forks the walking child (it waits for the mount to answer) and starts
  // the supervisor thread. An error only if the fork or the pipe failed; a
  // walk the child cannot make (no private mount namespace, say) ends with
  // that reason in the log.
  static Result<std::unique_ptr<WarmWalk>> Start(const WarmWalkOptions& o);
  ~WarmWalk();  // Stop()
  WarmWalk(const WarmWalk&) = delete;
  WarmWalk& operator=(const WarmWalk&) = delete;

  // Kills the child if it still runs and waits for the supervisor; the
  // destructor reaps the child. Destroy it only after the session has
  // ended (fuse_session_unmount): until then a request of the child's that
  // the loop read but never answered keeps the child alive.
  void Stop();

  // A request that changes the file system came in (any thread; a store
  // to memory the child shares).
  void NoteWrite();

 private:
  void Supervise();

  // Owns the shared mapping of the last write's time.
  struct Unmap {
    void operator()(std::atomic<int64_t>* p) const;
  };
  using SharedTime = std::unique_ptr<std::atomic<int64_t>, Unmap>;

  WarmWalk(const WarmWalkOptions& o, pid_t child, UniqueFd report_fd,
           SharedTime last_write_ms);

  const WarmWalkOptions options_;
  // CLOCK_MONOTONIC milliseconds of the last request that changed
  // something (0: none yet), in a page shared with the child
  // (MAP_SHARED, made before the fork, so the child has it too).
  // Lock-free: any thread of the daemon stores, the child's threads load.
  const SharedTime last_write_ms_;
  const pid_t child_;  // written once, before the supervisor starts
  // The read end of the child's report pipe: the supervisor thread's alone
  // (set before it starts; it closes it when it ends), so no lock.
  UniqueFd report_fd_;
  std::atomic<bool> stop_{false};  // any thread
  std::thread supervisor_;
};

namespace warm_walk_internal {
// The walk itself, as the child runs it, on the directory `root` (used by
// the tests without a mount). Stops at the bounds. Reads only.
// `threads` list directories side by side (at least one: the caller's).
// While `last_write_ms` (if given) is within kWriterWindowMs of now, no
// thread starts a listing. `listing` (tests: a slow
// directory) is called by a thread once it has opened each directory.
WarmWalkResult Walk(int root, uint64_t max_entries, double max_seconds,
                    unsigned threads = 1,
                    const std::atomic<int64_t>* last_write_ms = nullptr,
                    const std::function<void()>& listing = {});
// CLOCK_MONOTONIC in milliseconds, the clock of `last_write_ms`.
int64_t MonotonicMs();
// Is a mount of device `dev` in `mountinfo` (the text of
// /proc/self/mountinfo)? A FUSE device names one connection.
bool Mounted(const std::string& mountinfo, dev_t dev);
}  // namespace warm_walk_internal

}  // namespace acqfs

#endif  // ACQFS_FUSE_WARM_WALK_H_
