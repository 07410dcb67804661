// Metadata and special files through the mount: symlinks, hard links,
// chmod/chown/utimensat, user.* xattrs, fifos and unix sockets, and the
// modes new entries get (the caller's umask, compared with ext4).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

using Symlink = MountTest;
using HardLink = MountTest;
using Attr = MountTest;
using Xattr = MountTest;
using SpecialFile = MountTest;
using Names = std::vector<std::string>;

Names ListOf(const std::string& dir) {
  Names names;
  EXPECT_TRUE(ListDir(dir, &names));
  return names;
}

Names XattrsOf(const std::string& path) {
  Names names;
  EXPECT_TRUE(ListXattrs(path, &names));
  return names;
}

int SetX(const std::string& path, const std::string& name,
         const std::string& value, int flags = 0) {
  return ::lsetxattr(path.c_str(), name.c_str(), value.data(), value.size(),
                     flags);
}

TEST_F(Symlink, CreateReadlinkAndFollow) {
  ASSERT_SYS_OK(::symlink("docs/a.txt", M("ln").c_str()));
  EXPECT_EQ(ReadLink(M("ln")), "docs/a.txt");
  const struct stat st = StatM("ln");
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_size, 10);
  EXPECT_EQ(ContentOf(M("ln")), lower::kFileAContent);
  EXPECT_SYS_ERRNO(::symlink("x", M("ln").c_str()), EEXIST);
  EXPECT_EQ(ReadLink(U("ln")), "docs/a.txt");
}

TEST_F(Symlink, LowerSymlinksReadBack) {
  EXPECT_EQ(ReadLink(M(lower::kLinkToFile)), lower::kLinkToFileTarget);
  EXPECT_EQ(ReadLink(M(lower::kDanglingLink)), lower::kDanglingLinkTarget);
  EXPECT_EQ(ReadLink(M(lower::kLinkToDir)), "../src/lib");
  char buf[16];
  EXPECT_SYS_ERRNO(::readlink(M(lower::kFileA).c_str(), buf, sizeof(buf)),
                   EINVAL);
}

TEST_F(HardLink, OfLowerFileSharesInodeAndData) {
  ASSERT_SYS_OK(::link(M(lower::kFileA).c_str(), M("docs/a-link.txt").c_str()));
  const struct stat a = StatM(lower::kFileA), b = StatM("docs/a-link.txt");
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 2u);
  EXPECT_EQ(b.st_nlink, 2u);
  ASSERT_TRUE(WriteFile(M("docs/a-link.txt"), "changed\n"));
  EXPECT_EQ(ContentOf(M(lower::kFileA)), "changed\n");
  ASSERT_TRUE(AppendFile(M(lower::kFileA), "more\n"));
  EXPECT_EQ(ContentOf(M("docs/a-link.txt")), "changed\nmore\n");
  EXPECT_EQ(ContentOf(L(lower::kFileA)), lower::kFileAContent);
  ASSERT_SYS_OK(::unlink(M(lower::kFileA).c_str()));
  EXPECT_EQ(StatM("docs/a-link.txt").st_nlink, 1u);
  EXPECT_EQ(ContentOf(M("docs/a-link.txt")), "changed\nmore\n");
}

TEST_F(HardLink, OfUpperFile) {
  ASSERT_TRUE(WriteFile(M("u.txt"), "u\n"));
  ASSERT_SYS_OK(::link(M("u.txt").c_str(), M("u2.txt").c_str()));
  EXPECT_EQ(StatM("u.txt").st_ino, StatM("u2.txt").st_ino);
  EXPECT_EQ(StatM("u2.txt").st_nlink, 2u);
  EXPECT_SYS_ERRNO(::link(M("u.txt").c_str(), M(lower::kFileA).c_str()),
                   EEXIST);
}

TEST_F(Attr, ChmodLowerFileAndDirectory) {
  ASSERT_SYS_OK(::chmod(M(lower::kFileA).c_str(), 0600));
  EXPECT_EQ(StatM(lower::kFileA).st_mode & 07777, 0600u);
  ASSERT_SYS_OK(::chmod(M(lower::kDocsDir).c_str(), 0711));
  EXPECT_EQ(StatM(lower::kDocsDir).st_mode & 07777, 0711u);
  ASSERT_SYS_OK(::chmod(M(lower::kScript).c_str(), 04755));
  EXPECT_EQ(StatM(lower::kScript).st_mode & 07777, 04755u);
  EXPECT_EQ(StatL(lower::kFileA).st_mode & 07777, 0644u);
  EXPECT_EQ(StatL(lower::kDocsDir).st_mode & 07777, 0755u);
  EXPECT_EQ(ContentOf(M(lower::kFileA)), lower::kFileAContent);
}

TEST_F(Attr, ChownAsRoot) {
  ASSERT_SYS_OK(::chown(M(lower::kFileA).c_str(), 1111, 2222));
  EXPECT_EQ(StatM(lower::kFileA).st_uid, 1111u);
  EXPECT_EQ(StatM(lower::kFileA).st_gid, 2222u);
  ASSERT_SYS_OK(::lchown(M(lower::kLinkToFile).c_str(), 3333, 4444));
  EXPECT_EQ(StatM(lower::kLinkToFile).st_uid, 3333u);
  EXPECT_EQ(StatM(lower::kFileA).st_uid, 1111u) << "lchown followed the link";
  ASSERT_SYS_OK(::chown(M(lower::kDocsDir).c_str(), 5555, -1));
  EXPECT_EQ(StatM(lower::kDocsDir).st_uid, 5555u);
  EXPECT_EQ(StatM(lower::kDocsDir).st_gid, 0u);
  EXPECT_EQ(StatU(lower::kFileA).st_uid, 1111u);
  EXPECT_EQ(StatL(lower::kFileA).st_uid, 0u);
}

TEST_F(Attr, UtimensatSetsExactTimes) {
  const timespec times[2] = {{1000000000, 123456789}, {1100000000, 987654321}};
  ASSERT_SYS_OK(::utimensat(AT_FDCWD, M(lower::kFileA).c_str(), times, 0));
  struct stat st = StatM(lower::kFileA);
  EXPECT_EQ(st.st_atim.tv_sec, 1000000000);
  EXPECT_EQ(st.st_atim.tv_nsec, 123456789);
  EXPECT_EQ(st.st_mtim.tv_sec, 1100000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 987654321);
  const timespec omit_atime[2] = {{0, UTIME_OMIT}, {1200000000, 5}};
  ASSERT_SYS_OK(::utimensat(AT_FDCWD, M(lower::kFileA).c_str(), omit_atime, 0));
  st = StatM(lower::kFileA);
  EXPECT_EQ(st.st_atim.tv_sec, 1000000000);
  EXPECT_EQ(st.st_mtim.tv_sec, 1200000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 5);
  ASSERT_SYS_OK(::utimensat(AT_FDCWD, M(lower::kLinkToFile).c_str(), times,
                            AT_SYMLINK_NOFOLLOW));
  EXPECT_EQ(StatM(lower::kLinkToFile).st_mtim.tv_sec, 1100000000);
  EXPECT_EQ(StatM(lower::kFileA).st_mtim.tv_sec, 1200000000);
  ASSERT_SYS_OK(::utimensat(AT_FDCWD, M(lower::kDocsDir).c_str(), times, 0));
  EXPECT_EQ(StatM(lower::kDocsDir).st_mtim.tv_nsec, 987654321);
}

TEST_F(Attr, WriteUpdatesMtimeAndCtime) {
  const struct stat before = StatM(lower::kFileB);
  ASSERT_TRUE(AppendFile(M(lower::kFileB), "x"));
  const struct stat after = StatM(lower::kFileB);
  EXPECT_GT(after.st_mtim.tv_sec, before.st_mtim.tv_sec)
      << "the lower file is an hour old; a write must set mtime to now";
  EXPECT_GE(after.st_ctim.tv_sec, after.st_mtim.tv_sec);
}

TEST_F(Attr, MtimeSeenThroughTheMountIsPersisted) {
  ASSERT_TRUE(WriteFile(M("new.txt"), "data\n"));
  ASSERT_TRUE(AppendFile(M(lower::kFileA), "more\n"));
  const struct stat created = StatM("new.txt");
  const struct stat appended = StatM(lower::kFileA);
  ASSERT_TRUE(sandbox().Unmount());
  const struct stat created_upper = StatU("new.txt");
  const struct stat appended_upper = StatU(lower::kFileA);
  EXPECT_EQ(created.st_mtim.tv_sec, created_upper.st_mtim.tv_sec);
  EXPECT_EQ(created.st_mtim.tv_nsec, created_upper.st_mtim.tv_nsec)
      << "new.txt: the mount showed one mtime, the upper layer kept another";
  EXPECT_EQ(appended.st_mtim.tv_sec, appended_upper.st_mtim.tv_sec);
  EXPECT_EQ(appended.st_mtim.tv_nsec, appended_upper.st_mtim.tv_nsec)
      << "docs/a.txt: the mount showed one mtime, the upper layer kept another";
}

TEST_F(Xattr, SetGetListRemoveInTheUserNamespace) {
  const std::string path = M(lower::kXattrFile);
  std::string value;
  ASSERT_TRUE(GetXattr(path, lower::kXattrName, &value));
  EXPECT_EQ(value, lower::kXattrValue);
  ASSERT_SYS_OK(SetX(path, "user.new", "v1"));
  ASSERT_TRUE(GetXattr(path, "user.new", &value));
  EXPECT_EQ(value, "v1");
  EXPECT_EQ(XattrsOf(path), (Names{"user.new", "user.test"}));
  EXPECT_SYS_ERRNO(SetX(path, "user.new", "v2", XATTR_CREATE), EEXIST);
  EXPECT_SYS_ERRNO(SetX(path, "user.none", "v", XATTR_REPLACE), ENODATA);
  ASSERT_SYS_OK(SetX(path, "user.new", "v2", XATTR_REPLACE));
  ASSERT_SYS_OK(::removexattr(path.c_str(), lower::kXattrName));
  EXPECT_SYS_ERRNO(::getxattr(path.c_str(), lower::kXattrName, nullptr, 0),
                   ENODATA);
  EXPECT_SYS_ERRNO(::removexattr(path.c_str(), lower::kXattrName), ENODATA);
  EXPECT_EQ(XattrsOf(path), Names{"user.new"});
  ASSERT_TRUE(GetXattr(L(lower::kXattrFile), lower::kXattrName, &value));
  EXPECT_EQ(value, lower::kXattrValue);
  ASSERT_TRUE(GetXattr(U(lower::kXattrFile), "user.new", &value));
  EXPECT_EQ(value, "v2");
}

TEST_F(Xattr, OnLowerDirectoryAndNewFile) {
  ASSERT_SYS_OK(SetX(M(lower::kDocsDir), "user.dir", "d"));
  std::string value;
  ASSERT_TRUE(GetXattr(M(lower::kDocsDir), "user.dir", &value));
  EXPECT_EQ(value, "d");
  EXPECT_EQ(ListOf(M(lower::kDocsDir)).size(), 4u)
      << "copying up a directory must keep its children";
  ASSERT_TRUE(WriteFile(M("x.bin"), ""));
  const std::string binary("\0\1\2\xff", 4);
  ASSERT_SYS_OK(SetX(M("x.bin"), "user.bin", binary));
  ASSERT_TRUE(GetXattr(M("x.bin"), "user.bin", &value));
  EXPECT_EQ(value, binary);
}

TEST_F(Xattr, OverlayInternalsAreHidden) {
  CommandResult r =
      RunShell("rm -rf src && mkdir src", 60, sandbox().mountpoint());
  ASSERT_TRUE(r.ok()) << r.Describe();
  for (const auto& name : XattrsOf(M("src"))) {
    EXPECT_EQ(name.find(".overlay."), std::string::npos) << name;
  }
  EXPECT_SYS_ERRNO(
      ::getxattr(M("src").c_str(), "trusted.overlay.opaque", nullptr, 0),
      ENODATA);
  EXPECT_EQ(SetX(M("src"), "trusted.overlay.opaque", "n"), -1)
      << "the mount must not let callers forge overlay metadata";
  std::string value;
  ASSERT_TRUE(GetXattr(U("src"), "trusted.overlay.opaque", &value));
  EXPECT_EQ(value, "y");
}

TEST_F(SpecialFile, MkfifoPassesData) {
  ASSERT_SYS_OK(::mkfifo(M("new.fifo").c_str(), 0640));
  EXPECT_TRUE(S_ISFIFO(StatM("new.fifo").st_mode));
  EXPECT_EQ(StatM("new.fifo").st_mode & 07777, 0640u);
  ScopedFd reader(::open(M("new.fifo").c_str(), O_RDONLY | O_NONBLOCK));
  ASSERT_SYS_OK(reader.get());
  ScopedFd writer(::open(M("new.fifo").c_str(), O_WRONLY | O_NONBLOCK));
  ASSERT_SYS_OK(writer.get());
  ASSERT_EQ(::write(writer.get(), "pong", 4), 4);
  char buf[8] = {};
  EXPECT_EQ(::read(reader.get(), buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf), "pong");
  struct stat st;
  ASSERT_TRUE(Lstat(U("new.fifo"), &st));
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(SpecialFile, UnixSocketBindAndConnect) {
  const std::string path = M("docs/sock");
  ScopedFd server = BindUnixSocket(path);
  ASSERT_TRUE(server.valid()) << "bind " << path << ": " << ErrnoName(errno);
  EXPECT_TRUE(S_ISSOCK(StatM("docs/sock").st_mode));
  EXPECT_TRUE(UnixSocketRoundTrip(server.get(), path, "over acqfs"));
  struct stat st;
  ASSERT_TRUE(Lstat(U("docs/sock"), &st));
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_SYS_OK(::unlink(path.c_str()));
}

TEST_F(SpecialFile, DeviceNodesAreInertOnNodevMount) {
  ASSERT_SYS_OK(::mknod(M("null").c_str(), S_IFCHR | 0666, makedev(1, 3)));
  EXPECT_TRUE(S_ISCHR(StatM("null").st_mode));
  EXPECT_SYS_ERRNO(::open(M("null").c_str(), O_RDONLY), EACCES);
}

TEST_F(SpecialFile, WhiteoutDeviceCannotBeCreated) {
  // A 0/0 character device is the upper layer's whiteout; creating one
  // through the mount would make the name vanish (kernel overlayfs: EPERM).
  EXPECT_SYS_ERRNO(::mknod(M("wh").c_str(), S_IFCHR | 0600, makedev(0, 0)),
                   EPERM);
  EXPECT_SYS_ERRNO(
      ::mknod(M(lower::kFileA).c_str(), S_IFCHR | 0600, makedev(0, 0)), EEXIST);
  EXPECT_EQ(ContentOf(M(lower::kFileA)), lower::kFileAContent);
}

}  // namespace
}  // namespace acqfs::test
