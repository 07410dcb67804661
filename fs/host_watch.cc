#include "fs/host_watch.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/handle.h"
#include "common/sys.h"

namespace acqfs {
namespace {

constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                           IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_ONLYDIR |
                           IN_EXCL_UNLINK;
// Directories walked between two reads of the event queue, so a long
// first walk does not let the queue overflow.
constexpr size_t kWalkSlice = 256;
// How long after Start the first walk begins.
constexpr int kWalkDelayMs = 100;

}  // namespace

struct HostWatch::State {
  // Immutable once the thread runs.
  UniqueFd inotify, root, stop_read, stop_write;
  std::string shown;
  Sink sink;
  Walked on_walked;
  std::vector<std::string> skip;
  // Read by any thread.
  std::atomic<size_t> watched{0};
  std::atomic<bool> walked{false};
  std::atomic<bool> stopping{false};  // no sink is called once set
  // The thread has returned; guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // The thread's own.
  std::unordered_map<int, std::string> dir_of;  // wd -> directory
  std::map<std::string, int> wd_of;             // directory -> wd
  bool limit_said = false, overflow_said = false;

  bool Skipped(const std::string& dir, const std::string& name) const {
    if (!dir.empty()) return false;
    for (const auto& s : skip)
      if (s == name) return true;
    return false;
  }

  // Watches `rel` and every directory below it, breadth first.
  void Walk(const std::string& rel) {
    std::deque<std::string> todo{rel};
    size_t done = 0;
    while (!todo.empty()) {
      std::string dir = std::move(todo.front());
      todo.pop_front();
      if (!WatchOne(dir, &todo)) return;  // the limit: no more watches
      if (++done % kWalkSlice == 0) {
        struct pollfd p = {stop_read.get(), POLLIN, 0};
        if (::poll(&p, 1, 0) > 0) return;
        Drain();
      }
    }
  }

  // Adds the watch of `dir` and queues its subdirectories; false when the
  // kernel refuses more watches.
  bool WatchOne(const std::string& dir, std::deque<std::string>* todo) {
    const std::string shown_dir = dir.empty() ? shown : shown + "/" + dir;
    auto fd =
        sys::OpenBeneath(root.get(), dir, O_RDONLY | O_DIRECTORY, 0, shown_dir);
    if (!fd) return true;  // gone, or not a directory any more
    const std::string proc = "/proc/self/fd/" + std::to_string(fd->get());
    int wd = ::inotify_add_watch(inotify.get(), proc.c_str(), kMask);
    if (wd < 0) {
      if (errno == ENOSPC) {
        if (!limit_said && !stopping)
          sink(HostChange{HostChange::kLost, dir, "", true,
                          "the kernel refuses more inotify watches after " +
                              std::to_string(wd_of.size()) +
                              " (fs.inotify.max_user_watches)"});
        limit_said = true;
        return false;
      }
      return true;
    }
    auto old = dir_of.find(wd);
    if (old != dir_of.end()) wd_of.erase(old->second);
    dir_of[wd] = dir;
    wd_of[dir] = wd;
    watched.store(wd_of.size());
    auto entries = sys::ReadDir(fd->get(), shown_dir);
    if (!entries) return true;
    for (const auto& e : *entries) {
      bool is_dir = e.type == DT_DIR;
      if (e.type == DT_UNKNOWN) {
        struct stat st;
        is_dir = ::fstatat(fd->get(), e.name.c_str(), &st,
                           AT_SYMLINK_NOFOLLOW) == 0 &&
                 S_ISDIR(st.st_mode);
      }
      if (is_dir && !Skipped(dir, e.name))
        todo->push_back(sys::Join(dir, e.name));
    }
    return true;
  }

  // Forgets `dir` and every directory below it (moved away or removed).
  void Unwatch(const std::string& dir) {
    auto it = wd_of.lower_bound(dir);
    while (it != wd_of.end() &&
           (it->first == dir || (it->first.size() > dir.size() &&
                                 it->first.compare(0, dir.size(), dir) == 0 &&
                                 it->first[dir.size()] == '/'))) {
      (void)::inotify_rm_watch(inotify.get(), it->second);
      dir_of.erase(it->second);
      it = wd_of.erase(it);
    }
    watched.store(wd_of.size());
  }

  void Handle(const struct inotify_event& ev) {
    if (ev.mask & IN_Q_OVERFLOW) {
      if (!overflow_said && !stopping)
        sink(HostChange{HostChange::kLost, "", "", false,
                        "the host changed more than the event queue holds "
                        "(fs.inotify.max_queued_events)"});
      overflow_said = true;
      return;
    }
    auto d = dir_of.find(ev.wd);
    if (d == dir_of.end()) return;
    if (ev.mask & IN_IGNORED) {  // the directory is gone
      wd_of.erase(d->second);
      dir_of.erase(d);
      watched.store(wd_of.size());
      return;
    }
    if (ev.len == 0 || ev.name[0] == '\0') return;  // about the dir itself
    const std::string dir = d->second;              // (Walk may rehash dir_of)
    const std::string name = ev.name;
    if (Skipped(dir, name)) return;
    HostChange c;
    c.dir = dir;
    c.name = name;
    c.is_dir = (ev.mask & IN_ISDIR) != 0;
    if (ev.mask & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO))
      c.kind = HostChange::kEntry;
    else if (ev.mask & (IN_MODIFY | IN_CLOSE_WRITE))
      c.kind = HostChange::kContent;
    else if (ev.mask & IN_ATTRIB)
      c.kind = HostChange::kAttrs;
    else
      return;
    if (stopping) return;
    sink(c);
    if (c.is_dir && (ev.mask & (IN_DELETE | IN_MOVED_FROM)))
      Unwatch(sys::Join(dir, name));
    if (c.is_dir && (ev.mask & (IN_CREATE | IN_MOVED_TO)))
      Walk(sys::Join(dir, name));
  }

  // Reads and handles every event queued now.
  void Drain() {
    alignas(struct inotify_event) char buf[64 * 1024];
    for (;;) {
      ssize_t n = ::read(inotify.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // EAGAIN: nothing more for now
      for (ssize_t off = 0; off < n;) {
        const auto* ev =
            reinterpret_cast<const struct inotify_event*>(buf + off);
        Handle(*ev);
        off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
      }
    }
  }
};

namespace {

void Run(const std::shared_ptr<HostWatch::State>& s) {
  // The first walk reads every directory of the host while the sandbox's
  // first commands (a `git status` at the mount) want the CPUs: it runs at
  // the lowest priority, and the events after it at the daemon's (a user
  // without CAP_SYS_NICE cannot raise it back: the events then wait for
  // the CPUs a moment longer under load).
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
  // And it starts once the mount's first requests are served.
  struct pollfd first = {s->stop_read.get(), POLLIN, 0};
  if (::poll(&first, 1, kWalkDelayMs) > 0) {
    std::lock_guard<std::mutex> l(s->mu);
    s->done = true;
    s->cv.notify_all();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  s->Walk("");
  s->walked.store(true);
  if (s->on_walked && !s->stopping)
    s->on_walked(
        s->watched.load(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 0);
  for (;;) {
    struct pollfd fds[2] = {{s->inotify.get(), POLLIN, 0},
                            {s->stop_read.get(), POLLIN, 0}};
    int rc = ::poll(fds, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) break;
    if (fds[0].revents & POLLIN) s->Drain();
  }
  std::lock_guard<std::mutex> l(s->mu);
  s->done = true;
  s->cv.notify_all();
}

}  // namespace

Result<std::unique_ptr<HostWatch>> HostWatch::Start(
    int root, std::string shown, Sink sink, std::vector<std::string> skip,
    Walked walked) {
  auto st = std::make_shared<State>();
  int ifd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ifd < 0) return Error::Errno("inotify_init1 (host watch)", shown);
  st->inotify.reset(ifd);
  int rfd = ::fcntl(root, F_DUPFD_CLOEXEC, 0);
  if (rfd < 0) return Error::Errno("dup (host watch)", shown);
  st->root.reset(rfd);
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
    return Error::Errno("pipe2 (host watch)", shown);
  st->stop_read.reset(p[0]);
  st->stop_write.reset(p[1]);
  st->shown = std::move(shown);
  st->sink = std::move(sink);
  st->skip = std::move(skip);
  st->on_walked = std::move(walked);
  std::thread([st] { Run(st); }).detach();
  return std::unique_ptr<HostWatch>(new HostWatch(std::move(st)));
}

size_t HostWatch::watched() const { return state_->watched.load(); }
bool HostWatch::walked() const { return state_->walked.load(); }

HostWatch::~HostWatch() {
  state_->stopping.store(true);
  char c = 1;
  (void)!::write(state_->stop_write.get(), &c, 1);
  std::unique_lock<std::mutex> l(state_->mu);
  state_->cv.wait_for(l, std::chrono::seconds(1), [&] { return state_->done; });
}

}  // namespace acqfs
