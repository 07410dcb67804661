// The merge rule of one name down the layers (fs/layer_chain.h): NameChain
// on hand-made entries, and ReadLayerEntry on real directories, an entry
// that vanishes while it is read included (tests/fs/vanish_hook.h).
#include "fs/layer_chain.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "common/sys.h"
#include "harness/layer_tree.h"
#include "vanish_hook.h"

namespace acqfs {
namespace {

using acqfs::test::MakeDeviceWhiteout;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::SetXattr;
using acqfs::test::VanishHook;
using acqfs::test::VanishWhen;

LayerEntry Entry(LayerEntry::Kind kind, ino_t ino = 0, uint64_t origin = 0,
                 OpaqueMark mark = OpaqueMark::kNone) {
  LayerEntry e;
  e.kind = kind;
  e.st.st_ino = ino;
  e.st.st_mode = kind == LayerEntry::kDir        ? S_IFDIR
                 : kind == LayerEntry::kWhiteout ? S_IFCHR
                                                 : S_IFREG;
  e.origin = origin;
  e.opaque = mark;
  return e;
}
constexpr auto kAbsent = LayerEntry::kAbsent;
constexpr auto kWhiteout = LayerEntry::kWhiteout;
constexpr auto kNonDir = LayerEntry::kNonDir;
constexpr auto kDir = LayerEntry::kDir;
NameChain::LayerSet Bits(std::initializer_list<unsigned> layers) {
  NameChain::LayerSet s = 0;
  for (unsigned i : layers) s |= NameChain::Bit(i);
  return s;
}

TEST(NameChain, AnAbsentEntryIsSkipped) {
  NameChain c;
  EXPECT_TRUE(c.Add(3, Entry(kAbsent), 0));
  EXPECT_FALSE(c.found());
  EXPECT_TRUE(c.wants_origin());
  EXPECT_TRUE(c.Add(2, Entry(kNonDir, 7), 107) == false);
  EXPECT_TRUE(c.found());
  EXPECT_EQ(c.top_layer(), 2u);
}

TEST(NameChain, AWhiteoutOnTopHidesTheNameBelow) {
  NameChain c;
  EXPECT_FALSE(c.Add(2, Entry(kWhiteout, 9), 0));
  EXPECT_TRUE(c.whited_out());
  EXPECT_FALSE(c.found());
  EXPECT_EQ(c.top().st.st_ino, 9u);
  // Nothing below counts.
  EXPECT_FALSE(c.Add(1, Entry(kNonDir, 5), 105));
  EXPECT_FALSE(c.found());
}

TEST(NameChain, ANonDirectoryHidesEverythingBelowAndKeepsItsMarker) {
  NameChain c;
  EXPECT_FALSE(c.Add(3, Entry(kNonDir, 7, /*origin=*/44), 107));
  EXPECT_FALSE(c.is_dir());
  EXPECT_EQ(c.number(), 44u);
  EXPECT_TRUE(c.number_known());
  EXPECT_EQ(c.dirs(), 0u);
  NameChain d;
  d.Add(3, Entry(kNonDir, 7), 107);
  EXPECT_EQ(d.number(), 107u);  // its own, without a marker
}

TEST(NameChain, ADirectoryMergesDownToTheFirstOpaqueOne) {
  NameChain c;
  EXPECT_TRUE(c.Add(4, Entry(kDir, 40), 140));
  EXPECT_TRUE(c.Add(3, Entry(kAbsent), 0));
  EXPECT_TRUE(
      c.Add(2, Entry(kDir, 20, 0, OpaqueMark::kMayHoldXattrWhiteouts), 120));
  EXPECT_FALSE(c.Add(1, Entry(kDir, 10, 0, OpaqueMark::kOpaque), 110));
  EXPECT_TRUE(c.is_dir());
  EXPECT_EQ(c.top_layer(), 4u);
  EXPECT_EQ(c.dirs(), Bits({4, 2, 1}));
  EXPECT_EQ(c.xattr_whiteouts(), Bits({2}));
  EXPECT_TRUE(c.stopped());
  // The lowest directory's number: the one it was merged with.
  EXPECT_EQ(c.number(), 110u);
  EXPECT_TRUE(c.number_known());
}

TEST(NameChain, AnOpaqueTopDirectoryMergesWithNothing) {
  NameChain c;
  EXPECT_FALSE(c.Add(2, Entry(kDir, 20, 0, OpaqueMark::kOpaque), 120));
  EXPECT_EQ(c.dirs(), Bits({2}));
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.number(), 120u);
}

TEST(NameChain, AWhiteoutOrANonDirectoryBelowStopsTheChain) {
  for (auto below : {kWhiteout, kNonDir}) {
    NameChain c;
    EXPECT_TRUE(c.Add(3, Entry(kDir, 30), 130));
    EXPECT_TRUE(c.Add(2, Entry(kDir, 20), 120));
    EXPECT_FALSE(c.Add(1, Entry(below, 10), 110));
    EXPECT_EQ(c.dirs(), Bits({3, 2}));
    EXPECT_TRUE(c.stopped());
    EXPECT_FALSE(c.whited_out());
    EXPECT_EQ(c.top().st.st_ino, 30u);
    EXPECT_EQ(c.number(), 120u);  // the lowest directory of the chain
    EXPECT_TRUE(c.number_known());
  }
}

TEST(NameChain, TheFirstOriginDownTheChainGivesTheNumber) {
  NameChain c;
  EXPECT_TRUE(c.wants_origin());
  EXPECT_TRUE(c.Add(3, Entry(kDir, 30), 130));
  EXPECT_TRUE(c.wants_origin());
  EXPECT_FALSE(c.number_known());  // a directory below may still give one
  EXPECT_TRUE(c.Add(2, Entry(kDir, 20, /*origin=*/77), 120));
  EXPECT_FALSE(c.wants_origin());
  EXPECT_TRUE(c.number_known());
  EXPECT_TRUE(c.Add(1, Entry(kDir, 10, /*origin=*/88), 110));
  EXPECT_EQ(c.number(), 77u);
  EXPECT_FALSE(c.stopped());
}

TEST(NameChain, TheHostGivesItsOwnNumberAndEndsTheChain) {
  NameChain c;
  EXPECT_TRUE(c.Add(1, Entry(kDir, 10), 110));
  // The host's entry is plain: its "origin" and marker mean nothing.
  EXPECT_FALSE(c.Add(0, Entry(kDir, 5, 99, OpaqueMark::kOpaque), 5, true));
  EXPECT_EQ(c.dirs(), Bits({1, 0}));
  EXPECT_EQ(c.number(), 5u);
  EXPECT_FALSE(c.stopped());
  EXPECT_TRUE(c.number_known());
}

// ReadLayerEntry on a real directory.
class ReadEntry : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeDir(dir_);
    MakeDir(grave_);
    ASSERT_OK_AND_ASSIGN(fd_, sys::OpenDirPath(dir_, O_PATH));
  }
  Result<LayerEntry> Read(const std::string& name, EntryRead how = {}) {
    return ReadLayerEntry(format_, fd_.get(), name, how, dir_ + "/" + name);
  }
  acqfs::test::TempTree t_;
  std::string dir_ = t_.root() + "/layer";
  std::string grave_ = t_.root() + "/grave";
  LayerFormat format_{XattrNamespace::kUser};
  UniqueFd fd_;
};

TEST_F(ReadEntry, TellsWhiteoutsNonDirectoriesAndDirectories) {
  MakeDeviceWhiteout(dir_ + "/w");
  MakeFile(dir_ + "/f", "x");
  SetXattr(dir_ + "/f", "user.overlay.acqfs.origin", "1234");
  MakeDir(dir_ + "/d");
  SetXattr(dir_ + "/d", "user.overlay.opaque", "y");
  ASSERT_OK_AND_ASSIGN(LayerEntry w, Read("w"));
  EXPECT_EQ(w.kind, LayerEntry::kWhiteout);
  ASSERT_OK_AND_ASSIGN(LayerEntry f, Read("f", {.origin = true}));
  EXPECT_EQ(f.kind, LayerEntry::kNonDir);
  EXPECT_EQ(f.origin, 1234u);
  ASSERT_OK_AND_ASSIGN(LayerEntry f2, Read("f"));
  EXPECT_EQ(f2.origin, 0u);  // not asked for
  ASSERT_OK_AND_ASSIGN(LayerEntry d, Read("d"));
  EXPECT_EQ(d.kind, LayerEntry::kDir);
  EXPECT_EQ(d.opaque, OpaqueMark::kOpaque);
  ASSERT_OK_AND_ASSIGN(LayerEntry none, Read("none"));
  EXPECT_EQ(none.kind, LayerEntry::kAbsent);
}

TEST_F(ReadEntry, AnXattrWhiteoutCountsOnlyWhereTheDirectorySaysSo) {
  MakeFile(dir_ + "/x", "");
  SetXattr(dir_ + "/x", "user.overlay.whiteout", "");
  ASSERT_OK_AND_ASSIGN(LayerEntry plain_dir, Read("x"));
  EXPECT_EQ(plain_dir.kind, LayerEntry::kNonDir);
  ASSERT_OK_AND_ASSIGN(LayerEntry xw, Read("x", {.xattr_whiteouts = true}));
  EXPECT_EQ(xw.kind, LayerEntry::kWhiteout);
}

TEST_F(ReadEntry, TheHostsObjectsArePlain) {
  MakeDeviceWhiteout(dir_ + "/w");
  MakeDir(dir_ + "/d");
  SetXattr(dir_ + "/d", "user.overlay.opaque", "y");
  ASSERT_OK_AND_ASSIGN(LayerEntry w, Read("w", {.plain = true}));
  EXPECT_EQ(w.kind, LayerEntry::kNonDir);
  ASSERT_OK_AND_ASSIGN(LayerEntry d,
                       Read("d", {.plain = true, .origin = true}));
  EXPECT_EQ(d.kind, LayerEntry::kDir);
  EXPECT_EQ(d.opaque, OpaqueMark::kNone);
}

// Listed, then gone before its stat, or between its stat and the read of a
// marker: absent, not an error.
TEST_F(ReadEntry, AnEntryThatVanishesIsAbsent) {
  for (VanishWhen when : {VanishWhen::kBeforeStat, VanishWhen::kAfterStat}) {
    MakeDir(dir_ + "/d");
    VanishHook hook(dir_, "d", when, grave_);
    ASSERT_OK_AND_ASSIGN(LayerEntry d, Read("d", {.origin = true}));
    EXPECT_TRUE(hook.fired());
    EXPECT_EQ(d.kind, LayerEntry::kAbsent);
    ASSERT_EQ(::rmdir((grave_ + "/d").c_str()), 0);
  }
  // An xattr whiteout candidate gone before its whiteout xattr is read.
  MakeFile(dir_ + "/x", "");
  VanishHook hook(dir_, "x", VanishWhen::kAfterStat, grave_);
  ASSERT_OK_AND_ASSIGN(LayerEntry x, Read("x", {.xattr_whiteouts = true}));
  EXPECT_TRUE(hook.fired());
  EXPECT_EQ(x.kind, LayerEntry::kAbsent);
}

}  // namespace
}  // namespace acqfs
