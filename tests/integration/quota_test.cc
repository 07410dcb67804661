// The quota (docs/sandboxes.md, "Quota") filled by every route a process in
// the sandbox has: write, truncate, fallocate with and without KEEP_SIZE,
// copy_file_range, copy-up, renaming a lower directory (which copies it),
// rename-over, unlink of an open file, xattrs, directories and symlinks.
//
// Each test runs on an ext4 of its own (a loop device), so that the file
// system's own count of used blocks is an oracle that sees everything the
// sandbox makes the disk hold, nameless files that processes keep open
// included. For every route the test checks that:
//   - the route is stopped with EDQUOT;
//   - what the upper layer (and work/acqfs-tmp) holds, by du(1), and what
//     the file system lost, by statfs(2), never pass the quota by more than
//     the documented slack;
//   - the daemon's count, which the mount's statfs shows (the quota as the
//     size, what it leaves as free), is what du says;
//   - once the route's files are removed the room comes back and can be
//     written again.
// Both file modes: handle-less (the default) and -o handles.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/sandbox.h"
#include "harness/temp_dir.h"

namespace acqfs::test {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kQuota = 16 * kMiB;
// How far the upper layer may hold more than the quota: docs/sandboxes.md,
// "Quota" (what one change can add beyond what it reserved, for each worker
// thread).
constexpr uint64_t kSlack = 256 << 10;

std::string Pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++)
    s[i] = static_cast<char>(seed + (i * 7 + i / 4096) % 61);
  return s;
}

std::string ModeName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "no_open" ? "HandleLess" : "Handles";
}

class QuotaRoutes : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "needs root (a loop-mounted ext4)";
    fs_ = tmp_.MakeDir("fs");
    const std::string image = tmp_.Sub("fs.img");
    // 4 KiB blocks and 256-byte inodes, as mkfs gives a disk of normal size
    // (a small one would get 1 KiB blocks and 128-byte inodes).
    CommandResult made = RunShell(
        "truncate -s 192M " + ShellQuote(image) +
            " && mkfs.ext4 -q -F -b 4096 -I 256 -m 0 " + ShellQuote(image) +
            " && mount -o loop " + ShellQuote(image) + " " + ShellQuote(fs_),
        60);
    ASSERT_TRUE(made.ok()) << made.Describe();
    fs_mounted_ = true;
    lower_ = tmp_.MakeDir("lower");
    ASSERT_TRUE(WriteFile(lower_ + "/README", "lower\n"));
    for (int i = 1; i <= 3; i++)
      ASSERT_TRUE(WriteFile(lower_ + "/big" + std::to_string(i),
                            Pattern(6 * kMiB, static_cast<char>('a' + i))));
    ASSERT_EQ(::mkdir((lower_ + "/tree").c_str(), 0755), 0);
    for (int i = 1; i <= 3; i++)
      ASSERT_TRUE(WriteFile(lower_ + "/tree/f" + std::to_string(i),
                            Pattern(6 * kMiB, static_cast<char>('k' + i))));
    ASSERT_EQ(::mkdir((lower_ + "/small").c_str(), 0755), 0);
    for (int i = 1; i <= 2; i++)
      ASSERT_TRUE(WriteFile(lower_ + "/small/f" + std::to_string(i),
                            Pattern(3 * kMiB, static_cast<char>('p' + i))));
    SandboxOptions o;
    o.state_dir = fs_ + "/state";
    ASSERT_EQ(::mkdir(o.state_dir.c_str(), 0700), 0);
    o.extra_mount_args = {"--quota", "16M"};
    if (!GetParam().empty())
      o.extra_mount_args.insert(o.extra_mount_args.end(), {"-o", GetParam()});
    sb_ = std::make_unique<Sandbox>(lower_, o);
    ASSERT_TRUE(sb_->mounted()) << sb_->mount_failure();
    upper0_ = Upper();
    disk0_ = Disk();
    daemon0_ = Daemon();
  }

  void TearDown() override {
    if (HasFailure() && sb_)
      std::cerr << "--- daemon.log ---\n" << sb_->DaemonLog() << "\n";
    sb_.reset();  // unmounts the sandbox first
    if (fs_mounted_) {
      CommandResult u = RunCommand({"umount", fs_}, 60);
      if (!u.ok()) RunCommand({"umount", "-l", fs_}, 30);
    }
  }

  std::string M(const std::string& rel) const { return sb_->M(rel); }

  // What the upper layer and work/acqfs-tmp hold, as du(1) says.
  uint64_t Upper() {
    CommandResult du = RunShell(
        "du -s -c --block-size=1 " + ShellQuote(sb_->upper()) + " " +
            ShellQuote(sb_->work() + "/acqfs-tmp") + " | tail -n 1 | cut -f1",
        60);
    EXPECT_TRUE(du.ok()) << du.Describe();
    return std::stoull(du.out.empty() ? "0" : du.out);
  }
  // What the file system holding them has in use (after writing back, so
  // that blocks ext4 allocates late are in), but for the audit log, which
  // the quota does not cover (its own bound is --audit-max; docs/audit.md).
  uint64_t Disk() {
    ScopedFd fd(::open(fs_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(::syncfs(fd.get()), 0);
    struct statvfs st;
    EXPECT_EQ(::statvfs(fs_.c_str(), &st), 0);
    CommandResult du =
        RunShell("du -s --block-size=1 " +
                     ShellQuote(sb_->layer_dir() + "/audit") + " | cut -f1",
                 60);
    EXPECT_TRUE(du.ok()) << du.Describe();
    return (st.f_blocks - st.f_bfree) * st.f_frsize -
           std::stoull(du.out.empty() ? "0" : du.out);
  }
  // The daemon's count, as the mount's statfs shows it.
  uint64_t Daemon() {
    struct statvfs st;
    EXPECT_EQ(::statvfs(sb_->mountpoint().c_str(), &st), 0) << ErrnoName(errno);
    return (st.f_blocks - st.f_bfree) * st.f_frsize;
  }
  // Waits (at most 5 s) for the daemon's count to drop to `at_most`: the
  // kernel tells the daemon that it let go of an unlinked file (FORGET) a
  // little after the last close.
  ::testing::AssertionResult DaemonDropsTo(uint64_t at_most) {
    uint64_t now = 0;
    for (int i = 0; i < 100; i++) {
      now = Daemon();
      if (now <= at_most) return ::testing::AssertionSuccess();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return ::testing::AssertionFailure()
           << "the daemon still counts " << now << " bytes, expected at most "
           << at_most;
  }

  // The quota holds against both oracles, and the daemon counts what du
  // sees (plus `unseen`, nameless data that du cannot see).
  void ExpectBounded(const std::string& when, uint64_t unseen = 0) {
    SCOPED_TRACE(when);
    const uint64_t disk = Disk();
    const uint64_t upper = Upper();
    const uint64_t daemon = Daemon();
    std::cout << "[ quota ] " << when << ": du " << upper << ", disk "
              << disk - disk0_ + upper0_ << ", daemon " << daemon << " (+"
              << unseen << " kept); quota " << kQuota << "\n";
    EXPECT_LE(upper, kQuota + kSlack) << "du of the upper layer";
    EXPECT_LE(disk - disk0_ + upper0_, kQuota + kSlack)
        << "blocks the file system lost";
    // The mount's statfs shows no more than the quota as used: past it (by
    // the slack) it shows the quota.
    EXPECT_EQ(daemon, std::min(upper + unseen, kQuota))
        << "the daemon's count vs du";
  }

  // Writes `total` bytes to `path` in 1 MiB writes; the errno of the first
  // failure (0 if none), the bytes written in *written.
  int WriteChunks(const std::string& path, uint64_t total,
                  uint64_t* written = nullptr, off_t start = 0) {
    ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (!fd.valid()) return errno;
    const std::string chunk = Pattern(kMiB, 'w');
    uint64_t done = 0;
    int err = 0;
    while (done < total) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kMiB, total - done));
      ssize_t w = ::pwrite(fd.get(), chunk.data(), n, start + done);
      if (w < 0) {
        err = errno;
        break;
      }
      done += static_cast<uint64_t>(w);
    }
    if (written) *written = done;
    return err;
  }

  // The room the quota gives is there to write again, and then goes.
  void ExpectWritableAgain(uint64_t bytes) {
    ASSERT_EQ(WriteChunks(M("again"), bytes), 0)
        << "writing " << bytes << " bytes into room the quota should have";
    ExpectBounded("written again");
    ASSERT_EQ(::unlink(M("again").c_str()), 0) << ErrnoName(errno);
    EXPECT_TRUE(DaemonDropsTo(daemon0_ + (64 << 10)));
  }

  TempDir tmp_;
  std::string fs_, lower_;
  bool fs_mounted_ = false;
  std::unique_ptr<Sandbox> sb_;
  uint64_t upper0_ = 0, disk0_ = 0, daemon0_ = 0;
};

TEST_P(QuotaRoutes, Write) {
  EXPECT_EQ(daemon0_, upper0_);
  uint64_t written = 0;
  EXPECT_EQ(WriteChunks(M("w"), 2 * kQuota, &written), EDQUOT);
  EXPECT_GE(written, kQuota - 2 * kMiB);  // refused only when it is full
  ExpectBounded("filled by write");
  // A remount measures what the daemon counted.
  const uint64_t counted = Daemon();
  ASSERT_TRUE(sb_->Unmount());
  ASSERT_TRUE(sb_->Remount());
  EXPECT_EQ(Daemon(), counted);
  ASSERT_EQ(::unlink(M("w").c_str()), 0);
  EXPECT_TRUE(DaemonDropsTo(daemon0_));
  ExpectWritableAgain(kQuota - kMiB);
}

TEST_P(QuotaRoutes, Truncate) {
  // A longer file is a hole: it takes nothing, as on ext4.
  ASSERT_TRUE(WriteFile(M("t"), ""));
  ASSERT_EQ(::truncate(M("t").c_str(), 1 << 30), 0) << ErrnoName(errno);
  struct stat st;
  ASSERT_TRUE(Lstat(M("t"), &st));
  EXPECT_EQ(st.st_size, 1 << 30);
  EXPECT_EQ(st.st_blocks, 0);
  EXPECT_EQ(Daemon(), daemon0_);
  // Filling its holes takes blocks, up to the quota.
  int err = 0;
  for (int i = 0; i < 64 && err == 0; i++)
    err = WriteChunks(M("t"), kMiB, nullptr, static_cast<off_t>(i) * 8 * kMiB);
  EXPECT_EQ(err, EDQUOT);
  // Eight extents: ext4 gives the file an extent block when it writes the
  // data back, which the daemon sees at the fsync.
  {
    ScopedFd fd(::open(M("t").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::fsync(fd.get()), 0) << ErrnoName(errno);
  }
  ExpectBounded("filled through a truncated file's holes");
  // Truncating gives the blocks back.
  ASSERT_EQ(::truncate(M("t").c_str(), 0), 0) << ErrnoName(errno);
  EXPECT_EQ(Daemon(), daemon0_);
  ExpectWritableAgain(kQuota - kMiB);
  // A truncate that copies a lower file up is charged the copy.
  ASSERT_EQ(WriteChunks(M("filler"), 12 * kMiB), 0);
  EXPECT_EQ(::truncate(M("big1").c_str(), 100), -1);
  EXPECT_EQ(errno, EDQUOT);
  EXPECT_FALSE(Exists(sb_->upper() + "/big1"));
  ExpectBounded("copy-up for a truncate refused");
}

TEST_P(QuotaRoutes, Fallocate) {
  ScopedFd fd(::open(M("f").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  EXPECT_EQ(::fallocate(fd.get(), 0, 0, 2 * kQuota), -1);
  EXPECT_EQ(errno, EDQUOT);
  struct stat st;
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  EXPECT_EQ(st.st_size, 0);  // refused whole
  EXPECT_EQ(st.st_blocks, 0);
  ASSERT_EQ(::fallocate(fd.get(), 0, 0, kQuota / 2), 0) << ErrnoName(errno);
  EXPECT_EQ(::fallocate(fd.get(), 0, kQuota / 2, kQuota / 2), -1);
  EXPECT_EQ(errno, EDQUOT);
  ExpectBounded("fallocate");
  // What the quota leaves, as the mount's statfs says, can be taken.
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(sb_->mountpoint().c_str(), &vfs), 0);
  const off_t left = static_cast<off_t>(vfs.f_bavail * vfs.f_frsize);
  ASSERT_GT(left, 0);
  EXPECT_EQ(::fallocate(fd.get(), 0, kQuota / 2, left), 0) << ErrnoName(errno);
  ExpectBounded("fallocate of what statfs says is free");
  fd.Reset();
  ASSERT_EQ(::unlink(M("f").c_str()), 0);
  EXPECT_TRUE(DaemonDropsTo(daemon0_));
  ExpectWritableAgain(kQuota - kMiB);
}

TEST_P(QuotaRoutes, FallocateKeepSize) {
  ScopedFd fd(::open(M("k").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  EXPECT_EQ(::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, 0, 2 * kQuota), -1);
  EXPECT_EQ(errno, EDQUOT);
  ExpectBounded("fallocate KEEP_SIZE past the quota");
  ASSERT_EQ(::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, 0, 8 * kMiB), 0)
      << ErrnoName(errno);
  struct stat st;
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 8 * kMiB);
  EXPECT_EQ(::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, 8 * kMiB, 8 * kMiB), -1);
  EXPECT_EQ(errno, EDQUOT);
  ExpectBounded("fallocate KEEP_SIZE");
  // With the rest of the quota taken, writing into the preallocated space
  // still works: it needs no new block.
  ASSERT_EQ(WriteChunks(M("rest"), kQuota, nullptr), EDQUOT);
  const std::string chunk = Pattern(kMiB, 'p');
  for (int i = 0; i < 8; i++)
    ASSERT_EQ(::pwrite(fd.get(), chunk.data(), chunk.size(),
                       static_cast<off_t>(i) * kMiB),
              static_cast<ssize_t>(kMiB))
        << "into preallocated space, MiB " << i << ": " << ErrnoName(errno);
  ExpectBounded("written into preallocated space");
  fd.Reset();
  ASSERT_EQ(::unlink(M("k").c_str()), 0);
  ASSERT_EQ(::unlink(M("rest").c_str()), 0);
  EXPECT_TRUE(DaemonDropsTo(daemon0_));
  ExpectWritableAgain(kQuota - kMiB);
}

TEST_P(QuotaRoutes, CopyFileRange) {
  ASSERT_EQ(WriteChunks(M("src"), 6 * kMiB), 0);
  ScopedFd in(::open(M("src").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(in.valid());
  auto copy = [&](const std::string& to) -> ssize_t {
    ScopedFd out(::open(M(to).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (!out.valid()) return -1;
    loff_t off_in = 0;
    // A length far beyond the source: only what it holds can be copied.
    return ::copy_file_range(in.get(), &off_in, out.get(), nullptr,
                             size_t{1} << 40, 0);
  };
  EXPECT_EQ(copy("d1"), static_cast<ssize_t>(6 * kMiB)) << ErrnoName(errno);
  EXPECT_EQ(copy("d2"), -1);
  EXPECT_EQ(errno, EDQUOT);
  ExpectBounded("copy_file_range");
  ASSERT_EQ(::unlink(M("d1").c_str()), 0);
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + 6 * kMiB + (64 << 10)));
  EXPECT_EQ(copy("d2"), static_cast<ssize_t>(6 * kMiB)) << ErrnoName(errno);
  ExpectBounded("copy_file_range after room was made");
}

TEST_P(QuotaRoutes, CopyUp) {
  ASSERT_TRUE(AppendFile(M("big1"), "+"));
  ASSERT_TRUE(AppendFile(M("big2"), "+"));
  EXPECT_FALSE(AppendFile(M("big3"), "+"));
  EXPECT_FALSE(Exists(sb_->upper() + "/big3"));
  ExpectBounded("copy-ups");
  EXPECT_EQ(ContentOf(sb_->lower() + "/big1"), Pattern(6 * kMiB, 'b'));
  ASSERT_EQ(::unlink(M("big1").c_str()), 0);
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + 6 * kMiB + (64 << 10)));
  ASSERT_TRUE(AppendFile(M("big3"), "+"));
  ExpectBounded("copy-up after room was made");
}

TEST_P(QuotaRoutes, RenameMaterialise) {
  // tree/ holds 18 MiB in the lower: moving it copies it, which the quota
  // refuses, leaving nothing behind.
  EXPECT_EQ(::rename(M("tree").c_str(), M("tree2").c_str()), -1);
  EXPECT_EQ(errno, EDQUOT);
  EXPECT_FALSE(Exists(M("tree2")));
  EXPECT_EQ(ContentOf(M("tree/f1")), Pattern(6 * kMiB, 'l'));
  ExpectBounded("a refused materialise");
  // small/ (6 MiB) fits and is charged.
  ASSERT_EQ(::rename(M("small").c_str(), M("small2").c_str()), 0)
      << ErrnoName(errno);
  EXPECT_GE(Daemon(), daemon0_ + 6 * kMiB);
  ExpectBounded("a materialise");
  EXPECT_EQ(WriteChunks(M("more"), kQuota), EDQUOT);
  ExpectBounded("filled after a materialise");
  CommandResult rm = RunCommand({"rm", "-rf", M("small2"), M("more")}, 60);
  ASSERT_TRUE(rm.ok()) << rm.Describe();
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + (64 << 10)));
  ExpectWritableAgain(kQuota - kMiB);
}

TEST_P(QuotaRoutes, RenameOver) {
  ASSERT_EQ(WriteChunks(M("x"), 10 * kMiB), 0);
  ASSERT_EQ(WriteChunks(M("y"), 4 * kMiB), 0);
  EXPECT_EQ(WriteChunks(M("z"), 4 * kMiB), EDQUOT);
  ASSERT_EQ(::unlink(M("z").c_str()), 0);
  ExpectBounded("before the rename");
  // mv y x frees x; rm x frees what was y.
  ASSERT_EQ(::rename(M("y").c_str(), M("x").c_str()), 0) << ErrnoName(errno);
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + 4 * kMiB + (64 << 10)));
  ExpectBounded("after the rename");
  ASSERT_EQ(::unlink(M("x").c_str()), 0);
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + (64 << 10)));
  EXPECT_LE(Disk(), disk0_ + (64 << 10)) << "the blocks did not come back";
  ExpectWritableAgain(kQuota - kMiB);
  // A file renamed over while a process holds it keeps its data, and its
  // blocks count, until the process lets go.
  ASSERT_EQ(WriteChunks(M("x"), 10 * kMiB), 0);
  ASSERT_EQ(WriteChunks(M("y"), kMiB), 0);
  ScopedFd held(::open(M("x").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(held.valid());
  ASSERT_EQ(::rename(M("y").c_str(), M("x").c_str()), 0) << ErrnoName(errno);
  EXPECT_EQ(WriteChunks(M("z"), 8 * kMiB), EDQUOT);
  ExpectBounded("renamed over while held", 10 * kMiB);
  char c;
  EXPECT_EQ(::pread(held.get(), &c, 1, 5 * kMiB), 1);
  held.Reset();
  ASSERT_EQ(::unlink(M("z").c_str()), 0);
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + kMiB + (64 << 10)));
  EXPECT_EQ(WriteChunks(M("z"), 12 * kMiB), 0);
  ExpectBounded("after the holder let go");
}

TEST_P(QuotaRoutes, UnlinkOfAnOpenFile) {
  ScopedFd held(::open(M("h").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(held.valid());
  const std::string chunk = Pattern(kMiB, 'h');
  for (int i = 0; i < 10; i++)
    ASSERT_EQ(::pwrite(held.get(), chunk.data(), chunk.size(),
                       static_cast<off_t>(i) * kMiB),
              static_cast<ssize_t>(kMiB));
  ASSERT_EQ(::unlink(M("h").c_str()), 0);
  // The data is still on disk, and still counts.
  EXPECT_GE(Disk(), disk0_ + 10 * kMiB);
  EXPECT_EQ(WriteChunks(M("g"), 8 * kMiB), EDQUOT);
  ExpectBounded("an unlinked file held open", 10 * kMiB);
  // Written to after the unlink, it still counts. g's blocks come back
  // when the kernel forgets g, a little after the unlink (the FORGET is
  // queued; sandboxes.md, "Quota"): wait for it, or the write can race it.
  ASSERT_EQ(::unlink(M("g").c_str()), 0);
  ASSERT_TRUE(DaemonDropsTo(daemon0_ + 10 * kMiB + (64 << 10)));
  EXPECT_EQ(::pwrite(held.get(), chunk.data(), chunk.size(), 10 * kMiB),
            static_cast<ssize_t>(kMiB));
  EXPECT_EQ(WriteChunks(M("g"), 8 * kMiB), EDQUOT);
  ExpectBounded("written to after the unlink", 11 * kMiB);
  ASSERT_EQ(::unlink(M("g").c_str()), 0);
  held.Reset();
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + (64 << 10)));
  EXPECT_LE(Disk(), disk0_ + (64 << 10)) << "the blocks did not come back";
  ExpectWritableAgain(kQuota - kMiB);
}

// The kernel as the oracle: the same calls on a file of the same ext4,
// outside the sandbox, allocate what the sandbox's file holds, and the
// daemon's count moves by exactly that.
TEST_P(QuotaRoutes, CountsWhatExt4Allocates) {
  const std::string native = fs_ + "/native";
  ScopedFd a(::open(native.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ScopedFd b(::open(M("mounted").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(a.valid() && b.valid());
  const uint64_t base = Daemon();
  const std::string page = Pattern(4096, 'o');
  const std::string value = Pattern(3000, 'v');
  struct Step {
    const char* what;
    std::function<int(int fd, const std::string& path)> run;
  };
  const std::vector<Step> steps = {
      {"truncate to 1 GiB",
       [](int fd, const std::string&) { return ::ftruncate(fd, 1 << 30); }},
      {"fallocate KEEP_SIZE past the end",
       [](int fd, const std::string&) {
         return ::fallocate(fd, FALLOC_FL_KEEP_SIZE, (1 << 30) + 4096, 1 << 20);
       }},
      {"fallocate 1 MiB",
       [](int fd, const std::string&) {
         return ::fallocate(fd, 0, 0, 1 << 20);
       }},
      {"write a page into a hole",
       [&](int fd, const std::string&) {
         return ::pwrite(fd, page.data(), page.size(), 5 << 20) == 4096 ? 0
                                                                        : -1;
       }},
      {"overwrite preallocated space",
       [&](int fd, const std::string&) {
         return ::pwrite(fd, page.data(), page.size(), 8192) == 4096 ? 0 : -1;
       }},
      {"punch a hole",
       [](int fd, const std::string&) {
         return ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                            512 << 10);
       }},
      {"zero a range",
       [](int fd, const std::string&) {
         return ::fallocate(fd, FALLOC_FL_ZERO_RANGE, 64 << 20, 256 << 10);
       }},
      {"an xattr of 3000 bytes",
       [&](int, const std::string& path) {
         return ::lsetxattr(path.c_str(), "user.v", value.data(), value.size(),
                            0);
       }},
      {"truncate to 3 MiB",
       [](int fd, const std::string&) { return ::ftruncate(fd, 3 << 20); }},
      {"fsync", [](int fd, const std::string&) { return ::fsync(fd); }},
  };
  for (const Step& step : steps) {
    SCOPED_TRACE(step.what);
    ASSERT_EQ(step.run(a.get(), native), 0) << "natively: " << ErrnoName(errno);
    ASSERT_EQ(step.run(b.get(), M("mounted")), 0)
        << "in the sandbox: " << ErrnoName(errno);
    // Written back on both sides (ext4 adds extent blocks then), which the
    // daemon sees at the fsync.
    ASSERT_EQ(::fsync(a.get()), 0);
    ASSERT_EQ(::fsync(b.get()), 0);
    struct stat na, mo;
    ASSERT_EQ(::fstat(a.get(), &na), 0);
    ASSERT_EQ(::lstat((sb_->upper() + "/mounted").c_str(), &mo), 0);
    EXPECT_EQ(mo.st_size, na.st_size);
    EXPECT_EQ(mo.st_blocks, na.st_blocks);
    EXPECT_EQ(Daemon() - base, static_cast<uint64_t>(mo.st_blocks) * 512);
  }
}

// Many small objects each taking a block: refused at the quota, never past.
void FillWithObjects(QuotaRoutes* t, const std::string& what,
                     const std::function<int(int i)>& make) {
  int err = 0, made = 0;
  for (; made < 8192 && err == 0; made++) err = make(made);
  EXPECT_EQ(err, EDQUOT) << what << ": " << made << " made, " << ErrnoName(err);
  EXPECT_GT(made, 1000) << what;
}

TEST_P(QuotaRoutes, Xattrs) {
  ASSERT_EQ(::mkdir(M("x").c_str(), 0755), 0);
  // Each file gets a value of its own, in a block of its own (ext4 shares
  // only identical xattr blocks).
  FillWithObjects(this, "xattrs", [&](int i) {
    std::string p = M("x/f" + std::to_string(i));
    ScopedFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (!fd.valid()) return errno;
    std::string v = std::to_string(i) + Pattern(3000, static_cast<char>(i));
    if (::lsetxattr(p.c_str(), "user.big", v.data(), v.size(), 0) != 0)
      return errno;
    return 0;
  });
  ExpectBounded("filled with xattrs");
  CommandResult rm = RunCommand({"rm", "-rf", M("x")}, 120);
  ASSERT_TRUE(rm.ok()) << rm.Describe();
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + (64 << 10)));
  ExpectWritableAgain(kQuota - kMiB);
}

TEST_P(QuotaRoutes, Directories) {
  ASSERT_EQ(::mkdir(M("d").c_str(), 0755), 0);
  FillWithObjects(this, "directories", [&](int i) {
    return ::mkdir(M("d/" + std::to_string(i)).c_str(), 0755) == 0 ? 0 : errno;
  });
  ExpectBounded("filled with directories");
  CommandResult rm = RunCommand({"rm", "-rf", M("d")}, 120);
  ASSERT_TRUE(rm.ok()) << rm.Describe();
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + (64 << 10)));
  ExpectWritableAgain(kQuota - kMiB);
}

TEST_P(QuotaRoutes, Symlinks) {
  ASSERT_EQ(::mkdir(M("s").c_str(), 0755), 0);
  // A target too long to live in the inode takes a block.
  FillWithObjects(this, "symlinks", [&](int i) {
    std::string target = std::to_string(i) + std::string(200, 't');
    return ::symlink(target.c_str(), M("s/" + std::to_string(i)).c_str()) == 0
               ? 0
               : errno;
  });
  ExpectBounded("filled with symlinks");
  CommandResult rm = RunCommand({"rm", "-rf", M("s")}, 120);
  ASSERT_TRUE(rm.ok()) << rm.Describe();
  EXPECT_TRUE(DaemonDropsTo(daemon0_ + (64 << 10)));
  ExpectWritableAgain(kQuota - kMiB);
}

// Every route at once, from several threads, three times over: the quota
// holds against all of them together, and emptying the sandbox brings the
// count back to where it started (it does not drift).
// A rewind gives back what it took off the stack, as a mount measures the
// stack: the count kept the rewound-away bytes until a remount (a 10 MiB
// write, rewound away, left a 16 MiB quota 6 MiB of room), and then the
// remount counted less than the mount had. Undo points do not count: only
// the owner can rewind, and the agent's stack stays within the quota.
TEST_P(QuotaRoutes, ARewindGivesBackWhatItTookOffTheStack) {
  auto acqfs = [&](std::vector<std::string> args) {
    args.insert(args.begin(), AcqfsBinary());
    args.insert(args.end(), {"--state-dir", sb_->state_dir()});
    CommandResult r = RunCommand(args, 60);
    EXPECT_TRUE(r.ok()) << r.Describe();
  };
  acqfs({"checkpoint", sb_->name(), "-m", "empty"});
  const uint64_t before = Daemon();
  ASSERT_EQ(WriteChunks(M("big"), 10 * kMiB), 0);
  EXPECT_GE(Daemon(), before + 10 * kMiB);
  acqfs({"rewind", sb_->name(), "1"});
  EXPECT_LE(Daemon(), before + (64 << 10)) << "the rewound-away 10 MiB";
  // The room is there, and counted.
  ASSERT_EQ(WriteChunks(M("again"), 12 * kMiB), 0);
  EXPECT_GE(Daemon(), before + 12 * kMiB);
  EXPECT_LE(Daemon(), before + 12 * kMiB + (256 << 10));
}

TEST_P(QuotaRoutes, AllRoutesAtOnce) {
  for (int round = 0; round < 3; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (const char* d : {"w", "d", "x", "k"})
      ASSERT_EQ(::mkdir(M(d).c_str(), 0755), 0) << d;
    std::vector<std::thread> threads;
    std::vector<int> last(7, 0);
    auto until_refused = [&](int slot, const std::function<int(int i)>& make) {
      threads.emplace_back([&, slot, make] {
        for (int i = 0; i < 20000; i++)
          if (int e = make(i); e != 0) {
            last[slot] = e;
            return;
          }
      });
    };
    const std::string chunk = Pattern(256 << 10, 'c');
    for (int w = 0; w < 4; w++)
      until_refused(w, [&, w](int i) {
        std::string p = M("w/" + std::to_string(w) + "." + std::to_string(i));
        ScopedFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        if (!fd.valid()) return errno;
        return ::write(fd.get(), chunk.data(), chunk.size()) ==
                       static_cast<ssize_t>(chunk.size())
                   ? 0
                   : errno;
      });
    until_refused(4, [&](int i) {
      return ::mkdir(M("d/" + std::to_string(i)).c_str(), 0755) == 0 ? 0
                                                                     : errno;
    });
    until_refused(5, [&](int i) {
      std::string p = M("x/" + std::to_string(i));
      ScopedFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
      if (!fd.valid()) return errno;
      std::string v = std::to_string(i) + Pattern(3000, 'x');
      return ::fsetxattr(fd.get(), "user.v", v.data(), v.size(), 0) == 0
                 ? 0
                 : errno;
    });
    until_refused(6, [&](int i) {
      std::string p = M("k/" + std::to_string(i));
      ScopedFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
      if (!fd.valid()) return errno;
      return ::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, 0, 300 << 10) == 0
                 ? 0
                 : errno;
    });
    for (auto& t : threads) t.join();
    for (int slot = 0; slot < 7; slot++)
      EXPECT_EQ(last[slot], EDQUOT)
          << "route " << slot << ": " << ErrnoName(last[slot]);
    ExpectBounded("every route at once");
    for (const char* d : {"w", "d", "x", "k"}) {
      CommandResult rm = RunCommand({"rm", "-rf", M(d)}, 120);
      ASSERT_TRUE(rm.ok()) << rm.Describe();
    }
    EXPECT_TRUE(DaemonDropsTo(daemon0_ + (64 << 10)));
    EXPECT_EQ(Daemon(), Upper());
  }
  ExpectWritableAgain(kQuota - kMiB);
}

INSTANTIATE_TEST_SUITE_P(Modes, QuotaRoutes,
                         ::testing::Values(std::string("no_open"), "handles"),
                         ModeName);

}  // namespace
}  // namespace acqfs::test
