#include "fuse/warm_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "common/handle.h"
#include "common/sys.h"

namespace acqfs {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;
constexpr int kReportFd = 3;  // the pipe's write end, in the child

double Now() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// The child's report: one line, written whole (shorter than PIPE_BUF).
void Report(const std::string& line) {
  std::string l = line + "\n";
  ssize_t n;
  do {
    n = ::write(kReportFd, l.data(), l.size());
  } while (n < 0 && errno == EINTR);
}

// false with errno set when `path` cannot be opened or written whole.
bool WriteProcFile(const char* path, const std::string& text) {
  UniqueFd fd(::open(path, O_WRONLY | O_CLOEXEC));
  if (!fd) return false;
  return ::write(fd.get(), text.data(), text.size()) ==
         static_cast<ssize_t>(text.size());
}

// A mount namespace of the child's own, whose mounts receive and send no
// propagation: as root a plain one; otherwise inside a user namespace that
// maps the daemon's own uid and gid. "" or the reason it could not be made.
std::string PrivateMountNamespace() {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWNS) != 0) {
    const int first = errno;
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return std::string("unshare: ") + std::strerror(first) + ", then " +
             std::strerror(errno) + " with a user namespace";
    if (!WriteProcFile("/proc/self/setgroups", "deny") ||
        !WriteProcFile("/proc/self/uid_map", std::to_string(uid) + " " +
                                                 std::to_string(uid) + " 1") ||
        !WriteProcFile("/proc/self/gid_map",
                       std::to_string(gid) + " " + std::to_string(gid) + " 1"))
      return std::string("map the user namespace: ") + std::strerror(errno);
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("make the mounts private: ") + std::strerror(errno);
  return "";
}

[[noreturn]] void RunChild(const WarmWalkOptions& o, pid_t parent,
                           const std::atomic<int64_t>* last_write_ms) {
  // Dies with the daemon; holds nothing of the daemon's (not /dev/fuse, so
  // a killed daemon still ends its mount; not its locks).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::prctl(PR_SET_NAME, "acqfs-warm");  // its argv is still the daemon's
  if (::getppid() != parent) ::_exit(1);
  ::syscall(SYS_close_range, kReportFd + 1, ~0U, 0);
  // At the daemon's priority unless asked otherwise. The daemon is a
  // session of its own, so where the kernel groups tasks by session
  // (autogroup, on in Debian's kernels) a nice value only ranks the walk
  // against the daemon's workers, not against the agent; measured, a
  // `git status` started at once was quicker with the walk at nice 0 than
  // at 10, and two CPU-bound processes started with the mount were not
  // slower (docs/benchmarks.md). SCHED_IDLE was slowest: the walk fell
  // behind git.
  if (o.nice != 0) ::setpriority(PRIO_PROCESS, 0, o.nice);
  std::string why = PrivateMountNamespace();
  if (!why.empty()) {
    Report("END 0 0 0 0 0 0 " + why);
    ::_exit(0);
  }
  // Blocks until the daemon has answered INIT.
  // Never closed: the child ends with _exit once the walk is over.
  UniqueFd root(::open(o.mountpoint.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) {
    Report(std::string("END 0 0 0 0 0 0 open the mount: ") +
           std::strerror(errno));
    ::_exit(0);
  }
  struct statfs sf;
  struct stat st;
  if (::fstatfs(root.get(), &sf) != 0 || sf.f_type != kFuseSuperMagic ||
      ::fstat(root.get(), &st) != 0) {
    Report("END 0 0 0 0 0 0 the mountpoint is not a FUSE mount");
    ::_exit(0);
  }
  Report("START " + std::to_string(static_cast<uint64_t>(st.st_dev)));
  WarmWalkResult r = warm_walk_internal::Walk(
      root.get(), o.max_entries, o.max_seconds, o.threads, last_write_ms);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", r.seconds);
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, 0);
  Report("END " + std::to_string(r.entries) + " " + std::to_string(r.dirs) +
         " " + secs + " " + std::to_string(r.threads) + " " +
         std::to_string(r.peak) + " " + std::to_string(errno == 0 ? nice : 0) +
         " " + r.ended);
  ::_exit(0);
}

}  // namespace

namespace warm_walk_internal {

namespace {

// The directories still to list, shared by the walk's threads: a stack, so
// each directory's subdirectories, pushed in reverse name order, are taken
// in name order (depth first, the order of git's index).
class PendingDirs {
 public:
  PendingDirs(uint64_t max_entries, double deadline,
              const std::atomic<int64_t>* last_write_ms)
      : max_entries_(max_entries),
        deadline_(deadline),
        last_write_ms_(last_write_ms) {}

  // The next directory to list; false when the walk is over (nothing left
  // and no thread listing, or a bound reached; `ended` then says which).
  // While the agent writes, a thread waits here (holding nothing).
  bool Take(std::string* rel) {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      if (ended_.empty()) {
        if (Now() > deadline_)
          ended_ = "time limit";
        else if (entries_ >= max_entries_)
          ended_ = "entry limit";
        else if (stack_.empty() && busy_ == 0)
          ended_ = "done";
      }
      if (!ended_.empty()) {
        cv_.notify_all();
        return false;
      }
      const int64_t pause = PauseLeftMs();
      if (!stack_.empty() && pause == 0) {
        *rel = std::move(stack_.back());
        stack_.pop_back();
        busy_++;
        peak_ = std::max(peak_, busy_);
        return true;
      }
      // Waiting for work, or for the agent's writes to pause: then look
      // again when the pause would end, as nothing notifies that.
      if (pause > 0)
        cv_.wait_for(l, std::chrono::milliseconds(pause));
      else
        cv_.wait(l);
    }
  }

  // Ends the listing of the directory `rel` Take gave: its entries and its
  // subdirectories (in any order).
  void Done(const std::string& rel, uint64_t entries,
            std::vector<std::string>* subdirs) {
    std::sort(subdirs->begin(), subdirs->end(), std::greater<std::string>());
    std::lock_guard<std::mutex> l(mu_);
    busy_--;
    dirs_++;
    entries_ += entries;
    for (std::string& s : *subdirs)
      stack_.push_back(rel == "." ? std::move(s) : rel + "/" + s);
    cv_.notify_all();
  }
  void Failed() {  // the directory Take gave could not be opened
    std::lock_guard<std::mutex> l(mu_);
    busy_--;
    cv_.notify_all();
  }

  void Fill(WarmWalkResult* r) {
    std::lock_guard<std::mutex> l(mu_);
    r->entries = entries_;
    r->dirs = dirs_;
    r->ended = ended_;
    r->peak = peak_;
  }

 private:
  // How long the walk still waits for the agent's writes (0: not).
  int64_t PauseLeftMs() const {
    if (!last_write_ms_) return 0;
    const int64_t w = last_write_ms_->load(std::memory_order_relaxed);
    if (w == 0) return 0;
    const int64_t left = w + kWriterWindowMs - MonotonicMs();
    return std::clamp<int64_t>(left, 0, kWriterWindowMs);
  }

  const uint64_t max_entries_;
  const double deadline_;
  const std::atomic<int64_t>* const last_write_ms_;  // may be null
  std::mutex mu_;                                    // guards everything below
  std::condition_variable cv_;
  std::vector<std::string> stack_ = {"."};
  unsigned busy_ = 0;  // threads listing a directory Take gave
  unsigned peak_ = 0;  // the most busy_ has been
  uint64_t entries_ = 0, dirs_ = 0;
  std::string ended_;
};

void ListDirs(int root, PendingDirs* pending,
              const std::function<void()>* listing) {
  std::vector<char> buf(128 * 1024);
  std::vector<std::string> subdirs;
  std::string rel;
  while (pending->Take(&rel)) {
    UniqueFd dir(::openat(root, rel.c_str(),
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) {  // gone or changed since its listing
      pending->Failed();
      continue;
    }
    if (*listing) (*listing)();
    subdirs.clear();
    uint64_t entries = 0;
    for (;;) {
      long n = ::syscall(SYS_getdents64, dir.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        auto* d = reinterpret_cast<LinuxDirent64*>(buf.data() + off);
        off += d->d_reclen;
        const char* name = d->d_name;
        if (name[0] == '.' &&
            (name[1] == 0 || (name[1] == '.' && name[2] == 0)))
          continue;
        entries++;
        if (d->d_type == DT_DIR && std::strcmp(name, ".git") != 0)
          subdirs.emplace_back(name);
      }
    }
    pending->Done(rel, entries, &subdirs);
  }
}

}  // namespace

int64_t MonotonicMs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

WarmWalkResult Walk(int root, uint64_t max_entries, double max_seconds,
                    unsigned threads, const std::atomic<int64_t>* last_write_ms,
                    const std::function<void()>& listing) {
  const double start = Now();
  PendingDirs pending(max_entries, start + max_seconds, last_write_ms);
  std::vector<std::thread> others;
  for (unsigned i = 1; i < threads; i++) {
    try {
      others.emplace_back(ListDirs, root, &pending, &listing);
    } catch (const std::system_error&) {
      break;  // fewer threads, the same walk
    }
  }
  ListDirs(root, &pending, &listing);
  for (std::thread& t : others) t.join();
  WarmWalkResult r;
  pending.Fill(&r);
  r.threads = static_cast<unsigned>(others.size()) + 1;
  r.seconds = Now() - start;
  return r;
}

bool Mounted(const std::string& mountinfo, dev_t dev) {
  const std::string want =
      std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    // "ID PARENT MAJOR:MINOR ROOT MOUNTPOINT ..."
    std::istringstream fields(line);
    std::string id, parent, devno;
    if (fields >> id >> parent >> devno && devno == want) return true;
  }
  return false;
}

}  // namespace warm_walk_internal

bool ChangesTheFileSystem(uint32_t opcode) {
  switch (opcode) {
    case FUSE_SETATTR:
    case FUSE_SYMLINK:
    case FUSE_MKNOD:
    case FUSE_MKDIR:
    case FUSE_UNLINK:
    case FUSE_RMDIR:
    case FUSE_RENAME:
    case FUSE_LINK:
    case FUSE_WRITE:
    case FUSE_SETXATTR:
    case FUSE_REMOVEXATTR:
    case FUSE_CREATE:
    case FUSE_FALLOCATE:
    case FUSE_RENAME2:
    case FUSE_COPY_FILE_RANGE:
      return true;
    default:
      return false;
  }
}

void WarmWalk::Unmap::operator()(std::atomic<int64_t>* p) const {
  ::munmap(p, sizeof *p);
}

WarmWalk::WarmWalk(const WarmWalkOptions& o, pid_t child, UniqueFd report_fd,
                   SharedTime last_write_ms)
    : options_(o),
      last_write_ms_(std::move(last_write_ms)),
      child_(child),
      report_fd_(std::move(report_fd)) {
  supervisor_ = std::thread([this] { Supervise(); });
}

void WarmWalk::NoteWrite() {
  last_write_ms_->store(warm_walk_internal::MonotonicMs(),
                        std::memory_order_relaxed);
}

Result<std::unique_ptr<WarmWalk>> WarmWalk::Start(const WarmWalkOptions& o) {
  static_assert(std::atomic<int64_t>::is_always_lock_free,
                "shared with the child across processes");
  void* page =
      ::mmap(nullptr, sizeof(std::atomic<int64_t>), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return Error::Errno("mmap (warm walk)", o.mountpoint);
  SharedTime last_write_ms(new (page) std::atomic<int64_t>(0));
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return Error::Errno("pipe (warm walk)", o.mountpoint);
  UniqueFd report_read(fds[0]), report_write(fds[1]);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Error::Errno("fork (warm walk)", o.mountpoint);
  if (pid == 0) {
    // The child's copy of the write end, at kReportFd (not O_CLOEXEC, not
    // owned: RunChild ends with _exit).
    if (::dup2(report_write.get(), kReportFd) < 0) ::_exit(1);
    RunChild(o, parent, last_write_ms.get());
  }
  report_write.reset();  // the child's copy alone: its end is EOF here
  return std::unique_ptr<WarmWalk>(
      new WarmWalk(o, pid, std::move(report_read), std::move(last_write_ms)));
}

// Reads the child's report; kills it once the sandbox's mount is gone from
// the daemon's mount namespace (the child's copy would keep the session
// alive), or once it outlives its time bound.
void WarmWalk::Supervise() {
  const double deadline = Now() + options_.max_seconds + 5;
  std::string got;
  dev_t dev = 0;
  bool started = false, ended = false;
  while (!ended && !stop_.load()) {
    struct pollfd p = {report_fd_.get(), POLLIN, 0};
    int rc = ::poll(&p, 1, 100);
    if (rc > 0) {
      char chunk[512];
      ssize_t n = ::read(report_fd_.get(), chunk, sizeof chunk);
      if (n <= 0) break;  // the child is gone
      got.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = got.find('\n')) != std::string::npos) {
        std::string line = got.substr(0, nl);
        got.erase(0, nl + 1);
        if (line.rfind("START ", 0) == 0) {
          dev = static_cast<dev_t>(std::stoull(line.substr(6)));
          started = true;
        } else if (line.rfind("END ", 0) == 0) {
          std::istringstream f(line.substr(4));
          WarmWalkResult r;
          int nice = 0;
          f >> r.entries >> r.dirs >> r.seconds >> r.threads >> r.peak >> nice;
          std::getline(f >> std::ws, r.ended);
          spdlog::info(
              "warm walk: {} entries in {} directories, {:.3f} s ({}; {} "
              "threads at nice {}, at most {} listing at once)",
              r.entries, r.dirs, r.seconds, r.ended, r.threads, nice, r.peak);
          ended = true;
        }
      }
    }
    if (Now() > deadline) {
      spdlog::warn("warm walk: still running after {} s; stopped",
                   options_.max_seconds + 5);
      break;
    }
    if (started && !ended) {
      std::ifstream in("/proc/self/mountinfo");
      std::stringstream text;
      text << in.rdbuf();
      if (!warm_walk_internal::Mounted(text.str(), dev)) {
        spdlog::info("warm walk: the mount is gone; stopped");
        break;
      }
    }
  }
  // Not waited for here: a request of the child's that a worker has read
  // holds it (uninterruptibly) until the daemon answers, which it no longer
  // does once its loop has ended; the session's end aborts that request.
  ::kill(child_, SIGKILL);
  report_fd_.reset();
}

void WarmWalk::Stop() {
  stop_.store(true);
  if (supervisor_.joinable()) supervisor_.join();
}

WarmWalk::~WarmWalk() {
  Stop();
  // Reaps the child, which SIGKILL ends once nothing holds it in the
  // kernel; after 10 s (the session is still up?) it is left to init.
  for (int i = 0; i < 1000; i++) {
    int status;
    pid_t r = ::waitpid(child_, &status, WNOHANG);
    if (r == child_ || (r < 0 && errno != EINTR)) return;
    ::usleep(10000);
  }
  spdlog::warn("warm walk: the child {} did not end", child_);
}

}  // namespace acqfs
