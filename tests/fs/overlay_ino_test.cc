// Tests of the engine's inode numbers (st_ino): two objects that are visible
// at the same time never share a number, and an object keeps its number
// when the kernel forgets and looks it up again.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/stat.h>

#include <set>

#include "fs/overlay.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;

class OverlayIno : public acqfs::test::OverlayTest {
 protected:
  ino_t InoOf(Node* n) {
    auto st = ov_->GetAttr(n);
    if (!st.ok()) {
      ADD_FAILURE() << st.error().Message();
      return 0;
    }
    return st->st_ino;
  }
};

TEST_F(OverlayIno, DistinctObjectsHaveDistinctInos) {
  MakeFile(t_.L("a"), "a");
  MakeFile(t_.L("b"), "b");
  MakeDir(t_.L("d"));
  MakeFile(t_.U("u"), "u");
  ASSERT_NO_FATAL_FAILURE(Start());
  std::set<ino_t> inos;
  for (const char* n : {"a", "b", "d", "u"}) {
    ASSERT_OK_AND_ASSIGN(Node * node, ov_->Lookup(root(), n));
    inos.insert(InoOf(node));
  }
  inos.insert(InoOf(root()));
  EXPECT_EQ(inos.size(), 5u);
}

TEST_F(OverlayIno, RenamedFileAndNewFileAtOldNameHaveDistinctInos) {
  // `mv x y; touch x` while the kernel still holds y: both are visible at
  // once and must not look like hard links of each other.
  MakeFile(t_.L("x"), "old x");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * x, ov_->Lookup(root(), "x"));
  ASSERT_OK(ov_->Rename(root(), "x", root(), "y", 0));
  ASSERT_OK_AND_ASSIGN(auto created,
                       ov_->Create(root(), "x", 0644, O_RDWR, Me()));
  ov_->ReleaseOpen(created.first);
  ASSERT_OK_AND_ASSIGN(Node * y, ov_->Lookup(root(), "y"));
  EXPECT_EQ(y, x);
  EXPECT_NE(created.first, y);
  EXPECT_NE(InoOf(created.first), InoOf(y))
      << "new x and renamed y report the same st_ino";
  ASSERT_OK_AND_ASSIGN(auto entries, ov_->ReadDir(root()));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_NE(entries[0].ino, entries[1].ino);
}

TEST_F(OverlayIno, ExchangedEntriesKeepDistinctInosAfterForget) {
  MakeFile(t_.L("f"), "file");
  MakeDir(t_.L("d"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Lookup(root(), "d"));
  ASSERT_OK(ov_->Rename(root(), "f", root(), "d", RENAME_EXCHANGE));
  ino_t dir_ino = InoOf(d);  // the directory, now called "f"
  // The kernel forgets the file (now called "d") but keeps the directory.
  ov_->Forget(f, 1);
  ASSERT_OK_AND_ASSIGN(Node * file_again, ov_->Lookup(root(), "d"));
  EXPECT_FALSE(file_again->is_dir());
  EXPECT_NE(InoOf(file_again), dir_ino)
      << "the file and the directory report the same st_ino";
}

TEST_F(OverlayIno, HardLinkedCopyKeepsInoAfterForget) {
  MakeFile(t_.L("f"), "data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(Node * g, ov_->Link(f, root(), "g"));
  ASSERT_EQ(g, f);
  ino_t before = InoOf(f);
  EXPECT_EQ(before, Lstat(t_.L("f")).st_ino);
  ov_->Forget(f, 2);  // both lookups given back: the node is freed
  ASSERT_OK_AND_ASSIGN(Node * via_g, ov_->Lookup(root(), "g"));
  ASSERT_OK_AND_ASSIGN(Node * via_f, ov_->Lookup(root(), "f"));
  EXPECT_EQ(via_g, via_f);
  EXPECT_EQ(InoOf(via_g), before) << "st_ino changed after a forget";
}

TEST_F(OverlayIno, CopiedUpFileKeepsInoAfterForget) {
  MakeFile(t_.L("f"), "data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ino_t before = InoOf(f);
  ASSERT_OK(ov_->CopyUp(f));
  ov_->Forget(f, 1);
  ASSERT_OK_AND_ASSIGN(Node * again, ov_->Lookup(root(), "f"));
  EXPECT_EQ(InoOf(again), before);
}

}  // namespace
}  // namespace acqfs
