// FUSE passthrough (fuse/passthrough.h; docs/architecture.md, "FUSE
// passthrough"): with -o handles, as root, opens of upper files are read
// and written by the kernel straight from the upper file. What must still
// hold, each checked here against what ext4 does or against the layers:
//   - the kernel's rule that one inode's opens are all passed through or
//     all cached: any mix of opens, from several threads, of a file that
//     starts in the lower and is copied up meanwhile, never fails (the
//     kernel fails such an open with EIO when the daemon answers it wrong);
//   - a checkpoint taken while the kernel writes a file through: nothing
//     lands in the frozen layer afterwards, nothing written is lost;
//   - a rewind: the undo point keeps the file as it was at the rewind;
//   - set-id bits, O_DIRECT, copy_file_range, fallocate, mmap: as on ext4;
//   - a quota, -o nopassthrough, the handle-less mode: nothing passed
//     through.
#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/mounts.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

CommandResult Acqfs(const Sandbox& s, std::vector<std::string> args) {
  return AcqfsIn(s, std::move(args));
}

// The daemon's count of opens it passed through (`acqfs ls --json`), or -1
// when the mount passes nothing through (null).
int64_t PassedThrough(const Sandbox& s) {
  CommandResult r = Acqfs(s, {"ls", "--json"});
  EXPECT_TRUE(r.ok()) << r.Describe();
  if (!r.ok()) return -2;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_array()) return -2;
  for (const auto& e : j)
    if (e.value("name", "") == s.name()) {
      if (!e.contains("passthrough_opens") || e["passthrough_opens"].is_null())
        return -1;
      return e["passthrough_opens"].get<int64_t>();
    }
  return -2;
}

std::string ReadFd(int fd) {
  std::string out;
  char buf[65536];
  for (off_t at = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return out;
}

std::string sys_dirname(const std::string& p) {
  return p.substr(0, p.rfind('/'));
}

class Passthrough : public MountTest {
 protected:
  // The default file mode: handles, since the daemon (root, on 6.18) can
  // pass opens through (fuse/mount.h, MountConfig::file_mode_chosen).
  SandboxOptions Options() const override { return {}; }
  void SetUp() override {
    MountTest::SetUp();
    if (HasFatalFailure()) return;
    // This kernel (6.18) offers it, and the tests run as root: it must be
    // on, or nothing below tests anything.
    ASSERT_NE(sandbox().DaemonLog().find("passthrough: on"), std::string::npos)
        << sandbox().DaemonLog();
  }
};

TEST_F(Passthrough, UpperFilesAreReadAndWrittenThroughTheirUpperFile) {
  const int64_t before = PassedThrough(sandbox());
  ASSERT_GE(before, 0);
  ASSERT_TRUE(WriteFile(M("new.txt"), "made in the sandbox\n"));
  EXPECT_EQ(ReadFile(M("new.txt")), "made in the sandbox\n");
  EXPECT_EQ(ReadFile(U("new.txt")), "made in the sandbox\n");
  // The create and the read: both passed through.
  EXPECT_GE(PassedThrough(sandbox()), before + 2);
  // A lower file is not (its backing file would be the host's, opened
  // again for the next open's writes): read from the host, cached.
  const int64_t mid = PassedThrough(sandbox());
  EXPECT_EQ(ReadFile(M("README.md")), ReadFile(L("README.md")));
  EXPECT_EQ(PassedThrough(sandbox()), mid);
  EXPECT_FALSE(Exists(U("README.md")));
}

// The kernel's rule (fs/fuse/iomode.c): while an inode has a passed-through
// open every new open must be passed through with the same backing file,
// and a passed-through open cannot join cached ones; a wrong answer fails
// the caller's open with EIO. Every mix, from four threads, on a file that
// starts in the lower (cached) and is copied up by the first write open.
TEST_F(Passthrough, AnyMixOfOpensOfOneFileFromManyThreadsWorks) {
  {
    // In order first: a cached open of the lower file, a write open (the
    // copy-up) beside it, more opens while either is open: all cached, and
    // coherent; once all are closed, the next open is passed through.
    ScopedFd r1(::open(M("README.md").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(r1.valid()) << ErrnoName(errno);
    ScopedFd w(::open(M("README.md").c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(w.valid()) << ErrnoName(errno);
    ASSERT_EQ(::pwrite(w.get(), "WRITTEN", 7, 0), 7);
    ScopedFd r2(::open(M("README.md").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(r2.valid()) << ErrnoName(errno);
    EXPECT_EQ(ReadFd(r1.get()).substr(0, 7), "WRITTEN");
    r1.Reset();
    w.Reset();
    ScopedFd w2(
        ::open(M("README.md").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    ASSERT_TRUE(w2.valid()) << ErrnoName(errno);
    ASSERT_EQ(::write(w2.get(), "more\n", 5), 5);
    EXPECT_EQ(ReadFd(r2.get()), ReadFile(U("README.md")));
  }
  const int64_t before = PassedThrough(sandbox());
  EXPECT_EQ(ReadFile(M("README.md")), ReadFile(U("README.md")));
  EXPECT_EQ(PassedThrough(sandbox()), before + 1);
  for (const std::string rel : {"README.md", "fresh"}) {
    if (rel == "fresh") {
      ASSERT_TRUE(WriteFile(M(rel), "fresh\n"));
    }
    const std::string p = M(rel);
    std::atomic<int> failures{0};
    std::string first_failure;
    std::mutex mu;
    auto fail = [&](const std::string& what) {
      std::lock_guard<std::mutex> l(mu);
      if (failures++ == 0) first_failure = what + ": " + ErrnoName(errno);
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        std::mt19937 rng(t * 7919 + 1);
        std::vector<ScopedFd> held;
        for (int i = 0; i < 300 && failures == 0; ++i) {
          static const int kFlags[] = {O_RDONLY, O_RDWR, O_WRONLY | O_APPEND,
                                       O_RDONLY | O_DIRECT};
          const int flags = kFlags[rng() % 4];
          ScopedFd fd(::open(p.c_str(), flags | O_CLOEXEC));
          if (!fd.valid()) {
            fail("open " + std::to_string(flags));
            break;
          }
          if ((flags & O_ACCMODE) != O_RDONLY) {
            if (::write(fd.get(), "w", 1) != 1) fail("write");
          } else if (!(flags & O_DIRECT)) {
            char b[64];
            if (::pread(fd.get(), b, sizeof b, 0) < 0) fail("read");
            void* m = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd.get(), 0);
            if (m == MAP_FAILED)
              fail("mmap");
            else
              ::munmap(m, 4096);
          }
          // Some are kept open across the next opens.
          if (rng() % 3 == 0) held.push_back(std::move(fd));
          if (held.size() > 3) held.erase(held.begin());
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0) << rel << ": " << first_failure;
    // The mount and the upper agree once every open is closed.
    EXPECT_EQ(ReadFile(M(rel)), ReadFile(U(rel))) << rel;
  }
  EXPECT_GT(PassedThrough(sandbox()), 0);
}

// A checkpoint taken while the kernel writes a file through its upper
// file: the write after it goes to the new upper (the open file moved
// there), the frozen layer keeps the file as it was, and a writer that
// appends through three checkpoints loses nothing and changes no frozen
// layer after its checkpoint.
TEST_F(Passthrough, ACheckpointLeavesNothingWritingTheFrozenLayer) {
  ASSERT_TRUE(WriteFile(M("log"), ""));
  ScopedFd fd(::open(M("log").c_str(), O_RDWR | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << ErrnoName(errno);
  ASSERT_EQ(::write(fd.get(), "before\n", 7), 7);
  // A shared mapping too: its stores reach the backing file directly.
  ASSERT_EQ(::ftruncate(fd.get(), 4096), 0);
  void* m =
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(m, MAP_FAILED) << ErrnoName(errno);
  ASSERT_EQ(::ftruncate(fd.get(), 7), 0);
  CommandResult c = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  const std::string frozen = sandbox().frozen().back() + "/log";
  EXPECT_EQ(ReadFile(frozen), "before\n");
  ASSERT_EQ(::write(fd.get(), "after\n", 6), 6);
  static_cast<char*>(m)[0] = 'B';
  ASSERT_EQ(::msync(m, 4096, MS_SYNC), 0);
  ::munmap(m, 4096);
  EXPECT_EQ(ReadFile(M("log")), "Before\nafter\n");
  EXPECT_EQ(ReadFile(U("log")), "Before\nafter\n");
  EXPECT_EQ(ReadFile(frozen), "before\n");

  // An appender through three checkpoints.
  std::atomic<bool> stop{false};
  std::atomic<long> written{0};
  std::thread writer([&] {
    ScopedFd w(::open(M("log").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    if (!w.valid()) return;
    const std::string line(100, 'x');
    while (!stop) {
      if (::write(w.get(), line.data(), line.size()) != 100) break;
      written += 100;
    }
  });
  std::vector<std::pair<std::string, std::string>> frozen_copies;
  for (int i = 0; i < 3; ++i) {
    ::usleep(200 * 1000);
    CommandResult ci = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
    ASSERT_TRUE(ci.ok()) << ci.Describe();
    const std::string f = sandbox().frozen().back() + "/log";
    frozen_copies.emplace_back(f, ReadFile(f));
  }
  ::usleep(200 * 1000);
  stop = true;
  writer.join();
  EXPECT_GT(written.load(), 0);
  EXPECT_EQ(ReadFile(M("log")).size(), 13u + static_cast<size_t>(written));
  for (const auto& [path, content] : frozen_copies)
    EXPECT_EQ(ReadFile(path), content)
        << path << " changed after its checkpoint";
  // The kernel overlayfs agrees on the stack's layers: each frozen copy is
  // a prefix of what came after.
  for (size_t i = 1; i < frozen_copies.size(); ++i)
    EXPECT_EQ(frozen_copies[i].second.rfind(frozen_copies[i - 1].second, 0),
              0u);
}

// A hard link made while the file is open through passthrough: the
// checkpoint's copy takes both names in the frozen layer (one inode, as
// the file had), and the other name is a frozen file from then on, as a
// checkpoint makes of any hard link (docs/stack.md).
TEST_F(Passthrough, ALinkMadeWhileOpenNamesTheFrozenCopy) {
  ASSERT_TRUE(WriteFile(M("orig"), "one\n"));
  ScopedFd fd(::open(M("orig").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << ErrnoName(errno);
  ASSERT_EQ(::link(M("orig").c_str(), M("other").c_str()), 0)
      << ErrnoName(errno);
  CommandResult c = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  ASSERT_EQ(::write(fd.get(), "two\n", 4), 4);
  const std::string frozen = sandbox().frozen().back();
  EXPECT_EQ(ReadFile(frozen + "/orig"), "one\n");
  EXPECT_EQ(ReadFile(frozen + "/other"), "one\n");
  struct stat a, b;
  ASSERT_EQ(::stat((frozen + "/orig").c_str(), &a), 0);
  ASSERT_EQ(::stat((frozen + "/other").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(ReadFile(M("orig")), "one\ntwo\n");
  EXPECT_EQ(ReadFile(M("other")), "one\n");
}

// A rewind while a file is open through its upper file: the undo point
// keeps the file as it was at the rewind, whatever the open file writes
// afterwards (it has no name any more: docs/stack.md).
TEST_F(Passthrough, ARewindLeavesTheUndoPointAsTheRewindFoundIt) {
  CommandResult c = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  ASSERT_TRUE(WriteFile(M("held"), "one\n"));
  ScopedFd fd(::open(M("held").c_str(), O_RDWR | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << ErrnoName(errno);
  CommandResult r = Acqfs(sandbox(), {"rewind", sandbox().name(), "1"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_FALSE(Exists(M("held")));
  // Written to a file of no name: lands in no layer.
  (void)::write(fd.get(), "two\n", 4);
  fd.Reset();
  // Back to the undo point ("what it held before is checkpoint N"): the
  // file as the rewind found it.
  const size_t at = r.out.find("is checkpoint ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string n =
      std::to_string(std::strtoul(r.out.c_str() + at + 14, nullptr, 10));
  CommandResult back = Acqfs(sandbox(), {"rewind", sandbox().name(), n});
  ASSERT_TRUE(back.ok()) << back.Describe();
  EXPECT_EQ(ReadFile(M("held")), "one\n");
}

// The kernel keeps writing a passed-through file for the process holding
// it after the daemon's death. Whatever claims the layers next (here an
// unmounted checkpoint, then a mount) first replaces each such file by a
// copy (fs/live_files.h): the frozen layer, and the upper, never see what
// the left-over writer writes afterwards.
TEST_F(Passthrough, AWriterLeftByAKilledDaemonWritesNoLayer) {
  ASSERT_TRUE(WriteFile(M("kept"), "one\n"));
  ScopedFd fd(::open(M("kept").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << ErrnoName(errno);
  ASSERT_EQ(::write(fd.get(), "two\n", 4), 4);
  const pid_t pid = sandbox().daemon_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  for (int i = 0; i < 500 && ::kill(pid, 0) == 0; ++i) ::usleep(10 * 1000);
  ASSERT_NE(::kill(pid, 0), 0) << "the daemon did not die";
  // No daemon, and the kernel still writes the upper file.
  ASSERT_EQ(::write(fd.get(), "three\n", 6), 6) << ErrnoName(errno);
  (void)sandbox().Unmount();  // the dead daemon's mount: torn down
  CommandResult c = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  const std::string frozen = sandbox().frozen().back() + "/kept";
  EXPECT_EQ(ReadFile(frozen), "one\ntwo\nthree\n");
  // Fenced: a file of no name takes this.
  EXPECT_EQ(::write(fd.get(), "four\n", 5), 5) << ErrnoName(errno);
  EXPECT_EQ(ReadFile(frozen), "one\ntwo\nthree\n");
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_EQ(ReadFile(M("kept")), "one\ntwo\nthree\n");
  // Open again through the new daemon: recorded again, so a second death
  // is fenced at the next mount too.
  ScopedFd again(::open(M("kept").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(again.valid()) << ErrnoName(errno);
  ASSERT_EQ(::write(again.get(), "five\n", 5), 5);
  const pid_t pid2 = sandbox().daemon_pid();
  ASSERT_EQ(::kill(pid2, SIGKILL), 0);
  for (int i = 0; i < 500 && ::kill(pid2, 0) == 0; ++i) ::usleep(10 * 1000);
  (void)sandbox().Unmount();
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_EQ(::write(again.get(), "six\n", 4), 4) << ErrnoName(errno);
  EXPECT_EQ(ReadFile(M("kept")), "one\ntwo\nthree\nfive\n");
  EXPECT_EQ(ReadFile(U("kept")), "one\ntwo\nthree\nfive\n");
  EXPECT_NE(sandbox().DaemonLog().find("still open through passthrough"),
            std::string::npos)
      << sandbox().DaemonLog();
}

// Set-id bits go on a write by someone else than root, as on ext4: the
// kernel clears them on the FUSE file first (a SETATTR the daemon
// answers) before it writes the backing file.
TEST_F(Passthrough, AWriteThroughClearsSetIdBitsAsExt4Does) {
  const std::string native = tmp().MakeDir("native");
  // Reachable by the writer.
  ASSERT_EQ(::chmod(sys_dirname(native).c_str(), 0755), 0);
  ASSERT_EQ(::chmod(native.c_str(), 0777), 0);
  for (const std::string& dir : {M(""), native + "/"}) {
    const std::string f = dir + "setid";
    ASSERT_TRUE(WriteFile(f, "#!/bin/sh\n"));
    ASSERT_EQ(::chown(f.c_str(), 65534, 65534), 0) << ErrnoName(errno);
    ASSERT_EQ(::chmod(f.c_str(), 06755), 0) << ErrnoName(errno);
    CommandResult w = RunCommand(
        {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh",
         "-c", "printf 'echo hi\\n' >> " + ShellQuote(f)},
        30);
    ASSERT_TRUE(w.ok()) << w.Describe();
  }
  struct stat a, b;
  ASSERT_EQ(::stat(M("setid").c_str(), &a), 0);
  ASSERT_EQ(::stat((native + "/setid").c_str(), &b), 0);
  EXPECT_EQ(a.st_mode, b.st_mode)
      << std::oct << a.st_mode << " vs " << b.st_mode;
  EXPECT_EQ(a.st_size, b.st_size);
  EXPECT_EQ(ReadFile(M("setid")), ReadFile(native + "/setid"));
}

// O_DIRECT, copy_file_range, fallocate (a hole punched, a range
// zeroed) and a shared mapping, on a file open through its upper file,
// give what the same calls give on ext4.
TEST_F(Passthrough, DirectIoCopyRangeFallocateAndMmapAgreeWithExt4) {
  const std::string native = tmp().MakeDir("native2");
  auto run = [&](const std::string& dir) -> std::string {
    const std::string f = dir + "/data", g = dir + "/copy";
    std::string block(8192, 'a');
    for (size_t i = 0; i < block.size(); ++i) block[i] = 'a' + i % 26;
    if (!WriteFile(f, block + block)) return "write";
    ScopedFd d(::open(f.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC));
    if (!d.valid()) return "open O_DIRECT: " + ErrnoName(errno);
    void* buf = nullptr;
    if (::posix_memalign(&buf, 4096, 4096) != 0) return "memalign";
    std::memset(buf, 'D', 4096);
    if (::pwrite(d.get(), buf, 4096, 4096) != 4096) {
      std::free(buf);
      return "pwrite O_DIRECT: " + ErrnoName(errno);
    }
    std::free(buf);
    ScopedFd rw(::open(f.c_str(), O_RDWR | O_CLOEXEC));
    if (!rw.valid()) return "open: " + ErrnoName(errno);
    if (::fallocate(rw.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                    4096) != 0)
      return "punch: " + ErrnoName(errno);
    if (::fallocate(rw.get(), 0, 16384, 8192) != 0)
      return "fallocate: " + ErrnoName(errno);
    void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
                     rw.get(), 8192);
    if (m == MAP_FAILED) return "mmap: " + ErrnoName(errno);
    std::memcpy(m, "MAPPED", 6);
    ::msync(m, 4096, MS_SYNC);
    ::munmap(m, 4096);
    ScopedFd out(
        ::open(g.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!out.valid()) return "create: " + ErrnoName(errno);
    loff_t in_off = 4000, out_off = 100;
    if (::copy_file_range(rw.get(), &in_off, out.get(), &out_off, 9000, 0) !=
        9000)
      return "copy_file_range: " + ErrnoName(errno);
    struct stat st;
    ::fstat(rw.get(), &st);
    return "size " + std::to_string(st.st_size) + "\n" + ReadFd(rw.get()) +
           "\n--\n" + ReadFd(out.get());
  };
  const std::string mine = run(M("").substr(0, M("").size() - 1));
  const std::string theirs = run(native);
  EXPECT_EQ(mine.substr(0, 80), theirs.substr(0, 80));
  EXPECT_TRUE(mine == theirs) << "the mount and ext4 differ";
  EXPECT_EQ(ReadFile(M("data")), ReadFile(U("data")));
}

// A checkpoint or a rewind copies each file open through passthrough for
// the layer it leaves behind. On a full disk there is no room for the
// copy: refused before anything is recorded (the stack, the mount and the
// file as they were, nothing left in acqfs-tmp), and taken once there is
// room again.
TEST(PassthroughFullDisk,
     NoRoomForTheCopiesRefusesTheCheckpointAndChangesNothing) {
  TempDir tmp;
  const std::string image = tmp.Sub("small.img"), fs = tmp.MakeDir("small");
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
  const std::string lower = tmp.MakeDir("lower");
  ASSERT_TRUE(WriteFile(lower + "/README", "x"));
  SandboxOptions o;
  o.extra_mount_args = {"-o", "handles"};
  o.state_dir = tmp.MakeDir("small/state");
  Sandbox sb(lower, o);
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  ASSERT_NE(sb.DaemonLog().find("passthrough: on"), std::string::npos);
  ScopedFd fd(::open(sb.M("big").c_str(),
                     O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid()) << ErrnoName(errno);
  const std::string mib(1 << 20, 'b');
  for (int i = 0; i < 24; ++i)
    ASSERT_EQ(::write(fd.get(), mib.data(), mib.size()),
              static_cast<ssize_t>(mib.size()));
  // Full but for 1 MiB: room for the checkpoint's new upper and manifest,
  // not for a copy of `big`.
  ASSERT_TRUE(WriteFile(sb.M("pad"), mib));
  CommandResult fill =
      RunShell("{ cat /dev/zero > " + ShellQuote(sb.M("filler")) +
                   "; } 2>/dev/null; true",
               120);
  ASSERT_FALSE(fill.timed_out) << fill.Describe();
  ASSERT_EQ(::unlink(sb.M("pad").c_str()), 0) << ErrnoName(errno);
  const size_t layers = sb.frozen().size();
  CommandResult c = RunCommand(
      {AcqfsBinary(), "checkpoint", sb.name(), "--state-dir", sb.state_dir()},
      120);
  EXPECT_FALSE(c.ok()) << c.Describe();
  EXPECT_NE(c.err.find("passthrough"), std::string::npos) << c.Describe();
  EXPECT_EQ(sb.frozen().size(), layers);
  EXPECT_EQ(Sh("ls -A " + ShellQuote(sb.work() + "/acqfs-tmp")), "");
  // The mount goes on as before: the open file writes the upper.
  ASSERT_EQ(::unlink(sb.M("filler").c_str()), 0) << ErrnoName(errno);
  ASSERT_EQ(::write(fd.get(), "end\n", 4), 4);
  EXPECT_EQ(ReadFile(sb.M("big")).size(), 24u * (1 << 20) + 4);
  CommandResult again = RunCommand(
      {AcqfsBinary(), "checkpoint", sb.name(), "--state-dir", sb.state_dir()},
      120);
  ASSERT_TRUE(again.ok()) << again.Describe();
  ASSERT_EQ(sb.frozen().size(), layers + 1);
  ASSERT_EQ(::write(fd.get(), "after\n", 6), 6);
  EXPECT_EQ(ReadFile(sb.frozen().back() + "/big").size(), 24u * (1 << 20) + 4);
  EXPECT_EQ(ReadFile(sb.M("big")).size(), 24u * (1 << 20) + 10);
  fd.Reset();
  EXPECT_TRUE(sb.Unmount());
}

// A mount that may pass through is a stacked file system (depth 1): a
// kernel overlayfs over it mounts, one over that is refused by the kernel
// (two levels at most), and -o nopassthrough gives that level back
// (docs/architecture.md, "FUSE passthrough").
TEST(PassthroughStacking, OneOverlayfsOverTheSandboxAndTwoWithoutPassthrough) {
  for (const bool passthrough : {true, false}) {
    TempDir tmp;
    const std::string lower = tmp.MakeDir("lower");
    ASSERT_TRUE(WriteFile(lower + "/x", "x\n"));
    SandboxOptions o;
    if (!passthrough) o.extra_mount_args = {"-o", "nopassthrough"};
    Sandbox s(lower, o);
    ASSERT_TRUE(s.mounted()) << s.mount_failure();
    const std::string one = tmp.MakeDir("one"), two = tmp.MakeDir("two");
    MountGuard g1(one), g2(two);
    CommandResult r1 = MountKernelOverlay(s.mountpoint(), tmp.MakeDir("u1"),
                                          tmp.MakeDir("w1"), one);
    ASSERT_TRUE(r1.ok()) << r1.Describe();
    EXPECT_EQ(ReadFile(one + "/x"), "x\n");
    CommandResult r2 =
        MountKernelOverlay(one, tmp.MakeDir("u2"), tmp.MakeDir("w2"), two);
    EXPECT_EQ(r2.ok(), !passthrough) << r2.Describe();
  }
}

// Where a write must reach the daemon, nothing is passed through: a quota
// (it counts every write), -o nopassthrough, -o no_open (the handle-less
// mode answers no OPEN). Each of them also keeps the default file mode
// handle-less.
TEST(PassthroughOff, AQuotaNopassthroughAndTheHandleLessModePassNothing) {
  struct Case {
    std::vector<std::string> args;
    const char* why;
    bool handle_less;  // the file mode the daemon settles on
  };
  for (const Case& c :
       {Case{{"-o", "handles", "--quota", "16M"}, "the quota must see", false},
        Case{{"--quota", "16M"}, "the quota must see", true},
        Case{{"-o", "handles,nopassthrough"}, "-o nopassthrough", false},
        Case{{"-o", "nopassthrough"}, "-o nopassthrough", true},
        Case{{"-o", "no_open"}, "the handle-less mode", true}}) {
    TempDir tmp;
    const std::string lower = tmp.MakeDir("lower");
    ASSERT_TRUE(WriteFile(lower + "/f", "f\n"));
    SandboxOptions o;
    o.extra_mount_args = c.args;
    Sandbox s(lower, o);
    ASSERT_TRUE(s.mounted()) << s.mount_failure();
    ASSERT_TRUE(WriteFile(s.M("new"), "new\n"));
    EXPECT_EQ(ReadFile(s.M("new")), "new\n");
    EXPECT_EQ(PassedThrough(s), -1) << c.why;
    EXPECT_NE(s.DaemonLog().find(std::string("passthrough: off (") + c.why),
              std::string::npos)
        << s.DaemonLog();
    EXPECT_NE(
        s.DaemonLog().find(c.handle_less ? "no_open=true" : "no_open=false"),
        std::string::npos)
        << s.DaemonLog();
  }
}

}  // namespace
}  // namespace acqfs::test
