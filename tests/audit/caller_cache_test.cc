// The caller of a request (audit/caller_cache): this process and a thread of
// it, a child process with its own comm, a process that is gone, the
// kernel's own requests, the capacity bound and the re-read after the ttl.
#include "audit/caller_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace acqfs::audit {
namespace {

int32_t GetTid() { return static_cast<int32_t>(::syscall(SYS_gettid)); }

std::string SelfComm() {
  char buf[64];
  FILE* f = std::fopen("/proc/self/comm", "r");
  if (f == nullptr) return "";
  size_t n = std::fread(buf, 1, sizeof(buf), f);
  std::fclose(f);
  if (n > 0 && buf[n - 1] == '\n') --n;
  return std::string(buf, n);
}

std::string SelfExe() {
  char buf[PATH_MAX + 1];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf));
  if (n < 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// A child process that names itself (prctl(PR_SET_NAME)) each time it is
// told a name, and ends when its command pipe closes.
class NamedChild {
 public:
  explicit NamedChild(const char* name) {
    int cmd[2], ack[2];
    if (::pipe2(cmd, O_CLOEXEC) != 0 || ::pipe2(ack, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2: " << std::strerror(errno);
      return;
    }
    pid_ = ::fork();
    if (pid_ < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      return;
    }
    if (pid_ == 0) {
      // Only async-signal-safe calls from here on.
      ::close(cmd[1]);
      ::close(ack[0]);
      char buf[16];
      std::strncpy(buf, name, sizeof(buf) - 1);
      buf[sizeof(buf) - 1] = '\0';
      for (;;) {
        if (::prctl(PR_SET_NAME, buf, 0, 0, 0) != 0) ::_exit(2);
        if (::write(ack[1], "k", 1) != 1) ::_exit(3);
        // The next name: up to 15 bytes and a NUL.
        size_t got = 0;
        while (got < sizeof(buf)) {
          ssize_t n = ::read(cmd[0], buf + got, sizeof(buf) - got);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) ::_exit(0);
          got += static_cast<size_t>(n);
        }
        buf[sizeof(buf) - 1] = '\0';
      }
    }
    ::close(cmd[0]);
    ::close(ack[1]);
    cmd_ = cmd[1];
    ack_ = ack[0];
    WaitAck();
  }
  ~NamedChild() {
    if (cmd_ >= 0) ::close(cmd_);
    if (ack_ >= 0) ::close(ack_);
    if (pid_ > 0) {
      // Later children hold copies of this one's pipes (fork without
      // exec), so its end is not seen: kill it.
      if (::kill(pid_, SIGKILL) != 0)
        ADD_FAILURE() << "kill: " << std::strerror(errno);
      int status;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  pid_t pid() const { return pid_; }
  void Rename(const char* name) {
    char buf[16] = {};
    std::strncpy(buf, name, sizeof(buf) - 1);
    ASSERT_TRUE(WriteAll(cmd_, buf, sizeof(buf)));
    WaitAck();
  }

 private:
  void WaitAck() {
    char c;
    ssize_t n;
    do {
      n = ::read(ack_, &c, 1);
    } while (n < 0 && errno == EINTR);
    EXPECT_EQ(n, 1) << "the child did not answer";
  }

  pid_t pid_ = -1;
  int cmd_ = -1;
  int ack_ = -1;
};

// The pid of a process that existed and has been reaped.
pid_t GonePid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  EXPECT_GT(pid, 0) << std::strerror(errno);
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return pid;
}

// Threads that stay alive (blocked) until the object goes.
class LiveThreads {
 public:
  explicit LiveThreads(size_t n) {
    std::shared_future<void> stop = stop_.get_future().share();
    for (size_t i = 0; i < n; ++i) {
      std::promise<int32_t> p;
      std::future<int32_t> f = p.get_future();
      threads_.emplace_back([p = std::move(p), stop]() mutable {
        p.set_value(GetTid());
        stop.wait();
      });
      tids_.push_back(f.get());
    }
  }
  ~LiveThreads() {
    stop_.set_value();
    for (std::thread& t : threads_) t.join();
  }
  const std::vector<int32_t>& tids() const { return tids_; }

 private:
  std::promise<void> stop_;
  std::vector<std::thread> threads_;
  std::vector<int32_t> tids_;
};

TEST(CallerCache, ThisProcess) {
  CallerCache cache;
  Caller c = cache.Lookup(::getpid(), 1000, 1001);
  EXPECT_EQ(c.pid, ::getpid());
  EXPECT_EQ(c.tid, ::getpid());
  EXPECT_EQ(c.uid, 1000u);
  EXPECT_EQ(c.gid, 1001u);
  EXPECT_EQ(c.comm, SelfComm());
  EXPECT_FALSE(c.comm.empty());
  EXPECT_EQ(c.exe, SelfExe());
  EXPECT_FALSE(c.exe.empty());
  EXPECT_EQ(cache.size(), 1u);
  // Again, from the cache.
  Caller again = cache.Lookup(::getpid(), 1000, 1001);
  EXPECT_EQ(again.pid, c.pid);
  EXPECT_EQ(again.comm, c.comm);
  EXPECT_EQ(again.exe, c.exe);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(CallerCache, AThreadOfThisProcessIsThisProcess) {
  CallerCache cache;
  LiveThreads threads(1);
  const int32_t tid = threads.tids()[0];
  ASSERT_NE(tid, ::getpid());
  Caller c = cache.Lookup(tid, 0, 0);
  EXPECT_EQ(c.pid, ::getpid());
  EXPECT_EQ(c.tid, tid);
  EXPECT_EQ(c.comm, SelfComm());
  EXPECT_EQ(c.exe, SelfExe());
  // The thread and the main thread share one process entry.
  Caller main = cache.Lookup(::getpid(), 0, 0);
  EXPECT_EQ(main.pid, ::getpid());
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.threads(), 2u);
}

TEST(CallerCache, LooksUpFromAnotherThreadToo) {
  CallerCache cache;
  Caller c;
  std::thread t([&] { c = cache.Lookup(GetTid(), 5, 6); });
  t.join();
  EXPECT_EQ(c.pid, ::getpid());
  EXPECT_NE(c.tid, ::getpid());
  EXPECT_EQ(c.comm, SelfComm());
  EXPECT_EQ(c.exe, SelfExe());
}

TEST(CallerCache, ChildWithItsOwnComm) {
  CallerCache cache;
  NamedChild child("acqfs-audit-ch");
  ASSERT_GT(child.pid(), 0);
  Caller c = cache.Lookup(child.pid(), 7, 8);
  EXPECT_EQ(c.pid, child.pid());
  EXPECT_EQ(c.tid, child.pid());
  EXPECT_EQ(c.comm, "acqfs-audit-ch");
  EXPECT_EQ(c.exe, SelfExe());  // fork keeps the executable
}

TEST(CallerCache, GoneProcessIsUnknown) {
  CallerCache cache;
  const pid_t gone = GonePid();
  ASSERT_GT(gone, 0);
  Caller c = cache.Lookup(gone, 3, 4);
  EXPECT_EQ(c.pid, gone);
  EXPECT_EQ(c.tid, gone);
  EXPECT_EQ(c.uid, 3u);
  EXPECT_EQ(c.gid, 4u);
  EXPECT_EQ(c.comm, "");
  EXPECT_EQ(c.exe, "");
  EXPECT_EQ(cache.size(), 0u);  // nothing kept about it
  EXPECT_EQ(cache.threads(), 0u);
}

TEST(CallerCache, TidZeroIsTheKernel) {
  CallerCache cache;
  Caller c = cache.Lookup(0, 0, 0);
  EXPECT_EQ(c.pid, 0);
  EXPECT_EQ(c.tid, 0);
  EXPECT_EQ(c.comm, "");
  EXPECT_EQ(c.exe, "");
  EXPECT_EQ(cache.size(), 0u);
}

TEST(CallerCache, FillSetsTheCallerFields) {
  CallerCache cache;
  Record r;
  r.path = "a/b";
  cache.Fill(&r, ::getpid(), 11, 12);
  EXPECT_EQ(r.pid, ::getpid());
  EXPECT_EQ(r.tid, ::getpid());
  EXPECT_EQ(r.uid, 11u);
  EXPECT_EQ(r.gid, 12u);
  EXPECT_EQ(r.comm, SelfComm());
  EXPECT_EQ(r.exe, SelfExe());
  EXPECT_EQ(r.path, "a/b");  // untouched
  cache.Fill(&r, 0, 0, 0);
  EXPECT_EQ(r.pid, 0);
  EXPECT_EQ(r.comm, "");
  EXPECT_EQ(r.exe, "");
}

TEST(CallerCache, BoundedToItsCapacity) {
  constexpr size_t kCapacity = 8;
  CallerCache cache(kCapacity);
  LiveThreads threads(20);
  std::vector<std::unique_ptr<NamedChild>> children;
  for (int i = 0; i < 12; ++i)
    children.push_back(
        std::make_unique<NamedChild>(("child-" + std::to_string(i)).c_str()));
  for (int round = 0; round < 50; ++round) {
    for (int32_t tid : threads.tids()) {
      Caller c = cache.Lookup(tid, 0, 0);
      ASSERT_EQ(c.pid, ::getpid());
      ASSERT_EQ(c.tid, tid);
      ASSERT_EQ(c.comm, SelfComm());
    }
    for (size_t i = 0; i < children.size(); ++i) {
      Caller c = cache.Lookup(children[i]->pid(), 0, 0);
      ASSERT_EQ(c.pid, children[i]->pid());
      ASSERT_EQ(c.comm, "child-" + std::to_string(i));
    }
    EXPECT_LE(cache.size(), kCapacity);
    EXPECT_LE(cache.threads(), kCapacity);
  }
  EXPECT_EQ(cache.size(), kCapacity);
  EXPECT_EQ(cache.threads(), kCapacity);
}

TEST(CallerCache, KeepsTheMostRecentlyUsed) {
  CallerCache cache(2);
  NamedChild a("child-a"), b("child-b"), c("child-c");
  EXPECT_EQ(cache.Lookup(a.pid(), 0, 0).comm, "child-a");
  EXPECT_EQ(cache.Lookup(b.pid(), 0, 0).comm, "child-b");
  // Use a again, so b is the least recently used when c comes.
  EXPECT_EQ(cache.Lookup(a.pid(), 0, 0).comm, "child-a");
  EXPECT_EQ(cache.Lookup(c.pid(), 0, 0).comm, "child-c");
  // a is still cached: renamed, it still shows its old comm.
  a.Rename("child-a2");
  EXPECT_EQ(cache.Lookup(a.pid(), 0, 0).comm, "child-a");
  // b was evicted, so it is read afresh.
  b.Rename("child-b2");
  EXPECT_EQ(cache.Lookup(b.pid(), 0, 0).comm, "child-b2");
  EXPECT_EQ(cache.size(), 2u);
}

TEST(CallerCache, ChangedCommIsReadAgainAfterTheTtl) {
  NamedChild child("before");
  CallerCache lasting;                 // 10 s
  CallerCache brief(4096, 1'000'000);  // 1 ms
  EXPECT_EQ(lasting.Lookup(child.pid(), 0, 0).comm, "before");
  EXPECT_EQ(brief.Lookup(child.pid(), 0, 0).comm, "before");
  child.Rename("after");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(lasting.Lookup(child.pid(), 0, 0).comm, "before");  // cached
  EXPECT_EQ(brief.Lookup(child.pid(), 0, 0).comm, "after");
  EXPECT_EQ(brief.size(), 1u);
}

TEST(CallerCache, ConcurrentLookups) {
  CallerCache cache(4);
  LiveThreads threads(8);
  std::atomic<int> wrong{0};
  std::vector<std::thread> lookers;
  for (int i = 0; i < 4; ++i) {
    lookers.emplace_back([&] {
      for (int round = 0; round < 200; ++round) {
        for (int32_t tid : threads.tids()) {
          Caller c = cache.Lookup(tid, 0, 0);
          if (c.pid != ::getpid() || c.tid != tid || c.exe.empty()) ++wrong;
        }
      }
    });
  }
  for (std::thread& t : lookers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.threads(), 4u);
}

}  // namespace
}  // namespace acqfs::audit
