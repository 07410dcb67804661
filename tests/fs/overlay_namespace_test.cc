// Tests of the Overlay engine's namespace changes: Unlink, Rmdir, Mkdir,
// Create, Link and Rename, checked both through the engine and on the upper
// directory itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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
using Strings = std::vector<std::string>;

bool IsDeviceWhiteout(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return false;
  return S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 &&
         minor(st.st_rdev) == 0;
}

class OverlayUnlink : public acqfs::test::OverlayTest {};
class OverlayRmdir : public acqfs::test::OverlayTest {};
class OverlayMkdir : public acqfs::test::OverlayTest {};
class OverlayCreate : public acqfs::test::OverlayTest {};
class OverlayLink : public acqfs::test::OverlayTest {};
class OverlayRename : public acqfs::test::OverlayTest {};

// ------------------------------------------------------------------ unlink

TEST_F(OverlayUnlink, LowerFileLeavesWhiteoutAndLookupFails) {
  MakeFile(t_.L("f"), "lower");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  (void)f;
  ASSERT_OK(ov_->Unlink(root(), "f"));
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("f")));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "f"));
  EXPECT_TRUE(ReadDirNames(root()).empty());
  EXPECT_EQ(ReadFile(t_.L("f")), "lower");
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(OverlayUnlink, LowerFileNeverLookedUpLeavesWhiteout) {
  MakeFile(t_.L("f"), "lower");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Unlink(root(), "f"));
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("f")));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "f"));
}

TEST_F(OverlayUnlink, UpperOnlyFileLeavesNoWhiteout) {
  MakeFile(t_.U("u"), "upper");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Unlink(root(), "u"));
  EXPECT_FALSE(Exists(t_.U("u")));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "u"));
}

TEST_F(OverlayUnlink, CopiedUpFileLeavesWhiteout) {
  MakeFile(t_.L("f"), "lower");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK(ov_->CopyUp(f));
  ASSERT_TRUE(S_ISREG(Lstat(t_.U("f")).st_mode));
  ASSERT_OK(ov_->Unlink(root(), "f"));
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("f")));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "f"));
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(OverlayUnlink, NestedLowerFileCopiesUpParentOnly) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/a"), "a");
  MakeFile(t_.L("d/b"), "b");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  ASSERT_OK(ov_->Unlink(d, "a"));
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("d/a")));
  EXPECT_FALSE(Exists(t_.U("d/b")));  // only the parent came up
  EXPECT_EQ(GetXattr(t_.U("d"), "user.overlay.opaque"), std::nullopt);
  EXPECT_EQ(ReadDirNames(d), (Strings{"b"}));
}

TEST_F(OverlayUnlink, DirectoryIsEISDIR) {
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(EISDIR, ov_->Unlink(root(), "d"));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

TEST_F(OverlayUnlink, MissingNameIsENOENT) {
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(ENOENT, ov_->Unlink(root(), "nope"));
}

// ------------------------------------------------------------------- rmdir

TEST_F(OverlayRmdir, LowerDirAfterUnlinkingChildrenLeavesWhiteoutNoUpperDir) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/a"), "a");
  MakeFile(t_.L("d/b"), "b");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  ASSERT_OK(ov_->Unlink(d, "a"));
  ASSERT_OK(ov_->Unlink(d, "b"));
  ASSERT_TRUE(S_ISDIR(Lstat(t_.U("d")).st_mode));  // held the whiteouts
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("d")));
  EXPECT_EQ(ListDir(t_.upper()), (Strings{"d"}));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "d"));
  EXPECT_TRUE(ReadDirNames(root()).empty());
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(OverlayRmdir, EmptyLowerDirLeavesWhiteout) {
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("d")));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "d"));
}

TEST_F(OverlayRmdir, NonEmptyLowerDirIsENOTEMPTY) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/a"), "a");
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(ENOTEMPTY, ov_->Rmdir(root(), "d"));
  EXPECT_FALSE(Exists(t_.U("d")));
  ASSERT_OK_AND_ASSIGN(Node * a, Walk("d/a"));
  (void)a;
}

TEST_F(OverlayRmdir, UpperOnlyDirLeavesNothing) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Mkdir(root(), "new", 0755, Me()));
  (void)d;
  ASSERT_OK(ov_->Rmdir(root(), "new"));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "new"));
}

TEST_F(OverlayRmdir, FileIsENOTDIR) {
  MakeFile(t_.L("f"), "");
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(ENOTDIR, ov_->Rmdir(root(), "f"));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

// ------------------------------------------------------------------- mkdir

TEST_F(OverlayMkdir, NewNameMakesPlainUpperDir) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Mkdir(root(), "d", 0750, Me()));
  EXPECT_TRUE(d->is_dir());
  struct stat st = Lstat(t_.U("d"));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0750u);  // under umask 022
  ASSERT_OK_AND_ASSIGN(Node * again, ov_->Lookup(root(), "d"));
  EXPECT_EQ(again, d);
  ASSERT_OK_AND_ASSIGN(struct stat ost, ov_->GetAttr(d));
  EXPECT_EQ(ost.st_ino, st.st_ino);  // no lower: the upper's number
}

TEST_F(OverlayMkdir, OverWhiteoutMakesOpaqueDir) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/old1"), "1");
  MakeFile(t_.L("d/old2"), "2");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  ASSERT_OK(ov_->Unlink(d, "old1"));
  ASSERT_OK(ov_->Unlink(d, "old2"));
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  ASSERT_TRUE(IsDeviceWhiteout(t_.U("d")));
  ASSERT_OK_AND_ASSIGN(Node * nd, ov_->Mkdir(root(), "d", 0755, Me()));
  struct stat st = Lstat(t_.U("d"));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(GetXattr(t_.U("d"), "user.overlay.opaque"), "y");
  EXPECT_TRUE(ListDir(t_.U("d")).empty());
  EXPECT_TRUE(ReadDirNames(nd).empty());
  EXPECT_ERRNO(ENOENT, ov_->Lookup(nd, "old1"));
  EXPECT_FALSE(nd->merged());
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
  // A file created in it is the only entry.
  ASSERT_OK_AND_ASSIGN(auto created,
                       ov_->Create(nd, "new", 0644, O_RDWR, Me()));
  ov_->ReleaseOpen(created.first);
  EXPECT_EQ(ReadDirNames(nd), (Strings{"new"}));
}

TEST_F(OverlayMkdir, OverWhiteoutMakesOpaqueDirInTrustedNamespace) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "trusted.* needs root (the tests run as root, as CI does)";
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/old"), "1");
  ASSERT_NO_FATAL_FAILURE(Start(XattrNamespace::kTrusted));
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  ASSERT_OK(ov_->Unlink(d, "old"));
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  ASSERT_OK_AND_ASSIGN(Node * nd, ov_->Mkdir(root(), "d", 0755, Me()));
  EXPECT_EQ(GetXattr(t_.U("d"), "trusted.overlay.opaque"), "y");
  EXPECT_EQ(GetXattr(t_.U("d"), "user.overlay.opaque"), std::nullopt);
  EXPECT_TRUE(ReadDirNames(nd).empty());
  EXPECT_ERRNO(ENOENT, ov_->Lookup(nd, "old"));
}

TEST_F(OverlayMkdir, ExistingNameIsEEXIST) {
  MakeFile(t_.L("f"), "");
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(EEXIST, ov_->Mkdir(root(), "f", 0755, Me()));
  EXPECT_ERRNO(EEXIST, ov_->Mkdir(root(), "d", 0755, Me()));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

// ------------------------------------------------------------------ create

TEST_F(OverlayCreate, WriteThroughReturnedFdThenReadBackViaOpen) {
  MakeFile(t_.L("other"), "x");
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(auto created,
                       ov_->Create(root(), "new", 0640, O_RDWR, Me()));
  Node* n = created.first;
  ASSERT_TRUE(created.second.is_valid());
  ASSERT_EQ(::pwrite(created.second.get(), "fresh data", 10, 0), 10);
  created.second.reset();
  ov_->ReleaseOpen(n);
  bool from_lower = true;
  EXPECT_EQ(ReadVia(n, &from_lower), "fresh data");
  EXPECT_FALSE(from_lower);
  EXPECT_EQ(ReadFile(t_.U("new")), "fresh data");
  EXPECT_EQ(Lstat(t_.U("new")).st_mode & 07777, 0640u);
  ASSERT_OK_AND_ASSIGN(Node * again, ov_->Lookup(root(), "new"));
  EXPECT_EQ(again, n);
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(n));
  EXPECT_EQ(st.st_size, 10);
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
}

TEST_F(OverlayCreate, OverWhiteoutReplacesIt) {
  MakeFile(t_.L("f"), "old lower");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Unlink(root(), "f"));
  ASSERT_TRUE(IsDeviceWhiteout(t_.U("f")));
  ASSERT_OK_AND_ASSIGN(auto created,
                       ov_->Create(root(), "f", 0644, O_WRONLY, Me()));
  ASSERT_EQ(::pwrite(created.second.get(), "new", 3, 0), 3);
  ov_->ReleaseOpen(created.first);
  EXPECT_TRUE(S_ISREG(Lstat(t_.U("f")).st_mode));
  EXPECT_EQ(ReadVia(created.first), "new");
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
}

TEST_F(OverlayCreate, ExistingLowerNameIsEEXIST) {
  MakeFile(t_.L("f"), "lower");
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(EEXIST, ov_->Create(root(), "f", 0644, O_RDWR, Me()));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

TEST_F(OverlayCreate, InLowerOnlyDirCopiesUpTheDir) {
  MakeDir(t_.L("d"), 0705);
  MakeFile(t_.L("d/old"), "o");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  ASSERT_OK_AND_ASSIGN(auto created, ov_->Create(d, "n", 0644, O_RDWR, Me()));
  ov_->ReleaseOpen(created.first);
  EXPECT_EQ(Lstat(t_.U("d")).st_mode & 07777, 0705u);
  EXPECT_EQ(ReadDirNames(d), (Strings{"n", "old"}));
}

// -------------------------------------------------------------------- link

TEST_F(OverlayLink, LowerFileCopiesUpAndBothNamesShareOneNode) {
  MakeFile(t_.L("f"), "shared");
  ASSERT_NO_FATAL_FAILURE(Start());
  ino_t lower_ino = Lstat(t_.L("f")).st_ino;
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(Node * g, ov_->Link(f, root(), "g"));
  EXPECT_EQ(g, f);
  ASSERT_OK_AND_ASSIGN(Node * g2, ov_->Lookup(root(), "g"));
  EXPECT_EQ(g2, f);
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(f));
  EXPECT_EQ(st.st_ino, lower_ino);
  EXPECT_EQ(st.st_nlink, 2u);
  // On disk: one upper inode with two names; the lower untouched.
  EXPECT_EQ(Lstat(t_.U("f")).st_ino, Lstat(t_.U("g")).st_ino);
  EXPECT_EQ(Lstat(t_.U("f")).st_nlink, 2u);
  EXPECT_EQ(Lstat(t_.L("f")).st_nlink, 1u);
  EXPECT_EQ(ReadDirNames(root()), (Strings{"f", "g"}));
  ASSERT_OK_AND_ASSIGN(auto entries, ov_->ReadDir(root()));
  for (const auto& e : entries) EXPECT_EQ(e.ino, lower_ino) << e.name;
}

TEST_F(OverlayLink, WriteThroughOneNameShowsThroughTheOther) {
  MakeFile(t_.L("f"), "before");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(Node * g, ov_->Link(f, root(), "g"));
  bool fl = true;
  ASSERT_OK_AND_ASSIGN(FileLease fd, OpenVia(g, O_WRONLY | O_TRUNC, &fl));
  ASSERT_EQ(::pwrite(fd.get(), "after", 5, 0), 5);
  ov_->ReleaseOpen(g);
  EXPECT_EQ(ReadFile(t_.U("f")), "after");
  EXPECT_EQ(ReadFile(t_.U("g")), "after");
  EXPECT_EQ(ReadFile(t_.L("f")), "before");
}

TEST_F(OverlayLink, UnlinkingOneNameKeepsTheOther) {
  MakeFile(t_.L("f"), "data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(Node * g, ov_->Link(f, root(), "g"));
  ASSERT_OK(ov_->Unlink(root(), "f"));
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("f")));
  EXPECT_EQ(ReadDirNames(root()), (Strings{"g"}));
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(g));
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(ReadVia(g), "data");
}

TEST_F(OverlayLink, DirectoryIsEPERM) {
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  EXPECT_ERRNO(EPERM, ov_->Link(d, root(), "d2"));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

TEST_F(OverlayLink, OntoExistingNameIsEEXIST) {
  MakeFile(t_.L("f"), "f");
  MakeFile(t_.L("g"), "g");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  EXPECT_ERRNO(EEXIST, ov_->Link(f, root(), "g"));
  EXPECT_FALSE(Exists(t_.U("g")));
}

// ------------------------------------------------------------------ rename

TEST_F(OverlayRename, LowerOnlyDirWithNestedFilesMovesWhole) {
  MakeDir(t_.L("src"), 0751);
  MakeFile(t_.L("src/a"), "A");
  MakeDir(t_.L("src/sub"));
  MakeFile(t_.L("src/sub/b"), "B");
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * src, ov_->Lookup(root(), "src"));
  ASSERT_OK_AND_ASSIGN(Node * a, ov_->Lookup(src, "a"));
  Status s = ov_->Rename(root(), "src", root(), "dst", 0);
  ASSERT_TRUE(s.ok()) << s.error().Message();  // in particular, no EXDEV
  // Through the engine.
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "src"));
  ASSERT_OK_AND_ASSIGN(Node * dst, ov_->Lookup(root(), "dst"));
  EXPECT_EQ(dst, src);
  EXPECT_EQ(ReadDirNames(root()), (Strings{"dst"}));
  EXPECT_EQ(ReadDirNames(dst), (Strings{"a", "sub"}));
  ASSERT_OK_AND_ASSIGN(Node * b, Walk("dst/sub/b"));
  EXPECT_EQ(ReadVia(b), "B");
  EXPECT_EQ(ReadVia(a), "A");  // a node looked up before the move
  EXPECT_EQ(ov_->PathOf(a), "dst/a");
  // On disk: an opaque upper copy and a whiteout at the old name.
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("src")));
  EXPECT_TRUE(S_ISDIR(Lstat(t_.U("dst")).st_mode));
  EXPECT_EQ(Lstat(t_.U("dst")).st_mode & 07777, 0751u);
  EXPECT_EQ(GetXattr(t_.U("dst"), "user.overlay.opaque"), "y");
  EXPECT_EQ(ListDir(t_.U("dst")), (Strings{"a", "sub"}));
  EXPECT_EQ(ReadFile(t_.U("dst/sub/b")), "B");
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
}

TEST_F(OverlayRename, MaterialisedDirDropsWhiteoutedChildren) {
  MakeDir(t_.L("src"));
  MakeFile(t_.L("src/keep"), "k");
  MakeFile(t_.L("src/drop"), "d");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * src, ov_->Lookup(root(), "src"));
  ASSERT_OK(ov_->Unlink(src, "drop"));
  ASSERT_OK(ov_->Rename(root(), "src", root(), "dst", 0));
  ASSERT_OK_AND_ASSIGN(Node * dst, ov_->Lookup(root(), "dst"));
  EXPECT_EQ(ReadDirNames(dst), (Strings{"keep"}));
  EXPECT_EQ(ListDir(t_.U("dst")), (Strings{"keep"}));
}

TEST_F(OverlayRename, NoReplaceOntoExistingNameIsEEXIST) {
  MakeFile(t_.L("a"), "A");
  MakeFile(t_.L("b"), "B");
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(EEXIST, ov_->Rename(root(), "a", root(), "b", RENAME_NOREPLACE));
  ASSERT_OK_AND_ASSIGN(Node * a, ov_->Lookup(root(), "a"));
  ASSERT_OK_AND_ASSIGN(Node * b, ov_->Lookup(root(), "b"));
  EXPECT_EQ(ReadVia(a), "A");
  EXPECT_EQ(ReadVia(b), "B");
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

TEST_F(OverlayRename, NoReplaceOntoFreeNameMoves) {
  MakeFile(t_.L("a"), "A");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Rename(root(), "a", root(), "b", RENAME_NOREPLACE));
  EXPECT_EQ(ReadDirNames(root()), (Strings{"b"}));
  EXPECT_EQ(ReadFile(t_.U("b")), "A");
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("a")));
}

TEST_F(OverlayRename, ExchangeSwapsLowerFileAndLowerDir) {
  MakeFile(t_.L("f"), "file data");
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/inner"), "in");
  auto lower_before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  ASSERT_OK(ov_->Rename(root(), "f", root(), "d", RENAME_EXCHANGE));
  ASSERT_OK_AND_ASSIGN(Node * now_f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(Node * now_d, ov_->Lookup(root(), "d"));
  EXPECT_EQ(now_f, d);
  EXPECT_EQ(now_d, f);
  EXPECT_TRUE(now_f->is_dir());
  EXPECT_FALSE(now_d->is_dir());
  EXPECT_EQ(ReadDirNames(now_f), (Strings{"inner"}));
  EXPECT_EQ(ReadVia(now_d), "file data");
  ASSERT_OK_AND_ASSIGN(Node * inner, ov_->Lookup(now_f, "inner"));
  EXPECT_EQ(ReadVia(inner), "in");
  // On disk.
  EXPECT_TRUE(S_ISDIR(Lstat(t_.U("f")).st_mode));
  EXPECT_EQ(ReadFile(t_.U("f/inner")), "in");
  EXPECT_EQ(ReadFile(t_.U("d")), "file data");
  ASSERT_OK_AND_ASSIGN(struct stat fst, ov_->GetAttr(now_f));
  EXPECT_TRUE(S_ISDIR(fst.st_mode));
  ASSERT_OK_AND_ASSIGN(struct stat dst, ov_->GetAttr(now_d));
  EXPECT_TRUE(S_ISREG(dst.st_mode));
  EXPECT_EQ(dst.st_size, 9);
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
  EXPECT_EQ(DescribeTree(t_.lower()), lower_before);
}

TEST_F(OverlayRename, ExchangeWithMissingNameIsENOENT) {
  MakeFile(t_.L("a"), "A");
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(ENOENT, ov_->Rename(root(), "a", root(), "zz", RENAME_EXCHANGE));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

TEST_F(OverlayRename, FileOverExistingLowerFile) {
  MakeFile(t_.L("a"), "A data");
  MakeFile(t_.L("b"), "B data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * a, ov_->Lookup(root(), "a"));
  ASSERT_OK_AND_ASSIGN(Node * b, ov_->Lookup(root(), "b"));
  (void)b;
  ASSERT_OK(ov_->Rename(root(), "a", root(), "b", 0));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "a"));
  ASSERT_OK_AND_ASSIGN(Node * nb, ov_->Lookup(root(), "b"));
  EXPECT_EQ(nb, a);
  EXPECT_EQ(ReadVia(nb), "A data");
  EXPECT_EQ(ReadDirNames(root()), (Strings{"b"}));
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("a")));
  EXPECT_EQ(ReadFile(t_.U("b")), "A data");
  EXPECT_EQ(ReadFile(t_.L("a")), "A data");
  EXPECT_EQ(ReadFile(t_.L("b")), "B data");
}

TEST_F(OverlayRename, UpperFileToNewNameLeavesNoWhiteout) {
  MakeFile(t_.U("u"), "U");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Rename(root(), "u", root(), "v", 0));
  EXPECT_EQ(ListDir(t_.upper()), (Strings{"v"}));
  EXPECT_EQ(ReadDirNames(root()), (Strings{"v"}));
}

TEST_F(OverlayRename, UpperFileOntoWhiteoutedNameReplacesTheWhiteout) {
  MakeFile(t_.L("x"), "lower x");
  MakeFile(t_.U("u"), "U");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Unlink(root(), "x"));
  ASSERT_OK(ov_->Rename(root(), "u", root(), "x", 0));
  EXPECT_EQ(ListDir(t_.upper()), (Strings{"x"}));
  EXPECT_EQ(ReadFile(t_.U("x")), "U");
  EXPECT_EQ(ReadDirNames(root()), (Strings{"x"}));
}

TEST_F(OverlayRename, DirOntoNonEmptyDirIsENOTEMPTY) {
  MakeDir(t_.L("a"));
  MakeDir(t_.L("b"));
  MakeFile(t_.L("b/x"), "");
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(ENOTEMPTY, ov_->Rename(root(), "a", root(), "b", 0));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

TEST_F(OverlayRename, DirOntoEmptyLowerDirDoesNotMergeWithIt) {
  MakeDir(t_.L("a"));
  MakeFile(t_.L("a/from_a"), "");
  MakeDir(t_.L("b"));  // empty in the lower: may be replaced
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Rename(root(), "a", root(), "b", 0));
  ASSERT_OK_AND_ASSIGN(Node * b, ov_->Lookup(root(), "b"));
  EXPECT_EQ(ReadDirNames(b), (Strings{"from_a"}));
  EXPECT_EQ(GetXattr(t_.U("b"), "user.overlay.opaque"), "y");
  // Something appearing later in the lower b must not show through.
  MakeFile(t_.L("b/late"), "");
  EXPECT_EQ(ReadDirNames(b), (Strings{"from_a"}));
}

TEST_F(OverlayRename, FileIntoOtherDirectory) {
  MakeFile(t_.L("f"), "F");
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  ASSERT_OK(ov_->Rename(root(), "f", d, "g", 0));
  EXPECT_EQ(ReadDirNames(root()), (Strings{"d"}));
  EXPECT_EQ(ReadDirNames(d), (Strings{"g"}));
  EXPECT_EQ(ReadFile(t_.U("d/g")), "F");
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("f")));
}

TEST_F(OverlayRename, LowerDirIntoLowerSubdirectoryOfAnotherDir) {
  MakeDir(t_.L("a"));
  MakeFile(t_.L("a/x"), "X");
  MakeDir(t_.L("b"));
  MakeDir(t_.L("b/c"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * a, ov_->Lookup(root(), "a"));
  ASSERT_OK_AND_ASSIGN(Node * x, ov_->Lookup(a, "x"));
  ASSERT_OK_AND_ASSIGN(Node * c, Walk("b/c"));
  ASSERT_OK(ov_->Rename(root(), "a", c, "a2", 0));
  EXPECT_EQ(ReadDirNames(root()), (Strings{"b"}));
  EXPECT_EQ(ReadDirNames(c), (Strings{"a2"}));
  EXPECT_EQ(ov_->PathOf(x), "b/c/a2/x");
  EXPECT_EQ(ReadVia(x), "X");
  EXPECT_EQ(ReadFile(t_.U("b/c/a2/x")), "X");
  EXPECT_TRUE(IsDeviceWhiteout(t_.U("a")));
}

TEST_F(OverlayRename, MovedDirectoryCanMoveAgainAndBack) {
  MakeDir(t_.L("a"));
  MakeFile(t_.L("a/x"), "X");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK(ov_->Rename(root(), "a", root(), "b", 0));
  ASSERT_OK(ov_->Rename(root(), "b", root(), "c", 0));
  EXPECT_EQ(ReadDirNames(root()), (Strings{"c"}));
  // "b" never existed in the lower: no whiteout is needed for it.
  EXPECT_FALSE(Exists(t_.U("b")));
  ASSERT_OK(ov_->Rename(root(), "c", root(), "a", 0));
  EXPECT_EQ(ReadDirNames(root()), (Strings{"a"}));
  ASSERT_OK_AND_ASSIGN(Node * a, ov_->Lookup(root(), "a"));
  EXPECT_EQ(ReadDirNames(a), (Strings{"x"}));
  // Back at its old name it stays opaque: a later lower entry stays hidden.
  MakeFile(t_.L("a/late"), "");
  EXPECT_EQ(ReadDirNames(a), (Strings{"x"}));
}

TEST_F(OverlayRename, ExchangeFilesAcrossDirectories) {
  MakeDir(t_.L("d1"));
  MakeDir(t_.L("d2"));
  MakeFile(t_.L("d1/p"), "P");
  MakeFile(t_.L("d2/q"), "Q");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d1, ov_->Lookup(root(), "d1"));
  ASSERT_OK_AND_ASSIGN(Node * d2, ov_->Lookup(root(), "d2"));
  ASSERT_OK(ov_->Rename(d1, "p", d2, "q", RENAME_EXCHANGE));
  ASSERT_OK_AND_ASSIGN(Node * p, ov_->Lookup(d1, "p"));
  ASSERT_OK_AND_ASSIGN(Node * q, ov_->Lookup(d2, "q"));
  EXPECT_EQ(ReadVia(p), "Q");
  EXPECT_EQ(ReadVia(q), "P");
  EXPECT_EQ(ReadFile(t_.U("d1/p")), "Q");
  EXPECT_EQ(ReadFile(t_.U("d2/q")), "P");
}

TEST_F(OverlayRename, UpperDirOntoDeletedNonEmptyLowerDirHidesTheLower) {
  MakeDir(t_.L("old"));
  MakeFile(t_.L("old/secret"), "s");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * old, ov_->Lookup(root(), "old"));
  ASSERT_OK(ov_->Unlink(old, "secret"));
  ASSERT_OK(ov_->Rmdir(root(), "old"));
  ASSERT_OK_AND_ASSIGN(Node * fresh, ov_->Mkdir(root(), "fresh", 0755, Me()));
  ASSERT_OK_AND_ASSIGN(auto c, ov_->Create(fresh, "mine", 0644, O_RDWR, Me()));
  ov_->ReleaseOpen(c.first);
  ASSERT_OK(ov_->Rename(root(), "fresh", root(), "old", 0));
  ASSERT_OK_AND_ASSIGN(Node * now, ov_->Lookup(root(), "old"));
  EXPECT_EQ(ReadDirNames(now), (Strings{"mine"}));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(now, "secret"));
  EXPECT_EQ(GetXattr(t_.U("old"), "user.overlay.opaque"), "y");
  EXPECT_FALSE(Exists(t_.U("fresh")));
}

TEST_F(OverlayRename, CreateInsideMovedDirectoryLandsAtTheNewPath) {
  MakeDir(t_.L("a"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * a, ov_->Lookup(root(), "a"));
  ASSERT_OK(ov_->Rename(root(), "a", root(), "b", 0));
  ASSERT_OK_AND_ASSIGN(auto c, ov_->Create(a, "n", 0644, O_RDWR, Me()));
  ov_->ReleaseOpen(c.first);
  EXPECT_EQ(ov_->PathOf(c.first), "b/n");
  EXPECT_TRUE(Exists(t_.U("b/n")));
  EXPECT_FALSE(Exists(t_.U("a/n")));
}

// Lookups reuse directory descriptors cached per thread (Layer::DirFd);
// a rename must retire them, or a lookup under the new directory of the old
// name would still search the moved one.
TEST_F(OverlayRename, LookupAfterRenameAndRecreateSeesTheNewDirectory) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Mkdir(root(), "d", 0755, Me()));
  ASSERT_OK_AND_ASSIGN(auto x, ov_->Create(d, "x", 0644, O_RDWR, Me()));
  ov_->ReleaseOpen(x.first);
  ov_->Forget(x.first, 1);  // the next lookup of x resolves it on disk
  ASSERT_OK_AND_ASSIGN(Node * again, ov_->Lookup(d, "x"));  // caches "d"
  ov_->Forget(again, 1);
  ASSERT_OK(ov_->Rename(root(), "d", root(), "e", 0));
  ASSERT_OK_AND_ASSIGN(Node * fresh, ov_->Mkdir(root(), "d", 0755, Me()));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(fresh, "x"));
  EXPECT_TRUE(Exists(t_.U("e/x")));
}

// A miss opens the directory beneath the nearest cached ancestor; an
// ancestor renamed away and made again must not be searched in its old
// place (the moved one still holds q/x).
TEST_F(OverlayRename, LookupBelowARenamedAncestorSeesTheNewTree) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * p, ov_->Mkdir(root(), "p", 0755, Me()));
  ASSERT_OK_AND_ASSIGN(Node * q, ov_->Mkdir(p, "q", 0755, Me()));
  ASSERT_OK_AND_ASSIGN(auto x, ov_->Create(q, "x", 0644, O_RDWR, Me()));
  ov_->ReleaseOpen(x.first);
  ov_->Forget(x.first, 1);
  EXPECT_ERRNO(ENOENT, ov_->Lookup(p, "none"));             // caches "p"
  ASSERT_OK_AND_ASSIGN(Node * again, ov_->Lookup(q, "x"));  // from "p"
  ov_->Forget(again, 1);
  ASSERT_OK(ov_->Rename(root(), "p", root(), "p2", 0));
  ASSERT_OK_AND_ASSIGN(Node * np, ov_->Mkdir(root(), "p", 0755, Me()));
  ASSERT_OK_AND_ASSIGN(Node * nq, ov_->Mkdir(np, "q", 0755, Me()));
  EXPECT_ERRNO(ENOENT, ov_->Lookup(nq, "x"));
  ASSERT_OK_AND_ASSIGN(Node * moved, ov_->Lookup(q, "x"));  // p2/q/x
  EXPECT_EQ(ov_->PathOf(moved), "p2/q/x");
  ov_->Forget(moved, 1);
}

TEST_F(OverlayRename, BadFlagsAreEINVAL) {
  MakeFile(t_.L("a"), "A");
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(EINVAL, ov_->Rename(root(), "a", root(), "b",
                                   RENAME_NOREPLACE | RENAME_EXCHANGE));
  EXPECT_ERRNO(EINVAL, ov_->Rename(root(), "a", root(), "b", RENAME_WHITEOUT));
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

}  // namespace
}  // namespace acqfs
