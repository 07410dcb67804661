// Tests of WalkUpper (fs/upper_walk.h): what the one walk of the upper layer
// visits, on trees laid down with plain syscalls in the kernel overlayfs
// format (user.overlay.* xattrs).
#include "fs/upper_walk.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness/deep_tree.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::MakeDeviceWhiteout;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::SetXattr;
using Strings = std::vector<std::string>;

constexpr char kOpaque[] = "user.overlay.opaque";

// "U path", "W path", "L path", with "+" when the lower has an object there
// and "g" when the entry is marked in_git.
std::string Show(const UpperEntry& e) {
  const char* k = e.kind == UpperEntry::kUpper      ? "U"
                  : e.kind == UpperEntry::kWhiteout ? "W"
                                                    : "L";
  return std::string(k) + (e.in_lower ? "+" : "") + (e.in_git ? "g" : "") +
         " " + e.path;
}

// Sorted by path, as Walk() returns them.
Strings Sorted(Strings v) {
  std::sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
    const std::string pa = a.substr(a.find(' ')), pb = b.substr(b.find(' '));
    return pa != pb ? pa < pb : a < b;
  });
  return v;
}

class UpperWalkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(layers_, acqfs::test::OpenLayers(t_));
  }

  // Every entry visited, sorted; `enter` says what to answer.
  Strings Walk(const UpperWalkOptions& o = {},
               std::function<Below(const UpperEntry&)> enter = {}) {
    Strings out;
    auto r = WalkUpper(layers_, o, [&](const UpperEntry& e) -> Result<Below> {
      out.push_back(Show(e));
      return enter ? enter(e) : Below::kEnter;
    });
    EXPECT_TRUE(r.ok()) << r.error().Message();
    if (r.ok()) visited_ = *r;
    return Sorted(std::move(out));
  }

  acqfs::test::TempTree t_;
  Layers layers_;
  uint64_t visited_ = 0;
};

TEST_F(UpperWalkTest, UpperEntriesArePairedWithTheLowerAtTheirPath) {
  MakeFile(t_.L("f"), "x");
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/g"), "y");
  MakeFile(t_.L("d/untouched"), "z");
  MakeFile(t_.U("f"), "x");
  MakeDir(t_.U("d"));
  MakeFile(t_.U("d/g"), "y2");
  MakeFile(t_.U("d/new"), "n");
  EXPECT_EQ(Walk(), Sorted({"U+ d", "U+ d/g", "U d/new", "U+ f"}));
  EXPECT_EQ(visited_, 4u);
}

TEST_F(UpperWalkTest, BothWhiteoutFormsAndOnlyThoseTwo) {
  MakeFile(t_.L("gone"), "x");
  MakeDir(t_.L("x"));
  MakeFile(t_.L("x/a"), "a");
  MakeDir(t_.L("plain"));
  MakeFile(t_.L("plain/a"), "a");
  MakeDeviceWhiteout(t_.U("gone"));
  MakeDeviceWhiteout(t_.U("never"));  // hides nothing, still visited
  MakeDir(t_.U("x"));
  SetXattr(t_.U("x"), kOpaque, "x");
  MakeFile(t_.U("x/a"), "");
  SetXattr(t_.U("x/a"), "user.overlay.whiteout", "");
  MakeFile(t_.U("x/empty"), "");  // zero-size, no xattr: a file
  // The xattr form counts only in a directory marked "x".
  MakeDir(t_.U("plain"));
  MakeFile(t_.U("plain/a"), "");
  SetXattr(t_.U("plain/a"), "user.overlay.whiteout", "");
  EXPECT_EQ(Walk(), Sorted({"W+ gone", "W never", "U+ plain", "U+ plain/a",
                            "U+ x", "W+ x/a", "U x/empty"}));
}

TEST_F(UpperWalkTest, AnOpaqueDirectoryListsTheLowerNamesItLacks) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/kept"), "k");
  MakeFile(t_.L("d/dropped"), "x");
  MakeFile(t_.L("d/whited"), "w");
  MakeDir(t_.L("d/sub"));
  MakeFile(t_.L("d/sub/deep"), "s");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), kOpaque, "y");
  MakeFile(t_.U("d/kept"), "k");
  MakeDeviceWhiteout(t_.U("d/whited"));  // not paired: listed as lower
  // Below the lower-only directory only when the visitor asks.
  EXPECT_EQ(Walk({}, [](const UpperEntry&) { return Below::kSkip; }),
            Sorted({"U+ d"}));
  EXPECT_EQ(Walk(), Sorted({"U+ d", "L+ d/dropped", "U+ d/kept", "L+ d/sub",
                            "L+ d/sub/deep", "W d/whited", "L+ d/whited"}));
}

TEST_F(UpperWalkTest, BelowAnOpaqueDirectoryEveryDirectoryHidesItsLower) {
  MakeDir(t_.L("d"));
  MakeDir(t_.L("d/e"));
  MakeFile(t_.L("d/e/old"), "o");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), kOpaque, "y");
  MakeDir(t_.U("d/e"));  // not marked itself
  EXPECT_EQ(Walk(), Sorted({"U+ d", "U+ d/e", "L+ d/e/old"}));
}

TEST_F(UpperWalkTest, RemovedLowerTreesAreListedOnlyWhenAsked) {
  MakeDir(t_.L("w"));
  MakeFile(t_.L("w/a"), "a");
  MakeDir(t_.L("t"));
  MakeFile(t_.L("t/b"), "b");
  MakeDeviceWhiteout(t_.U("w"));
  MakeFile(t_.U("t"), "a file over a directory");
  EXPECT_EQ(Walk({}, [](const UpperEntry&) { return Below::kSkip; }),
            Sorted({"U+ t", "W+ w"}));
  EXPECT_EQ(Walk(), Sorted({"U+ t", "L+ t/b", "W+ w", "L+ w/a"}));
}

TEST_F(UpperWalkTest, OpaqueRootListsEveryLowerNameItLacks) {
  MakeFile(t_.L("a"), "a");
  MakeFile(t_.L("b"), "b");
  SetXattr(t_.upper(), kOpaque, "y");
  MakeFile(t_.U("a"), "a");
  EXPECT_EQ(Walk(), Sorted({"U+ a", "L+ b"}));
}

TEST_F(UpperWalkTest, GitEntriesAreSkippedAtAnyDepthOrMarked) {
  MakeDir(t_.L(".git"));
  MakeFile(t_.L(".git/HEAD"), "ref");
  MakeDir(t_.L("op"));
  MakeDir(t_.L("op/.git"));
  MakeDir(t_.L("gone"));
  MakeDir(t_.L("gone/.git"));
  MakeFile(t_.L("gone/f"), "f");
  MakeDir(t_.U(".git"));
  MakeFile(t_.U(".git/index"), "i");
  MakeDir(t_.U("sub"));
  MakeDir(t_.U("sub/.git"));
  MakeFile(t_.U("sub/.git/HEAD"), "ref");
  MakeFile(t_.U("sub/f"), "f");
  MakeDir(t_.U("module"));
  MakeFile(t_.U("module/.git"), "gitdir: ../.git/modules/module\n");
  MakeDir(t_.U("op"));
  SetXattr(t_.U("op"), kOpaque, "y");
  MakeDeviceWhiteout(t_.U("gone"));
  // Not named .git: visited.
  MakeDir(t_.U(".GIT"));
  EXPECT_EQ(Walk(), Sorted({"U .GIT", "W+ gone", "L+ gone/f", "U module",
                            "U+ op", "U sub", "U sub/f"}));
  EXPECT_EQ(visited_, 6u);  // .GIT, gone, module, op, sub, sub/f
  UpperWalkOptions visit_git;
  visit_git.git_dirs = GitDirs::kVisit;
  // The top-level .git is merged with the lower's: .git/HEAD shows through.
  EXPECT_EQ(
      Walk(visit_git),
      Sorted({"U+g .git", "Ug .git/index", "U .GIT", "W+ gone", "L+g gone/.git",
              "L+ gone/f", "U module", "Ug module/.git", "U+ op", "L+g op/.git",
              "U sub", "Ug sub/.git", "Ug sub/.git/HEAD", "U sub/f"}));
}

TEST_F(UpperWalkTest, WantedPrunesAPathAndEverythingBelowIt) {
  MakeDir(t_.U("a"));
  MakeFile(t_.U("a/x"), "x");
  MakeDir(t_.U("b"));
  MakeFile(t_.U("b/y"), "y");
  UpperWalkOptions o;
  o.wanted = [](const std::string& p) { return p != "a"; };
  EXPECT_EQ(Walk(o), Sorted({"U b", "U b/y"}));
  EXPECT_EQ(visited_, 2u);
}

TEST_F(UpperWalkTest, ReportsProgressEveryThousandUpperEntries) {
  for (int i = 0; i < 2100; ++i) MakeFile(t_.U("f" + std::to_string(i)), "");
  std::vector<uint64_t> seen;
  UpperWalkOptions o;
  o.progress = [&](uint64_t n) { seen.push_back(n); };
  EXPECT_EQ(Walk(o).size(), 2100u);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1000, 2000}));
}

// Entries removed between the listing and the walk's look at them are
// skipped, not errors: the layers may be in use while a scan runs.
TEST_F(UpperWalkTest, EntriesVanishingAfterTheListingAreSkipped) {
  MakeDir(t_.U("d"));
  MakeFile(t_.U("d/a"), "a");
  MakeFile(t_.U("d/b"), "b");
  MakeDir(t_.U("d/sub"));
  MakeFile(t_.U("d/sub/c"), "c");
  UpperWalkOptions o;
  o.listed = [&](const std::string& dir) {
    if (dir != "d") return;
    ::unlink(t_.U("d/a").c_str());
    ::unlink(t_.U("d/sub/c").c_str());
    ::rmdir(t_.U("d/sub").c_str());
  };
  EXPECT_EQ(Walk(o), Sorted({"U d", "U d/b"}));
  EXPECT_EQ(visited_, 2u);
}

TEST_F(UpperWalkTest, ADirectoryVanishingBeforeItIsEnteredIsNotAnError) {
  MakeDir(t_.U("d"));
  MakeFile(t_.U("d/a"), "a");
  MakeDir(t_.L("w"));
  MakeDir(t_.L("w/sub"));
  MakeFile(t_.L("w/sub/x"), "x");
  MakeFile(t_.L("w/y"), "y");
  MakeDeviceWhiteout(t_.U("w"));
  // The visitor removes each directory it is about to enter (in the lower
  // too: the host may edit its checkout while a scan runs).
  auto remove = [&](const UpperEntry& e) {
    const std::string root =
        e.kind == UpperEntry::kUpper ? t_.upper() : t_.lower();
    if (e.path == "d" || e.path == "w/sub") {
      EXPECT_EQ(acqfs::test::RemoveDeep(root + "/" + e.path), "");
    }
    return Below::kEnter;
  };
  EXPECT_EQ(Walk({}, remove), Sorted({"U d", "W+ w", "L+ w/sub", "L+ w/y"}));
}

TEST_F(UpperWalkTest, LowerNamesVanishingAfterTheirListingAreSkipped) {
  MakeDir(t_.L("d"));
  for (const char* n : {"a", "b", "c"})
    MakeFile(t_.L(std::string("d/") + n), n);
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), kOpaque, "y");
  // The first lower-only entry visited removes the others.
  int lower_only = 0;
  auto r = WalkUpper(layers_, {}, [&](const UpperEntry& e) -> Result<Below> {
    if (e.kind == UpperEntry::kLowerOnly && lower_only++ == 0) {
      for (const char* n : {"a", "b", "c"})
        if (e.name != n) ::unlink(t_.L(std::string("d/") + n).c_str());
    }
    return Below::kEnter;
  });
  ASSERT_OK(r);
  EXPECT_EQ(lower_only, 1);
}

// Deep trees (issue 13): iterative, bounded descriptors, for paired,
// opaque and lower-only trees alike.
TEST_F(UpperWalkTest, DeepTreesAreWalkedInBoundedDescriptors) {
  constexpr size_t kDepth = 3000;
  auto leaf = [](const char* data) {
    return [data](int fd, size_t level) -> std::string {
      return level == kDepth ? acqfs::test::WriteAt(fd, "f", data) : "";
    };
  };
  ASSERT_EQ(acqfs::test::MakeChain(t_.lower(), "d", kDepth, leaf("old")), "");
  ASSERT_EQ(acqfs::test::MakeChain(t_.upper(), "d", kDepth, leaf("new")), "");
  ASSERT_EQ(acqfs::test::MakeChain(t_.lower(), "w", kDepth, leaf("gone")), "");
  MakeDeviceWhiteout(t_.U("w"));
  ASSERT_EQ(acqfs::test::MakeChain(t_.lower(), "o", kDepth, leaf("hidden")),
            "");
  MakeDir(t_.U("o"));
  SetXattr(t_.U("o"), kOpaque, "y");
  uint64_t paired = 0, lower_only = 0;
  {
    acqfs::test::FdLimit limit(40);
    ASSERT_TRUE(limit.ok());
    auto r = WalkUpper(layers_, {}, [&](const UpperEntry& e) -> Result<Below> {
      if (e.kind == UpperEntry::kUpper && e.in_lower) ++paired;
      if (e.kind == UpperEntry::kLowerOnly) ++lower_only;
      return Below::kEnter;
    });
    ASSERT_OK(r);
    EXPECT_EQ(*r, kDepth + 1 + 2);  // d..., f, w, o
  }
  EXPECT_EQ(paired, kDepth + 1 + 1);            // d..., f, o
  EXPECT_EQ(lower_only, 2 * (kDepth - 1) + 2);  // w/..., o/...: dirs and f
  EXPECT_EQ(acqfs::test::RemoveDeep(t_.L("d")), "");
  EXPECT_EQ(acqfs::test::RemoveDeep(t_.U("d")), "");
  EXPECT_EQ(acqfs::test::RemoveDeep(t_.L("w")), "");
  EXPECT_EQ(acqfs::test::RemoveDeep(t_.L("o")), "");
}

TEST_F(UpperWalkTest, ErrorsNameTheOperationAndTheAbsolutePath) {
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), kOpaque, "y");
  // The lower "d" is a file: an opaque directory over it lists nothing.
  MakeFile(t_.L("d"), "file");
  EXPECT_EQ(Walk(), Sorted({"U+ d"}));
  auto r = WalkUpper(layers_, {}, [](const UpperEntry& e) -> Result<Below> {
    return Error::Of(EIO, "visit", e.path);
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err(), EIO);
}

}  // namespace
}  // namespace acqfs
