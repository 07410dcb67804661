// The warm walk (fuse/warm_walk.h) through a real mount, in both file
// modes: it fills the kernel's caches so that what an agent runs first
// (git's lstat of every path, in index order) sends no LOOKUP; the
// sandbox's mount unmounts at any instant of it, by `acqfs umount`, by
// umount(2) and by fusermount3, and the daemon then ends; a signal ends
// it at once; a daemon killed
// during it leaves no walker behind; and it writes nothing.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "harness/sandbox.h"
#include "harness/snapshot.h"
#include "harness/temp_dir.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

// A lower of `dirs` directories of `files` files each (and one level
// below each), plus the sorted list of its paths.
std::vector<std::string> MakeTree(const std::string& lower, int dirs,
                                  int files) {
  std::vector<std::string> paths;
  for (int d = 0; d < dirs; d++) {
    const std::string dir = "dir" + std::to_string(d);
    MakeDir(lower + "/" + dir);
    MakeDir(lower + "/" + dir + "/sub");
    paths.push_back(dir);
    paths.push_back(dir + "/sub");
    for (int f = 0; f < files; f++) {
      const std::string name = dir + "/file" + std::to_string(f) + ".c";
      MakeFile(lower + "/" + name, "x");
      paths.push_back(name);
      if (f % 4 == 0) {
        MakeFile(lower + "/" + dir + "/sub/s" + std::to_string(f), "y");
        paths.push_back(dir + "/sub/s" + std::to_string(f));
      }
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size()))
    n++;
  return n;
}

// Waits (up to 60 s) for the daemon log's line that the walk ended.
AssertionResult WaitForWalkEnd(const Sandbox& sb, std::string* line) {
  return sb.WaitForWarmWalk(60, 0, line);
}

class WarmWalk : public ::testing::TestWithParam<std::string> {
 protected:
  SandboxOptions Options(std::vector<std::string> extra) const {
    SandboxOptions o;
    o.wait_for_warm_walk = false;  // these tests race the walk on purpose
    o.extra_mount_args = std::move(extra);
    if (!GetParam().empty()) {
      o.extra_mount_args.push_back("-o");
      o.extra_mount_args.push_back(GetParam());
    }
    return o;
  }
  TempDir tmp_;
};

// git's first `git status` lstat()s every path of its index in order; after
// the walk none of those needs a LOOKUP. Without the walk each one does
// (the same check with -o nowarm, so the test can tell them apart).
TEST_P(WarmWalk, FillsTheKernelCachesSoPathLookupsSendNoRequest) {
  const std::string lower = tmp_.MakeDir("lower");
  const std::vector<std::string> paths = MakeTree(lower, 20, 40);
  for (bool warm : {true, false}) {
    SCOPED_TRACE(warm ? "walk on" : "-o nowarm");
    std::vector<std::string> extra = {"-o", "debug"};
    if (!warm) extra.insert(extra.end(), {"-o", "nowarm"});
    Sandbox sb(lower, Options(extra));
    ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
    const std::string trace = sb.layer_dir() + "/fuse-debug.log";
    if (warm) {
      std::string line;
      ASSERT_TRUE(WaitForWalkEnd(sb, &line));
      EXPECT_NE(line.find("(done; 32 threads at nice "), std::string::npos)
          << line;
      EXPECT_NE(line.find(std::to_string(paths.size()) + " entries"),
                std::string::npos)
          << line;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_NE(sb.DaemonLog().find("warm walk: off (-o nowarm)"),
                std::string::npos)
          << sb.DaemonLog();
      EXPECT_EQ(sb.DaemonLog().find("warm walk: 0"), std::string::npos)
          << sb.DaemonLog();
    }
    const size_t before = Count(ReadAll(trace), "opcode: LOOKUP");
    for (const std::string& p : paths) {
      struct stat st;
      ASSERT_EQ(::lstat(sb.M(p).c_str(), &st), 0) << p;
    }
    const size_t lookups = Count(ReadAll(trace), "opcode: LOOKUP") - before;
    if (warm)
      EXPECT_EQ(lookups, 0u) << "LOOKUPs after the walk";
    else
      EXPECT_GE(lookups, paths.size()) << "LOOKUPs without the walk";
    EXPECT_TRUE(sb.Unmount());
  }
}

// The sandbox's mount is never busy because of the walk: whichever way it
// is unmounted, at any instant of the walk, the unmount succeeds at once
// and the daemon ends.
TEST_P(WarmWalk, TheMountUnmountsAtAnyInstantOfTheWalk) {
  const std::string lower = tmp_.MakeDir("lower");
  MakeTree(lower, 100, 200);  // 25,200 entries: a walk of a second or so
  const int delays_ms[] = {0, 20, 150};
  for (const char* how : {"acqfs umount", "umount2", "fusermount3 -u"}) {
    for (int delay : delays_ms) {
      SCOPED_TRACE(std::string(how) + " after " + std::to_string(delay) +
                   " ms");
      Sandbox sb(lower, Options({}));
      ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
      const pid_t daemon = sb.daemon_pid();
      ASSERT_GT(daemon, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      if (std::string(how) == "acqfs umount") {
        EXPECT_TRUE(sb.Unmount());
        continue;  // Unmount checks the mount and the daemon are gone
      }
      if (std::string(how) == "umount2") {
        ASSERT_EQ(::umount2(sb.mountpoint().c_str(), UMOUNT_NOFOLLOW), 0)
            << std::strerror(errno);
      } else {
        CommandResult r =
            RunCommand({"fusermount3", "-u", sb.mountpoint()}, 30);
        ASSERT_TRUE(r.ok()) << r.Describe();
      }
      EXPECT_TRUE(sb.UnmountedElsewhere(20));
    }
  }
}

// SIGTERM or SIGINT at any instant of the walk ends the daemon at once,
// cleanly: a request of the walk's that a worker had read when the loop
// ended must not hold the daemon in its wait for the walk (it did: the
// page dropper's copy of /dev/fuse kept the connection, so the request
// was never aborted, and the daemon waited for a child it could not end).
TEST_P(WarmWalk, ASignalAtAnyInstantOfTheWalkEndsTheDaemonAtOnce) {
  const std::string lower = tmp_.MakeDir("lower");
  MakeTree(lower, 100, 200);
  for (int sig : {SIGTERM, SIGINT}) {
    for (int delay : {0, 5, 20, 60, 150}) {
      SCOPED_TRACE(std::string(strsignal(sig)) + " after " +
                   std::to_string(delay) + " ms");
      Sandbox sb(lower, Options({}));
      ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      ASSERT_EQ(::kill(sb.daemon_pid(), sig), 0);
      EXPECT_TRUE(sb.UnmountedElsewhere(5));
      const std::string log = sb.DaemonLog();
      EXPECT_NE(log.find("unmounted " + sb.mountpoint()), std::string::npos)
          << log;
      EXPECT_EQ(log.find("did not end"), std::string::npos) << log;
    }
  }
}

// A daemon killed during the walk takes its walker with it (the walker
// must not keep the connection's superblock, nor any lock, alive), and the
// sandbox cleans up as after any killed daemon.
TEST_P(WarmWalk, AKilledDaemonLeavesNoWalkerBehind) {
  const std::string lower = tmp_.MakeDir("lower");
  MakeTree(lower, 100, 200);
  Sandbox sb(lower, Options({}));
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  const pid_t daemon = sb.daemon_pid();
  std::vector<pid_t> walkers;
  for (int i = 0; i < 100 && walkers.empty(); i++) {
    std::string kids = Sh("pgrep -P " + std::to_string(daemon) + " || true");
    std::istringstream in(kids);
    pid_t p;
    while (in >> p) walkers.push_back(p);
    if (walkers.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  EXPECT_TRUE(WaitForProcessExit(daemon, 20));
  for (pid_t w : walkers)
    EXPECT_TRUE(WaitForProcessExit(w, 30)) << "walker " << w << " survived";
  EXPECT_TRUE(sb.Unmount()) << "acqfs umount cleans up the stale mount";
}

// The walk's threads and nice value are the mount's to choose, and the
// child runs with them (its own report, read back by getpriority).
TEST_P(WarmWalk, RunsWithTheThreadsAndNiceValueAskedFor) {
  const std::string lower = tmp_.MakeDir("lower");
  MakeTree(lower, 10, 30);
  Sandbox sb(lower, Options({"-o", "warm_threads=5", "-o", "warm_nice=7"}));
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  std::string line;
  ASSERT_TRUE(WaitForWalkEnd(sb, &line));
  EXPECT_NE(line.find("(done; 5 threads at nice 7, at most "),
            std::string::npos)
      << line;
  EXPECT_TRUE(sb.Unmount());
}

// An agent that writes right after the mount has the daemon to itself: the
// walk starts no listing while requests that change something keep coming
// (fuse/warm_walk.h), and finishes once they pause. One walking thread, so
// the walk of 3,000 directories outlasts the writer's start.
TEST_P(WarmWalk, WaitsWhileTheAgentWritesAndFinishesAfterwards) {
  const std::string lower = tmp_.MakeDir("lower");
  MakeTree(lower, 1500, 2);
  Sandbox sb(lower, Options({"-o", "warm_threads=1"}));
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  const auto start = std::chrono::steady_clock::now();
  int rounds = 0;
  while (std::chrono::steady_clock::now() - start <
         std::chrono::milliseconds(1500)) {
    const std::string f = sb.M("w" + std::to_string(rounds++ % 8));
    int fd = ::open(f.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << f;
    ASSERT_EQ(::write(fd, "x", 1), 1);
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::string line;
  ASSERT_TRUE(WaitForWalkEnd(sb, &line));
  EXPECT_NE(line.find("(done;"), std::string::npos) << line;
  const size_t at = line.find("directories, ");
  ASSERT_NE(at, std::string::npos) << line;
  const double seconds = std::stod(line.substr(at + 13));
  EXPECT_GE(seconds, 1.0) << "the walk did not wait for the writes: " << line;
  EXPECT_TRUE(sb.Unmount());
}

// The walk only reads: the upper stays empty and the lower unchanged.
TEST_P(WarmWalk, WritesNothing) {
  const std::string lower = tmp_.MakeDir("lower");
  MakeTree(lower, 10, 30);
  const TreeSnapshot before = Snapshot(lower, SnapshotOptions::Everything());
  Sandbox sb(lower, Options({}));
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  std::string line;
  ASSERT_TRUE(WaitForWalkEnd(sb, &line));
  EXPECT_EQ(Sh("ls -A " + ShellQuote(sb.upper())), "");
  EXPECT_TRUE(sb.Unmount());
  EXPECT_TRUE(
      SnapshotsEqual(before, Snapshot(lower, SnapshotOptions::Everything())));
}

INSTANTIATE_TEST_SUITE_P(Modes, WarmWalk,
                         ::testing::Values(std::string("no_open"), "handles"),
                         FileModeName);

}  // namespace
}  // namespace acqfs::test
