// Tests of the lookup rules: RootView and ResolveChild on hand-built layers.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "fs/layer.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::Lstat;
using acqfs::test::MakeDeviceWhiteout;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::SetXattr;

class Lookup : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(layers_, acqfs::test::OpenLayers(t_));
  }
  acqfs::test::TempTree t_;
  Layers layers_;
};

TEST_F(Lookup, RootViewOfPlainUpperIsMerged) {
  ASSERT_OK_AND_ASSIGN(DirView v, RootView(layers_));
  EXPECT_EQ(v.path, "");
  EXPECT_TRUE(v.upper);
  EXPECT_TRUE(v.merged());
  EXPECT_FALSE(v.xwhiteouts);
}

TEST_F(Lookup, RootViewOfOpaqueUpperIsNotMerged) {
  SetXattr(t_.upper(), "user.overlay.opaque", "y");
  ASSERT_OK_AND_ASSIGN(DirView v, RootView(layers_));
  EXPECT_TRUE(v.upper);
  EXPECT_FALSE(v.merged());
}

TEST_F(Lookup, LowerFileUnderMergedRootExists) {
  MakeFile(t_.L("f"), "lower");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "f"));
  EXPECT_TRUE(c.exists);
  EXPECT_TRUE(c.lower);
  EXPECT_FALSE(c.upper);
  EXPECT_FALSE(c.whiteout);
  EXPECT_EQ(c.lower_st.st_ino, Lstat(t_.L("f")).st_ino);
  EXPECT_EQ(c.lower_st.st_size, 5);
}

TEST_F(Lookup, MissingNameDoesNotExist) {
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "nope"));
  EXPECT_FALSE(c.exists);
  EXPECT_FALSE(c.lower);
  EXPECT_FALSE(c.upper);
  EXPECT_FALSE(c.whiteout);
}

TEST_F(Lookup, WhiteoutHidesLowerFile) {
  MakeFile(t_.L("f"), "lower");
  MakeDeviceWhiteout(t_.U("f"));
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "f"));
  EXPECT_FALSE(c.exists);
  EXPECT_TRUE(c.whiteout);
  EXPECT_FALSE(c.upper);
  EXPECT_TRUE(c.lower);  // still reported, for the caller's bookkeeping
}

TEST_F(Lookup, UpperFileHidesLowerDir) {
  MakeDir(t_.L("x"));
  MakeFile(t_.L("x/inner"), "");
  MakeFile(t_.U("x"), "upper");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "x"));
  EXPECT_TRUE(c.exists);
  EXPECT_TRUE(c.upper);
  EXPECT_FALSE(c.is_dir());
  EXPECT_TRUE(S_ISREG(c.upper_st.st_mode));
  // Even if someone treats it as a directory, the lower must not show.
  DirView v = c.AsDir("x");
  EXPECT_FALSE(v.merged());
}

TEST_F(Lookup, UpperDirMergesWithLowerDir) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/low"), "l");
  MakeDir(t_.U("d"));
  MakeFile(t_.U("d/up"), "u");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "d"));
  EXPECT_TRUE(c.exists);
  EXPECT_TRUE(c.upper);
  EXPECT_TRUE(c.lower);
  EXPECT_TRUE(c.is_dir());
  EXPECT_EQ(c.opaque, OpaqueMark::kNone);
  DirView d = c.AsDir("d");
  EXPECT_EQ(d.path, "d");
  EXPECT_TRUE(d.upper);
  EXPECT_TRUE(d.merged());
  ASSERT_OK_AND_ASSIGN(ChildInfo low, ResolveChild(layers_, d, "low"));
  EXPECT_TRUE(low.exists);
  EXPECT_TRUE(low.lower);
  ASSERT_OK_AND_ASSIGN(ChildInfo up, ResolveChild(layers_, d, "up"));
  EXPECT_TRUE(up.exists);
  EXPECT_TRUE(up.upper);
  EXPECT_FALSE(up.lower);
}

TEST_F(Lookup, OpaqueDirStopsLower) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/low"), "l");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), "user.overlay.opaque", "y");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "d"));
  EXPECT_TRUE(c.exists);
  EXPECT_TRUE(c.upper);
  EXPECT_EQ(c.opaque, OpaqueMark::kOpaque);
  DirView d = c.AsDir("d");
  EXPECT_TRUE(d.upper);
  EXPECT_FALSE(d.merged());
  ASSERT_OK_AND_ASSIGN(ChildInfo low, ResolveChild(layers_, d, "low"));
  EXPECT_FALSE(low.exists);
  EXPECT_FALSE(low.lower);
}

TEST_F(Lookup, OpaqueMarkInOtherNamespaceDoesNotStopLower) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/low"), "l");
  MakeDir(t_.U("d"));
  if (acqfs::test::IsRoot()) SetXattr(t_.U("d"), "trusted.overlay.opaque", "y");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "d"));
  EXPECT_EQ(c.opaque, OpaqueMark::kNone);
  ASSERT_OK_AND_ASSIGN(ChildInfo low,
                       ResolveChild(layers_, c.AsDir("d"), "low"));
  EXPECT_TRUE(low.exists);
}

TEST_F(Lookup, LowerOnlyWhenParentMerged) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/f"), "l");
  MakeDir(t_.U("d"));
  MakeFile(t_.U("d/g"), "u");
  DirView not_merged;
  not_merged.path = "d";
  not_merged.upper = true;
  not_merged.lower = 0;
  ASSERT_OK_AND_ASSIGN(ChildInfo f, ResolveChild(layers_, not_merged, "f"));
  EXPECT_FALSE(f.exists);
  EXPECT_FALSE(f.lower);
  ASSERT_OK_AND_ASSIGN(ChildInfo g, ResolveChild(layers_, not_merged, "g"));
  EXPECT_TRUE(g.exists);

  DirView merged = not_merged;
  merged.lower = LowerBit(0);
  ASSERT_OK_AND_ASSIGN(ChildInfo f2, ResolveChild(layers_, merged, "f"));
  EXPECT_TRUE(f2.exists);
  EXPECT_TRUE(f2.lower);
}

TEST_F(Lookup, LowerOnlyDirectoryIsMergedWithoutUpper) {
  MakeDir(t_.L("d"));
  MakeDir(t_.L("d/e"));
  MakeFile(t_.L("d/e/f"), "deep");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo d, ResolveChild(layers_, root, "d"));
  DirView dv = d.AsDir("d");
  EXPECT_FALSE(dv.upper);
  EXPECT_TRUE(dv.merged());
  ASSERT_OK_AND_ASSIGN(ChildInfo e, ResolveChild(layers_, dv, "e"));
  ASSERT_OK_AND_ASSIGN(ChildInfo f, ResolveChild(layers_, e.AsDir("d/e"), "f"));
  EXPECT_TRUE(f.exists);
  EXPECT_EQ(f.lower_st.st_size, 4);
}

TEST_F(Lookup, XattrWhiteoutInDirMarkedX) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/f"), "lower");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), "user.overlay.opaque", "x");
  MakeFile(t_.U("d/f"), "");
  SetXattr(t_.U("d/f"), "user.overlay.whiteout", "");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo d, ResolveChild(layers_, root, "d"));
  EXPECT_EQ(d.opaque, OpaqueMark::kMayHoldXattrWhiteouts);
  DirView dv = d.AsDir("d");
  EXPECT_TRUE(dv.xwhiteouts);
  EXPECT_TRUE(dv.merged());  // "x" is not opaque
  ASSERT_OK_AND_ASSIGN(ChildInfo f, ResolveChild(layers_, dv, "f"));
  EXPECT_FALSE(f.exists);
  EXPECT_TRUE(f.whiteout);
  EXPECT_FALSE(f.upper);
}

TEST_F(Lookup, XattrWhiteoutOutsideDirMarkedXIsAnOrdinaryFile) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/f"), "lower");
  MakeDir(t_.U("d"));
  MakeFile(t_.U("d/f"), "");
  SetXattr(t_.U("d/f"), "user.overlay.whiteout", "");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo d, ResolveChild(layers_, root, "d"));
  ASSERT_OK_AND_ASSIGN(ChildInfo f, ResolveChild(layers_, d.AsDir("d"), "f"));
  EXPECT_TRUE(f.exists);
  EXPECT_TRUE(f.upper);
  EXPECT_FALSE(f.whiteout);
  EXPECT_EQ(f.upper_st.st_size, 0);
}

TEST_F(Lookup, NonEmptyFileWithWhiteoutXattrInDirMarkedXIsNotAWhiteout) {
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), "user.overlay.opaque", "x");
  MakeFile(t_.U("d/f"), "data");
  SetXattr(t_.U("d/f"), "user.overlay.whiteout", "");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo d, ResolveChild(layers_, root, "d"));
  ASSERT_OK_AND_ASSIGN(ChildInfo f, ResolveChild(layers_, d.AsDir("d"), "f"));
  EXPECT_TRUE(f.exists);
  EXPECT_TRUE(f.upper);
}

TEST_F(Lookup, WhiteoutInLowerIsNotSpecial) {
  // Only the upper's whiteouts delete names; the lower is plain data. (The
  // lower here is not a stacked overlay.) A 0/0 device in the lower exists.
  MakeDeviceWhiteout(t_.L("dev"));
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "dev"));
  EXPECT_TRUE(c.lower);
  EXPECT_FALSE(c.whiteout);
}

TEST_F(Lookup, OpaqueDirStopsLowerInTrustedNamespace) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "trusted.* needs root (the tests run as root, as CI does)";
  // A reader's view (the fixture's Layers holds the layers' claim, which a
  // second serving Layers::Open would be refused).
  ASSERT_OK_AND_ASSIGN(
      Layers trusted,
      Layers::OpenForReading(t_.lower(), t_.upper(), XattrNamespace::kTrusted));
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/low"), "l");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), "trusted.overlay.opaque", "y");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(trusted));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(trusted, root, "d"));
  EXPECT_EQ(c.opaque, OpaqueMark::kOpaque);
  ASSERT_OK_AND_ASSIGN(ChildInfo low,
                       ResolveChild(trusted, c.AsDir("d"), "low"));
  EXPECT_FALSE(low.exists);
  // The user-namespace reader of the same tree does not see the mark.
  ASSERT_OK_AND_ASSIGN(ChildInfo cu, ResolveChild(layers_, root, "d"));
  EXPECT_EQ(cu.opaque, OpaqueMark::kNone);
}

}  // namespace
}  // namespace acqfs
