// Tests of CopyUp: what it copies, that the upper entry appears only
// complete, and that the lower is never changed.
#include "fs/copy_up.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs/layer.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::DescribeTree;
using acqfs::test::Exists;
using acqfs::test::GetXattr;
using acqfs::test::ListDir;
using acqfs::test::ListXattrs;
using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFifo;
using acqfs::test::MakeFile;
using acqfs::test::MakeSymlink;
using acqfs::test::ReadFile;
using acqfs::test::SetTimes;
using acqfs::test::SetXattr;
using Strings = std::vector<std::string>;

constexpr time_t kOldTime = 1234567890;
constexpr long kOldNsec = 123456789;

// Installs a copy-up hook for the life of the object.
class ScopedCopyUpHook {
 public:
  explicit ScopedCopyUpHook(CopyUpHook hook) {
    SetCopyUpHookForTesting(std::move(hook));
  }
  ~ScopedCopyUpHook() { SetCopyUpHookForTesting(nullptr); }
  ScopedCopyUpHook(const ScopedCopyUpHook&) = delete;
  ScopedCopyUpHook& operator=(const ScopedCopyUpHook&) = delete;
};

class CopyUpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(layers_, acqfs::test::OpenLayers(t_));
  }
  acqfs::test::TempTree t_;
  Layers layers_;
};

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7919) >> 3);
  return s;
}

TEST_F(CopyUpTest, CopiesDataModeMtimeAndUserXattrs) {
  MakeFile(t_.L("f"), "hello lower", 0640);
  SetXattr(t_.L("f"), "user.a", "1");
  SetXattr(t_.L("f"), "user.bin", std::string("\0\x01\xff", 3));
  SetTimes(t_.L("f"), kOldTime, kOldNsec);
  ASSERT_OK(CopyUp(layers_, "f"));
  struct stat st = Lstat(t_.U("f"));
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtim.tv_sec, kOldTime);
  EXPECT_EQ(st.st_mtim.tv_nsec, kOldNsec);
  EXPECT_EQ(ReadFile(t_.U("f")), "hello lower");
  EXPECT_EQ(GetXattr(t_.U("f"), "user.a"), "1");
  EXPECT_EQ(GetXattr(t_.U("f"), "user.bin"), std::string("\0\x01\xff", 3));
  // A copy, not a link: a different inode.
  EXPECT_NE(st.st_ino, Lstat(t_.L("f")).st_ino);
}

TEST_F(CopyUpTest, CopiesOwnerWhenPrivileged) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "chown needs root (the tests run as root, as CI does)";
  MakeFile(t_.L("f"), "x");
  ASSERT_EQ(::lchown(t_.L("f").c_str(), 1234, 5678), 0);
  ASSERT_OK(CopyUp(layers_, "f"));
  struct stat st = Lstat(t_.U("f"));
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
}

TEST_F(CopyUpTest, CopiesSetuidAndStickyBits) {
  MakeFile(t_.L("f"), "x", 04755);
  MakeDir(t_.L("d"), 01777);
  ASSERT_OK(CopyUp(layers_, "f"));
  ASSERT_OK(CopyUp(layers_, "d"));
  EXPECT_EQ(Lstat(t_.U("f")).st_mode & 07777, 04755u);
  EXPECT_EQ(Lstat(t_.U("d")).st_mode & 07777, 01777u);
}

TEST_F(CopyUpTest, CopiesLargeFileExactly) {
  std::string data = Pattern((3 << 20) + 12345);  // over 1 MiB buffers
  MakeFile(t_.L("big"), data);
  ASSERT_OK(CopyUp(layers_, "big"));
  EXPECT_EQ(Lstat(t_.U("big")).st_size, static_cast<off_t>(data.size()));
  EXPECT_TRUE(ReadFile(t_.U("big")) == data) << "content differs";
}

TEST_F(CopyUpTest, CopiesEmptyFile) {
  MakeFile(t_.L("empty"), "", 0600);
  ASSERT_OK(CopyUp(layers_, "empty"));
  EXPECT_EQ(Lstat(t_.U("empty")).st_size, 0);
  EXPECT_EQ(Lstat(t_.U("empty")).st_mode & 07777, 0600u);
}

TEST_F(CopyUpTest, CopiesDirectoryWithoutItsChildren) {
  MakeDir(t_.L("d"), 0751);
  MakeFile(t_.L("d/child"), "c");
  SetXattr(t_.L("d"), "user.dir", "v");
  SetTimes(t_.L("d"), kOldTime, kOldNsec);
  ASSERT_OK(CopyUp(layers_, "d"));
  struct stat st = Lstat(t_.U("d"));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0751u);
  EXPECT_EQ(st.st_mtim.tv_sec, kOldTime);
  EXPECT_EQ(st.st_mtim.tv_nsec, kOldNsec);
  EXPECT_EQ(GetXattr(t_.U("d"), "user.dir"), "v");
  EXPECT_TRUE(ListDir(t_.U("d")).empty());
  // The copied directory is not opaque: the lower still shows through.
  EXPECT_EQ(GetXattr(t_.U("d"), "user.overlay.opaque"), std::nullopt);
}

TEST_F(CopyUpTest, CopiesNestedFileOnceParentIsUp) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/f"), "nested");
  ASSERT_OK(CopyUp(layers_, "d"));
  ASSERT_OK(CopyUp(layers_, "d/f"));
  EXPECT_EQ(ReadFile(t_.U("d/f")), "nested");
}

TEST_F(CopyUpTest, CopiesSymlinkTarget) {
  MakeSymlink("../some/where", t_.L("ln"));
  struct timespec ts[2] = {{kOldTime, 0}, {kOldTime, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, t_.L("ln").c_str(), ts, AT_SYMLINK_NOFOLLOW),
            0);
  ASSERT_OK(CopyUp(layers_, "ln"));
  struct stat st = Lstat(t_.U("ln"));
  ASSERT_TRUE(S_ISLNK(st.st_mode));
  char buf[256];
  ssize_t n = ::readlink(t_.U("ln").c_str(), buf, sizeof buf);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, n), "../some/where");
  EXPECT_EQ(st.st_mtim.tv_sec, kOldTime);
}

TEST_F(CopyUpTest, CopiesFifoType) {
  MakeFifo(t_.L("pipe"), 0620);
  ASSERT_OK(CopyUp(layers_, "pipe"));
  struct stat st = Lstat(t_.U("pipe"));
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0620u);
}

TEST_F(CopyUpTest, DoesNotCopyPrivateOverlayXattrs) {
  MakeFile(t_.L("f"), "x");
  SetXattr(t_.L("f"), "user.overlay.whiteout", "");
  SetXattr(t_.L("f"), "user.keep", "k");
  ASSERT_OK(CopyUp(layers_, "f"));
  // The lower's private marker is not copied; the only private xattr on the
  // copy is the origin marker copy-up writes itself.
  EXPECT_EQ(ListXattrs(t_.U("f")),
            (Strings{"user.keep", "user.overlay.acqfs.origin"}));
}

TEST_F(CopyUpTest, MarksCopyWithLowerInode) {
  MakeFile(t_.L("f"), "x");
  ASSERT_OK(CopyUp(layers_, "f"));
  auto origin = layers_.format.ReadOrigin(layers_.upper.root(), "f", "f");
  ASSERT_OK(origin);
  EXPECT_EQ(*origin, Lstat(t_.L("f")).st_ino);
}

TEST_F(CopyUpTest, RefusesToReplaceExistingUpperEntry) {
  MakeFile(t_.L("f"), "lower");
  MakeFile(t_.U("f"), "upper");
  Status s = CopyUp(layers_, "f");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EEXIST);
  EXPECT_EQ(ReadFile(t_.U("f")), "upper");
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(CopyUpTest, FailsWithoutUpperParentAndLeavesNothing) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/f"), "x");
  Status s = CopyUp(layers_, "d/f");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.err(), ENOENT);
  EXPECT_FALSE(Exists(t_.U("d")));
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(CopyUpTest, MissingLowerFails) {
  Status s = CopyUp(layers_, "nothing");
  EXPECT_EQ(s.err(), ENOENT);
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

// The descriptor numbers of this process's open files that have no name and
// were created in `dir` (an O_TMPFILE inode reads as "<dir>/#N (deleted)").
static std::vector<int> NamelessFilesIn(const std::string& dir) {
  std::vector<int> fds;
  for (const auto& name : ListDir("/proc/self/fd")) {
    char target[4096];
    std::string link = "/proc/self/fd/" + name;
    ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    std::string t(target, static_cast<size_t>(n));
    const std::string deleted = " (deleted)";
    if (t.rfind(dir + "/", 0) == 0 && t.size() > deleted.size() &&
        t.compare(t.size() - deleted.size(), deleted.size(), deleted) == 0)
      fds.push_back(std::stoi(name));
  }
  return fds;
}

TEST_F(CopyUpTest, UpperFileAppearsOnlyComplete) {
  std::string data = Pattern(200000);
  MakeFile(t_.L("f"), data, 0604);
  SetXattr(t_.L("f"), "user.a", "1");
  SetTimes(t_.L("f"), kOldTime, kOldNsec);
  int calls = 0;
  ScopedCopyUpHook hook([&](const std::string& rel) -> Status {
    ++calls;
    EXPECT_EQ(rel, "f");
    // Not yet published...
    EXPECT_FALSE(Exists(t_.U("f")));
    // ...but already complete, in a nameless (O_TMPFILE) inode of the work
    // area, which leaves no name behind if the daemon dies here.
    EXPECT_TRUE(ListDir(t_.tmp()).empty());
    std::vector<int> fds = NamelessFilesIn(t_.tmp());
    EXPECT_EQ(fds.size(), 1u);
    if (fds.size() == 1) {
      // The copy's own descriptor is write-only: read it through a new one.
      std::string p = "/proc/self/fd/" + std::to_string(fds[0]);
      int rfd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      EXPECT_GE(rfd, 0) << p;
      std::string got(data.size() + 1, '\0');
      ssize_t n = rfd >= 0 ? ::pread(rfd, got.data(), got.size(), 0) : -1;
      if (rfd >= 0) ::close(rfd);
      EXPECT_EQ(n, static_cast<ssize_t>(data.size()));
      EXPECT_TRUE(n > 0 && got.compare(0, static_cast<size_t>(n), data) == 0);
      struct stat st;
      EXPECT_EQ(::fstat(fds[0], &st), 0);
      EXPECT_EQ(st.st_mode & 07777, 0604u);
      EXPECT_EQ(st.st_mtim.tv_sec, kOldTime);
      EXPECT_EQ(st.st_nlink, 0u);
      char v[8];
      EXPECT_EQ(::fgetxattr(fds[0], "user.a", v, sizeof v), 1);
      EXPECT_EQ(v[0], '1');
    }
    return Ok();
  });
  ASSERT_OK(CopyUp(layers_, "f"));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(ReadFile(t_.U("f")) == data);
  EXPECT_EQ(Lstat(t_.U("f")).st_nlink, 1u);
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
  EXPECT_TRUE(NamelessFilesIn(t_.tmp()).empty());
}

TEST_F(CopyUpTest, UnsyncedCopyUpIsTheSameCopy) {
  std::string data = Pattern(70000);
  MakeFile(t_.L("f"), data, 0640);
  SetXattr(t_.L("f"), "user.a", "1");
  SetTimes(t_.L("f"), kOldTime, kOldNsec);
  layers_.sync_copy_up = false;
  ASSERT_OK(CopyUp(layers_, "f"));
  EXPECT_TRUE(ReadFile(t_.U("f")) == data);
  struct stat st = Lstat(t_.U("f"));
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtim.tv_sec, kOldTime);
  EXPECT_EQ(GetXattr(t_.U("f"), "user.a"), "1");
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(CopyUpTest, InterruptedCopyUpLeavesNoUpperFile) {
  MakeFile(t_.L("f"), Pattern(100000));
  int calls = 0;
  ScopedCopyUpHook hook([&](const std::string&) -> Status {
    ++calls;
    return Error::Of(EIO, "injected", "f");
  });
  Status s = CopyUp(layers_, "f");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EIO);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(Exists(t_.U("f")));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(CopyUpTest, InterruptedDirectoryCopyUpLeavesNoUpperDir) {
  MakeDir(t_.L("d"));
  ScopedCopyUpHook hook([&](const std::string&) -> Status {
    return Error::Of(ENOSPC, "injected", "d");
  });
  EXPECT_EQ(CopyUp(layers_, "d").err(), ENOSPC);
  EXPECT_FALSE(Exists(t_.U("d")));
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(CopyUpTest, CopyUpNeverChangesTheLower) {
  MakeFile(t_.L("f"), "content", 0640);
  SetXattr(t_.L("f"), "user.a", "1");
  MakeDir(t_.L("d"), 0750);
  SetXattr(t_.L("d"), "user.d", "2");
  MakeFile(t_.L("d/g"), "nested");
  MakeSymlink("f", t_.L("ln"));
  MakeFifo(t_.L("p"));
  SetTimes(t_.L("f"), kOldTime, kOldNsec);
  SetTimes(t_.L("d"), kOldTime, kOldNsec);
  SetTimes(t_.lower(), kOldTime, kOldNsec);
  auto before = DescribeTree(t_.lower());
  struct stat f_before = Lstat(t_.L("f"));
  for (const char* rel : {"f", "d", "d/g", "ln", "p"}) {
    ASSERT_OK(CopyUp(layers_, rel));
  }
  EXPECT_EQ(DescribeTree(t_.lower()), before);
  struct stat f_after = Lstat(t_.L("f"));
  EXPECT_EQ(f_after.st_ctim.tv_sec, f_before.st_ctim.tv_sec);
  EXPECT_EQ(f_after.st_ctim.tv_nsec, f_before.st_ctim.tv_nsec);
  // And the upper got independent copies: writing one leaves the lower.
  MakeFile(t_.U("d/g"), "changed");
  EXPECT_EQ(ReadFile(t_.L("d/g")), "nested");
}

TEST_F(CopyUpTest, CopyUpLeavesLowerAccessTime) {
  // atime == mtime in the past: under relatime any ordinary read would
  // update it. Copy-up reads with O_NOATIME.
  MakeFile(t_.L("f"), Pattern(5000));
  SetTimes(t_.L("f"), kOldTime, kOldNsec);
  ASSERT_OK(CopyUp(layers_, "f"));
  struct stat st = Lstat(t_.L("f"));
  EXPECT_EQ(st.st_atim.tv_sec, kOldTime);
  EXPECT_EQ(st.st_atim.tv_nsec, kOldNsec);
}

}  // namespace
}  // namespace acqfs
