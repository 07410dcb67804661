// The daemon's descriptors are bounded by design (docs/architecture.md,
// "Descriptors"), whatever the sandbox does, in both file modes: the bound
// the daemon logs at mount (FdBudget) holds under
//   - a hundred rounds of "create 500 files, read them, rm -rf", with some
//     of them held open across their removal (what killed a sandbox within
//     20 seconds when a CREATE's handle was never released);
//   - a daemon limited to 256 descriptors serving 20,000 files created,
//     read, renamed over each other and deleted while another process holds
//     300 of them open, and this one 300 more for writing;
//   - more files held open at once than the daemon may have descriptors.
// No operation may fail, none with EMFILE or ENFILE, and every held file
// keeps its data.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/process.h"
#include "harness/sandbox.h"
#include "harness/temp_dir.h"

namespace acqfs::test {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

// The descriptor bound the daemon logged at mount; 0 when missing.
long LoggedBound(const Sandbox& sb) {
  std::smatch m;
  std::string log = sb.DaemonLog();
  static const std::regex re("descriptors: limit [0-9]+, bound ([0-9]+)");
  if (!std::regex_search(log, m, re)) return 0;
  return std::stol(m[1]);
}

// Lets this process hold as many descriptors as the machine allows.
void RaiseOwnFdLimit() {
  struct rlimit rl;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = rl.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);
}

AssertionResult Failed(const std::string& what, int err) {
  return AssertionFailure() << what << ": " << ErrnoName(err);
}

AssertionResult Put(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Failed("create " + path, errno);
  ssize_t n = ::write(fd, data.data(), data.size());
  int err = errno;
  if (::close(fd) != 0) return Failed("close " + path, errno);
  if (n != static_cast<ssize_t>(data.size()))
    return Failed("write " + path, err);
  return AssertionSuccess();
}

// All of `fd` from offset 0, after dropping its cached pages so the read
// reaches the daemon.
AssertionResult ReadFd(int fd, const std::string& what, std::string* out) {
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  out->clear();
  char buf[4096];
  for (off_t off = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n < 0) return Failed("read " + what, errno);
    if (n == 0) return AssertionSuccess();
    out->append(buf, static_cast<size_t>(n));
    off += n;
  }
}

AssertionResult Expect(const std::string& path, const std::string& want) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Failed("open " + path, errno);
  ScopedFd owned(fd);
  std::string got;
  if (AssertionResult r = ReadFd(fd, path, &got); !r) return r;
  if (got != want)
    return AssertionFailure()
           << path << " holds '" << got << "', not '" << want << "'";
  return AssertionSuccess();
}

AssertionResult Within(const Sandbox& sb, long bound, const std::string& when,
                       long* peak) {
  long n = CountFds(sb.daemon_pid());
  if (n < 0) return AssertionFailure() << "cannot read the daemon's fds";
  if (n > *peak) *peak = n;
  if (n > bound)
    return AssertionFailure()
           << "the daemon holds " << n << " descriptors, over its bound "
           << bound << " (" << when << ")";
  return AssertionSuccess();
}

class Descriptors : public ::testing::TestWithParam<const char*> {
 protected:
  SandboxOptions Options(const std::string& nofile) const {
    SandboxOptions o;
    if (!nofile.empty())
      o.command_prefix = {"prlimit", "--nofile=" + nofile + ":" + nofile};
    if (GetParam()[0]) o.extra_mount_args = {"-o", GetParam()};
    return o;
  }
  std::string MakeLower() {
    std::string lower = tmp_.MakeDir("lower");
    EXPECT_TRUE(WriteFile(lower + "/README", "readme\n"));
    return lower;
  }
  // The daemon log must not show the daemon running out.
  static void ExpectCleanLog(const Sandbox& sb) {
    std::string log = sb.DaemonLog();
    EXPECT_EQ(log.find("Too many open files"), std::string::npos) << log;
    EXPECT_EQ(log.find("descriptor budget exhausted"), std::string::npos)
        << log;
  }
  TempDir tmp_;
};

TEST_P(Descriptors, HundredRoundsOfCreateReadRemoveStayUnderTheBound) {
  Sandbox sb(MakeLower(), Options(""));
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  const long bound = LoggedBound(sb);
  ASSERT_GT(bound, 0) << sb.DaemonLog();
  // The first open makes the kernel stop sending OPEN in the handle-less
  // mode: every file below is created after it.
  ASSERT_TRUE(Expect(sb.M("README"), "readme\n"));
  long peak = 0;
  for (int round = 0; round < 100; round++) {
    const std::string d = sb.M("loop/d");
    ASSERT_EQ(::mkdir(sb.M("loop").c_str(), 0755), 0) << round;
    ASSERT_EQ(::mkdir(d.c_str(), 0755), 0) << round;
    for (int j = 0; j < 500; j++) {
      std::string f = d + "/f" + std::to_string(j);
      ASSERT_TRUE(Put(f, std::to_string(round) + "/" + std::to_string(j)))
          << "round " << round;
    }
    for (int j = 0; j < 500; j++) {
      std::string f = d + "/f" + std::to_string(j);
      ASSERT_TRUE(Expect(f, std::to_string(round) + "/" + std::to_string(j)))
          << "round " << round;
    }
    std::vector<ScopedFd> held;
    for (int j = 0; j < 500; j += 100)
      held.emplace_back(
          ::open((d + "/f" + std::to_string(j)).c_str(), O_RDONLY | O_CLOEXEC));
    CommandResult rm = RunShell("rm -rf " + ShellQuote(sb.M("loop")), 60);
    ASSERT_TRUE(rm.ok()) << "round " << round << ": " << rm.Describe();
    for (size_t h = 0; h < held.size(); h++) {
      ASSERT_TRUE(held[h].valid()) << "round " << round;
      std::string got;
      ASSERT_TRUE(ReadFd(held[h].get(), "held file", &got));
      EXPECT_EQ(got, std::to_string(round) + "/" + std::to_string(h * 100))
          << "round " << round << ": a held file lost its data";
    }
    held.clear();
    ASSERT_TRUE(Within(sb, bound, "round " + std::to_string(round), &peak));
  }
  std::cout << "[ daemon fds ] peak " << peak << ", bound " << bound
            << ", VmHWM " << StatusKib(sb.daemon_pid(), "VmHWM") << " KiB\n";
  ExpectCleanLog(sb);
  EXPECT_TRUE(sb.Unmount());
}

// A child that opens `paths` read-only, says so on `ready`, waits for a
// byte on `go`, then reads every file and checks it holds `want(i)`.
// Exits 0 when all held their data, else 1 with a message on stderr.
pid_t HoldInChild(const std::vector<std::string>& paths,
                  const std::vector<std::string>& want, int ready, int go) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  std::vector<int> fds;
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::fprintf(stderr, "child: open %s: %s\n", p.c_str(),
                   std::strerror(errno));
      ::_exit(1);
    }
    fds.push_back(fd);
  }
  char c = 'r';
  if (::write(ready, &c, 1) != 1 || ::read(go, &c, 1) != 1) ::_exit(1);
  for (size_t i = 0; i < fds.size(); i++) {
    std::string got;
    AssertionResult r = ReadFd(fds[i], paths[i], &got);
    if (!r || got != want[i]) {
      std::fprintf(stderr, "child: %s: got '%s', want '%s' (%s)\n",
                   paths[i].c_str(), got.c_str(), want[i].c_str(),
                   r ? "" : r.message());
      ::_exit(1);
    }
  }
  ::_exit(0);
}

TEST_P(Descriptors, TwentyThousandFilesUnderALimitOf256WhileOthersHoldFiles) {
  ASSERT_NO_FATAL_FAILURE(RaiseOwnFdLimit());
  Sandbox sb(MakeLower(), Options("256"));
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  const long bound = LoggedBound(sb);
  ASSERT_GT(bound, 0) << sb.DaemonLog();
  ASSERT_LT(bound, 256);
  ASSERT_TRUE(Expect(sb.M("README"), "readme\n"));
  constexpr int kDirs = 20, kPerDir = 1000;
  auto path = [&](int d, int f) {
    return sb.M("t/d" + std::to_string(d) + "/f" + std::to_string(f));
  };
  auto body = [](int d, int f) {
    return "file " + std::to_string(d) + "/" + std::to_string(f);
  };
  long peak = 0;
  ASSERT_EQ(::mkdir(sb.M("t").c_str(), 0755), 0);
  for (int d = 0; d < kDirs; d++) {
    ASSERT_EQ(::mkdir(sb.M("t/d" + std::to_string(d)).c_str(), 0755), 0);
    for (int f = 0; f < kPerDir; f++) ASSERT_TRUE(Put(path(d, f), body(d, f)));
  }
  ASSERT_TRUE(Within(sb, bound, "after creating", &peak));
  // Another process holds 300 files open for reading; this one 300 more
  // for writing. All of them lose their names below.
  std::vector<std::string> child_paths, child_want;
  std::vector<ScopedFd> mine;
  for (int i = 0; i < 300; i++) {
    child_paths.push_back(path(i % kDirs, i));
    child_want.push_back(body(i % kDirs, i));
    mine.emplace_back(
        ::open(path(i % kDirs, 500 + i).c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(mine.back().valid()) << ErrnoName(errno);
  }
  int ready[2], go[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  pid_t child = HoldInChild(child_paths, child_want, ready[1], go[0]);
  ASSERT_GT(child, 0);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the holding child failed";
  // Read everything; rename every third file over its neighbour and every
  // other third to a new name; then delete the whole tree.
  for (int d = 0; d < kDirs; d++)
    for (int f = 0; f < kPerDir; f++)
      ASSERT_TRUE(Expect(path(d, f), body(d, f)));
  ASSERT_TRUE(Within(sb, bound, "after reading", &peak));
  for (int d = 0; d < kDirs; d++) {
    for (int f = 0; f + 1 < kPerDir; f += 3) {
      ASSERT_EQ(::rename(path(d, f).c_str(), path(d, f + 1).c_str()), 0)
          << ErrnoName(errno);
      ASSERT_EQ(
          ::rename(path(d, f + 2).c_str(), (path(d, f + 2) + ".moved").c_str()),
          0)
          << ErrnoName(errno);
    }
  }
  ASSERT_TRUE(Within(sb, bound, "after renaming", &peak));
  CommandResult rm = RunShell("rm -rf " + ShellQuote(sb.M("t")), 300);
  ASSERT_TRUE(rm.ok()) << rm.Describe();
  ASSERT_TRUE(Within(sb, bound, "after deleting", &peak));
  // The held files still read and write their own data.
  for (size_t i = 0; i < mine.size(); i++) {
    ASSERT_EQ(::pwrite(mine[i].get(), "W", 1, 0), 1) << ErrnoName(errno);
    std::string got;
    ASSERT_TRUE(ReadFd(mine[i].get(), "held file", &got));
    std::string want = body(static_cast<int>(i) % kDirs, 500 + i);
    want[0] = 'W';
    EXPECT_EQ(got, want);
  }
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  int status = 0;
  ASSERT_TRUE(WaitForChild(child, &status, 120));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the other process's held files lost their data";
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  mine.clear();
  ASSERT_TRUE(Within(sb, bound, "after closing", &peak));
  std::cout << "[ daemon fds ] peak " << peak << ", bound " << bound
            << ", VmHWM " << StatusKib(sb.daemon_pid(), "VmHWM") << " KiB\n";
  ExpectCleanLog(sb);
  EXPECT_TRUE(sb.Unmount());
}

// 2,000 files open at once, read and written in turn, against a daemon
// that may hold 256 descriptors: every handle works through the daemon's
// bounded file cache.
TEST_P(Descriptors, MoreFilesOpenAtOnceThanTheDaemonMayHoldDescriptors) {
  ASSERT_NO_FATAL_FAILURE(RaiseOwnFdLimit());
  std::string lower = MakeLower();
  ASSERT_EQ(::mkdir((lower + "/l").c_str(), 0755), 0);
  for (int i = 0; i < 1000; i++)
    ASSERT_TRUE(WriteFile(lower + "/l/" + std::to_string(i), "lower"));
  Sandbox sb(lower, Options("256"));
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  const long bound = LoggedBound(sb);
  ASSERT_GT(bound, 0);
  ASSERT_EQ(::mkdir(sb.M("u").c_str(), 0755), 0);
  std::vector<ScopedFd> open_files;
  for (int i = 0; i < 1000; i++) {
    open_files.emplace_back(
        ::open(sb.M("l/" + std::to_string(i)).c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(open_files.back().valid()) << ErrnoName(errno);
    open_files.emplace_back(::open(sb.M("u/" + std::to_string(i)).c_str(),
                                   O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(open_files.back().valid()) << ErrnoName(errno);
  }
  long peak = 0;
  ASSERT_TRUE(Within(sb, bound, "with 2,000 files open", &peak));
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < open_files.size(); i++) {
      std::string mark = "#" + std::to_string(i) + "." + std::to_string(pass);
      ASSERT_EQ(::pwrite(open_files[i].get(), mark.data(), mark.size(), 0),
                static_cast<ssize_t>(mark.size()))
          << ErrnoName(errno);
    }
    for (size_t i = 0; i < open_files.size(); i++) {
      std::string got;
      ASSERT_TRUE(
          ReadFd(open_files[i].get(), "file " + std::to_string(i), &got));
      std::string mark = "#" + std::to_string(i) + "." + std::to_string(pass);
      EXPECT_EQ(got.substr(0, mark.size()), mark);
    }
    ASSERT_TRUE(Within(sb, bound, "pass " + std::to_string(pass), &peak));
  }
  open_files.clear();
  EXPECT_EQ(ContentOf(lower + "/l/7"), "lower");
  std::cout << "[ daemon fds ] peak " << peak << ", bound " << bound << "\n";
  ExpectCleanLog(sb);
  EXPECT_TRUE(sb.Unmount());
}

// Writers rename freshly written files over a few names while readers open
// and read them, against a daemon allowed 256 descriptors (so its file
// cache evicts all the time) and with kept data in play (a reader's file is
// renamed over under it). Every read sees one whole file: its content names
// itself, so a mix of two files or a stale descriptor shows. Nothing fails.
TEST_P(Descriptors, ReadersSeeWholeFilesWhileWritersRenameOverThem) {
  Sandbox sb(MakeLower(), Options("256"));
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  constexpr int kNames = 8, kThreads = 3;
  auto content = [](int writer, long gen) {
    std::string id = std::to_string(writer) + "." + std::to_string(gen) + ";";
    std::string body;
    while (body.size() < 3000) body += id;
    return body;
  };
  for (int n = 0; n < kNames; n++)
    ASSERT_TRUE(Put(sb.M("n" + std::to_string(n)), content(99, n)));
  std::atomic<bool> stop{false};
  std::atomic<long> reads{0}, renames{0};
  std::mutex mu;
  std::vector<std::string> problems;
  auto problem = [&](const std::string& p) {
    std::lock_guard<std::mutex> l(mu);
    if (problems.size() < 10) problems.push_back(p);
    stop = true;
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; w++) {
    threads.emplace_back([&, w] {
      for (long gen = 0; !stop; gen++) {
        std::string tmp = sb.M("w" + std::to_string(w) + ".tmp");
        std::string dst = sb.M("n" + std::to_string(gen % kNames));
        if (AssertionResult r = Put(tmp, content(w, gen)); !r)
          return problem(r.message());
        if (::rename(tmp.c_str(), dst.c_str()) != 0)
          return problem("rename: " + ErrnoName(errno));
        renames++;
      }
    });
  }
  for (int r = 0; r < kThreads; r++) {
    threads.emplace_back([&, r] {
      for (long i = 0; !stop; i++) {
        std::string path = sb.M("n" + std::to_string((i + r) % kNames));
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return problem("open " + path + ": " + ErrnoName(errno));
        ScopedFd owned(fd);
        std::string got;
        if (AssertionResult a = ReadFd(fd, path, &got); !a)
          return problem(a.message());
        std::string id = got.substr(0, got.find(';') + 1);
        std::string want;
        while (want.size() < 3000) want += id;
        if (id.size() < 4 || got != want)
          return problem(path + " read a mix: " + got.substr(0, 80));
        reads++;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(6));
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
  EXPECT_GT(reads.load(), 100);
  EXPECT_GT(renames.load(), 100);
  std::cout << "[ race ] " << reads << " whole reads, " << renames
            << " renames over\n";
  ExpectCleanLog(sb);
  EXPECT_TRUE(sb.Unmount());
}

INSTANTIATE_TEST_SUITE_P(Modes, Descriptors, ::testing::Values("", "handles"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param[0] ? "Handles"
                                                         : "HandleLess");
                         });

}  // namespace
}  // namespace acqfs::test
