// Tests of ApplyTreeEdits in a real bare repository: nested puts and
// removals, file <-> directory changes in one call, dropped empty subtrees,
// untouched subtrees kept by id, and refused paths.
#include "gitbridge/tree_build.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <optional>

#include "common/git_ptr.h"
#include "harness/deep_git.h"
#include "harness/deep_tree.h"
#include "harness/git_test_util.h"
#include "harness/result_assert.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::DeepContent;
using ::acqfs::test::TempDir;

constexpr char kEmptyTree[] = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

class TreeBuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    git_repository* raw = nullptr;
    ASSERT_EQ(git_repository_init(&raw, (root_ + "/repo.git").c_str(), 1), 0);
    repo_.reset(raw);
  }
  void TearDown() override { repo_.reset(); }

  git_oid Blob(const std::string& data) {
    return ::acqfs::test::MakeBlob(repo_.get(), data);
  }
  TreeEdit Put(const std::string& path, const std::string& data,
               git_filemode_t mode = GIT_FILEMODE_BLOB) {
    return TreeEdit{TreeEdit::kPut, path, mode, Blob(data)};
  }
  static TreeEdit Remove(const std::string& path) {
    return TreeEdit{TreeEdit::kRemove, path};
  }
  // The entry at `path` of tree `tree`, or nullopt.
  std::optional<::acqfs::test::TreeEntryAt> At(const git_oid& tree,
                                               const std::string& path) {
    return ::acqfs::test::EntryAt(repo_.get(), tree, path);
  }
  std::string Content(const git_oid& tree, const std::string& path) {
    return ::acqfs::test::BlobAt(repo_.get(), tree, path);
  }
  size_t EntryCount(const git_oid& tree) {
    git_tree* raw = nullptr;
    EXPECT_EQ(git_tree_lookup(&raw, repo_.get(), &tree), 0);
    GitTree t(raw);
    return git_tree_entrycount(raw);
  }
  // Number of loose objects in the repository.
  size_t LooseObjects() {
    return ::acqfs::test::LooseObjects(root_ + "/repo.git/objects").size();
  }
  git_oid Apply(const git_oid* base, const std::vector<TreeEdit>& edits) {
    auto r = ApplyTreeEdits(repo_.get(), base, edits);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    return r.ok() ? *r : git_oid{};
  }

  GitLibrary lib_;
  TempDir tmp_;
  std::string root_;
  GitRepository repo_;
};

TEST_F(TreeBuildTest, NoBaseNoEditsIsTheEmptyTree) {
  git_oid t = Apply(nullptr, {});
  EXPECT_EQ(OidHex(t), kEmptyTree);
  git_tree* raw = nullptr;
  ASSERT_EQ(git_tree_lookup(&raw, repo_.get(), &t), 0);  // it was written
  git_tree_free(raw);
}

TEST_F(TreeBuildTest, PutsCreateNestedDirectories) {
  git_oid t = Apply(
      nullptr, {Put("a/b/c.txt", "deep"), Put("top", "t"), Put("a/x", "x")});
  EXPECT_EQ(Content(t, "a/b/c.txt"), "deep");
  EXPECT_EQ(Content(t, "top"), "t");
  EXPECT_EQ(Content(t, "a/x"), "x");
  EXPECT_EQ(At(t, "a/b")->mode, GIT_FILEMODE_TREE);
  EXPECT_EQ(EntryCount(t), 2u);
}

TEST_F(TreeBuildTest, ModesArePreserved) {
  git_oid commit;
  ASSERT_EQ(
      git_oid_fromstr(&commit, "0123456789abcdef0123456789abcdef01234567"), 0);
  git_oid t = Apply(nullptr, {Put("run", "#!", GIT_FILEMODE_BLOB_EXECUTABLE),
                              Put("link", "target", GIT_FILEMODE_LINK),
                              TreeEdit{TreeEdit::kPut, "sub/module",
                                       GIT_FILEMODE_COMMIT, commit}});
  EXPECT_EQ(At(t, "run")->mode, GIT_FILEMODE_BLOB_EXECUTABLE);
  EXPECT_EQ(At(t, "link")->mode, GIT_FILEMODE_LINK);
  EXPECT_EQ(Content(t, "link"), "target");
  auto sub = At(t, "sub/module");
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->mode, GIT_FILEMODE_COMMIT);
  EXPECT_TRUE(git_oid_equal(&sub->id, &commit));
}

TEST_F(TreeBuildTest, RemoveFileAndDropEmptyDirectories) {
  git_oid base = Apply(nullptr, {Put("a/b/c/only", "1"), Put("keep", "k")});
  git_oid t = Apply(&base, {Remove("a/b/c/only")});
  EXPECT_FALSE(At(t, "a"));  // a/b/c, a/b and a were left empty
  EXPECT_EQ(Content(t, "keep"), "k");
  EXPECT_EQ(EntryCount(t), 1u);
}

TEST_F(TreeBuildTest, RemovingEverythingLeavesTheEmptyTree) {
  git_oid base = Apply(nullptr, {Put("a/b", "1"), Put("c", "2")});
  git_oid t = Apply(&base, {Remove("a/b"), Remove("c")});
  EXPECT_EQ(OidHex(t), kEmptyTree);
}

TEST_F(TreeBuildTest, RemoveOfDirectoryRemovesWholeSubtree) {
  git_oid base = Apply(nullptr, {Put("d/x", "1"), Put("d/e/y", "2"),
                                 Put("d/e/f/z", "3"), Put("other", "o")});
  git_oid t = Apply(&base, {Remove("d")});
  EXPECT_FALSE(At(t, "d"));
  EXPECT_EQ(Content(t, "other"), "o");
  EXPECT_EQ(EntryCount(t), 1u);
}

TEST_F(TreeBuildTest, RemovingMissingPathsChangesNothing) {
  git_oid base = Apply(nullptr, {Put("a/b", "1"), Put("f", "2")});
  git_oid t = Apply(
      &base, {Remove("nope"), Remove("a/nope/deeper"), Remove("f/below")});
  EXPECT_TRUE(git_oid_equal(&t, &base));
}

TEST_F(TreeBuildTest, FileBecomesDirectory) {
  git_oid base = Apply(nullptr, {Put("a", "was a file"), Put("z", "z")});
  git_oid t = Apply(&base, {Put("a/b/c", "now below")});
  auto a = At(t, "a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->mode, GIT_FILEMODE_TREE);
  EXPECT_EQ(Content(t, "a/b/c"), "now below");
  EXPECT_EQ(EntryCount(t), 2u);
}

TEST_F(TreeBuildTest, DirectoryBecomesFile) {
  git_oid base = Apply(nullptr, {Put("d/x", "1"), Put("d/e/y", "2")});
  git_oid t = Apply(&base, {Put("d", "now a file")});
  EXPECT_EQ(At(t, "d")->mode, GIT_FILEMODE_BLOB);
  EXPECT_EQ(Content(t, "d"), "now a file");
}

TEST_F(TreeBuildTest, BothTransitionsInOneCall) {
  git_oid base = Apply(nullptr, {Put("f", "file"), Put("d/x", "1"),
                                 Put("deep/er/f", "2"), Put("deep/er/g", "3")});
  git_oid t = Apply(
      &base, {Remove("d"), Put("d", "file now"), Remove("f"),
              Put("f/inside", "dir now"), Put("deep/er/g/h", "g becomes a dir"),
              Put("deep/er", "er becomes a file")});
  EXPECT_EQ(Content(t, "d"), "file now");
  EXPECT_EQ(Content(t, "f/inside"), "dir now");
  EXPECT_EQ(Content(t, "deep/er"), "er becomes a file");
  EXPECT_EQ(At(t, "deep")->mode, GIT_FILEMODE_TREE);
}

TEST_F(TreeBuildTest, EditsApplyInOrder) {
  git_oid base = Apply(nullptr, {Put("d/old", "o"), Put("f", "base")});
  git_oid t = Apply(&base, {Put("f", "first"), Put("f", "second"), Remove("d"),
                            Put("d/new", "n"), Put("gone", "x"), Remove("gone"),
                            Put("p", "file"), Put("p/q", "dir"),
                            Put("r/s", "dir"), Put("r", "file")});
  EXPECT_EQ(Content(t, "f"), "second");
  EXPECT_FALSE(At(t, "d/old"));
  EXPECT_EQ(Content(t, "d/new"), "n");
  EXPECT_FALSE(At(t, "gone"));
  EXPECT_EQ(Content(t, "p/q"), "dir");
  EXPECT_EQ(Content(t, "r"), "file");
}

TEST_F(TreeBuildTest, PutThenRemoveBelowAFileDropsTheNewDirectory) {
  git_oid base = Apply(nullptr, {Put("a", "file"), Put("z", "z")});
  // Put a/b turns a into a directory; removing a/b leaves it empty.
  git_oid t = Apply(&base, {Put("a/b", "x"), Remove("a/b")});
  EXPECT_FALSE(At(t, "a"));
  EXPECT_EQ(EntryCount(t), 1u);
}

TEST_F(TreeBuildTest, UntouchedSubtreesKeepTheirIds) {
  git_oid base = Apply(nullptr, {Put("x/1", "1"), Put("x/y/2", "2"),
                                 Put("w/3", "3"), Put("w/v/4", "4")});
  git_oid t = Apply(&base, {Put("w/v/5", "5")});
  EXPECT_TRUE(git_oid_equal(&At(t, "x")->id, &At(base, "x")->id));
  EXPECT_TRUE(git_oid_equal(&At(t, "x/y")->id, &At(base, "x/y")->id));
  EXPECT_FALSE(git_oid_equal(&At(t, "w")->id, &At(base, "w")->id));
  EXPECT_FALSE(git_oid_equal(&At(t, "w/v")->id, &At(base, "w/v")->id));
  EXPECT_EQ(Content(t, "w/3"), "3");
  EXPECT_EQ(Content(t, "w/v/4"), "4");
}

TEST_F(TreeBuildTest, OnlyTreesOnEditedPathsAreWritten) {
  std::vector<TreeEdit> edits;
  for (int i = 0; i < 20; ++i) {
    edits.push_back(Put("big" + std::to_string(i) + "/f", std::to_string(i)));
  }
  edits.push_back(Put("a/b/c/d/e/leaf", "old"));
  git_oid base = Apply(nullptr, edits);
  TreeEdit change = Put("a/b/c/d/e/leaf", "new");  // writes the blob first
  size_t before = LooseObjects();
  git_oid t = Apply(&base, {change});
  // The root and a, a/b, a/b/c, a/b/c/d, a/b/c/d/e: six new trees.
  EXPECT_EQ(LooseObjects() - before, 6u);
  EXPECT_EQ(Content(t, "a/b/c/d/e/leaf"), "new");
  EXPECT_EQ(EntryCount(t), 21u);
}

TEST_F(TreeBuildTest, BadPathsAreEinval) {
  git_oid base = Apply(nullptr, {Put("f", "1")});
  for (const char* bad : {"", "a//b", "./a", "a/.", "a/..", "..", "/a", "a/"}) {
    auto r = ApplyTreeEdits(repo_.get(), &base, {Remove(bad)});
    EXPECT_EQ(r.err(), EINVAL) << "remove '" << bad << "'";
    auto p = ApplyTreeEdits(repo_.get(), &base, {Put(bad, "x")});
    EXPECT_EQ(p.err(), EINVAL) << "put '" << bad << "'";
  }
}

TEST_F(TreeBuildTest, BadModesAreEinval) {
  TreeEdit e = Put("f", "x");
  e.mode = GIT_FILEMODE_TREE;
  EXPECT_EQ(ApplyTreeEdits(repo_.get(), nullptr, {e}).err(), EINVAL);
  e.mode = static_cast<git_filemode_t>(0100600);
  EXPECT_EQ(ApplyTreeEdits(repo_.get(), nullptr, {e}).err(), EINVAL);
}

TEST_F(TreeBuildTest, UnsafeNamesAreRefused) {
  // The bridge's one rule set (git_names.h), not libgit2's "invalid name".
  for (const char* bad : {".git/config", "a/.git/hooks/x", ".GIT/x", "git~1/x",
                          ".git./x", "sub/.GIT", "a\\.git", ".gitmodules/x"}) {
    auto r = ApplyTreeEdits(repo_.get(), nullptr, {Put(bad, "x")});
    EXPECT_EQ(r.err(), EPERM) << bad;
  }
  for (const char* bad : {"sub/.gitmodules", "GITMOD~1", ".gitmodules.",
                          ".gitmodules ", ".gitignore", "gi250a~1"}) {
    auto link = ApplyTreeEdits(repo_.get(), nullptr,
                               {Put(bad, "x", GIT_FILEMODE_LINK)});
    EXPECT_EQ(link.err(), EPERM) << bad;
  }
  auto named = ApplyTreeEdits(repo_.get(), nullptr, {Put("a/.GIT/x", "x")});
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.error().path, "a/.GIT");
  EXPECT_NE(named.error().op.find("hasDotgit"), std::string::npos);
  auto file = ApplyTreeEdits(repo_.get(), nullptr,
                             {Put(".gitmodules", "[submodule]\n")});
  EXPECT_TRUE(file.ok());
}

TEST_F(TreeBuildTest, MissingBlobIsRefused) {
  git_oid ghost;
  ASSERT_EQ(git_oid_fromstr(&ghost, "1111111111111111111111111111111111111111"),
            0);
  auto r =
      ApplyTreeEdits(repo_.get(), nullptr,
                     {TreeEdit{TreeEdit::kPut, "f", GIT_FILEMODE_BLOB, ghost}});
  EXPECT_FALSE(r.ok());
}

TEST_F(TreeBuildTest, MissingBaseTreeIsAnError) {
  git_oid ghost;
  ASSERT_EQ(git_oid_fromstr(&ghost, "2222222222222222222222222222222222222222"),
            0);
  auto r = ApplyTreeEdits(repo_.get(), &ghost, {});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().path.find("2222"), std::string::npos);
}

// An edited path 100,000 directories deep (issue 13: a legal tree on ext4)
// is built without recursion: the old recursive BuildTree/BuildNode, and
// the recursive destruction of the edit trie, overflowed the 8 MB stack.
TEST_F(TreeBuildTest, AnEditPath100000DirectoriesDeepIsBuiltWithoutRecursion) {
  constexpr size_t kDepth = 100000;
  const std::string dir = acqfs::test::ChainPath("d", kDepth);
  ASSERT_OK_AND_ASSIGN(auto t1, ApplyTreeEdits(repo_.get(), nullptr,
                                               {Put(dir + "/f", "bottom\n")}));
  EXPECT_EQ(DeepContent(repo_.get(), t1, dir + "/f"), "bottom\n");
  // From that base: the file replaced by a sibling, and a file halfway.
  const std::string half = acqfs::test::ChainPath("d", kDepth / 2, "h");
  ASSERT_OK_AND_ASSIGN(
      auto t2, ApplyTreeEdits(repo_.get(), &t1,
                              {Remove(dir + "/f"), Put(dir + "/g", "sibling\n"),
                               Put(half, "half\n")}));
  EXPECT_EQ(DeepContent(repo_.get(), t2, dir + "/f"), "<missing>");
  EXPECT_EQ(DeepContent(repo_.get(), t2, dir + "/g"), "sibling\n");
  EXPECT_EQ(DeepContent(repo_.get(), t2, half), "half\n");
}

}  // namespace
}  // namespace acqfs::gitbridge
