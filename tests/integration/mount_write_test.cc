// Writing through the mount: create/write/truncate/append, unlink and
// whiteouts, directories (mkdir/rmdir, rm -rf and re-creation), and the data
// paths fallocate, fsync, shared mmap and copy_file_range.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

using Write = MountTest;
using Remove = MountTest;
using Dirs = MountTest;
using DataPath = MountTest;

using Names = std::vector<std::string>;

Names ListOf(const std::string& dir) {
  Names names;
  EXPECT_TRUE(ListDir(dir, &names));
  return names;
}

TEST_F(Write, CreateWriteReadTruncate) {
  const std::string path = M("new.txt");
  ScopedFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0640));
  ASSERT_SYS_OK(fd.get());
  ASSERT_EQ(::write(fd.get(), "hello world", 11), 11);
  char buf[32] = {};
  ASSERT_EQ(::pread(fd.get(), buf, sizeof(buf), 0), 11);
  EXPECT_STREQ(buf, "hello world");
  ASSERT_SYS_OK(::ftruncate(fd.get(), 5));
  EXPECT_EQ(ContentOf(path), "hello");
  ASSERT_SYS_OK(::ftruncate(fd.get(), 8));
  EXPECT_EQ(ContentOf(path), std::string("hello\0\0\0", 8));
  ASSERT_SYS_OK(fd.Close());
  EXPECT_EQ(StatM("new.txt").st_mode & 07777, 0640u);
  EXPECT_EQ(ContentOf(U("new.txt")), std::string("hello\0\0\0", 8));
  EXPECT_SYS_ERRNO(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0640),
                   EEXIST);
}

TEST_F(Write, TruncateLowerFileCopiesUpAndKeepsLower) {
  ASSERT_SYS_OK(::truncate(M(lower::kFileB).c_str(), 2));
  EXPECT_EQ(ContentOf(M(lower::kFileB)), "br");
  EXPECT_EQ(StatM(lower::kFileB).st_size, 2);
  EXPECT_EQ(ContentOf(U(lower::kFileB)), "br");
  EXPECT_EQ(ContentOf(L(lower::kFileB)), lower::kFileBContent);
}

TEST_F(Write, OpenWithTruncEmptiesLowerFile) {
  ScopedFd fd(::open(M(lower::kFileA).c_str(), O_WRONLY | O_TRUNC));
  ASSERT_SYS_OK(fd.get());
  ASSERT_SYS_OK(fd.Close());
  EXPECT_EQ(ContentOf(M(lower::kFileA)), "");
  EXPECT_EQ(ContentOf(L(lower::kFileA)), lower::kFileAContent);
}

TEST_F(Write, AppendToLowerFile) {
  ASSERT_TRUE(AppendFile(M(lower::kFileA), "more\n"));
  ASSERT_TRUE(AppendFile(M(lower::kFileA), "again\n"));
  EXPECT_EQ(ContentOf(M(lower::kFileA)), "alpha\nmore\nagain\n");
  EXPECT_EQ(ContentOf(L(lower::kFileA)), lower::kFileAContent);
}

TEST_F(Write, OverwriteInsideLowerFileKeepsTheRest) {
  ScopedFd fd(::open(M(lower::kFileA).c_str(), O_WRONLY));
  ASSERT_SYS_OK(fd.get());
  ASSERT_EQ(::pwrite(fd.get(), "LP", 2, 1), 2);
  ASSERT_SYS_OK(fd.Close());
  EXPECT_EQ(ContentOf(M(lower::kFileA)), "aLPha\n");
}

TEST_F(Write, RootCanAppendToReadOnlyLowerFile) {
  // Root may write a 0444 file; the mode must still come through.
  EXPECT_EQ(StatM(lower::kReadOnlyFile).st_mode & 07777, 0444u);
  ASSERT_TRUE(AppendFile(M(lower::kReadOnlyFile), "root can\n"));
  EXPECT_EQ(ContentOf(M(lower::kReadOnlyFile)), "read only\nroot can\n");
  EXPECT_EQ(StatM(lower::kReadOnlyFile).st_mode & 07777, 0444u);
}

TEST_F(Remove, UnlinkLowerFileLeavesWhiteout) {
  ASSERT_SYS_OK(::unlink(M(lower::kFileA).c_str()));
  EXPECT_EQ(LstatErrno(M(lower::kFileA)), ENOENT);
  EXPECT_EQ(ListOf(M(lower::kDocsDir)),
            (Names{"b.txt", "private.txt", "readonly.txt"}));
  EXPECT_TRUE(IsWhiteout(U(lower::kFileA)));
  EXPECT_EQ(ContentOf(L(lower::kFileA)), lower::kFileAContent);
  EXPECT_SYS_ERRNO(::unlink(M(lower::kFileA).c_str()), ENOENT);
  // The name can be used again, without the lower content showing through.
  ASSERT_TRUE(WriteFile(M(lower::kFileA), "reborn\n"));
  EXPECT_EQ(ContentOf(M(lower::kFileA)), "reborn\n");
}

TEST_F(Remove, UnlinkUpperOnlyFile) {
  ASSERT_TRUE(WriteFile(M("docs/upper.txt"), "upper\n"));
  ASSERT_SYS_OK(::unlink(M("docs/upper.txt").c_str()));
  EXPECT_EQ(LstatErrno(M("docs/upper.txt")), ENOENT);
  EXPECT_EQ(ListOf(M(lower::kDocsDir)),
            (Names{"a.txt", "b.txt", "private.txt", "readonly.txt"}));
}

TEST_F(Remove, UnlinkCopiedUpFileHidesTheLower) {
  ASSERT_TRUE(AppendFile(M(lower::kFileB), "x"));
  ASSERT_SYS_OK(::unlink(M(lower::kFileB).c_str()));
  EXPECT_EQ(LstatErrno(M(lower::kFileB)), ENOENT);
  EXPECT_TRUE(IsWhiteout(U(lower::kFileB)));
}

TEST_F(Remove, UnlinkOneHardLinkKeepsTheOther) {
  ASSERT_SYS_OK(::unlink(M(lower::kHardLinkA).c_str()));
  EXPECT_EQ(LstatErrno(M(lower::kHardLinkA)), ENOENT);
  EXPECT_EQ(ContentOf(M(lower::kHardLinkB)), lower::kHardLinkContent);
}

TEST_F(Remove, UnlinkSymlinkAndFifo) {
  ASSERT_SYS_OK(::unlink(M(lower::kLinkToDir).c_str()));
  ASSERT_SYS_OK(::unlink(M(lower::kFifo).c_str()));
  EXPECT_EQ(LstatErrno(M(lower::kLinkToDir)), ENOENT);
  EXPECT_EQ(LstatErrno(M(lower::kFifo)), ENOENT);
  EXPECT_EQ(ListOf(M(lower::kLibDir)), (Names{".hidden", "core.txt", "util"}))
      << "unlinking a symlink to a directory must not touch its target";
}

TEST_F(Dirs, MkdirAndRmdir) {
  ASSERT_SYS_OK(::mkdir(M("newdir").c_str(), 0750));
  EXPECT_EQ(StatM("newdir").st_mode & 07777, 0750u);
  EXPECT_SYS_ERRNO(::mkdir(M("newdir").c_str(), 0750), EEXIST);
  EXPECT_SYS_ERRNO(::mkdir(M(lower::kDocsDir).c_str(), 0750), EEXIST);
  ASSERT_TRUE(WriteFile(M("newdir/f"), "f"));
  EXPECT_SYS_ERRNO(::rmdir(M("newdir").c_str()), ENOTEMPTY);
  ASSERT_SYS_OK(::unlink(M("newdir/f").c_str()));
  ASSERT_SYS_OK(::rmdir(M("newdir").c_str()));
  EXPECT_EQ(LstatErrno(M("newdir")), ENOENT);
}

TEST_F(Dirs, RmdirLowerDirectoryAfterDeletingItsChildren) {
  const std::string deep = "src/lib/util/deep";
  EXPECT_SYS_ERRNO(::rmdir(M(deep).c_str()), ENOTEMPTY);
  ASSERT_SYS_OK(::unlink(M(lower::kDeepFile).c_str()));
  ASSERT_SYS_OK(::rmdir(M(deep).c_str()));
  EXPECT_EQ(LstatErrno(M(deep)), ENOENT);
  EXPECT_EQ(ListOf(M("src/lib/util")), Names{"helper.txt"});
  EXPECT_TRUE(IsWhiteout(U(deep)));
  ASSERT_SYS_OK(::mkdir(M(deep).c_str(), 0755));
  EXPECT_EQ(ListOf(M(deep)), Names{}) << "the old children came back";
  EXPECT_TRUE(Exists(L(lower::kDeepFile)));
}

TEST_F(Dirs, RmdirEmptyLowerDirectory) {
  ASSERT_SYS_OK(::rmdir(M(lower::kEmptyDir).c_str()));
  EXPECT_EQ(LstatErrno(M(lower::kEmptyDir)), ENOENT);
  EXPECT_TRUE(IsWhiteout(U(lower::kEmptyDir)));
}

TEST_F(Dirs, RmRfLowerDirectoryAndRecreateWithDifferentContent) {
  CommandResult r = RunShell(
      "rm -rf src && mkdir src && echo new > src/only.txt && ls -A src", 60,
      sandbox().mountpoint());
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, "only.txt\n");
  EXPECT_EQ(ListOf(M("src")), Names{"only.txt"});
  EXPECT_EQ(ContentOf(M("src/only.txt")), "new\n");
  EXPECT_EQ(LstatErrno(M("src/lib/core.txt")), ENOENT);
  EXPECT_EQ(LstatErrno(M("src/top.txt")), ENOENT);
  std::string opaque;
  EXPECT_TRUE(GetXattr(U("src"), "trusted.overlay.opaque", &opaque));
  EXPECT_EQ(opaque, "y");
  EXPECT_EQ(ContentOf(L("src/top.txt")), "top\n");
}

TEST_F(Dirs, RecreatedDirectorySurvivesRemount) {
  CommandResult r = RunShell("rm -rf src && mkdir src && touch src/x", 60,
                             sandbox().mountpoint());
  ASSERT_TRUE(r.ok()) << r.Describe();
  ASSERT_TRUE(sandbox().Unmount());
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_EQ(ListOf(M("src")), Names{"x"});
}

TEST_F(DataPath, FallocateExtendsNewAndLowerFiles) {
  ScopedFd fd(::open(M("falloc.bin").c_str(), O_RDWR | O_CREAT, 0644));
  ASSERT_SYS_OK(fd.get());
  ASSERT_SYS_OK(::fallocate(fd.get(), 0, 0, 1 << 20));
  EXPECT_EQ(StatM("falloc.bin").st_size, 1 << 20);
  EXPECT_EQ(ContentOf(M("falloc.bin")), std::string(1 << 20, '\0'));
  ScopedFd lower_fd(::open(M(lower::kFileA).c_str(), O_RDWR));
  ASSERT_SYS_OK(lower_fd.get());
  ASSERT_SYS_OK(::fallocate(lower_fd.get(), 0, 0, 65536));
  EXPECT_EQ(StatM(lower::kFileA).st_size, 65536);
  EXPECT_EQ(ContentOf(M(lower::kFileA)).substr(0, 6), lower::kFileAContent);
  EXPECT_EQ(StatL(lower::kFileA).st_size, 6);
}

TEST_F(DataPath, FsyncAndFdatasyncSucceed) {
  ScopedFd fd(::open(M("synced.txt").c_str(), O_WRONLY | O_CREAT, 0644));
  ASSERT_SYS_OK(fd.get());
  ASSERT_EQ(::write(fd.get(), "data", 4), 4);
  EXPECT_SYS_OK(::fsync(fd.get()));
  EXPECT_SYS_OK(::fdatasync(fd.get()));
  ScopedFd ro(::open(M(lower::kFileB).c_str(), O_RDONLY));
  EXPECT_SYS_OK(::fsync(ro.get()));
  ScopedFd dir(::open(M(lower::kDocsDir).c_str(), O_RDONLY | O_DIRECTORY));
  EXPECT_SYS_OK(::fsync(dir.get()));
  EXPECT_EQ(ContentOf(U("synced.txt")), "data");
}

TEST_F(DataPath, SharedWritableMmapReachesTheFile) {
  ScopedFd fd(::open(M(lower::kFileA).c_str(), O_RDWR));
  ASSERT_SYS_OK(fd.get());
  void* map =
      ::mmap(nullptr, 6, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(map, MAP_FAILED) << ErrnoName(errno);
  EXPECT_EQ(std::string(static_cast<char*>(map), 6), lower::kFileAContent);
  std::memcpy(map, "ALPHA", 5);
  EXPECT_SYS_OK(::msync(map, 6, MS_SYNC));
  EXPECT_SYS_OK(::munmap(map, 6));
  ASSERT_SYS_OK(fd.Close());
  EXPECT_EQ(ContentOf(M(lower::kFileA)), "ALPHA\n");
  EXPECT_EQ(ContentOf(L(lower::kFileA)), lower::kFileAContent);
  ASSERT_TRUE(sandbox().Unmount());
  EXPECT_EQ(ContentOf(U(lower::kFileA)), "ALPHA\n");
}

TEST_F(DataPath, SharedMmapOfGrownNewFile) {
  ScopedFd fd(::open(M("mapped.bin").c_str(), O_RDWR | O_CREAT, 0644));
  ASSERT_SYS_OK(fd.get());
  ASSERT_SYS_OK(::ftruncate(fd.get(), 8192));
  char* map = static_cast<char*>(
      ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
  ASSERT_NE(map, MAP_FAILED) << ErrnoName(errno);
  std::memcpy(map + 4096, "page two", 8);
  EXPECT_SYS_OK(::msync(map, 8192, MS_SYNC));
  EXPECT_SYS_OK(::munmap(map, 8192));
  char buf[8];
  ASSERT_EQ(::pread(fd.get(), buf, 8, 4096), 8);
  EXPECT_EQ(std::string(buf, 8), "page two");
}

TEST_F(DataPath, CopyFileRangeCopiesBytes) {
  ScopedFd in(::open(M(lower::kLargeFile).c_str(), O_RDONLY));
  ScopedFd out(::open(M("copy.bin").c_str(), O_RDWR | O_CREAT, 0644));
  ASSERT_SYS_OK(in.get());
  ASSERT_SYS_OK(out.get());
  const size_t length = 1 << 20;
  loff_t off_in = (1 << 20) - 100, off_out = 0;
  size_t copied = 0;
  while (copied < length) {
    ssize_t n = ::copy_file_range(in.get(), &off_in, out.get(), &off_out,
                                  length - copied, 0);
    ASSERT_GT(n, 0) << ErrnoName(errno);
    copied += static_cast<size_t>(n);
  }
  std::string want(length, '\0'), got(length, '\0');
  ScopedFd lower_fd(::open(L(lower::kLargeFile).c_str(), O_RDONLY));
  ASSERT_EQ(::pread(lower_fd.get(), want.data(), length, (1 << 20) - 100),
            static_cast<ssize_t>(length));
  ASSERT_EQ(::pread(out.get(), got.data(), length, 0),
            static_cast<ssize_t>(length));
  EXPECT_TRUE(want == got) << "copy_file_range produced different bytes";
}

TEST_F(DataPath, CopyUpOfLargeFileKeepsItsContent) {
  ASSERT_TRUE(AppendFile(M(lower::kLargeFile), "Z"));
  EXPECT_EQ(static_cast<uint64_t>(StatM(lower::kLargeFile).st_size),
            lower::kLargeFileSize + 1);
  ASSERT_SYS_OK(::truncate(M(lower::kLargeFile).c_str(),
                           static_cast<off_t>(lower::kLargeFileSize)));
  SnapshotOptions options;
  options.mtime = false;
  TreeSnapshot lower_view = Snapshot(L(lower::kLargeFile), options);
  TreeSnapshot mount_view = Snapshot(M(lower::kLargeFile), options);
  EXPECT_TRUE(SnapshotsEqual(lower_view, mount_view));
}

}  // namespace
}  // namespace acqfs::test
