// Tests of DeltaScan on hand-built upper layers: what counts as a change,
// unchanged copy-ups, whiteouts, opaque directories and the output order.
#include "gitbridge/delta_scan.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "fs/change_scan.h"
#include "harness/deep_tree.h"
#include "harness/fs_util.h"
#include "harness/git_test_util.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;

using ::acqfs::test::MakeFile;
using ::acqfs::test::MakeOpaqueDir;
using ::acqfs::test::MakeSymlinkAt;
using ::acqfs::test::MakeWhiteoutAt;
using ::acqfs::test::TempDir;

// "D path" or "U path mode size": a compact form of a Change for asserts.
std::string Show(const Change& c) {
  if (c.kind == Change::kDelete) return "D " + c.path;
  if (c.kind == Change::kUnsafe) return "X " + c.path;
  char mode[16];
  std::snprintf(mode, sizeof mode, "%o", c.mode);
  return "U " + c.path + " " + mode + " " + std::to_string(c.size);
}

class DeltaScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    fs::create_directory(root_ + "/lower");
    fs::create_directory(root_ + "/upper");
    auto l = Layers::OpenForReading(root_ + "/lower", root_ + "/upper",
                                    XattrNamespace::kUser);
    ASSERT_TRUE(l.ok()) << l.error().Message();
    layers_ = std::move(*l);
  }

  std::string L(const std::string& rel) { return root_ + "/lower/" + rel; }
  std::string U(const std::string& rel) { return root_ + "/upper/" + rel; }
  std::vector<std::string> Scan(ScanStats* stats = nullptr) {
    std::vector<std::string> out;
    auto r = ScanUpper(layers_, stats);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    if (r.ok())
      for (const auto& c : *r) out.push_back(Show(c));
    return out;
  }
  using V = std::vector<std::string>;

  TempDir tmp_;
  std::string root_;
  Layers layers_;
};

TEST_F(DeltaScanTest, EmptyUpperHasNoChanges) {
  MakeFile(L("a/b"), "lower");
  ScanStats stats;
  EXPECT_EQ(Scan(&stats), V{});
  EXPECT_EQ(stats.upper_entries, 0u);
}

TEST_F(DeltaScanTest, NewFilesAreUpserts) {
  MakeFile(U("new.txt"), "hello", 0644);
  MakeFile(U("d/run.sh"), "#!/bin/sh\n", 0755);
  EXPECT_EQ(Scan(), (V{"U d/run.sh 100755 10", "U new.txt 100644 5"}));
}

TEST_F(DeltaScanTest, WhiteoutIsDelete) {
  MakeFile(L("d/f"), "lower");
  MakeFile(L("gone"), "lower");
  MakeWhiteoutAt(U("d/f"));
  MakeWhiteoutAt(U("gone"));
  EXPECT_EQ(Scan(), (V{"D d/f", "D gone"}));
}

// A whiteout of a name the lower lacks hides nothing: no change (as for
// `acqfs status`; before, it was a delete of a path the base lacks).
TEST_F(DeltaScanTest, WhiteoutOfANameTheLowerLacksIsNoChange) {
  MakeWhiteoutAt(U("never"));
  MakeFile(L("d/f"), "lower");
  MakeWhiteoutAt(U("d/other"));
  EXPECT_EQ(Scan(), V{});
}

TEST_F(DeltaScanTest, WhiteoutOfDirectoryIsOneDelete) {
  MakeFile(L("d/e/f"), "lower");
  MakeFile(L("d/g"), "lower");
  MakeWhiteoutAt(U("d"));
  EXPECT_EQ(Scan(), V{"D d"});
}

// Each path of an opaque directory is compared with the lower object at
// that path, as `acqfs status` does (docs/changes.md); the lower names it
// lacks are deleted one by one. (Before, the directory was one delete and
// everything in it an upsert: the same tree, but an unchanged file counted
// as a change.)
TEST_F(DeltaScanTest, OpaqueDirectoryIsComparedPathByPath) {
  MakeFile(L("d/old"), "lower");
  MakeFile(L("d/same"), "same");
  MakeOpaqueDir(U("d"));
  MakeFile(U("d/same"), "same");  // made again equal to the lower: no change
  MakeFile(U("d/sub/new"), "n");
  ScanStats stats;
  EXPECT_EQ(Scan(&stats), (V{"D d/old", "U d/sub/new 100644 1"}));
  EXPECT_EQ(stats.unchanged_copies, 1u);
}

TEST_F(DeltaScanTest, UnchangedCopyUpIsNotAChange) {
  MakeFile(L("d/f"), "same bytes");
  MakeFile(U("d/f"), "same bytes");
  ScanStats stats;
  EXPECT_EQ(Scan(&stats), V{});
  EXPECT_EQ(stats.unchanged_copies, 1u);
  EXPECT_EQ(stats.upper_entries, 2u);  // d and d/f
}

TEST_F(DeltaScanTest, SameSizeDifferentContentIsUpsert) {
  MakeFile(L("f"), "abc");
  MakeFile(U("f"), "abd");
  ScanStats stats;
  EXPECT_EQ(Scan(&stats), V{"U f 100644 3"});
  EXPECT_EQ(stats.unchanged_copies, 0u);
}

TEST_F(DeltaScanTest, SizeChangeIsUpsert) {
  MakeFile(L("f"), "abc");
  MakeFile(U("f"), "abcd");
  EXPECT_EQ(Scan(), V{"U f 100644 4"});
}

TEST_F(DeltaScanTest, ExecutableBitChangeIsUpsert) {
  MakeFile(L("f"), "abc", 0644);
  MakeFile(U("f"), "abc", 0755);
  MakeFile(L("g"), "abc", 0644);
  MakeFile(U("g"), "abc", 0600);  // other bits: not a change git records
  EXPECT_EQ(Scan(), V{"U f 100755 3"});
}

TEST_F(DeltaScanTest, BigFilesAreComparedWhole) {
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = 'a' + i % 26;
  MakeFile(L("same"), big);
  MakeFile(U("same"), big);
  std::string changed = big;
  changed[changed.size() - 1] = 'Z';  // only the last byte differs
  MakeFile(L("last"), big);
  MakeFile(U("last"), changed);
  ScanStats stats;
  EXPECT_EQ(Scan(&stats), V{"U last 100644 " + std::to_string(big.size())});
  EXPECT_EQ(stats.unchanged_copies, 1u);
}

TEST_F(DeltaScanTest, SymlinksComparedByTarget) {
  MakeSymlinkAt("target", L("same"));
  MakeSymlinkAt("target", U("same"));
  MakeSymlinkAt("old", L("moved"));
  MakeSymlinkAt("new", U("moved"));
  MakeSymlinkAt("abc", L("typechange"));
  MakeFile(U("typechange"), "abc");  // same size, same bytes, other type
  EXPECT_EQ(Scan(), (V{"U moved 120777 3", "U typechange 100644 3"}));
}

TEST_F(DeltaScanTest, DanglingUpperSymlinkIsNotFollowed) {
  MakeSymlinkAt("/nonexistent/target", U("link"));
  MakeSymlinkAt("../../../../etc/passwd", U("escape"));
  EXPECT_EQ(Scan(), (V{"U escape 120777 22", "U link 120777 19"}));
}

TEST_F(DeltaScanTest, BelowAnOpaqueAncestorPathsAreComparedWithTheLower) {
  // d is opaque, so d/e hides its lower directory too; each path is still
  // compared with the lower object at that path.
  MakeFile(L("d/e/f"), "same");
  MakeFile(L("d/e/g"), "old");
  MakeFile(L("d/e/gone"), "x");
  MakeOpaqueDir(U("d"));
  MakeFile(U("d/e/f"), "same");
  MakeFile(U("d/e/g"), "new");
  EXPECT_EQ(Scan(), (V{"U d/e/g 100644 3", "D d/e/gone"}));
}

TEST_F(DeltaScanTest, UpperDirectoryOverLowerFileDeletesTheFile) {
  MakeFile(L("x"), "lower file");
  MakeFile(L("x2"), "lower file");
  MakeFile(U("x/inner"), "i");
  fs::create_directory(U("x2"));  // empty: only the delete is reported
  EXPECT_EQ(Scan(), (V{"D x", "U x/inner 100644 1", "D x2"}));
}

TEST_F(DeltaScanTest, UpperFileOverLowerDirectoryIsUpsert) {
  MakeFile(L("d/f"), "lower");
  MakeFile(U("d"), "file now");
  EXPECT_EQ(Scan(), V{"U d 100644 8"});
}

TEST_F(DeltaScanTest, GitDirectoriesAreSkipped) {
  MakeFile(U(".git/index"), "idx");
  MakeFile(U(".git/objects/ab/cd"), "obj");
  MakeFile(U("sub/.git/HEAD"), "ref");
  MakeFile(L("other/.git/HEAD"), "ref");
  MakeWhiteoutAt(U("other/.git"));  // a nested repository removed
  MakeFile(L("op/.git/config"), "c");
  MakeFile(L("op/tracked"), "t");
  MakeOpaqueDir(U("op"));  // its lower .git is not a delete either
  MakeFile(U("sub/real"), "r");
  MakeFile(U("gitfile/.git"), "gitdir: ../.git/modules/gitfile\n");
  EXPECT_EQ(Scan(), (V{"D op/tracked", "U sub/real 100644 1"}));
}

TEST_F(DeltaScanTest, DirectoriesFifosAndSocketsAreNotReported) {
  fs::create_directories(U("empty/deeper"));
  ASSERT_EQ(::mkfifo(U("fifo").c_str(), 0644), 0);
  MakeFile(L("hidden"), "lower");
  ASSERT_EQ(::mkfifo(U("hidden").c_str(), 0644), 0);
  // A fifo hides the lower file of its name: that file is gone.
  EXPECT_EQ(Scan(), V{"D hidden"});
}

TEST_F(DeltaScanTest, XattrWhiteoutInDirectoryMarkedX) {
  MakeFile(L("d/f"), "lower");
  MakeFile(L("d/keep"), "lower");
  MakeFile(U("d/f"), "");
  ASSERT_EQ(::setxattr(U("d/f").c_str(), "user.overlay.whiteout", "", 0, 0), 0);
  MakeFile(U("d/empty"), "");  // a zero-size file without the xattr
  MakeOpaqueDir(U("d"), "x");
  EXPECT_EQ(Scan(), (V{"U d/empty 100644 0", "D d/f"}));
}

TEST_F(DeltaScanTest, OpaqueRootDeletesEveryLowerName) {
  MakeFile(L("a"), "lower");
  MakeFile(L("b/c"), "lower");
  MakeFile(L(".git/HEAD"), "ref");
  MakeOpaqueDir(U(""));
  MakeFile(U("a"), "lower");  // made again equal to the lower: no change
  MakeFile(U("z"), "new");
  EXPECT_EQ(Scan(), (V{"D b", "U z 100644 3"}));
}

TEST_F(DeltaScanTest, OutputIsInPathOrderWithDeletesFirst) {
  MakeFile(L("a/x"), "lower");
  MakeOpaqueDir(U("a"));
  MakeFile(U("a/y"), "1");
  MakeFile(U("a.txt"), "2");
  MakeFile(U("a-b"), "3");
  MakeFile(U("b/c/d"), "4");
  MakeFile(L("b/a/x"), "lower");
  MakeWhiteoutAt(U("b/a"));
  MakeFile(U("0"), "5");
  auto got = Scan();
  EXPECT_EQ(got, (V{"U 0 100644 1", "U a-b 100644 1", "U a.txt 100644 1",
                    "D a/x", "U a/y 100644 1", "D b/a", "U b/c/d 100644 1"}));
}

TEST_F(DeltaScanTest, StatsCountUpperEntries) {
  MakeFile(U("a/b/c"), "1");
  MakeFile(L("a/w"), "lower");
  MakeWhiteoutAt(U("a/w"));
  MakeFile(L("a/same"), "s");
  MakeFile(U("a/same"), "s");
  ScanStats stats;
  EXPECT_EQ(Scan(&stats), (V{"U a/b/c 100644 1", "D a/w"}));
  EXPECT_EQ(stats.upper_entries, 5u);  // a, a/b, a/b/c, a/w, a/same
  EXPECT_EQ(stats.unchanged_copies, 1u);
}

// A name git refuses in a tree is reported once, as kUnsafe, and nothing
// below it is read; the top-level .git and .git below stay out silently.
TEST_F(DeltaScanTest, NamesGitRefusesAreReportedAndNotEntered) {
  MakeFile(U(".GIT/config"), "x");
  MakeFile(U("git~1/a/b"), "x");
  MakeFile(U("sub/.git./hooks/post-checkout"), "x", 0755);
  MakeFile(U("sub/.GIT"), "a file");
  MakeFile(U(".gitmodules/x"), "a directory named .gitmodules");
  MakeSymlinkAt("target", U("GITMOD~1"));
  MakeSymlinkAt("target", U(".gitmodules."));
  MakeSymlinkAt("target", U("d/.gitignore"));
  MakeFile(U("GITMOD~2"), "a file of that name is fine");
  MakeFile(U(".git/config"), "the sandbox's repository");
  MakeFile(U("d/.git/HEAD"), "a nested repository");
  ScanStats stats;
  std::vector<std::string> got = Scan(&stats);
  EXPECT_EQ(got, (V{"X .GIT", "X .gitmodules", "X .gitmodules.", "X GITMOD~1",
                    "U GITMOD~2 100644 27", "X d/.gitignore", "X git~1",
                    "X sub/.GIT", "X sub/.git."}));
  // Eight entries at the top (.git aside), two in sub, one in d: nothing
  // below a refused directory was visited.
  EXPECT_EQ(stats.upper_entries, 11u);
  auto r = ScanUpper(layers_);
  ASSERT_TRUE(r.ok());
  for (const Change& c : *r) {
    if (c.kind == Change::kUnsafe) {
      EXPECT_FALSE(c.reason.empty()) << c.path;
    }
  }
}

// Status (fs/change_scan.h) and export (ScanUpper) read one walk and one
// comparison; these tests hold them to docs/changes.md on the same layers:
// they agree on what git can record, and only status sees metadata.
class ScansAgreeTest : public DeltaScanTest {
 protected:
  // Both layers hold `rel` with `data`: a copy-up left as it was.
  void Both(const std::string& rel, const std::string& data,
            mode_t mode = 0644) {
    MakeFile(L(rel), data, mode);
    MakeFile(U(rel), data, mode);
  }
  // "<code> path" per status change.
  V Status(bool include_git = false) {
    ChangeScanOptions o;
    o.include_git_dir = include_git;
    auto r = ScanChanges(layers_, o);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    V out;
    if (r.ok())
      for (const PathChange& c : *r)
        out.push_back(std::string(1, ChangeCode(c.kind)) + " " + c.path);
    return out;
  }
  // "D path" / "U path" / "X path" per export change.
  V Export() {
    V out;
    for (const std::string& c : Scan())
      out.push_back(c.substr(0, c.find(' ', 2)));
    return out;
  }
};

TEST_F(ScansAgreeTest, ACopyUpEqualToTheLowerIsUnchangedForBoth) {
  Both("f", "same bytes");
  Both("d/tool", "#!/bin/sh\n", 0755);
  MakeSymlinkAt("f", L("l/link"));
  MakeSymlinkAt("f", U("l/link"));
  EXPECT_EQ(Status(), V{});
  EXPECT_EQ(Export(), V{});
}

TEST_F(ScansAgreeTest, AnExecBitChangeIsAChangeForBoth) {
  MakeFile(L("run.sh"), "echo\n", 0644);
  MakeFile(U("run.sh"), "echo\n", 0755);
  EXPECT_EQ(Status(), V{"m run.sh"});
  EXPECT_EQ(Export(), V{"U run.sh"});
}

TEST_F(ScansAgreeTest, OwnerXattrsAndOtherModeBitsAreStatusOnly) {
  ASSERT_EQ(::geteuid(), 0u) << "chown needs root (as CI runs the tests)";
  Both("owned", "x");
  ASSERT_EQ(::lchown(U("owned").c_str(), 1234, 1234), 0);
  Both("tagged", "x");
  ASSERT_EQ(::setxattr(U("tagged").c_str(), "user.tag", "v", 1, 0), 0);
  MakeFile(L("private"), "x", 0644);
  MakeFile(U("private"), "x", 0600);
  EXPECT_EQ(Status(), (V{"m owned", "m private", "m tagged"}));
  EXPECT_EQ(Export(), V{});
}

TEST_F(ScansAgreeTest, ContentAndTypeChangesAreChangesForBoth) {
  MakeFile(L("f"), "old");
  MakeFile(U("f"), "new");
  MakeFile(L("t"), "abc");
  MakeSymlinkAt("abc", U("t"));
  EXPECT_EQ(Status(), (V{"M f", "T t"}));
  EXPECT_EQ(Export(), (V{"U f", "U t"}));
}

// A directory removed and made again (opaque) holding a file equal to the
// lower one: no change for either (export used to upsert every file of an
// opaque directory).
TEST_F(ScansAgreeTest, AFileMadeAgainInAnOpaqueDirectoryEqualToTheLower) {
  Both("d/same", "same");
  MakeFile(L("d/gone"), "x");
  ASSERT_EQ(::setxattr(U("d").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  EXPECT_EQ(Status(), V{"D d/gone"});
  EXPECT_EQ(Export(), V{"D d/gone"});
}

// `.git` at any depth is git's own data, left out of both by default
// (docs/changes.md); status shows every one with --git-dir.
TEST_F(ScansAgreeTest, GitDirectoriesAtAnyDepthAreLeftOut) {
  MakeFile(L(".git/index"), "old");
  MakeFile(U(".git/index"), "new");
  MakeFile(L("nested/.git/index"), "old");
  MakeFile(U("nested/.git/index"), "new");
  MakeFile(U("nested/.git/ORIG_HEAD"), "x");
  MakeFile(U("sub/.git"), "gitdir: ../.git/modules/sub\n");
  MakeFile(U("nested/work.c"), "int x;\n");
  EXPECT_EQ(Status(), (V{"A nested/work.c", "A sub"}));
  EXPECT_EQ(Export(), V{"U nested/work.c"});
  EXPECT_EQ(Status(true),
            (V{"M .git/index", "A nested/.git/ORIG_HEAD", "M nested/.git/index",
               "A nested/work.c", "A sub", "A sub/.git"}));
}

// Trees deeper than PATH_MAX (issue 13): the scan holds a bounded number of
// descriptors (the open-files limit is lowered to 64 above what the test
// holds; the old walk held two per level) and no C++ stack per level (a
// 100,000-deep recursion overflows the 8 MB stack).
TEST_F(DeltaScanTest, AChainOf100000DirectoriesIsScannedInBoundedFds) {
  constexpr size_t kDepth = 100000;
  ASSERT_EQ(acqfs::test::MakeChain(root_ + "/upper", "d", kDepth,
                                   [](int fd, size_t level) -> std::string {
                                     if (level != kDepth) return "";
                                     return acqfs::test::WriteAt(fd, "deep.txt",
                                                                 "deep\n");
                                   }),
            "");
  V got;
  {
    acqfs::test::FdLimit limit(64);
    ASSERT_TRUE(limit.ok());
    got = Scan();
  }
  EXPECT_EQ(got, V{"U " + acqfs::test::ChainPath("d", kDepth, "deep.txt") +
                   " 100644 5"});
  EXPECT_EQ(acqfs::test::RemoveDeep(U("d")), "");
}

TEST_F(DeltaScanTest, CopyUpsDeeperThanPathMaxAreComparedInBoundedFds) {
  constexpr size_t kDepth = 3000;  // 6,000 bytes of "d/"
  auto files = [](const char* changed) {
    return [changed](int fd, size_t level) -> std::string {
      if (level != kDepth) return "";
      std::string why = acqfs::test::WriteAt(fd, "same", "same\n");
      return why.empty() ? acqfs::test::WriteAt(fd, "changed", changed) : why;
    };
  };
  ASSERT_EQ(acqfs::test::MakeChain(root_ + "/lower", "d", kDepth, files("old")),
            "");
  ASSERT_EQ(acqfs::test::MakeChain(root_ + "/upper", "d", kDepth, files("new")),
            "");
  ScanStats stats;
  V got;
  {
    acqfs::test::FdLimit limit(64);
    ASSERT_TRUE(limit.ok());
    got = Scan(&stats);
  }
  EXPECT_EQ(got, V{"U " + acqfs::test::ChainPath("d", kDepth, "changed") +
                   " 100644 3"});
  EXPECT_EQ(stats.unchanged_copies, 1u);
  EXPECT_EQ(acqfs::test::RemoveDeep(L("d")), "");
  EXPECT_EQ(acqfs::test::RemoveDeep(U("d")), "");
}

}  // namespace
}  // namespace acqfs::gitbridge
