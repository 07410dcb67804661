// SquashLayers (fs/layer_squash.h) on hand-built stacks, without a mount:
// the topmost entry of each name decides (whiteouts stay whiteouts, a
// non-directory is hard-linked, a directory is made anew and merges down its
// chain), and the merged view (ResolveChild over every listed name, the
// numbers reported included) is the same after the squash as before. Also
// what ResolveChild and SquashLayers do with an entry that vanishes while
// they read it (tests/fs/vanish_hook.h).
#include "fs/layer_squash.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "common/sys.h"
#include "fs/layer.h"
#include "harness/layer_tree.h"
#include "vanish_hook.h"

namespace acqfs {
namespace {

using acqfs::test::GetXattr;
using acqfs::test::Lstat;
using acqfs::test::MakeDeviceWhiteout;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::MakeSymlink;
using acqfs::test::ReadFile;
using acqfs::test::ReadLink;
using acqfs::test::SetTimes;
using acqfs::test::SetXattr;
using acqfs::test::VanishHook;
using acqfs::test::VanishWhen;

constexpr const char* kOpaque = "user.overlay.opaque";
constexpr const char* kOrigin = "user.overlay.acqfs.origin";

class Squash : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 1; i <= 3; ++i) MakeDir(F(i));
    MakeDir(out_);
    MakeDir(grave_);
  }
  // Frozen layer i's directory, or a path in it.
  std::string F(int i, const std::string& rel = "") const {
    std::string p = t_.root() + "/f" + std::to_string(i);
    return rel.empty() ? p : p + "/" + rel;
  }
  std::string O(const std::string& rel) const { return out_ + "/" + rel; }

  Result<Layers> Open(const std::vector<std::string>& frozen) {
    return Layers::OpenForReading(t_.lower(), t_.upper(), XattrNamespace::kUser,
                                  frozen);
  }
  // The merged view: path -> type, number reported, mode and content.
  std::map<std::string, std::string> View(const std::vector<std::string>& fr) {
    std::map<std::string, std::string> out;
    auto layers = Open(fr);
    EXPECT_TRUE(layers.ok());
    if (!layers) return out;
    auto root = RootView(*layers);
    EXPECT_TRUE(root.ok());
    if (root) Describe(*layers, *root, &out);
    return out;
  }
  void Describe(const Layers& l, const DirView& dir,
                std::map<std::string, std::string>* out) {
    auto ents = ListMerged(l, dir);
    ASSERT_TRUE(ents.ok()) << ents.error().Message();
    for (const MergedEntry& e : *ents) {
      auto c = ResolveChild(l, dir, e.name);
      ASSERT_TRUE(c.ok()) << c.error().Message();
      ASSERT_TRUE(c->exists) << e.name;
      const std::string rel = sys::Join(dir.path, e.name);
      const struct stat& st = c->upper ? c->upper_st : c->lower_st;
      std::string d =
          std::to_string(st.st_mode) + " #" + std::to_string(c->lower_ino);
      if (S_ISREG(st.st_mode))
        d += " " + ReadFile(l.LowerLayer(c->lower_layer).Shown(rel));
      (*out)[rel] = d;
      if (c->is_dir()) Describe(l, c->AsDir(rel), out);
    }
  }
  // Squashes frozen layers bottom..top of `frozen` into out_.
  Result<SquashStats> Run(const std::vector<std::string>& frozen,
                          unsigned bottom, unsigned top) {
    auto layers = Open(frozen);
    if (!layers) return layers.error();
    return SquashLayers(*layers, bottom, top, out_);
  }
  // Squashes all three frozen layers and checks the view did not change.
  void SquashAllKeepsTheView() {
    auto before = View({F(1), F(2), F(3)});
    ASSERT_OK(Run({F(1), F(2), F(3)}, 1, 3));
    EXPECT_EQ(View({out_}), before);
  }

  acqfs::test::TempTree t_;
  std::string out_ = t_.root() + "/out";
  std::string grave_ = t_.root() + "/grave";
};

bool IsWhiteout(const std::string& path) {
  struct stat st = Lstat(path);
  return S_ISCHR(st.st_mode) && st.st_rdev == 0;
}

TEST_F(Squash, WhiteoutsOverLowerFilesStayWhiteouts) {
  MakeFile(t_.L("f"), "host");
  MakeFile(t_.L("g"), "host");
  MakeFile(F(1, "f"), "one");
  MakeDeviceWhiteout(F(2, "f"));
  MakeDeviceWhiteout(F(1, "g"));
  auto before = View({F(1), F(2), F(3)});
  EXPECT_EQ(before.count("f") + before.count("g"), 0u);
  ASSERT_OK_AND_ASSIGN(SquashStats stats, Run({F(1), F(2), F(3)}, 1, 3));
  EXPECT_EQ(stats.whiteouts, 2u);
  EXPECT_TRUE(IsWhiteout(O("f")));
  EXPECT_TRUE(IsWhiteout(O("g")));
  EXPECT_EQ(View({out_}), before);
}

TEST_F(Squash, AnXattrWhiteoutBecomesADeviceWhiteout) {
  MakeFile(t_.L("f"), "host");
  SetXattr(F(2), kOpaque, "x");
  MakeFile(F(2, "f"), "");
  SetXattr(F(2, "f"), "user.overlay.whiteout", "");
  SquashAllKeepsTheView();
  EXPECT_TRUE(IsWhiteout(O("f")));
}

TEST_F(Squash, AnOpaqueDirectoryHidesTheDirectoriesBelowIt) {
  MakeFile(t_.L("d/h"), "host");
  MakeFile(F(1, "d/a"), "a");
  MakeFile(F(2, "d/b"), "b");
  SetXattr(F(2, "d"), kOpaque, "y");
  MakeFile(F(3, "d/c"), "c");
  SquashAllKeepsTheView();
  EXPECT_EQ(acqfs::test::ListDir(O("d")), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(GetXattr(O("d"), kOpaque), "y");
}

TEST_F(Squash, ADirectoryMergingWithTheOneBelowStaysTransparent) {
  MakeFile(t_.L("d/h"), "host");
  MakeFile(F(1, "d/a"), "a");
  MakeFile(F(3, "d/c"), "c");
  SquashAllKeepsTheView();
  EXPECT_EQ(acqfs::test::ListDir(O("d")), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(GetXattr(O("d"), kOpaque), std::nullopt);
}

TEST_F(Squash, ASquashOfTheUpperLayersOnlyKeepsTheView) {
  MakeFile(F(1, "d/a"), "a");
  MakeFile(F(2, "d/b"), "b");
  MakeFile(F(3, "d/c"), "c");
  SetXattr(F(3, "d"), kOpaque, "y");
  auto before = View({F(1), F(2), F(3)});
  ASSERT_OK(Run({F(1), F(2), F(3)}, 2, 3));
  EXPECT_EQ(View({F(1), out_}), before);
  EXPECT_EQ(acqfs::test::ListDir(O("d")), (std::vector<std::string>{"c"}));
}

TEST_F(Squash, ADirectoryReplacedByAFileIsTheFile) {
  MakeFile(F(1, "d/a"), "a");
  MakeFile(F(2, "d"), "now a file");
  SquashAllKeepsTheView();
  EXPECT_TRUE(S_ISREG(Lstat(O("d")).st_mode));
  EXPECT_EQ(Lstat(O("d")).st_ino, Lstat(F(2, "d")).st_ino);
}

TEST_F(Squash, AFileReplacedByADirectoryIsAnOpaqueDirectory) {
  MakeFile(F(1, "f"), "a file");
  MakeFile(F(2, "f/x"), "x");
  SquashAllKeepsTheView();
  ASSERT_TRUE(S_ISDIR(Lstat(O("f")).st_mode));
  EXPECT_EQ(acqfs::test::ListDir(O("f")), (std::vector<std::string>{"x"}));
  // It hides what lies below, as the file in the chain did, and reports the
  // number it did.
  EXPECT_EQ(GetXattr(O("f"), kOpaque), "y");
  EXPECT_TRUE(GetXattr(O("f"), kOrigin).has_value());
}

TEST_F(Squash, NonDirectoriesAreHardLinksOfTheSameInode) {
  MakeFile(F(2, "h"), "data", 0640);
  SetXattr(F(2, "h"), "user.note", "kept");
  ASSERT_EQ(::link(F(2, "h").c_str(), F(2, "h2").c_str()), 0);
  MakeSymlink("target", F(2, "s"));
  MakeFile(F(1, "k"), "k");
  SetXattr(F(1, "k"), kOrigin, "4242");
  SquashAllKeepsTheView();
  EXPECT_EQ(Lstat(O("h")).st_ino, Lstat(F(2, "h")).st_ino);
  EXPECT_EQ(Lstat(O("h2")).st_ino, Lstat(F(2, "h")).st_ino);
  EXPECT_EQ(Lstat(O("h")).st_mode & 07777, 0640u);
  EXPECT_EQ(GetXattr(O("h"), "user.note"), "kept");
  EXPECT_EQ(ReadLink(O("s")), "target");
  EXPECT_EQ(Lstat(O("k")).st_ino, Lstat(F(1, "k")).st_ino);
  EXPECT_EQ(GetXattr(O("k"), kOrigin), "4242");
}

TEST_F(Squash, DirectoriesKeepTheTopmostOnesModeTimesAndXattrs) {
  // (The host's directory gives the number: a squashed directory that
  // merges with nothing below and has no marker gets a new one.)
  MakeDir(t_.L("d"));
  MakeFile(F(1, "d/a"), "a");
  MakeFile(F(2, "d/b"), "b");
  ASSERT_EQ(::chmod(F(2, "d").c_str(), 0710), 0);
  SetXattr(F(2, "d"), "user.note", "top");
  SetXattr(F(1, "d"), "user.note", "below");
  SetTimes(F(2, "d"), 1000000, 5);
  SquashAllKeepsTheView();
  struct stat st = Lstat(O("d"));
  EXPECT_EQ(st.st_mode & 07777, 0710u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 5);
  EXPECT_EQ(GetXattr(O("d"), "user.note"), "top");
}

// A chain of directories without an origin marker, stopped by an opaque
// one: the number reported is the lowest one's, before the squash and after.
TEST_F(Squash, ADirectoryKeepsTheNumberItReported) {
  MakeFile(F(1, "d/a"), "a");
  SetXattr(F(1, "d"), kOpaque, "y");
  MakeFile(F(2, "d/b"), "b");
  SquashAllKeepsTheView();
  ASSERT_OK_AND_ASSIGN(Layers layers, Open({out_}));
  EXPECT_EQ(GetXattr(O("d"), kOrigin),
            std::to_string(layers.TagStore(Lstat(F(1, "d")).st_ino)));
}

// Listed in the top layer, gone before its stat or between its stat and
// the read of its markers: the squash goes on as if it had not been
// listed, and the entry below decides.
TEST_F(Squash, AnEntryGoneWhileReadLeavesTheOneBelowToDecide) {
  for (VanishWhen when : {VanishWhen::kBeforeStat, VanishWhen::kAfterStat}) {
    SCOPED_TRACE(when == VanishWhen::kBeforeStat ? "before" : "after");
    MakeFile(F(1, "v"), "below");
    MakeFile(F(2, "v/x"), "x");
    {
      VanishHook hook(F(2), "v", when, grave_);
      ASSERT_OK(Run({F(1), F(2), F(3)}, 1, 3));
      EXPECT_TRUE(hook.fired());
    }
    EXPECT_EQ(ReadFile(O("v")), "below");
    EXPECT_EQ(Lstat(O("v")).st_ino, Lstat(F(1, "v")).st_ino);
    ASSERT_EQ(
        ::system(("rm -rf " + out_ + " " + grave_ + "/v " + F(1, "v")).c_str()),
        0);
    MakeDir(out_);
  }
}

// A directory in the middle of a chain, gone after its stat: left out of
// the merge, which goes on below it.
TEST_F(Squash, ADirectoryOfTheChainGoneMeanwhileIsLeftOut) {
  MakeFile(F(1, "d/a"), "a");
  MakeFile(F(2, "d/b"), "b");
  MakeFile(F(3, "d/c"), "c");
  {
    VanishHook hook(F(2), "d", VanishWhen::kAfterStat, grave_);
    ASSERT_OK(Run({F(1), F(2), F(3)}, 1, 3));
    EXPECT_TRUE(hook.fired());
  }
  EXPECT_EQ(acqfs::test::ListDir(O("d")), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(GetXattr(O("d"), kOpaque), std::nullopt);
}

// The lookup: a frozen layer's entry gone between its stat and the read of
// its origin marker is absent; the layer below answers.
TEST_F(Squash, ResolveChildSkipsALowerEntryGoneMeanwhile) {
  MakeFile(F(1, "f"), "below");
  MakeFile(F(2, "f"), "above");
  ASSERT_OK_AND_ASSIGN(Layers layers, Open({F(1), F(2)}));
  ASSERT_OK_AND_ASSIGN(DirView root, RootView(layers));
  VanishHook hook(F(2), "f", VanishWhen::kAfterStat, grave_);
  ASSERT_OK_AND_ASSIGN(ChildInfo c, ResolveChild(layers, root, "f"));
  EXPECT_TRUE(hook.fired());
  EXPECT_TRUE(c.exists);
  EXPECT_EQ(c.lower_layer, 1u);
  EXPECT_EQ(c.lower_st.st_ino, Lstat(F(1, "f")).st_ino);
}

}  // namespace
}  // namespace acqfs
