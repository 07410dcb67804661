#include "audit/caller_cache.h"

#include <fcntl.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>

#include "common/handle.h"

namespace acqfs::audit {
namespace {

int64_t MonotonicNs() {
  struct timespec ts;
  if (::clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Reads at most `cap` bytes of the /proc file `path` into `buf`: the
// number read, or -1 when it cannot be opened or read.
ssize_t ReadProcFile(const char* path, char* buf, size_t cap) {
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) return -1;
  size_t got = 0;
  while (got < cap) {
    ssize_t n = ::read(fd.get(), buf + got, cap - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(got);
}

// The thread group of thread `tid` (its Tgid: line), or -1.
int32_t ReadTgid(int32_t tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/status", static_cast<int>(tid));
  // Tgid is the fourth line, after Name (escaped, at most 64 bytes), Umask
  // and State.
  char buf[1024];
  ssize_t n = ReadProcFile(path, buf, sizeof(buf));
  if (n <= 0) return -1;
  std::string_view text(buf, static_cast<size_t>(n));
  constexpr std::string_view kKey = "\nTgid:";
  size_t at = text.find(kKey);
  if (at == std::string_view::npos) return -1;
  size_t i = at + kKey.size();
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  int64_t v = 0;
  size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
    v = v * 10 + (text[i] - '0');
    if (v > INT32_MAX) return -1;
  }
  if (digits == 0 || i == text.size() || text[i] != '\n' || v <= 0) return -1;
  return static_cast<int32_t>(v);
}

// The comm of process `pid`, without its newline; false when unreadable.
bool ReadComm(int32_t pid, std::string* comm) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/comm", static_cast<int>(pid));
  char buf[64];  // TASK_COMM_LEN is 16; 64 leaves room for a larger one
  ssize_t n = ReadProcFile(path, buf, sizeof(buf));
  if (n < 0) return false;
  size_t len = static_cast<size_t>(n);
  if (len > 0 && buf[len - 1] == '\n') --len;
  comm->assign(buf, len);
  return true;
}

// The target of /proc/<pid>/exe; false when it cannot be read (a kernel
// thread, a zombie, or no ptrace access to the process).
bool ReadExe(int32_t pid, std::string* exe) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/exe", static_cast<int>(pid));
  char buf[PATH_MAX + 1];
  ssize_t n = ::readlink(path, buf, sizeof(buf));
  if (n < 0 || static_cast<size_t>(n) >= sizeof(buf)) return false;
  exe->assign(buf, static_cast<size_t>(n));
  return true;
}

}  // namespace

CallerCache::CallerCache(size_t capacity, int64_t ttl_ns)
    : capacity_(std::max<size_t>(capacity, 1)), ttl_ns_(ttl_ns) {}

bool CallerCache::Fresh(int64_t read_ns, int64_t now_ns) const {
  return now_ns - read_ns < ttl_ns_;
}

void CallerCache::PutThread(const ThreadEntry& e) {
  auto it = thread_index_.find(e.tid);
  if (it != thread_index_.end()) {
    *it->second = e;
    threads_.splice(threads_.begin(), threads_, it->second);
    return;
  }
  threads_.push_front(e);
  try {
    thread_index_.emplace(e.tid, threads_.begin());
  } catch (...) {
    threads_.pop_front();
    throw;
  }
  while (threads_.size() > capacity_) {
    thread_index_.erase(threads_.back().tid);
    threads_.pop_back();
  }
}

void CallerCache::PutProcess(ProcessEntry e) {
  auto it = process_index_.find(e.pid);
  if (it != process_index_.end()) {
    *it->second = std::move(e);
    processes_.splice(processes_.begin(), processes_, it->second);
    return;
  }
  processes_.push_front(std::move(e));
  try {
    process_index_.emplace(processes_.front().pid, processes_.begin());
  } catch (...) {
    processes_.pop_front();
    throw;
  }
  while (processes_.size() > capacity_) {
    process_index_.erase(processes_.back().pid);
    processes_.pop_back();
  }
}

Caller CallerCache::Lookup(int32_t tid, uint32_t uid, uint32_t gid) noexcept {
  Caller c;
  c.tid = tid;
  c.uid = uid;
  c.gid = gid;
  if (tid == 0) return c;  // the kernel's own request: pid 0
  c.pid = tid;             // until the process is known
  if (tid < 0) return c;
  try {
    const int64_t now = MonotonicNs();
    int32_t pid = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto t = thread_index_.find(tid);
      if (t != thread_index_.end() && Fresh(t->second->read_ns, now)) {
        pid = t->second->pid;
        threads_.splice(threads_.begin(), threads_, t->second);
        auto p = process_index_.find(pid);
        if (p != process_index_.end() && Fresh(p->second->read_ns, now)) {
          processes_.splice(processes_.begin(), processes_, p->second);
          c.pid = pid;
          c.comm = p->second->comm;
          c.exe = p->second->exe;
          return c;
        }
      }
    }
    // Read what is missing without the lock.
    const bool thread_read = pid == 0;
    if (thread_read) {
      pid = ReadTgid(tid);
      if (pid <= 0) return c;  // gone, or unreadable
    }
    ProcessEntry e;
    e.pid = pid;
    e.read_ns = now;
    if (!ReadComm(pid, &e.comm)) return c;  // gone since
    if (!ReadExe(pid, &e.exe)) e.exe.clear();
    c.pid = pid;
    c.comm = e.comm;
    c.exe = e.exe;
    std::lock_guard<std::mutex> lock(mu_);
    if (thread_read) PutThread(ThreadEntry{tid, pid, now});
    PutProcess(std::move(e));
    return c;
  } catch (...) {
    // Out of memory: the caller as far as known; nothing more kept.
    return c;
  }
}

void CallerCache::Fill(Record* r, int32_t tid, uint32_t uid,
                       uint32_t gid) noexcept {
  Caller c = Lookup(tid, uid, gid);
  r->pid = c.pid;
  r->tid = c.tid;
  r->uid = c.uid;
  r->gid = c.gid;
  r->comm = std::move(c.comm);
  r->exe = std::move(c.exe);
}

size_t CallerCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return processes_.size();
}

size_t CallerCache::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_index_.size();
}

}  // namespace acqfs::audit
