// The lower layer is the host's data: no engine operation may write it. This
// runs every kind of engine change against one overlay and compares a
// recursive snapshot of the lower (content, mode, owner, link count, mtime,
// ctime, xattrs) before and after. It also checks the merged root listing
// that results.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs/overlay.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs::test::DescribeTree;
using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFifo;
using acqfs::test::MakeFile;
using acqfs::test::MakeSymlink;
using acqfs::test::SetTimes;
using acqfs::test::SetXattr;
using Strings = std::vector<std::string>;

class HostUntouched : public acqfs::test::OverlayTest {
 protected:
  void BuildLower() {
    MakeFile(t_.L("f1"), "file one", 0644);
    SetXattr(t_.L("f1"), "user.x", "1");
    MakeFile(t_.L("f2"), "file two");
    MakeFile(t_.L("f3"), "file three");
    MakeFile(t_.L("f4"), "file four, to be cut", 0664);
    MakeFile(t_.L("f5"), "file five");
    SetXattr(t_.L("f5"), "user.keep", "k");
    MakeFile(t_.L("f6a"), "six a");
    MakeFile(t_.L("f6b"), "six b");
    MakeFile(t_.L("ex_file"), "exchange me");
    MakeDir(t_.L("ex_dir"));
    MakeFile(t_.L("ex_dir/inner"), "inside");
    MakeDir(t_.L("dir_rm"));
    MakeFile(t_.L("dir_rm/c1"), "c1");
    MakeFile(t_.L("dir_rm/c2"), "c2");
    MakeDir(t_.L("tree"), 0750);
    MakeFile(t_.L("tree/a"), "tree a");
    MakeDir(t_.L("tree/sub"));
    MakeFile(t_.L("tree/sub/b"), "tree b");
    MakeDir(t_.L("nested"));
    MakeDir(t_.L("nested/deep"));
    MakeFile(t_.L("nested/deep/file"), "deep file");
    SetXattr(t_.L("nested"), "user.dir", "d");
    MakeSymlink("f1", t_.L("ln"));
    MakeFifo(t_.L("fifo"));
    // Old times everywhere, so that any touch would show.
    for (const char* p :
         {"f1",         "f2",           "f3",          "f4",
          "f5",         "f6a",          "f6b",         "ex_file",
          "ex_dir",     "ex_dir/inner", "dir_rm",      "dir_rm/c1",
          "dir_rm/c2",  "tree",         "tree/a",      "tree/sub",
          "tree/sub/b", "nested",       "nested/deep", "nested/deep/file",
          "ln",         "fifo"})
      SetTimes(t_.L(p), 1111111111, 0);
    SetTimes(t_.lower(), 1111111111, 0);
  }

  Node* Get(const std::string& rel) {
    auto r = Walk(rel);
    if (!r.ok()) {
      ADD_FAILURE() << "lookup " << rel << ": " << r.error().Message();
      return nullptr;
    }
    return *r;
  }

  // Runs one of everything. Each step asserts its own success.
  void RunEveryOperation() {
    bool fl = false;
    // Reads.
    Node* f1 = Get("f1");
    ASSERT_NE(f1, nullptr);
    ASSERT_OK(ov_->GetAttr(f1));
    EXPECT_EQ(ReadVia(f1), "file one");
    ASSERT_OK(ov_->ReadLink(Get("ln")));
    ASSERT_OK(ov_->ReadDir(Get("tree")));
    ASSERT_OK(ov_->GetXattr(f1, "user.x"));
    ASSERT_OK(ov_->ListXattr(Get("nested")));
    ASSERT_OK(ov_->StatFs());
    // Write through a copied-up file.
    {
      ASSERT_OK_AND_ASSIGN(FileLease fd, OpenVia(f1, O_RDWR, &fl));
      ASSERT_EQ(::pwrite(fd.get(), "FILE", 4, 0), 4);
      ov_->ReleaseOpen(f1);
    }
    {
      Node* deep = Get("nested/deep/file");
      ASSERT_NE(deep, nullptr);
      ASSERT_OK_AND_ASSIGN(FileLease fd,
                           OpenVia(deep, O_WRONLY | O_TRUNC, &fl));
      ASSERT_EQ(::pwrite(fd.get(), "new deep", 8, 0), 8);
      ov_->ReleaseOpen(deep);
    }
    // Removal.
    ASSERT_OK(ov_->Unlink(root(), "f2"));
    Node* dir_rm = Get("dir_rm");
    ASSERT_NE(dir_rm, nullptr);
    ASSERT_OK(ov_->Unlink(dir_rm, "c1"));
    ASSERT_OK(ov_->Unlink(dir_rm, "c2"));
    ASSERT_OK(ov_->Rmdir(root(), "dir_rm"));
    ASSERT_OK(ov_->Mkdir(root(), "dir_rm", 0755, Me()));
    // Links.
    ASSERT_OK(ov_->Link(Get("f3"), root(), "f3link"));
    // Attributes.
    Node* f4 = Get("f4");
    ASSERT_NE(f4, nullptr);
    SetAttrRequest req;
    req.set_mode = true;
    req.mode = 0600;
    req.set_size = true;
    req.size = 9;
    req.set_mtime = true;
    req.mtime = {1700000000, 0};
    req.set_atime = true;
    req.atime_now = true;
    ASSERT_OK(ov_->SetAttr(f4, req, -1));
    Node* f5 = Get("f5");
    ASSERT_NE(f5, nullptr);
    ASSERT_OK(ov_->SetXattr(f5, "user.added", "a", 0));
    ASSERT_OK(ov_->RemoveXattr(f5, "user.keep"));
    ASSERT_OK(ov_->SetXattr(Get("nested"), "user.dir", "changed", 0));
    // Renames.
    ASSERT_OK(ov_->Rename(root(), "f6a", root(), "f6b", 0));
    ASSERT_OK(
        ov_->Rename(root(), "ex_file", root(), "ex_dir", RENAME_EXCHANGE));
    ASSERT_OK(ov_->Rename(root(), "tree", root(), "moved", 0));
    ASSERT_OK(ov_->Rename(root(), "ln", root(), "ln2", 0));
    EXPECT_ERRNO(EEXIST,
                 ov_->Rename(root(), "f1", root(), "f3", RENAME_NOREPLACE));
    // Creation.
    {
      ASSERT_OK_AND_ASSIGN(auto c,
                           ov_->Create(root(), "newfile", 0644, O_RDWR, Me()));
      ASSERT_EQ(::pwrite(c.second.get(), "brand new", 9, 0), 9);
      ov_->ReleaseOpen(c.first);
    }
    ASSERT_OK(ov_->Mkdir(root(), "newdir", 0755, Me()));
    ASSERT_OK(ov_->Symlink(root(), "newlink", "newfile", Me()));
    ASSERT_OK(ov_->Mknod(root(), "newfifo", S_IFIFO | 0644, 0, Me()));
    // Chmod of a lower directory and of a moved one.
    req = SetAttrRequest{};
    req.set_mode = true;
    req.mode = 0700;
    ASSERT_OK(ov_->SetAttr(Get("ex_file"), req, -1));
    ASSERT_OK(ov_->SetAttr(Get("moved/sub"), req, -1));
    ASSERT_OK(ov_->CopyUp(Get("fifo")));
  }
};

TEST_F(HostUntouched, EveryEngineOperationLeavesLowerUnchanged) {
  BuildLower();
  ASSERT_FALSE(HasFailure());
  auto before = DescribeTree(t_.lower());
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(RunEveryOperation());
  ov_.reset();  // whatever the engine does on shutdown counts too
  auto after = DescribeTree(t_.lower());
  EXPECT_EQ(after, before);
  // The operations did happen (in the upper).
  EXPECT_GE(acqfs::test::ListDir(t_.upper()).size(), 15u);
}

TEST_F(HostUntouched, SnapshotDetectsChangesToTheLower) {
  // Guards the test above: a snapshot must differ after each kind of write.
  BuildLower();
  auto base = DescribeTree(t_.lower());
  MakeFile(t_.L("f1"), "file onE", 0644);  // same size, same mode
  SetTimes(t_.L("f1"), 1111111111, 0);
  EXPECT_NE(DescribeTree(t_.lower()), base);
  base = DescribeTree(t_.lower());
  SetXattr(t_.L("f5"), "user.keep", "K");
  EXPECT_NE(DescribeTree(t_.lower()), base);
  base = DescribeTree(t_.lower());
  ASSERT_EQ(::chmod(t_.L("tree/sub").c_str(), 0700), 0);
  EXPECT_NE(DescribeTree(t_.lower()), base);
  base = DescribeTree(t_.lower());
  // A ctime-only change (a no-op chmod still updates ctime).
  ::usleep(20000);
  ASSERT_EQ(::chmod(t_.L("f3").c_str(), Lstat(t_.L("f3")).st_mode & 07777), 0);
  EXPECT_NE(DescribeTree(t_.lower()), base);
}

TEST_F(HostUntouched, RootListingAfterEveryOperation) {
  BuildLower();
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(RunEveryOperation());
  EXPECT_EQ(ReadDirNames(root()),
            (Strings{"dir_rm", "ex_dir", "ex_file", "f1", "f3", "f3link", "f4",
                     "f5", "f6b", "fifo", "ln2", "moved", "nested", "newdir",
                     "newfifo", "newfile", "newlink"}));
  // And the contents behind some of those names.
  EXPECT_EQ(ReadVia(Get("f1")), "FILE one");
  EXPECT_EQ(ReadVia(Get("f6b")), "six a");
  EXPECT_EQ(ReadVia(Get("ex_dir")), "exchange me");
  EXPECT_EQ(ReadDirNames(Get("ex_file")), (Strings{"inner"}));
  EXPECT_EQ(ReadDirNames(Get("moved")), (Strings{"a", "sub"}));
  EXPECT_EQ(ReadVia(Get("moved/sub/b")), "tree b");
  EXPECT_TRUE(ReadDirNames(Get("dir_rm")).empty());
  EXPECT_EQ(ReadVia(Get("nested/deep/file")), "new deep");
  EXPECT_EQ(ReadVia(Get("f4")), "file four");
  ASSERT_OK_AND_ASSIGN(std::string target, ov_->ReadLink(Get("ln2")));
  EXPECT_EQ(target, "f1");
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(Get("f3link")));
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_OK_AND_ASSIGN(struct stat fst, ov_->GetAttr(Get("newfifo")));
  EXPECT_TRUE(S_ISFIFO(fst.st_mode));
  EXPECT_ERRNO(ENODATA, ov_->GetXattr(Get("f5"), "user.keep"));
  ASSERT_OK_AND_ASSIGN(std::string added,
                       ov_->GetXattr(Get("f5"), "user.added"));
  EXPECT_EQ(added, "a");
  EXPECT_TRUE(acqfs::test::ListDir(t_.tmp()).empty());
}

}  // namespace
}  // namespace acqfs
