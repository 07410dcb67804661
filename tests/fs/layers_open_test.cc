// Tests of Layers::Open: the directories it opens and the work area it
// prepares.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/layer.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::Exists;
using acqfs::test::ListDir;
using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::ReadFile;
using acqfs::test::TempTree;
using Strings = std::vector<std::string>;

TEST(LayersOpen, CreatesEmptyAcqfsTmpInWorkdir) {
  TempTree t;
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  struct stat st = Lstat(t.tmp());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(ListDir(t.tmp()).empty());
  EXPECT_EQ(l.tmp_path, t.tmp());
  EXPECT_TRUE(l.tmp.is_valid());
  EXPECT_EQ(l.format.ns(), XattrNamespace::kUser);
  EXPECT_EQ(l.lower.root_path(), t.lower());
  EXPECT_EQ(l.upper.root_path(), t.upper());
  // Nothing is created in the layers themselves.
  EXPECT_TRUE(ListDir(t.lower()).empty());
  EXPECT_TRUE(ListDir(t.upper()).empty());
  EXPECT_EQ(ListDir(t.work()), (Strings{"acqfs-tmp"}));
}

TEST(LayersOpen, RemovesLeftoversFromAcqfsTmp) {
  TempTree t;
  // A crashed daemon left a half-written copy and a half-built directory.
  MakeDir(t.tmp(), 0700);
  MakeFile(t.tmp() + "/#acqfs.0123456789abcdef", "half");
  const std::string half_dir = t.tmp() + "/#acqfs.fedcba9876543210";
  MakeDir(half_dir, 0700);
  MakeFile(half_dir + "/f", "x");
  MakeDir(half_dir + "/sub", 0700);
  MakeFile(half_dir + "/sub/g", "y");
  ASSERT_EQ(::chmod((half_dir + "/sub").c_str(), 0), 0);
  ASSERT_EQ(::chmod(half_dir.c_str(), 0500), 0);
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(ListDir(t.tmp()).empty());
  EXPECT_TRUE(l.tmp.is_valid());
}

TEST(LayersOpen, LeavesTheKernelWorkDirAndUpperAlone) {
  TempTree t;
  MakeDir(t.work() + "/work");
  MakeFile(t.work() + "/work/kernel-junk", "k");
  MakeFile(t.U("keep"), "u");
  MakeDir(t.tmp(), 0700);
  MakeFile(t.tmp() + "/#acqfs.1", "junk");
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_EQ(ReadFile(t.work() + "/work/kernel-junk"), "k");
  EXPECT_EQ(ReadFile(t.U("keep")), "u");
  EXPECT_EQ(ListDir(t.work()), (Strings{"acqfs-tmp", "work"}));
}

TEST(LayersOpen, AcqfsTmpSymlinkIsReplacedWithoutFollowingIt) {
  TempTree t;
  MakeDir(t.root() + "/victim");
  MakeFile(t.root() + "/victim/precious", "keep me");
  ASSERT_EQ(::symlink((t.root() + "/victim").c_str(), t.tmp().c_str()), 0);
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(S_ISDIR(Lstat(t.tmp()).st_mode));
  EXPECT_EQ(ReadFile(t.root() + "/victim/precious"), "keep me");
}

TEST(LayersOpen, AcqfsTmpThatIsAFileIsReplaced) {
  TempTree t;
  MakeFile(t.tmp(), "junk");
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(S_ISDIR(Lstat(t.tmp()).st_mode));
  EXPECT_TRUE(ListDir(t.tmp()).empty());
}

TEST(LayersOpen, ReopeningEmptiesAcqfsTmpAgain) {
  TempTree t;
  { ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t)); }
  MakeFile(t.tmp() + "/#acqfs.leftover", "x");
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(ListDir(t.tmp()).empty());
}

// One daemon per upper layer and work area: a second Layers::Open of the
// same directories (a second daemon) is refused, names the pid holding
// them, and touches nothing in the work area, where the first keeps the
// data of files held open after their last name.
TEST(LayersOpen, ASecondOpenOfTheSameLayersIsRefusedAndTouchesNothing) {
  TempTree t;
  ASSERT_OK_AND_ASSIGN(Layers first, acqfs::test::OpenLayers(t));
  MakeFile(t.tmp() + "/#acqfs.kept", "data of a file held open");
  auto second = acqfs::test::OpenLayers(t);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.err(), EBUSY);
  const std::string msg = second.error().Message();
  EXPECT_NE(msg.find(t.upper()), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(::getpid())), std::string::npos)
      << msg;
  EXPECT_EQ(ReadFile(t.tmp() + "/#acqfs.kept"), "data of a file held open");
  auto holder = LayersHolder(t.upper());
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(*holder, ::getpid());
  // Another upper layer with the same work area: refused too.
  MakeDir(t.root() + "/upper2");
  auto shared_work = Layers::Open(t.lower(), t.root() + "/upper2", t.work(),
                                  XattrNamespace::kUser);
  ASSERT_FALSE(shared_work.ok());
  EXPECT_EQ(shared_work.err(), EBUSY);
  EXPECT_NE(shared_work.error().Message().find(t.work()), std::string::npos)
      << shared_work.error().Message();
  EXPECT_EQ(ReadFile(t.tmp() + "/#acqfs.kept"), "data of a file held open");
  // Once the first is gone, the layers open again (and are emptied).
  { Layers gone = std::move(first); }
  EXPECT_FALSE(LayersHolder(t.upper()).has_value());
  ASSERT_OK_AND_ASSIGN(Layers again, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(ListDir(t.tmp()).empty());
}

TEST(LayersOpen, MissingLowerFails) {
  TempTree t;
  auto r = Layers::Open(t.root() + "/nope", t.upper(), t.work(),
                        XattrNamespace::kUser);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.err(), ENOENT);
  EXPECT_FALSE(Exists(t.tmp()));
}

TEST(LayersOpen, LowerThatIsAFileFails) {
  TempTree t;
  MakeFile(t.root() + "/file", "");
  auto r = Layers::Open(t.root() + "/file", t.upper(), t.work(),
                        XattrNamespace::kUser);
  EXPECT_EQ(r.err(), ENOTDIR);
}

TEST(LayersOpen, RecordsTheNamespace) {
  TempTree t;
  ASSERT_OK_AND_ASSIGN(Layers l,
                       acqfs::test::OpenLayers(t, XattrNamespace::kTrusted));
  EXPECT_EQ(l.format.ns(), XattrNamespace::kTrusted);
  EXPECT_EQ(l.format.OpaqueKey(), "trusted.overlay.opaque");
}

}  // namespace
}  // namespace acqfs
