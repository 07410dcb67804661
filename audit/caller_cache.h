// CallerCache: who made a FUSE request, for the audit log (issue 36).
//
// A request carries the id of the calling thread (the kernel's "pid" field
// is the thread id), and its uid and gid. The cache maps that thread to its
// process (the Tgid: line of /proc/<tid>/status), and the process to its
// comm (/proc/<pid>/comm) and executable (the target of /proc/<pid>/exe).
// Both maps are read once and kept: tid -> pid keyed by thread, comm and
// exe keyed by process, each bounded to `capacity` entries (the least
// recently used goes first) and re-read when older than `ttl_ns` (an id the
// kernel gave to a new thread or process since, or a comm changed with
// prctl(PR_SET_NAME)).
//
// A thread or process that is gone, or whose /proc files cannot be read
// (also when the daemon is out of descriptors: no descriptor is taken from
// anything else for this), is reported as pid = tid with comm and exe "",
// and nothing about it is kept. An exe the daemon may not read (another
// user's process, without ptrace access) is "" while comm is known. tid 0
// is a request the kernel made itself (background writeback): pid 0, comm
// and exe "".
//
// Thread-safety: every member function may be called from any thread. One
// mutex guards both maps; it is never held while /proc is read (the reads
// happen outside it, and their results are inserted after). Lookup and Fill
// never throw: when memory runs out they return what they have.
#ifndef ACQFS_AUDIT_CALLER_CACHE_H_
#define ACQFS_AUDIT_CALLER_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "audit/record.h"

namespace acqfs::audit {

struct Caller {
  int32_t pid = 0;  // the thread group (process), tid when unknown
  int32_t tid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string comm;  // without its newline; "" when unknown
  std::string exe;   // the /proc/<pid>/exe target; "" when unknown
};

class CallerCache {
 public:
  // `capacity` entries in each map (at least 1), re-read after `ttl_ns`.
  explicit CallerCache(size_t capacity = 4096, int64_t ttl_ns = 10'000'000'000);
  CallerCache(const CallerCache&) = delete;
  CallerCache& operator=(const CallerCache&) = delete;

  // The caller of a request made by thread `tid` as `uid`/`gid`.
  Caller Lookup(int32_t tid, uint32_t uid, uint32_t gid) noexcept;
  // Lookup, stored in r->pid, tid, uid, gid, comm and exe.
  void Fill(Record* r, int32_t tid, uint32_t uid, uint32_t gid) noexcept;

  // Processes whose comm and exe are kept (at most `capacity`).
  size_t size() const;
  // Threads whose process is kept (at most `capacity`).
  size_t threads() const;

 private:
  struct ThreadEntry {
    int32_t tid = 0;
    int32_t pid = 0;
    int64_t read_ns = 0;  // CLOCK_MONOTONIC when read
  };
  struct ProcessEntry {
    int32_t pid = 0;
    std::string comm;
    std::string exe;
    int64_t read_ns = 0;
  };

  bool Fresh(int64_t read_ns, int64_t now_ns) const;
  // Insert or replace, most recently used first; drops the least recently
  // used beyond capacity_. Called with mu_ held.
  void PutThread(const ThreadEntry& e);
  void PutProcess(ProcessEntry e);

  const size_t capacity_;
  const int64_t ttl_ns_;

  mutable std::mutex mu_;
  // Most recently used first; each index points into its list. Guarded by
  // mu_.
  std::list<ThreadEntry> threads_;
  std::unordered_map<int32_t, std::list<ThreadEntry>::iterator> thread_index_;
  // Guarded by mu_.
  std::list<ProcessEntry> processes_;
  std::unordered_map<int32_t, std::list<ProcessEntry>::iterator> process_index_;
};

}  // namespace acqfs::audit

#endif  // ACQFS_AUDIT_CALLER_CACHE_H_
