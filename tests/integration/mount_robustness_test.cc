// Robustness of a mounted sandbox: host edits while mounted (the documented
// visibility rule), a daemon killed in the middle of a copy-up (crash
// safety), and a tree with many more files than the daemon may hold
// descriptors (no descriptor per inode).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/process.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

// Host edits show once the daemon's entry/attr/negative timeouts pass: these
// tests mount with `-o timeout=1` (the default is longer) and wait past it.
void WaitPastCacheTimeout() {
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
}

class HostEdits : public MountTest {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"-o", "timeout=1"};
    return o;
  }
};

TEST_F(HostEdits, EditOfAnUntouchedLowerFileShowsAfterTheAttrTimeout) {
  ASSERT_TRUE(WriteFile(L("host-edited.txt"), "before\n"));
  std::string first;
  ASSERT_TRUE(ReadFile(M("host-edited.txt"), &first));
  EXPECT_EQ(first, "before\n");
  // The host rewrites its file (size and mtime change).
  ASSERT_TRUE(WriteFile(L("host-edited.txt"), "after, and longer\n"));
  WaitPastCacheTimeout();
  EXPECT_EQ(ContentOf(M("host-edited.txt")), "after, and longer\n");
}

TEST_F(HostEdits, NewAndDeletedLowerFilesShowAfterTheEntryTimeout) {
  ASSERT_TRUE(WriteFile(L("doomed.txt"), "x"));
  EXPECT_TRUE(Exists(M("doomed.txt")));
  EXPECT_FALSE(Exists(M("born.txt")));  // caches a negative entry
  ASSERT_TRUE(WriteFile(L("born.txt"), "new"));
  ASSERT_EQ(::unlink(L("doomed.txt").c_str()), 0);
  WaitPastCacheTimeout();
  EXPECT_EQ(ContentOf(M("born.txt")), "new");
  EXPECT_EQ(LstatErrno(M("doomed.txt")), ENOENT);
}

TEST_F(HostEdits, CopiedUpFileKeepsTheSandboxVersion) {
  ASSERT_TRUE(WriteFile(L("shared.txt"), "host v1\n"));
  ASSERT_TRUE(AppendFile(M("shared.txt"), "sandbox\n"));
  ASSERT_TRUE(WriteFile(L("shared.txt"), "host v2\n"));
  WaitPastCacheTimeout();
  EXPECT_EQ(ContentOf(M("shared.txt")), "host v1\nsandbox\n");
}

using Crash = MountTest;

// Kills the daemon with SIGKILL while a 256 MiB lower file is being copied
// up. Whenever the kill lands, the upper holds either no copy or a complete
// one; remounting resumes, and the view is the original file or the
// original plus the appended byte, never a torn copy.
TEST_F(Crash, KillDuringCopyUpLeavesNoPartialUpperFile) {
  constexpr int kMiB = 256;
  CommandResult made =
      RunShell("head -c " + std::to_string(kMiB) + "M /dev/urandom > " +
                   ShellQuote(L("huge.bin")),
               120);
  ASSERT_TRUE(made.ok()) << made.Describe();
  CommandResult sum = RunCommand({"md5sum", L("huge.bin")}, 60);
  ASSERT_TRUE(sum.ok()) << sum.Describe();
  const std::string lower_sum = sum.out.substr(0, 32);
  struct stat lower_st;
  ASSERT_TRUE(Lstat(L("huge.bin"), &lower_st));

  pid_t daemon = sandbox().daemon_pid();
  ASSERT_GT(daemon, 0);
  // The append opens the file for writing: that is the copy-up.
  pid_t writer = ::fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {
    ::execlp("sh", "sh", "-c",
             ("printf x >> " + ShellQuote(M("huge.bin"))).c_str(), nullptr);
    ::_exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  int status = 0;
  ::waitpid(writer, &status, 0);  // ENOTCONN once the daemon is gone

  struct stat up;
  if (::lstat(U("huge.bin").c_str(), &up) == 0) {
    // Published: it must be the whole file, never a prefix.
    EXPECT_GE(up.st_size, lower_st.st_size);
  }
  ASSERT_TRUE(sandbox().Unmount());  // cleans up the dead mount
  ASSERT_TRUE(sandbox().Remount());
  CommandResult after = RunCommand({"md5sum", M("huge.bin")}, 60);
  ASSERT_TRUE(after.ok()) << after.Describe();
  struct stat seen;
  ASSERT_TRUE(Lstat(M("huge.bin"), &seen));
  if (seen.st_size == lower_st.st_size) {
    EXPECT_EQ(after.out.substr(0, 32), lower_sum);
  } else {
    EXPECT_EQ(seen.st_size, lower_st.st_size + 1);
  }
  std::vector<std::string> leftovers;
  ASSERT_TRUE(ListDir(sandbox().work() + "/acqfs-tmp", &leftovers));
  EXPECT_TRUE(leftovers.empty()) << "junk left in acqfs-tmp after remount";
}

// SIGKILL while processes hold 100 unlinked files, more than a daemon
// limited to 256 descriptors keeps by descriptor, so the rest are kept
// under acqfs-tmp. The upper layer holds none of them, the remount empties
// acqfs-tmp, and the rest of the tree is intact.
TEST(CrashWithKeptData, KillWhileUnlinkedFilesAreHeldLeavesACleanUpper) {
  TempDir tmp;
  std::string lower = tmp.MakeDir("lower");
  ASSERT_TRUE(WriteFile(lower + "/keep.txt", "kept\n"));
  SandboxOptions opts;
  opts.command_prefix = {"prlimit", "--nofile=256:256"};
  Sandbox sb(lower, opts);
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  ASSERT_EQ(ContentOf(sb.M("keep.txt")), "kept\n");
  std::vector<ScopedFd> held;
  for (int i = 0; i < 100; i++) {
    std::string f = sb.M("tmp" + std::to_string(i));
    ASSERT_TRUE(WriteFile(f, "scratch " + std::to_string(i)));
    held.emplace_back(::open(f.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(held.back().valid()) << std::strerror(errno);
    ASSERT_EQ(::unlink(f.c_str()), 0) << std::strerror(errno);
  }
  ASSERT_TRUE(WriteFile(sb.M("written.txt"), "before the kill"));
  std::vector<std::string> parked;
  ASSERT_TRUE(ListDir(sb.work() + "/acqfs-tmp", &parked));
  // Some by descriptor (the budget), the rest under acqfs-tmp.
  EXPECT_GT(parked.size(), 0u);
  EXPECT_LT(parked.size(), 100u);
  ASSERT_EQ(::kill(sb.daemon_pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitForProcessExit(sb.daemon_pid(), 10));
  held.clear();  // ENOTCONN now; the kernel lets go
  std::vector<std::string> upper;
  ASSERT_TRUE(ListDir(sb.upper(), &upper));
  EXPECT_EQ(upper, (std::vector<std::string>{"written.txt"}));
  ASSERT_TRUE(sb.Unmount());  // cleans up the dead mount
  ASSERT_TRUE(sb.Remount());
  parked.clear();
  ASSERT_TRUE(ListDir(sb.work() + "/acqfs-tmp", &parked));
  EXPECT_TRUE(parked.empty());
  EXPECT_EQ(ContentOf(sb.M("written.txt")), "before the kill");
  EXPECT_EQ(ContentOf(sb.M("keep.txt")), "kept\n");
  EXPECT_EQ(LstatErrno(sb.M("tmp7")), ENOENT);
  EXPECT_TRUE(sb.Unmount());
}

// A full disk. Unlink is how space is freed, so it must work even when the
// data of files a process holds (here 60: past the kept-descriptor budget
// of a daemon limited to 256, 21, and past the 30 names a fresh acqfs-tmp
// takes on this 64 MiB ext4 of 1 KiB blocks) cannot be parked in acqfs-tmp
// for want of a new directory block: the descriptor reserve keeps it, the
// files keep reading, and the space comes back once the kernel lets go.
TEST(FullDisk, UnlinkFreesSpaceAndHeldFilesKeepTheirData) {
  TempDir tmp;
  std::string image = tmp.Sub("small.img"), fs = tmp.MakeDir("small");
  CommandResult made =
      RunShell("truncate -s 64M " + ShellQuote(image) + " && mkfs.ext4 -q -F " +
                   ShellQuote(image) + " && mount -o loop " +
                   ShellQuote(image) + " " + ShellQuote(fs),
               60);
  ASSERT_TRUE(made.ok()) << made.Describe();
  struct Unmount {
    std::string fs;
    ~Unmount() { RunCommand({"umount", "-l", fs}, 30); }
  } unmount{fs};
  std::string lower = tmp.MakeDir("lower");
  ASSERT_TRUE(WriteFile(lower + "/README", "x"));
  SandboxOptions opts;
  opts.command_prefix = {"prlimit", "--nofile=256:256"};
  opts.state_dir = tmp.MakeDir("small/state");
  {
    Sandbox sb(lower, opts);
    ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
    std::vector<ScopedFd> held;
    for (int i = 0; i < 60; i++) {
      std::string f = sb.M("t" + std::to_string(i));
      ASSERT_TRUE(WriteFile(f, "data " + std::to_string(i)));
      held.emplace_back(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
      ASSERT_TRUE(held.back().valid());
    }
    CommandResult fill = RunShell(
        "{ cat /dev/zero > " + ShellQuote(sb.M("filler")) +
            "; } 2>/dev/null"
            " || true; i=0; while { : > " +
            ShellQuote(sb.M("s")) + "$i; } 2>/dev/null; do i=$((i+1)); done",
        120);
    ASSERT_FALSE(fill.timed_out) << fill.Describe();
    EXPECT_FALSE(WriteFile(sb.M("more"), "x")) << "the disk is not full";
    for (int i = 0; i < 60; i++)
      ASSERT_EQ(::unlink(sb.M("t" + std::to_string(i)).c_str()), 0)
          << "t" << i << ": " << ErrnoName(errno);
    ASSERT_EQ(::unlink(sb.M("filler").c_str()), 0) << ErrnoName(errno);
    for (int i = 0; i < 60; i++) {
      char buf[32];
      ssize_t n = ::pread(held[i].get(), buf, sizeof buf, 0);
      ASSERT_GE(n, 0) << ErrnoName(errno);
      EXPECT_EQ(std::string(buf, n), "data " + std::to_string(i));
    }
    bool wrote = false;
    for (int t = 0; t < 50 && !wrote; t++) {
      wrote = WriteFile(sb.M("after"), std::string(1 << 20, 'a'));
      if (!wrote) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(wrote) << "the space did not come back";
    held.clear();
    EXPECT_TRUE(sb.Unmount());
  }
}

// The daemon runs with at most 64 descriptors (and one worker thread, all
// such a limit can serve: see FdBudget) and serves a tree of 3,000 files
// that the kernel keeps in its inode cache (ls -lR), reads and partly
// rewrites them: it must never need a descriptor per inode.
TEST(FewDescriptors, ThousandsOfFilesWithSixtyFourDescriptors) {
  TempDir tmp;
  std::string lower = tmp.MakeDir("lower");
  CommandResult made = RunShell(
      "cd " + ShellQuote(lower) +
          " && for d in $(seq 1 30); do mkdir d$d; for f in $(seq 1 100); do "
          "echo $d-$f > d$d/f$f; done; done",
      120);
  ASSERT_TRUE(made.ok()) << made.Describe();
  SandboxOptions opts;
  opts.command_prefix = {"prlimit", "--nofile=64:64"};
  opts.extra_mount_args = {"-o", "threads=1"};
  // 64 descriptors leave no room for the io_uring transport's workers:
  // the daemon keeps to /dev/fuse (and says so), whatever the run's.
  opts.transport = "auto";
  Sandbox sb(lower, opts);
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  CommandResult ls = RunShell(
      "ls -lR " + ShellQuote(sb.mountpoint()) + " | grep -c '^-'", 120);
  ASSERT_TRUE(ls.ok()) << ls.Describe();
  EXPECT_EQ(ls.out, "3000\n");
  CommandResult cat = RunShell(
      "cd " + ShellQuote(sb.mountpoint()) + " && cat d*/f* | wc -l", 120);
  ASSERT_TRUE(cat.ok()) << cat.Describe();
  EXPECT_EQ(cat.out, "3000\n");
  CommandResult write =
      RunShell("cd " + ShellQuote(sb.mountpoint()) +
                   " && for f in d1*/f*; do echo more >> $f || exit 1; done",
               120);
  ASSERT_TRUE(write.ok()) << write.Describe();
  EXPECT_EQ(ContentOf(sb.M("d17/f3")), "17-3\nmore\n");
  EXPECT_EQ(ContentOf(sb.L("d17/f3")), "17-3\n");
  EXPECT_EQ(sb.DaemonLog().find("Too many open files"), std::string::npos)
      << sb.DaemonLog();
  EXPECT_TRUE(sb.Unmount());
}

// Files that lose their last name while open keep their data, in both ways
// the daemon serves files: with a handle per open (-o handles) and without
// (the default, where the kernel sends no OPEN and the daemon cannot know a
// file is open). The page cache is dropped first, so every read reaches the
// daemon.
class Unlinked : public MountTest,
                 public ::testing::WithParamInterface<const char*> {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    if (GetParam()[0]) o.extra_mount_args = {"-o", GetParam()};
    return o;
  }
  // Reads all of `fd` from offset 0 after dropping its cached pages.
  static std::string ReadUncached(int fd) {
    EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    std::string out;
    char buf[4096];
    for (off_t off = 0;;) {
      ssize_t n = ::pread(fd, buf, sizeof buf, off);
      EXPECT_GE(n, 0) << std::strerror(errno);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      off += n;
    }
    return out;
  }
};

TEST_P(Unlinked, LowerFileOpenedThenDeletedStillReads) {
  ASSERT_TRUE(WriteFile(L("lower-doomed.txt"), "lower bytes\n"));
  int fd = ::open(M("lower-doomed.txt").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::unlink(M("lower-doomed.txt").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(ReadUncached(fd), "lower bytes\n");
  struct stat st;
  EXPECT_EQ(::fstat(fd, &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 12);
  ::close(fd);
  EXPECT_EQ(ContentOf(L("lower-doomed.txt")), "lower bytes\n");
  EXPECT_EQ(LstatErrno(M("lower-doomed.txt")), ENOENT);
}

TEST_P(Unlinked, UpperFileReplacedByRenameStillReadsAndWrites) {
  ASSERT_TRUE(WriteFile(M("tool.bin"), "old build\n"));
  int fd = ::open(M("tool.bin").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // A rebuild: the new file is written aside and renamed over the old one.
  ASSERT_TRUE(WriteFile(M("tool.bin.tmp"), "new build\n"));
  ASSERT_EQ(::rename(M("tool.bin.tmp").c_str(), M("tool.bin").c_str()), 0)
      << std::strerror(errno);
  EXPECT_EQ(ReadUncached(fd), "old build\n");
  EXPECT_EQ(::pwrite(fd, "OLD", 3, 0), 3) << std::strerror(errno);
  EXPECT_EQ(ReadUncached(fd), "OLD build\n");
  ::close(fd);
  EXPECT_EQ(ContentOf(M("tool.bin")), "new build\n");
  EXPECT_EQ(ContentOf(U("tool.bin")), "new build\n");
}

TEST_P(Unlinked, UpperFileDeletedWhileOpenKeepsItsData) {
  ASSERT_TRUE(WriteFile(M("scratch.dat"), "scratch\n"));
  int fd = ::open(M("scratch.dat").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::unlink(M("scratch.dat").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(ReadUncached(fd), "scratch\n");
  ::close(fd);
  EXPECT_EQ(LstatErrno(U("scratch.dat")), ENOENT);
}

// The reproduction of the descriptor issue: in the handle-less mode the
// kernel never RELEASEs a CREATE's handle once it has seen an OPEN answered,
// so a file created after the mount's first open used to lose its data at
// unlink (ENOENT). Files created before and after the first open.
TEST_P(Unlinked, FilesCreatedBeforeAndAfterTheFirstOpenKeepTheirData) {
  ASSERT_TRUE(WriteFile(M("before"), "made before"));
  EXPECT_EQ(ContentOf(M("README.md")).empty(), false);  // the first OPEN
  ASSERT_TRUE(WriteFile(M("after"), "made after"));
  ScopedFd b(::open(M("before").c_str(), O_RDONLY | O_CLOEXEC));
  ScopedFd a(::open(M("after").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(b.valid() && a.valid()) << std::strerror(errno);
  ASSERT_EQ(::unlink(M("before").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::unlink(M("after").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(ReadUncached(b.get()), "made before");
  EXPECT_EQ(ReadUncached(a.get()), "made after");
  struct stat st;
  ASSERT_EQ(::fstat(a.get(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 10);
  EXPECT_EQ(st.st_nlink, 0u);
}

// A lower file opened for writing, deleted, then written: the write goes to
// a copy of its own (it used to fail with ESTALE in the handle-less mode);
// the host's file is untouched.
TEST_P(Unlinked, LowerFileDeletedWhileOpenCanStillBeWritten) {
  ASSERT_TRUE(WriteFile(L("journal"), "lower journal"));
  ScopedFd fd(::open(M("journal").c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  ASSERT_EQ(::unlink(M("journal").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd.get(), "LOWER", 5, 0), 5) << std::strerror(errno);
  EXPECT_EQ(ReadUncached(fd.get()), "LOWER journal");
  ASSERT_EQ(::fchmod(fd.get(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd.get(), 5), 0) << std::strerror(errno);
  EXPECT_EQ(ReadUncached(fd.get()), "LOWER");
  fd.Reset();
  EXPECT_EQ(ContentOf(L("journal")), "lower journal");
  EXPECT_EQ(LstatErrno(M("journal")), ENOENT);
}

TEST_P(Unlinked, CopiedUpFileDeletedWhileOpenKeepsItsData) {
  ASSERT_TRUE(WriteFile(L("copied"), "lower"));
  ASSERT_TRUE(AppendFile(M("copied"), "+upper"));  // the copy-up
  ScopedFd fd(::open(M("copied").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  ASSERT_EQ(::unlink(M("copied").c_str()), 0) << std::strerror(errno);
  EXPECT_TRUE(IsWhiteout(U("copied")));
  EXPECT_EQ(ReadUncached(fd.get()), "lower+upper");
  EXPECT_EQ(ContentOf(L("copied")), "lower");
}

TEST_P(Unlinked, FileOfARemovedDirectoryKeepsItsData) {
  ASSERT_EQ(::mkdir(M("scratch").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(M("scratch/db"), "database"));
  ScopedFd fd(::open(M("scratch/db").c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  CommandResult rm = RunShell("rm -rf " + ShellQuote(M("scratch")), 30);
  ASSERT_TRUE(rm.ok()) << rm.Describe();
  EXPECT_EQ(ReadUncached(fd.get()), "database");
  ASSERT_EQ(::pwrite(fd.get(), "D", 1, 0), 1) << std::strerror(errno);
  EXPECT_EQ(ReadUncached(fd.get()), "Database");
}

// The kernel may OPEN a file after its last name is gone, with no handle
// open before: a reopen through /proc/self/fd of an O_PATH descriptor
// (which sends no OPEN itself), as on ext4. In the handles mode the data
// used to be dropped at the unlink, so the OPEN found nothing and fstat of
// the new descriptor said ENOENT (Python's own
// test_logging.HandlerTest.test_race, an open racing an unlink, found it).
TEST_P(Unlinked, ReopenedThroughProcAfterTheUnlinkReadsAndStats) {
  for (const std::string name : {"upper.log", "lower.log"}) {
    if (name == "lower.log")
      ASSERT_TRUE(WriteFile(L(name), "logged\n"));
    else
      ASSERT_TRUE(WriteFile(M(name), "logged\n"));
    ScopedFd path(::open(M(name).c_str(), O_PATH | O_CLOEXEC));
    ASSERT_TRUE(path.valid()) << std::strerror(errno);
    ASSERT_EQ(::unlink(M(name).c_str()), 0) << std::strerror(errno);
    const std::string proc = "/proc/self/fd/" + std::to_string(path.get());
    ScopedFd fd(::open(proc.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(fd.valid()) << name << ": " << std::strerror(errno);
    struct stat st;
    ASSERT_EQ(::fstat(fd.get(), &st), 0)
        << name << ": " << std::strerror(errno);
    EXPECT_EQ(st.st_size, 7) << name;
    EXPECT_EQ(st.st_nlink, 0u) << name;
    EXPECT_EQ(ReadUncached(fd.get()), "logged\n") << name;
    EXPECT_EQ(::pwrite(fd.get(), "L", 1, 0), 1) << std::strerror(errno);
    EXPECT_EQ(ReadUncached(fd.get()), "Logged\n") << name;
  }
  EXPECT_EQ(ContentOf(L("lower.log")), "logged\n");
}

// An open(O_CREAT) racing an unlink of the same name, as a log handler and
// a cleaner do: every open that succeeds can fstat its descriptor.
TEST_P(Unlinked, AnOpenRacingAnUnlinkAlwaysStats) {
  const std::string f = M("race.log");
  std::atomic<bool> stop{false};
  std::thread remover([&] {
    while (!stop) ::unlink(f.c_str());
  });
  int failures = 0, opened = 0;
  std::string first;
  for (int i = 0; i < 3000; ++i) {
    ScopedFd fd(
        ::open(f.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!fd.valid()) {
      if (first.empty()) first = std::string("open: ") + std::strerror(errno);
      ++failures;
      continue;
    }
    ++opened;
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) {
      if (first.empty()) first = std::string("fstat: ") + std::strerror(errno);
      ++failures;
    }
  }
  stop = true;
  remover.join();
  EXPECT_EQ(failures, 0) << "of 3000 opens (" << opened
                         << " opened); the first: " << first;
}

INSTANTIATE_TEST_SUITE_P(Modes, Unlinked, ::testing::Values("", "handles"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param[0] ? "Handles"
                                                         : "HandleLess");
                         });

// `-o nosync_copyup` skips only the copy-up's fsync: the copy is the same
// and the host's file is untouched.
// A copy of the mount in another mount namespace (rootless podman's pause
// process copies the user's mounts when it starts after the mount; here
// `unshare --mount`) keeps the FUSE connection, and so the daemon, alive
// after the unmount here: `acqfs umount` used to wait 15 s and fail with
// "Connection timed out (wait for daemon N)", the sandbox could not be
// mounted again, and the copy went on serving writes the export would not
// see. Now umount ends the daemon (SIGTERM, its clean shutdown), says so,
// and the copy answers ENOTCONN.
using ForeignCopy = MountTest;
TEST_F(ForeignCopy, UmountEndsADaemonThatAnotherNamespacesCopyKeepsAlive) {
  const std::string file = M(lower::kFileA);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::execlp("unshare", "unshare", "--mount", "--propagation", "private",
             "sleep", "600", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGKILL);
      int st;
      ::waitpid(pid, &st, 0);
    }
  } reap{holder};
  // Wait until the child is sleep, in its own mount namespace.
  const std::string ns = "/proc/" + std::to_string(holder) + "/ns/mnt";
  struct stat mine, theirs;
  ASSERT_EQ(::stat("/proc/self/ns/mnt", &mine), 0);
  bool ready = false;
  for (int i = 0; i < 500 && !ready; i++) {
    std::vector<std::string> args = ProcessArgs(holder);
    ready = !args.empty() && args[0] == "sleep" &&
            ::stat(ns.c_str(), &theirs) == 0 && theirs.st_ino != mine.st_ino;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(ready) << "unshare --mount did not start";
  const std::string in_copy = "nsenter --target " + std::to_string(holder) +
                              " --mount cat " + ShellQuote(file);
  ASSERT_TRUE(RunShell(in_copy, 30).ok()) << "the copy does not serve";

  const pid_t daemon = sandbox().daemon_pid();
  const auto t0 = std::chrono::steady_clock::now();
  CommandResult u =
      RunCommand({AcqfsBinary(), "umount", sandbox().name(), "--state-dir",
                  sandbox().state_dir(), "--no-export"},
                 60);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_TRUE(u.ok()) << u.Describe();
  EXPECT_NE(u.err.find("another mount namespace"), std::string::npos)
      << u.Describe();
  EXPECT_LT(took, 10.0);
  EXPECT_TRUE(WaitForProcessExit(daemon, 5)) << "the daemon lives on";
  CommandResult after = RunShell(in_copy, 30);
  EXPECT_FALSE(after.ok()) << after.Describe();
  EXPECT_NE(after.err.find("Transport endpoint is not connected"),
            std::string::npos)
      << after.Describe();
  EXPECT_TRUE(sandbox().UnmountedElsewhere(5));
  EXPECT_TRUE(sandbox().Remount()) << "the sandbox cannot be mounted again";
}

class UnsyncedCopyUp : public MountTest {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"-o", "nosync_copyup"};
    return o;
  }
};

TEST_F(UnsyncedCopyUp, AppendCopiesUpTheWholeFileAndLeavesTheHostAlone) {
  std::string body(300000, 'h');
  ASSERT_TRUE(WriteFile(L("big.txt"), body));
  ASSERT_EQ(::chmod(L("big.txt").c_str(), 0640), 0);
  ASSERT_TRUE(AppendFile(M("big.txt"), "+sandbox"));
  EXPECT_EQ(ContentOf(M("big.txt")), body + "+sandbox");
  EXPECT_EQ(ContentOf(U("big.txt")), body + "+sandbox");
  EXPECT_EQ(StatU("big.txt").st_mode & 07777, 0640u);
  EXPECT_EQ(ContentOf(L("big.txt")), body);
}

}  // namespace
}  // namespace acqfs::test
