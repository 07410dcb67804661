// Tests of the Overlay engine's attribute operations: SetAttr (chmod,
// truncate, utimes) and the xattr calls, including the hiding of the
// overlay's private xattrs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>

#include "fs/overlay.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs::test::DescribeTree;
using acqfs::test::Exists;
using acqfs::test::GetXattr;
using acqfs::test::ListDir;
using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::ReadFile;
using acqfs::test::SetTimes;
using acqfs::test::SetXattr;
using Strings = std::vector<std::string>;

class OverlaySetAttr : public acqfs::test::OverlayTest {};
class OverlayXattr : public acqfs::test::OverlayTest {};

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// ----------------------------------------------------------------- setattr

TEST_F(OverlaySetAttr, ChmodOfLowerFileCopiesUpAndLeavesLower) {
  MakeFile(t_.L("f"), "data", 0644);
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  SetAttrRequest req;
  req.set_mode = true;
  req.mode = 0600;
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->SetAttr(f, req, -1));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_ino, Lstat(t_.L("f")).st_ino);
  EXPECT_EQ(Lstat(t_.U("f")).st_mode & 07777, 0600u);
  EXPECT_EQ(ReadFile(t_.U("f")), "data");
  ASSERT_OK_AND_ASSIGN(struct stat got, ov_->GetAttr(f));
  EXPECT_EQ(got.st_mode & 07777, 0600u);
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
}

TEST_F(OverlaySetAttr, TruncateOfLowerFileCopiesUpAndLeavesLower) {
  MakeFile(t_.L("f"), "0123456789");
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  SetAttrRequest req;
  req.set_size = true;
  req.size = 4;
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->SetAttr(f, req, -1));
  EXPECT_EQ(st.st_size, 4);
  EXPECT_EQ(ReadFile(t_.U("f")), "0123");
  EXPECT_EQ(ReadVia(f), "0123");
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
}

TEST_F(OverlaySetAttr, TruncateGrowsWithZeros) {
  MakeFile(t_.L("f"), "ab");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  SetAttrRequest req;
  req.set_size = true;
  req.size = 5;
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->SetAttr(f, req, -1));
  EXPECT_EQ(st.st_size, 5);
  EXPECT_EQ(ReadFile(t_.U("f")), std::string("ab\0\0\0", 5));
}

TEST_F(OverlaySetAttr, UtimesOfLowerFileCopiesUpAndLeavesLower) {
  MakeFile(t_.L("f"), "data");
  SetTimes(t_.L("f"), 1000000000, 0);
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  SetAttrRequest req;
  req.set_atime = true;
  req.atime = {1500000000, 7};
  req.set_mtime = true;
  req.mtime = {1600000000, 123};
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->SetAttr(f, req, -1));
  EXPECT_EQ(st.st_mtim.tv_sec, 1600000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 123);
  EXPECT_EQ(st.st_atim.tv_sec, 1500000000);
  struct stat ust = Lstat(t_.U("f"));
  EXPECT_EQ(ust.st_mtim.tv_sec, 1600000000);
  EXPECT_EQ(ust.st_atim.tv_sec, 1500000000);
  EXPECT_EQ(Lstat(t_.L("f")).st_mtim.tv_sec, 1000000000);
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
}

TEST_F(OverlaySetAttr, MtimeOnlyLeavesAtime) {
  MakeFile(t_.L("f"), "data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  SetAttrRequest a;
  a.set_atime = true;
  a.atime = {1400000000, 0};
  ASSERT_OK(ov_->SetAttr(f, a, -1));
  SetAttrRequest m;
  m.set_mtime = true;
  m.mtime = {1600000000, 0};
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->SetAttr(f, m, -1));
  EXPECT_EQ(st.st_atim.tv_sec, 1400000000);
  EXPECT_EQ(st.st_mtim.tv_sec, 1600000000);
}

TEST_F(OverlaySetAttr, ChmodOfLowerDirCopiesUpDirOnly) {
  MakeDir(t_.L("d"), 0755);
  MakeFile(t_.L("d/child"), "c");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  SetAttrRequest req;
  req.set_mode = true;
  req.mode = 0700;
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->SetAttr(d, req, -1));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(Lstat(t_.U("d")).st_mode & 07777, 0700u);
  EXPECT_EQ(Lstat(t_.L("d")).st_mode & 07777, 0755u);
  EXPECT_TRUE(ListDir(t_.U("d")).empty());
  EXPECT_EQ(ReadDirNames(d), (Strings{"child"}));
}

TEST_F(OverlaySetAttr, ChownOfLowerFileCopiesUpWhenPrivileged) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "chown needs root (the tests run as root, as CI does)";
  MakeFile(t_.L("f"), "data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  SetAttrRequest req;
  req.set_uid = req.set_gid = true;
  req.uid = 4321;
  req.gid = 8765;
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->SetAttr(f, req, -1));
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(Lstat(t_.U("f")).st_gid, 8765u);
  EXPECT_EQ(Lstat(t_.L("f")).st_uid, ::geteuid());
}

TEST_F(OverlaySetAttr, ChmodOfUnlinkedFileOpenFromLowerLeavesLower) {
  // open(O_RDONLY) reads the lower copy; after unlink the handle keeps the
  // file alive, and fchmod/futimens on it reach SetAttr without a handle
  // (the kernel passes one only for truncate). The lower must not change.
  MakeFile(t_.L("f"), "data", 0644);
  SetTimes(t_.L("f"), 1000000000, 0);
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  bool from_lower = false;
  ASSERT_OK_AND_ASSIGN(FileLease fd, OpenVia(f, O_RDONLY, &from_lower));
  ASSERT_TRUE(from_lower);
  ASSERT_OK(ov_->Unlink(root(), "f"));
  SetAttrRequest req;
  req.set_mode = true;
  req.mode = 0600;
  req.set_mtime = true;
  req.mtime = {1600000000, 0};
  (void)ov_->SetAttr(f, req, -1);  // may fail or copy; must not write lower
  EXPECT_EQ(Lstat(t_.L("f")).st_mode & 07777, 0644u);
  EXPECT_EQ(Lstat(t_.L("f")).st_mtim.tv_sec, 1000000000);
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
  ov_->ReleaseOpen(f);
}

TEST_F(OverlaySetAttr, SetAttrWithLowerHandleOfUnlinkedFileLeavesLower) {
  // The same through the handle's own descriptor (the lower, read-only).
  MakeFile(t_.L("f"), "0123456789", 0644);
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  bool from_lower = false;
  ASSERT_OK_AND_ASSIGN(FileLease fd, OpenVia(f, O_RDONLY, &from_lower));
  ASSERT_TRUE(from_lower);
  ASSERT_OK(ov_->Unlink(root(), "f"));
  SetAttrRequest req;
  req.set_mode = true;
  req.mode = 0600;
  (void)ov_->SetAttr(f, req, fd.get());
  EXPECT_EQ(Lstat(t_.L("f")).st_mode & 07777, 0644u);
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
  ov_->ReleaseOpen(f);
}

TEST_F(OverlaySetAttr, ChmodOfOpenLowerFileReplacedByRenameLeavesLower) {
  // As above, but the open file loses its name to a rename over it.
  MakeFile(t_.L("victim"), "v", 0644);
  MakeFile(t_.L("other"), "o");
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * v, ov_->Lookup(root(), "victim"));
  bool from_lower = false;
  ASSERT_OK_AND_ASSIGN(FileLease fd, OpenVia(v, O_RDONLY, &from_lower));
  ASSERT_OK(ov_->Rename(root(), "other", root(), "victim", 0));
  SetAttrRequest req;
  req.set_mode = true;
  req.mode = 0600;
  (void)ov_->SetAttr(v, req, -1);
  EXPECT_EQ(Lstat(t_.L("victim")).st_mode & 07777, 0644u);
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
  ov_->ReleaseOpen(v);
}

// ------------------------------------------------------------------ xattrs

TEST_F(OverlayXattr, SetGetListRemoveUserXattrOnLowerFile) {
  MakeFile(t_.L("f"), "data");
  SetXattr(t_.L("f"), "user.old", "o");
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  // Reading needs no copy-up.
  ASSERT_OK_AND_ASSIGN(std::string old, ov_->GetXattr(f, "user.old"));
  EXPECT_EQ(old, "o");
  EXPECT_FALSE(Exists(t_.U("f")));
  ASSERT_OK(ov_->SetXattr(f, "user.new", "value", 0));
  EXPECT_TRUE(f->upper.load());
  EXPECT_EQ(GetXattr(t_.U("f"), "user.new"), "value");
  EXPECT_EQ(GetXattr(t_.U("f"), "user.old"), "o");  // came up with the copy
  ASSERT_OK_AND_ASSIGN(std::string got, ov_->GetXattr(f, "user.new"));
  EXPECT_EQ(got, "value");
  ASSERT_OK_AND_ASSIGN(Strings names, ov_->ListXattr(f));
  EXPECT_TRUE(Contains(names, "user.new"));
  EXPECT_TRUE(Contains(names, "user.old"));
  ASSERT_OK(ov_->RemoveXattr(f, "user.new"));
  EXPECT_ERRNO(ENODATA, ov_->GetXattr(f, "user.new"));
  ASSERT_OK_AND_ASSIGN(Strings after, ov_->ListXattr(f));
  EXPECT_FALSE(Contains(after, "user.new"));
  EXPECT_EQ(GetXattr(t_.U("f"), "user.new"), std::nullopt);
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
}

TEST_F(OverlayXattr, SetXattrCreateFlagOnExistingIsEEXIST) {
  MakeFile(t_.L("f"), "data");
  SetXattr(t_.L("f"), "user.k", "1");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  EXPECT_ERRNO(EEXIST, ov_->SetXattr(f, "user.k", "2", XATTR_CREATE));
  ASSERT_OK_AND_ASSIGN(std::string v, ov_->GetXattr(f, "user.k"));
  EXPECT_EQ(v, "1");
  EXPECT_EQ(GetXattr(t_.L("f"), "user.k"), "1");
}

TEST_F(OverlayXattr, XattrOnRootGoesToUpperRoot) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->SetXattr(root(), "user.rootattr", "r", 0));
  EXPECT_EQ(GetXattr(t_.upper(), "user.rootattr"), "r");
  EXPECT_EQ(GetXattr(t_.lower(), "user.rootattr"), std::nullopt);
  ASSERT_OK_AND_ASSIGN(std::string v, ov_->GetXattr(root(), "user.rootattr"));
  EXPECT_EQ(v, "r");
}

TEST_F(OverlayXattr, PrivateXattrIsHiddenFromListAndGet) {
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Mkdir(root(), "d", 0755, Me()));
  ASSERT_EQ(GetXattr(t_.U("d"), "user.overlay.opaque"), "y");  // on disk
  ASSERT_OK(ov_->SetXattr(d, "user.visible", "v", 0));
  ASSERT_OK_AND_ASSIGN(Strings names, ov_->ListXattr(d));
  EXPECT_TRUE(Contains(names, "user.visible"));
  for (const auto& n : names)
    EXPECT_NE(n.rfind("user.overlay.", 0), 0u) << "leaked " << n;
  EXPECT_ERRNO(ENODATA, ov_->GetXattr(d, "user.overlay.opaque"));
}

TEST_F(OverlayXattr, SetXattrOfPrivateNameFails) {
  MakeFile(t_.L("f"), "data");
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/x"), "x");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  EXPECT_ERRNO(EPERM, ov_->SetXattr(f, "user.overlay.whiteout", "", 0));
  EXPECT_ERRNO(EPERM, ov_->SetXattr(d, "user.overlay.opaque", "y", 0));
  // Nothing reached the disk, and the directory still merges.
  EXPECT_TRUE(ListDir(t_.upper()).empty());
  EXPECT_EQ(ReadDirNames(d), (Strings{"x"}));
  EXPECT_EQ(ReadDirNames(root()), (Strings{"d", "f"}));
}

TEST_F(OverlayXattr, RemoveXattrOfPrivateNameFailsAndKeepsIt) {
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Mkdir(root(), "d", 0755, Me()));
  Status s = ov_->RemoveXattr(d, "user.overlay.opaque");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(GetXattr(t_.U("d"), "user.overlay.opaque"), "y");
}

TEST_F(OverlayXattr, PrivateXattrIsHiddenInTrustedNamespace) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "trusted.* needs root (the tests run as root, as CI does)";
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start(XattrNamespace::kTrusted));
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Mkdir(root(), "d", 0755, Me()));
  ASSERT_EQ(GetXattr(t_.U("d"), "trusted.overlay.opaque"), "y");
  ASSERT_OK_AND_ASSIGN(Strings names, ov_->ListXattr(d));
  for (const auto& n : names)
    EXPECT_NE(n.rfind("trusted.overlay.", 0), 0u) << "leaked " << n;
  EXPECT_ERRNO(ENODATA, ov_->GetXattr(d, "trusted.overlay.opaque"));
  EXPECT_ERRNO(EPERM, ov_->SetXattr(d, "trusted.overlay.opaque", "", 0));
  // In this namespace user.overlay.* is ordinary user data.
  ASSERT_OK(ov_->SetXattr(d, "user.overlay.note", "n", 0));
  ASSERT_OK_AND_ASSIGN(Strings after, ov_->ListXattr(d));
  EXPECT_TRUE(Contains(after, "user.overlay.note"));
}

}  // namespace
}  // namespace acqfs
