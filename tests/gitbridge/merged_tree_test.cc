// Tests of MergedTree: the merged view read straight from hand-built layers
// (whiteouts, opaque directories, xattr whiteouts, symlinks never followed).
#include "gitbridge/merged_tree.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "harness/deep_tree.h"
#include "harness/fs_util.h"
#include "harness/git_test_util.h"
#include "harness/result_assert.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

using ::acqfs::test::MakeFile;
using ::acqfs::test::MakeSymlinkAt;
using ::acqfs::test::MakeWhiteoutAt;
using ::acqfs::test::TempDir;
class MergedTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    std::filesystem::create_directory(root_ + "/lower");
    std::filesystem::create_directory(root_ + "/upper");
    auto l = Layers::OpenForReading(root_ + "/lower", root_ + "/upper",
                                    XattrNamespace::kUser);
    ASSERT_TRUE(l.ok()) << l.error().Message();
    layers_ = std::move(*l);
  }

  std::string L(const std::string& rel) { return root_ + "/lower/" + rel; }
  std::string U(const std::string& rel) { return root_ + "/upper/" + rel; }
  static void Mkdir(const std::string& path) {
    std::filesystem::create_directories(path);
  }
  static void Xattr(const std::string& path, const std::string& key,
                    const std::string& value) {
    ASSERT_EQ(
        ::setxattr(path.c_str(), key.c_str(), value.data(), value.size(), 0), 0)
        << path << ": " << std::strerror(errno);
  }
  std::vector<std::string> Names(const std::string& rel) {
    std::vector<std::string> out;
    auto list = MergedTree(layers_).List(rel);
    EXPECT_TRUE(list.ok()) << list.error().Message();
    if (!list.ok()) return out;
    for (const auto& e : *list) out.push_back(e.name);
    std::sort(out.begin(), out.end());
    return out;
  }

  TempDir tmp_;
  std::string root_;
  Layers layers_;
};

TEST_F(MergedTreeTest, RootIsTheUpperDirectory) {
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto node, tree.Resolve(""));
  EXPECT_TRUE(node.exists);
  EXPECT_TRUE(node.in_upper);
  EXPECT_TRUE(S_ISDIR(node.st.st_mode));
  struct stat st;
  ASSERT_EQ(::lstat(U("").c_str(), &st), 0);
  EXPECT_EQ(node.st.st_ino, st.st_ino);
  EXPECT_TRUE(node.dir.merged());
  EXPECT_EQ(node.dir.path, "");
}

TEST_F(MergedTreeTest, LowerFileShowsThroughMergedDirectories) {
  MakeFile(L("a/b/f"), "lower data");
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto node, tree.Resolve("a/b/f"));
  EXPECT_TRUE(node.exists);
  EXPECT_FALSE(node.in_upper);
  EXPECT_TRUE(S_ISREG(node.st.st_mode));
  EXPECT_EQ(node.st.st_size, 10);
  ASSERT_OK_AND_ASSIGN(auto data, tree.ReadFile("a/b/f"));
  EXPECT_EQ(data, "lower data");
  ASSERT_OK_AND_ASSIGN(auto dir, tree.Resolve("a/b"));
  EXPECT_TRUE(S_ISDIR(dir.st.st_mode));
  EXPECT_EQ(dir.dir.path, "a/b");
  EXPECT_FALSE(dir.dir.upper);
  EXPECT_TRUE(dir.dir.merged());
}

TEST_F(MergedTreeTest, UpperFileHidesLowerFile) {
  MakeFile(L("d/f"), "lower");
  MakeFile(U("d/f"), "upper!");
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto node, tree.Resolve("d/f"));
  EXPECT_TRUE(node.in_upper);
  EXPECT_EQ(node.st.st_size, 6);
  ASSERT_OK_AND_ASSIGN(auto data, tree.ReadFile("d/f"));
  EXPECT_EQ(data, "upper!");
}

TEST_F(MergedTreeTest, WhiteoutHidesLowerFile) {
  MakeFile(L("d/f"), "lower");
  Mkdir(U("d"));
  MakeWhiteoutAt(U("d/f"));
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto node, tree.Resolve("d/f"));
  EXPECT_FALSE(node.exists);
  EXPECT_ERRNO(ENOENT, tree.ReadFile("d/f"));
  EXPECT_ERRNO(ENOENT, tree.OpenFile("d/f"));
  EXPECT_TRUE(Names("d").empty());
}

TEST_F(MergedTreeTest, WhiteoutOfDirectoryHidesEverythingBelow) {
  MakeFile(L("d/e/f"), "lower");
  MakeWhiteoutAt(U("d"));
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto d, tree.Resolve("d"));
  EXPECT_FALSE(d.exists);
  ASSERT_OK_AND_ASSIGN(auto f, tree.Resolve("d/e/f"));
  EXPECT_FALSE(f.exists);
  EXPECT_ERRNO(ENOENT, tree.List("d"));
}

TEST_F(MergedTreeTest, OpaqueDirectoryHidesLowerContent) {
  MakeFile(L("d/old"), "lower");
  MakeFile(L("d/sub/deep"), "lower");
  MakeFile(U("d/new"), "upper");
  Xattr(U("d"), "user.overlay.opaque", "y");
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto old, tree.Resolve("d/old"));
  EXPECT_FALSE(old.exists);
  ASSERT_OK_AND_ASSIGN(auto deep, tree.Resolve("d/sub/deep"));
  EXPECT_FALSE(deep.exists);
  ASSERT_OK_AND_ASSIGN(auto d, tree.Resolve("d"));
  EXPECT_TRUE(d.exists);
  EXPECT_FALSE(d.dir.merged());
  EXPECT_EQ(Names("d"), std::vector<std::string>{"new"});
}

TEST_F(MergedTreeTest, MergedDirectoryListsBothLayers) {
  MakeFile(L("d/lo"), "1");
  MakeFile(L("d/both"), "2");
  MakeFile(U("d/up"), "3");
  MakeFile(U("d/both"), "4");
  MakeWhiteoutAt(U("d/gone"));
  MakeFile(L("d/gone"), "5");
  EXPECT_EQ(Names("d"), (std::vector<std::string>{"both", "lo", "up"}));
  EXPECT_EQ(Names(""), std::vector<std::string>{"d"});
}

TEST_F(MergedTreeTest, XattrWhiteoutInDirectoryMarkedX) {
  MakeFile(L("d/f"), "lower");
  MakeFile(L("d/g"), "lower");
  MakeFile(U("d/f"), "");
  Xattr(U("d/f"), "user.overlay.whiteout", "");
  Xattr(U("d"), "user.overlay.opaque", "x");
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto f, tree.Resolve("d/f"));
  EXPECT_FALSE(f.exists);
  ASSERT_OK_AND_ASSIGN(auto g, tree.Resolve("d/g"));
  EXPECT_TRUE(g.exists);  // "x" marks a merged directory, not an opaque one
  EXPECT_EQ(Names("d"), std::vector<std::string>{"g"});
}

TEST_F(MergedTreeTest, UpperFileHidesLowerDirectory) {
  MakeFile(L("d/f"), "lower");
  MakeFile(U("d"), "now a file");
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto d, tree.Resolve("d"));
  EXPECT_TRUE(d.exists);
  EXPECT_TRUE(S_ISREG(d.st.st_mode));
  ASSERT_OK_AND_ASSIGN(auto f, tree.Resolve("d/f"));
  EXPECT_FALSE(f.exists);
  EXPECT_ERRNO(ENOTDIR, tree.List("d"));
}

TEST_F(MergedTreeTest, MissingComponentsDoNotExist) {
  MakeFile(L("file"), "x");
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto a, tree.Resolve("nope"));
  EXPECT_FALSE(a.exists);
  ASSERT_OK_AND_ASSIGN(auto b, tree.Resolve("nope/deeper"));
  EXPECT_FALSE(b.exists);
  ASSERT_OK_AND_ASSIGN(auto c, tree.Resolve("file/below"));
  EXPECT_FALSE(c.exists);
  EXPECT_ERRNO(ENOENT, tree.ReadFile("nope"));
  EXPECT_ERRNO(ENOENT, tree.ReadLink("nope"));
  EXPECT_ERRNO(ENOENT, tree.List("nope"));
}

TEST_F(MergedTreeTest, InvalidComponentsAreEinval) {
  MergedTree tree(layers_);
  for (const char* bad : {"a//b", "./a", "a/..", "a/", "/a", "..", "."}) {
    EXPECT_ERRNO(EINVAL, tree.Resolve(bad));
  }
}

TEST_F(MergedTreeTest, SymlinksAreReportedNeverFollowed) {
  MakeFile(L("realdir/inside"), "secret");
  MakeSymlinkAt("realdir", L("linkdir"));
  MakeSymlinkAt("/etc/passwd", L("abs"));
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto link, tree.Resolve("linkdir"));
  EXPECT_TRUE(S_ISLNK(link.st.st_mode));
  ASSERT_OK_AND_ASSIGN(auto below, tree.Resolve("linkdir/inside"));
  EXPECT_FALSE(below.exists);
  ASSERT_OK_AND_ASSIGN(auto target, tree.ReadLink("abs"));
  EXPECT_EQ(target, "/etc/passwd");
  EXPECT_ERRNO(EINVAL, tree.ReadFile("abs"));
  EXPECT_ERRNO(EINVAL, tree.ReadLink("realdir/inside"));
}

TEST_F(MergedTreeTest, UpperSymlinkHidesLowerFile) {
  MakeFile(L("x"), "lower");
  MakeSymlinkAt("elsewhere", U("x"));
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto x, tree.Resolve("x"));
  EXPECT_TRUE(x.in_upper);
  EXPECT_TRUE(S_ISLNK(x.st.st_mode));
  ASSERT_OK_AND_ASSIGN(auto target, tree.ReadLink("x"));
  EXPECT_EQ(target, "elsewhere");
}

TEST_F(MergedTreeTest, ReadFileOfDirectoryIsEisdir) {
  Mkdir(L("d"));
  Mkdir(U("e"));
  ::mkfifo(U("fifo").c_str(), 0644);
  MergedTree tree(layers_);
  EXPECT_ERRNO(EISDIR, tree.ReadFile("d"));
  EXPECT_ERRNO(EISDIR, tree.ReadFile("e"));
  EXPECT_ERRNO(EINVAL, tree.ReadFile("fifo"));
}

TEST_F(MergedTreeTest, ReadFileReadsLargeFilesWhole) {
  std::string big;
  for (int i = 0; i < 300000; ++i)
    big.push_back(static_cast<char>('a' + i % 26));
  MakeFile(L("big"), big);
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto data, tree.ReadFile("big"));
  EXPECT_EQ(data, big);
}

TEST_F(MergedTreeTest, OpenFileOpensTheVisibleLayer) {
  MakeFile(L("f"), "lower");
  MakeFile(L("g"), "lower-g");
  MakeFile(U("f"), "upper");
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto f, tree.OpenFile("f"));
  struct stat st, want;
  ASSERT_EQ(::fstat(f.get(), &st), 0);
  ASSERT_EQ(::lstat(U("f").c_str(), &want), 0);
  EXPECT_EQ(st.st_ino, want.st_ino);
  ASSERT_OK_AND_ASSIGN(auto g, tree.OpenFile("g"));
  ASSERT_EQ(::fstat(g.get(), &st), 0);
  ASSERT_EQ(::lstat(L("g").c_str(), &want), 0);
  EXPECT_EQ(st.st_ino, want.st_ino);
  int fl = ::fcntl(g.get(), F_GETFL);
  EXPECT_EQ(fl & O_ACCMODE, O_RDONLY);
}

TEST_F(MergedTreeTest, OpaqueRootHidesTheWholeLower) {
  MakeFile(L("f"), "lower");
  MakeFile(U("g"), "upper");
  Xattr(U(""), "user.overlay.opaque", "y");
  MergedTree tree(layers_);
  ASSERT_OK_AND_ASSIGN(auto f, tree.Resolve("f"));
  EXPECT_FALSE(f.exists);
  EXPECT_EQ(Names(""), std::vector<std::string>{"g"});
}

// Paths deeper than PATH_MAX (issue 13), through merged, upper-only and
// lower-only directories, with the open-files limit lowered to 64 above
// what the test holds: the cursor keeps a bounded number of descriptors and
// moves between paths by their shared prefix.
TEST_F(MergedTreeTest, PathsDeeperThanPathMaxResolveWithBoundedFds) {
  constexpr size_t kDepth = 2050;  // "d/" x 2050: 4,100 bytes
  using acqfs::test::ChainPath;
  using acqfs::test::MakeChain;
  using acqfs::test::WriteAt;
  ASSERT_EQ(MakeChain(root_ + "/lower", "d", kDepth,
                      [](int fd, size_t level) -> std::string {
                        if (level != kDepth) return "";
                        std::string why = WriteAt(fd, "lo.txt", "lower\n");
                        return why.empty() ? WriteAt(fd, "gone.txt", "x") : why;
                      }),
            "");
  ASSERT_EQ(MakeChain(root_ + "/upper", "d", kDepth,
                      [](int fd, size_t level) -> std::string {
                        if (level != kDepth) return "";
                        if (::mknodat(fd, "gone.txt", S_IFCHR | 0, 0) != 0)
                          return "mknod gone.txt";
                        return WriteAt(fd, "up.txt", "upper\n");
                      }),
            "");
  ASSERT_EQ(MakeChain(root_ + "/lower", "e", kDepth,
                      [](int fd, size_t level) -> std::string {
                        return level == kDepth ? WriteAt(fd, "f", "e\n") : "";
                      }),
            "");
  {
    acqfs::test::FdLimit limit(64);
    ASSERT_TRUE(limit.ok());
    MergedTree tree(layers_);
    ASSERT_OK_AND_ASSIGN(auto lo,
                         tree.ReadFile(ChainPath("d", kDepth, "lo.txt")));
    EXPECT_EQ(lo, "lower\n");
    ASSERT_OK_AND_ASSIGN(auto up,
                         tree.ReadFile(ChainPath("d", kDepth, "up.txt")));
    EXPECT_EQ(up, "upper\n");
    ASSERT_OK_AND_ASSIGN(auto gone,
                         tree.Resolve(ChainPath("d", kDepth, "gone.txt")));
    EXPECT_FALSE(gone.exists);
    ASSERT_OK_AND_ASSIGN(auto e, tree.ReadFile(ChainPath("e", kDepth, "f")));
    EXPECT_EQ(e, "e\n");
    ASSERT_OK_AND_ASSIGN(auto list, tree.List(ChainPath("d", kDepth)));
    std::vector<std::string> names;
    for (const auto& m : list) names.push_back(m.name);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"lo.txt", "up.txt"}));
    ASSERT_OK_AND_ASSIGN(auto mid, tree.Resolve(ChainPath("d", kDepth / 2)));
    EXPECT_TRUE(mid.exists);
    EXPECT_TRUE(mid.dir.upper);
    EXPECT_TRUE(mid.dir.merged());
    ASSERT_OK_AND_ASSIGN(auto deeper,
                         tree.Resolve(ChainPath("d", kDepth + 10)));
    EXPECT_FALSE(deeper.exists);
    // Every directory of the chain in turn, as the ignore rules and the
    // snapshot ask: one step each from the last (the old resolver walked
    // each path from the layer root, O(depth) opens of O(depth) paths each
    // time: minutes for this loop).
    auto start = std::chrono::steady_clock::now();
    for (size_t i = 1; i <= kDepth; ++i) {
      auto node = tree.Resolve(ChainPath("d", i));
      ASSERT_TRUE(node.ok()) << node.error().Message();
      ASSERT_TRUE(node->exists && S_ISDIR(node->st.st_mode)) << i;
    }
    double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    EXPECT_LT(secs, 10.0);
  }
  EXPECT_EQ(acqfs::test::RemoveDeep(L("d")), "");
  EXPECT_EQ(acqfs::test::RemoveDeep(L("e")), "");
  EXPECT_EQ(acqfs::test::RemoveDeep(U("d")), "");
}

}  // namespace
}  // namespace acqfs::gitbridge
