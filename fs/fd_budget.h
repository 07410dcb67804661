// FdBudget: how the daemon shares its open-files limit out, so that the
// number of descriptors it holds has a fixed bound whatever the sandbox
// does (docs/architecture.md, "Descriptors").
//
// Every descriptor the daemon holds is in one of these classes:
//   fixed       standard streams, /dev/fuse (and KernelNotify's duplicate),
//               the log, the lock, the two claims on upper and work
//               (LayersClaim), the four layer roots (lower, upper, work,
//               work/acqfs-tmp), the store of copy-up sources
//               (CopyUpSources), the host watch (HostWatch: its copy of
//               the host's root, the inotify instance, a stop pipe and the
//               directory its walk has open), slack;
//   ring        a ring worker's io_uring and stop eventfd (FUSE over
//               io_uring, fuse/uring_transport.h), beside its per-thread
//               share (a ring worker serves requests as a worker does);
//   per thread  a worker's directory cache (Layer::DirFd), the descriptors
//               one request holds at once (no walk holds more than a
//               constant, however deep or wide the tree: see
//               sys::RemoveTree, BuildMergedCopy, Quota::Measure), and the
//               file-cache leases one request may still hold after their
//               eviction (two: copy_file_range's source and target);
//   files       the file cache (FileCache): data descriptors, LRU;
//   pinned      the file cache's pinned class: the host's object-store
//               packs and graphs that git maps (FileCache, "Pinned");
//   kept        descriptors keeping unlinked files' data (KeptStore);
//               beyond them such data is kept under acqfs-tmp instead, and
//               as many again are a reserve for when acqfs-tmp has no room
//               (a full disk must still let files be unlinked).
// bound() is the sum. Plan() leaves half of what remains after the fixed
// and per-thread parts unused, as a margin for the system's own use of
// the process (e.g. a short-lived descriptor libfuse or spdlog opens).
// Thread-safety: a plain value.
#ifndef ACQFS_FS_FD_BUDGET_H_
#define ACQFS_FS_FD_BUDGET_H_

#include <algorithm>
#include <cstddef>
#include <string>

#include "common/error.h"

namespace acqfs {

struct FdBudget {
  // Descriptors held whatever the workload.
  static constexpr size_t kFixed = 24;
  // The most descriptors one request holds at once, beyond its thread's
  // directory cache (a directory rename that materialises a tree: two
  // parents, the source and copy levels being built, a file being copied
  // and the listing being read).
  static constexpr size_t kPerRequest = 12;
  // Directory descriptors a worker thread caches (Layer::DirFd).
  static constexpr size_t kDirCache = 4;
  // Leases one request holds at once (copy_file_range: two).
  static constexpr size_t kLeases = 2;
  // An io_uring and an eventfd per ring worker.
  static constexpr size_t kPerRing = 2;
  static constexpr size_t kMaxFiles = 512;
  static constexpr size_t kMaxKept = 1024;
  // A repository's packs, their indexes and reverse indexes, the
  // multi-pack index and the commit graphs (gc.autoPackLimit is 50).
  static constexpr size_t kMaxPinned = 256;

  size_t limit = 0;         // RLIMIT_NOFILE the daemon runs with
  size_t threads = 0;       // /dev/fuse worker threads
  size_t ring_workers = 0;  // io_uring worker threads (0: no ring)
  size_t dir_cache = 0;     // per thread (kDirCache, or 0 when tight)
  size_t files = 0;         // FileCache capacity
  size_t pinned = 0;        // FileCache pinned capacity
  size_t kept = 0;          // KeptStore budget

  size_t per_thread() const { return dir_cache + kPerRequest + kLeases; }
  // Threads serving requests at once: the /dev/fuse workers, or the ring's
  // once the kernel uses the ring (the /dev/fuse workers then get FORGETs
  // and INTERRUPTs only, which hold no descriptor); every thread keeps its
  // directory cache.
  size_t serving() const { return std::max(threads, ring_workers); }
  size_t bound_without_caches() const {
    return kFixed + serving() * (kPerRequest + kLeases) +
           (threads + ring_workers) * dir_cache + kPerRing * ring_workers;
  }
  size_t bound() const {
    return bound_without_caches() + files + pinned + 2 * kept;
  }
  // "limit 20000, bound 2912: 24 fixed + 4 threads x 18 + 512 files + ..."
  std::string Describe() const;

  // The plan for `limit` descriptors, `threads` /dev/fuse workers and
  // `ring_workers` io_uring workers. EMFILE, naming the limit and what it
  // would take, when the limit is too low to serve that many threads at all.
  static Result<FdBudget> Plan(size_t limit, size_t threads,
                               size_t ring_workers = 0);
};

// Raises the soft open-files limit to the hard one and returns it.
Result<size_t> RaiseFdLimit();

}  // namespace acqfs

#endif  // ACQFS_FS_FD_BUDGET_H_
