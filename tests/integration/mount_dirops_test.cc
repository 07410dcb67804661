// Lookups and listings of one directory side by side (FUSE_PARALLEL_DIROPS,
// which the daemon adds to libfuse 3.14's INIT reply: fuse/mount.cc).
//
// - OneDirectory.TheKernelDoesNotSerializeItsLookups: threads looking up
//   names in one directory are never seen waiting in the kernel's
//   fuse_lock_inode (the per-directory mutex the kernel takes without the
//   flag), read from /proc/self/task/*/stack; under `-o
//   noparallel_dirops` they are, which shows the probe sees it.
// - OneDirectoryRace.*: with nothing serialized by the kernel, threads
//   creating, renaming, removing, looking up and listing in one directory
//   at once see what they made, never lose a lower entry from a listing,
//   and leave exactly their own files behind, in both file modes.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mount_fixture.h"

namespace acqfs::test {
namespace {

constexpr int kLowerFiles = 200;

void MakeSharedDir(const std::string& lower) {
  ASSERT_EQ(::mkdir((lower + "/shared").c_str(), 0755), 0) << strerror(errno);
  for (int i = 0; i < kLowerFiles; i++) {
    std::ofstream(lower + "/shared/l" + std::to_string(i)) << "lower " << i;
  }
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Probe {
  int samples = 0;     // stacks read
  int serialized = 0;  // ... showing fuse_lock_inode
};

// `threads` threads look up fresh names (each a LOOKUP: no entry cached) in
// `dir` while this thread reads their kernel stacks; for `seconds`, or
// until a stack shows fuse_lock_inode when `stop_when_seen`.
Probe ProbeLookups(const std::string& dir, int threads, double seconds,
                   bool stop_when_seen) {
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<pid_t> tids;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; t++) {
    workers.emplace_back([&, t] {
      {
        std::lock_guard<std::mutex> l(mu);
        tids.push_back(static_cast<pid_t>(::syscall(SYS_gettid)));
      }
      struct stat st;
      for (long i = 0; !stop.load(); i++) {
        std::string p =
            dir + "/absent-" + std::to_string(t) + "-" + std::to_string(i);
        ::lstat(p.c_str(), &st);
      }
    });
  }
  Probe probe;
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::vector<pid_t> now;
    {
      std::lock_guard<std::mutex> l(mu);
      now = tids;
    }
    for (pid_t tid : now) {
      std::string stack =
          ReadAll("/proc/self/task/" + std::to_string(tid) + "/stack");
      probe.samples++;
      if (stack.find("fuse_lock_inode") != std::string::npos)
        probe.serialized++;
    }
    if (stop_when_seen && probe.serialized > 0) break;
  }
  stop.store(true);
  for (std::thread& w : workers) w.join();
  return probe;
}

class OneDirectory : public MountTest {
 protected:
  void PrepareLower(const std::string& lower) override { MakeSharedDir(lower); }
};

TEST_F(OneDirectory, TheKernelDoesNotSerializeItsLookups) {
  // `acqfs mount` returns once the daemon is ready, which can be before
  // it has answered the kernel's INIT (and logged how): the first request
  // through the mount waits for that answer.
  struct stat st;
  ASSERT_EQ(::lstat(M("shared").c_str(), &st), 0);
  EXPECT_NE(sandbox().DaemonLog().find("lookups in one directory run side "
                                       "by side"),
            std::string::npos)
      << sandbox().DaemonLog();
  Probe side_by_side = ProbeLookups(M("shared"), 8, 1.5, false);
  EXPECT_GT(side_by_side.samples, 100);
  EXPECT_EQ(side_by_side.serialized, 0)
      << side_by_side.serialized << " of " << side_by_side.samples
      << " stacks waited in fuse_lock_inode";

  // The probe itself: the same lookups on a mount that leaves the kernel
  // to serialize them are caught waiting.
  SandboxOptions o;
  o.name = "serialized";
  o.extra_mount_args = {"-o", "noparallel_dirops"};
  Sandbox serialized(lower(), o);
  ASSERT_TRUE(serialized.mounted()) << serialized.mount_failure();
  ASSERT_EQ(::lstat(serialized.M("shared").c_str(), &st), 0);
  EXPECT_NE(serialized.DaemonLog().find("are serialized by the kernel"),
            std::string::npos)
      << serialized.DaemonLog();
  Probe one_at_a_time =
      ProbeLookups(serialized.M("shared"), 8, 10, /*stop_when_seen=*/true);
  EXPECT_GT(one_at_a_time.serialized, 0)
      << "no stack of " << one_at_a_time.samples
      << " showed fuse_lock_inode: the probe cannot tell";
  EXPECT_TRUE(serialized.Unmount());
}

class OneDirectoryRace : public BothFileModes {
 protected:
  void PrepareLower(const std::string& lower) override { MakeSharedDir(lower); }
};

TEST_P(OneDirectoryRace, CreatesRenamesRemovalsLookupsAndListingsAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 150;
  const std::string dir = M("shared");
  std::mutex mu;
  std::vector<std::string> failures;  // guarded by mu
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> l(mu);
    if (failures.size() < 20) failures.push_back(what);
  };
  // What each thread leaves: name -> content.
  std::vector<std::map<std::string, std::string>> left(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      struct stat st;
      for (int i = 0; i < kRounds; i++) {
        const std::string tag = std::to_string(t) + "-" + std::to_string(i);
        // A lower file: always there, its own size.
        const int l = (t * 31 + i * 7) % kLowerFiles;
        const std::string lname = dir + "/l" + std::to_string(l);
        const std::string want = "lower " + std::to_string(l);
        if (::lstat(lname.c_str(), &st) != 0 ||
            st.st_size != static_cast<off_t>(want.size()))
          fail("lstat " + lname + ": " + strerror(errno));
        // A name nobody makes.
        if (::lstat((dir + "/none-" + tag).c_str(), &st) == 0 ||
            errno != ENOENT)
          fail("lstat of an absent name did not give ENOENT: " + tag);
        // A file of its own: made, read back, then renamed or removed.
        const std::string mine = dir + "/t" + tag;
        const std::string text = "thread " + tag;
        int fd = ::open(mine.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) {
          fail("create " + mine + ": " + strerror(errno));
          continue;
        }
        if (::write(fd, text.data(), text.size()) !=
            static_cast<ssize_t>(text.size()))
          fail("write " + mine);
        ::close(fd);
        if (ReadAll(mine) != text) fail("read back " + mine);
        if (i % 3 == 0) {
          if (::unlink(mine.c_str()) != 0)
            fail("unlink " + mine + ": " + strerror(errno));
        } else if (i % 3 == 1) {
          const std::string renamed = mine + "r";
          if (::rename(mine.c_str(), renamed.c_str()) != 0)
            fail("rename " + mine + ": " + strerror(errno));
          else
            left[t]["t" + tag + "r"] = text;
        } else {
          left[t]["t" + tag] = text;
        }
        // A listing: every lower file once, nothing twice.
        if (i % 10 == 0) {
          DIR* d = ::opendir(dir.c_str());
          if (!d) {
            fail("opendir: " + std::string(strerror(errno)));
            continue;
          }
          std::multiset<std::string> names;
          while (dirent* e = ::readdir(d)) names.insert(e->d_name);
          ::closedir(d);
          for (int k = 0; k < kLowerFiles; k++)
            if (names.count("l" + std::to_string(k)) != 1)
              fail("listing " + tag + ": l" + std::to_string(k) + " seen " +
                   std::to_string(names.count("l" + std::to_string(k))) +
                   " times");
          for (auto it = names.begin(); it != names.end();
               it = names.upper_bound(*it))
            if (names.count(*it) != 1)
              fail("listing " + tag + ": " + *it + " twice");
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;

  // Afterwards: exactly the lower files and what each thread kept.
  std::set<std::string> want;
  for (int k = 0; k < kLowerFiles; k++) want.insert("l" + std::to_string(k));
  for (auto& m : left)
    for (auto& [name, text] : m) {
      want.insert(name);
      EXPECT_EQ(ReadAll(dir + "/" + name), text) << name;
    }
  std::set<std::string> got;
  DIR* d = ::opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << strerror(errno);
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      got.insert(e->d_name);
  ::closedir(d);
  EXPECT_EQ(got, want);
  // The upper layer holds the same (no lower file was touched).
  std::set<std::string> upper;
  d = ::opendir(U("shared").c_str());
  ASSERT_NE(d, nullptr) << strerror(errno);
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] == 't') upper.insert(e->d_name);
  ::closedir(d);
  std::set<std::string> kept;
  for (const std::string& n : want)
    if (n[0] == 't') kept.insert(n);
  EXPECT_EQ(upper, kept);
  const std::string log = sandbox().DaemonLog();
  EXPECT_EQ(log.find("[warning]"), std::string::npos) << log;
  EXPECT_EQ(log.find("[error]"), std::string::npos) << log;
}

// telldir and seekdir across changes: going back to a position gives the
// names after it again, each once, whatever was made or removed since
// (POSIX: entries neither added nor removed come exactly once).
TEST_P(OneDirectoryRace, SeekdirToATelldirPositionAfterChangesGoesOnThere) {
  DIR* d = ::opendir(M("shared").c_str());
  ASSERT_NE(d, nullptr) << strerror(errno);
  std::set<std::string> before;  // read before the position
  for (int i = 0; i < 60; i++) {
    dirent* e = ::readdir(d);
    ASSERT_NE(e, nullptr);
    before.insert(e->d_name);
  }
  const long pos = ::telldir(d);
  std::vector<std::string> after;  // the rest, as first read
  while (dirent* e = ::readdir(d)) after.push_back(e->d_name);
  ASSERT_EQ(before.size() + after.size(), kLowerFiles + 2u);
  // New names, and some of both parts removed.
  for (int i = 0; i < 100; i++)
    std::ofstream(M("shared/new" + std::to_string(i))) << i;
  std::set<std::string> removed;
  for (const std::string& n : {*before.rbegin(), after[3], after[40]}) {
    if (n == "." || n == "..") continue;
    ASSERT_EQ(::unlink(M("shared/" + n).c_str()), 0) << n;
    removed.insert(n);
  }
  ::seekdir(d, pos);
  std::multiset<std::string> again;
  while (dirent* e = ::readdir(d)) again.insert(e->d_name);
  ::closedir(d);
  for (const std::string& n : after)
    if (!removed.count(n)) EXPECT_EQ(again.count(n), 1u) << n;
  for (const std::string& n : before)
    EXPECT_EQ(again.count(n), 0u) << n << " came again after seekdir";
  for (const std::string& n : again) EXPECT_EQ(again.count(n), 1u) << n;
}

ACQFS_IN_BOTH_FILE_MODES(OneDirectoryRace);

}  // namespace
}  // namespace acqfs::test
