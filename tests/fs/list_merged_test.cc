// Tests of ListMerged, the merged directory listing.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <set>

#include "fs/layer.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::Lstat;
using acqfs::test::MakeDeviceWhiteout;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::Names;
using acqfs::test::SetXattr;
using Strings = std::vector<std::string>;

class ListMergedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(layers_, acqfs::test::OpenLayers(t_));
  }
  std::map<std::string, MergedEntry> ByName(const std::vector<MergedEntry>& v) {
    std::map<std::string, MergedEntry> m;
    for (const auto& e : v) {
      EXPECT_TRUE(m.emplace(e.name, e).second) << "duplicate " << e.name;
    }
    return m;
  }
  acqfs::test::TempTree t_;
  Layers layers_;
};

TEST_F(ListMergedTest, MergesBothLayersAndDropsWhiteouts) {
  MakeFile(t_.L("lower_only"), "l");
  MakeFile(t_.L("shadowed"), "l");
  MakeFile(t_.L("deleted"), "l");
  MakeDir(t_.L("dir"));
  MakeFile(t_.U("upper_only"), "u");
  MakeFile(t_.U("shadowed"), "u");
  MakeDeviceWhiteout(t_.U("deleted"));
  MakeDeviceWhiteout(t_.U("deleted_upper_only"));  // whiteout over nothing
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, root));
  EXPECT_EQ(Names(entries),
            (Strings{"dir", "lower_only", "shadowed", "upper_only"}));
  auto m = ByName(entries);
  EXPECT_TRUE(m["shadowed"].in_upper);
  EXPECT_TRUE(m["shadowed"].in_lower);
  EXPECT_EQ(m["shadowed"].upper_ino, Lstat(t_.U("shadowed")).st_ino);
  EXPECT_EQ(m["shadowed"].lower_ino, Lstat(t_.L("shadowed")).st_ino);
  EXPECT_FALSE(m["lower_only"].in_upper);
  EXPECT_TRUE(m["lower_only"].in_lower);
  EXPECT_EQ(m["lower_only"].lower_ino, Lstat(t_.L("lower_only")).st_ino);
  EXPECT_TRUE(m["upper_only"].in_upper);
  EXPECT_FALSE(m["upper_only"].in_lower);
  EXPECT_EQ(m["dir"].type, DT_DIR);
  EXPECT_EQ(m["upper_only"].type, DT_REG);
}

TEST_F(ListMergedTest, ShadowedLowerNameAppearsOnceWithInLowerSet) {
  MakeFile(t_.L("a"), "l");
  MakeDir(t_.L("b"));
  MakeFile(t_.U("a"), "u");
  MakeFile(t_.U("b"), "u");  // an upper file over a lower dir
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, root));
  ASSERT_EQ(entries.size(), 2u);
  auto m = ByName(entries);
  EXPECT_TRUE(m["a"].in_upper && m["a"].in_lower);
  EXPECT_TRUE(m["b"].in_upper && m["b"].in_lower);
  EXPECT_EQ(m["b"].type, DT_REG);  // the upper's type wins
}

TEST_F(ListMergedTest, OpaqueDirectoryListsOnlyTheUpper) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/low1"), "");
  MakeFile(t_.L("d/low2"), "");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), "user.overlay.opaque", "y");
  MakeFile(t_.U("d/up"), "");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "d"));
  ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, c.AsDir("d")));
  EXPECT_EQ(Names(entries), (Strings{"up"}));
  EXPECT_FALSE(entries[0].in_lower);
}

TEST_F(ListMergedTest, OpaqueRootListsOnlyTheUpper) {
  MakeFile(t_.L("low"), "");
  MakeFile(t_.U("up"), "");
  SetXattr(t_.upper(), "user.overlay.opaque", "y");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, root));
  EXPECT_EQ(Names(entries), (Strings{"up"}));
}

TEST_F(ListMergedTest, LowerOnlyDirectoryListsTheLower) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/a"), "");
  MakeDir(t_.L("d/b"));
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "d"));
  ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, c.AsDir("d")));
  EXPECT_EQ(Names(entries), (Strings{"a", "b"}));
  for (const auto& e : entries) {
    EXPECT_FALSE(e.in_upper);
    EXPECT_TRUE(e.in_lower);
  }
}

TEST_F(ListMergedTest, EmptyUpperOverEmptyLowerListsNothing) {
  MakeDir(t_.L("d"));
  MakeDir(t_.U("d"));
  MakeDeviceWhiteout(t_.U("d/gone"));
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "d"));
  ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, c.AsDir("d")));
  EXPECT_TRUE(entries.empty());
}

TEST_F(ListMergedTest, XattrWhiteoutsDroppedInDirMarkedX) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/hidden"), "lower");
  MakeFile(t_.L("d/kept"), "lower");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), "user.overlay.opaque", "x");
  MakeFile(t_.U("d/hidden"), "");
  SetXattr(t_.U("d/hidden"), "user.overlay.whiteout", "");
  MakeFile(t_.U("d/empty_plain"), "");
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "d"));
  ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, c.AsDir("d")));
  EXPECT_EQ(Names(entries), (Strings{"empty_plain", "kept"}));
}

TEST_F(ListMergedTest, TenThousandEntriesSplitOverBothLayers) {
  // Lower holds f00000..f05999, upper f04000..f09999 (2,000 shadowed), and
  // the upper whites out f00000..f00099 of the lower.
  auto name = [](int i) {
    char b[16];
    std::snprintf(b, sizeof b, "f%05d", i);
    return std::string(b);
  };
  MakeDir(t_.L("big"));
  MakeDir(t_.U("big"));
  for (int i = 0; i < 6000; ++i) MakeFile(t_.L("big/" + name(i)), "");
  for (int i = 4000; i < 10000; ++i) MakeFile(t_.U("big/" + name(i)), "");
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers_));
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers_, root, "big"));
  DirView big = c.AsDir("big");
  ASSERT_TRUE(big.merged());
  {
    ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, big));
    EXPECT_EQ(entries.size(), 10000u);
    std::set<std::string> names;
    int both = 0;
    for (const auto& e : entries) {
      names.insert(e.name);
      if (e.in_upper && e.in_lower) ++both;
    }
    EXPECT_EQ(names.size(), 10000u);
    EXPECT_EQ(both, 2000);
    EXPECT_EQ(*names.begin(), "f00000");
    EXPECT_EQ(*names.rbegin(), "f09999");
  }
  for (int i = 0; i < 100; ++i) MakeDeviceWhiteout(t_.U("big/" + name(i)));
  ASSERT_OK_AND_ASSIGN(auto entries, ListMerged(layers_, big));
  EXPECT_EQ(entries.size(), 9900u);
  std::set<std::string> names;
  for (const auto& e : entries) names.insert(e.name);
  EXPECT_EQ(names.size(), 9900u);
  EXPECT_EQ(names.count("f00099"), 0u);
  EXPECT_EQ(names.count("f00100"), 1u);
}

}  // namespace
}  // namespace acqfs
