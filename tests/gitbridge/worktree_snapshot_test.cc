// Tests of BuildWorktreeTree: a base tree made from the lower files, changes
// laid down by hand in the upper, and the resulting tree read back from a
// real bare repository.
#include "gitbridge/worktree_snapshot.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "common/git_ptr.h"
#include "gitbridge/tree_build.h"
#include "harness/deep_git.h"
#include "harness/deep_tree.h"
#include "harness/fs_util.h"
#include "harness/git_test_util.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::DeepContent;
using ::acqfs::test::MakeFile;
using ::acqfs::test::MakeOpaqueDir;
using ::acqfs::test::MakeSymlinkAt;
using ::acqfs::test::MakeWhiteoutAt;
using ::acqfs::test::TempDir;

class WorktreeSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    fs::create_directory(root_ + "/lower");
    fs::create_directory(root_ + "/upper");
    git_repository* raw = nullptr;
    ASSERT_EQ(git_repository_init(&raw, (root_ + "/repo.git").c_str(), 1), 0);
    repo_.reset(raw);
    auto l = Layers::OpenForReading(root_ + "/lower", root_ + "/upper",
                                    XattrNamespace::kUser);
    ASSERT_TRUE(l.ok()) << l.error().Message();
    layers_ = std::move(*l);
  }
  void TearDown() override { repo_.reset(); }

  std::string L(const std::string& rel) { return root_ + "/lower/" + rel; }
  std::string U(const std::string& rel) { return root_ + "/upper/" + rel; }
  git_oid Blob(const std::string& data) {
    return ::acqfs::test::MakeBlob(repo_.get(), data);
  }
  // A tracked lower file: written to the lower and recorded in the base.
  void Tracked(const std::string& path, const std::string& data,
               mode_t mode = 0644) {
    MakeFile(L(path), data, mode);
    base_.push_back(TreeEdit{
        TreeEdit::kPut, path,
        (mode & S_IXUSR) ? GIT_FILEMODE_BLOB_EXECUTABLE : GIT_FILEMODE_BLOB,
        Blob(data)});
  }
  void Gitlink(const std::string& path, const git_oid& commit) {
    fs::create_directories(L(path));
    base_.push_back(
        TreeEdit{TreeEdit::kPut, path, GIT_FILEMODE_COMMIT, commit});
  }
  git_oid Base() {
    auto r = ApplyTreeEdits(repo_.get(), nullptr, base_);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    return r.ok() ? *r : git_oid{};
  }
  git_oid Snapshot(const git_oid* base, SnapshotStats* stats = nullptr) {
    auto r = BuildWorktreeTree(repo_.get(), base, layers_, stats);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    return r.ok() ? *r : git_oid{};
  }
  std::optional<::acqfs::test::TreeEntryAt> At(const git_oid& tree,
                                               const std::string& path) {
    return ::acqfs::test::EntryAt(repo_.get(), tree, path);
  }
  std::string Content(const git_oid& tree, const std::string& path) {
    return ::acqfs::test::BlobAt(repo_.get(), tree, path);
  }

  GitLibrary lib_;
  TempDir tmp_;
  std::string root_;
  GitRepository repo_;
  Layers layers_;
  std::vector<TreeEdit> base_;
};

TEST_F(WorktreeSnapshotTest, NoChangesKeepTheBaseTree) {
  Tracked("a/b", "1");
  Tracked("c", "2");
  git_oid base = Base();
  SnapshotStats stats;
  git_oid t = Snapshot(&base, &stats);
  EXPECT_TRUE(git_oid_equal(&t, &base));
  EXPECT_EQ(stats.changes, 0u);
  EXPECT_EQ(stats.blobs_written, 0u);
}

TEST_F(WorktreeSnapshotTest, ModifiedTrackedFileIsRecorded) {
  Tracked("src/main.c", "int main;");
  Tracked("src/util.c", "util");
  git_oid base = Base();
  MakeFile(U("src/main.c"), "int main(void) { return 0; }");
  SnapshotStats stats;
  git_oid t = Snapshot(&base, &stats);
  EXPECT_EQ(Content(t, "src/main.c"), "int main(void) { return 0; }");
  EXPECT_EQ(Content(t, "src/util.c"), "util");
  EXPECT_EQ(stats.changes, 1u);
  EXPECT_EQ(stats.blobs_written, 1u);
}

TEST_F(WorktreeSnapshotTest, UnchangedCopyUpWritesNothing) {
  Tracked("f", "same");
  git_oid base = Base();
  MakeFile(U("f"), "same");
  SnapshotStats stats;
  git_oid t = Snapshot(&base, &stats);
  EXPECT_TRUE(git_oid_equal(&t, &base));
  EXPECT_EQ(stats.blobs_written, 0u);
}

TEST_F(WorktreeSnapshotTest, WhiteoutsRemoveFilesAndDirectories) {
  Tracked("keep", "k");
  Tracked("gone", "g");
  Tracked("dir/x", "x");
  Tracked("dir/sub/y", "y");
  Tracked("part/a", "a");
  Tracked("part/b", "b");
  git_oid base = Base();
  MakeWhiteoutAt(U("gone"));
  MakeWhiteoutAt(U("dir"));
  MakeWhiteoutAt(U("part/a"));
  git_oid t = Snapshot(&base);
  EXPECT_EQ(Content(t, "keep"), "k");
  EXPECT_FALSE(At(t, "gone"));
  EXPECT_FALSE(At(t, "dir"));
  EXPECT_FALSE(At(t, "part/a"));
  EXPECT_EQ(Content(t, "part/b"), "b");
}

TEST_F(WorktreeSnapshotTest, NewUntrackedFilesAreAdded) {
  Tracked("a", "1");
  git_oid base = Base();
  MakeFile(U("new/deep/file.txt"), "fresh");
  git_oid t = Snapshot(&base);
  EXPECT_EQ(Content(t, "new/deep/file.txt"), "fresh");
  EXPECT_EQ(Content(t, "a"), "1");
}

TEST_F(WorktreeSnapshotTest, IgnoredUntrackedFilesAreSkipped) {
  Tracked(".gitignore", "*.log\nbuild/\n");
  Tracked("src/a.c", "a");
  git_oid base = Base();
  MakeFile(U("debug.log"), "noise");
  MakeFile(U("src/deep.log"), "noise");
  MakeFile(U("build/out.o"), "obj");
  MakeFile(U("src/b.c"), "b");
  SnapshotStats stats;
  git_oid t = Snapshot(&base, &stats);
  EXPECT_FALSE(At(t, "debug.log"));
  EXPECT_FALSE(At(t, "src/deep.log"));
  EXPECT_FALSE(At(t, "build"));
  EXPECT_EQ(Content(t, "src/b.c"), "b");
  EXPECT_EQ(stats.ignored_skipped, 3u);
  EXPECT_EQ(stats.blobs_written, 1u);
}

TEST_F(WorktreeSnapshotTest, TrackedIgnoredFileIsStillRecorded) {
  Tracked(".gitignore", "*.log\n");
  Tracked("kept.log", "old");
  git_oid base = Base();
  MakeFile(U("kept.log"), "new");
  git_oid t = Snapshot(&base);
  EXPECT_EQ(Content(t, "kept.log"), "new");
}

TEST_F(WorktreeSnapshotTest, SandboxIgnoreRulesCount) {
  Tracked(".gitignore", "*.a\n");
  git_oid base = Base();
  MakeFile(U(".gitignore"), "*.b\n");  // the sandbox's edit counts
  MakeFile(U("x.a"), "a");
  MakeFile(U("x.b"), "b");
  MakeFile(L(".git/info/exclude"), "secret*\n");
  MakeFile(U("secret.txt"), "s");
  git_oid t = Snapshot(&base);
  EXPECT_EQ(Content(t, ".gitignore"), "*.b\n");
  EXPECT_EQ(Content(t, "x.a"), "a");
  EXPECT_FALSE(At(t, "x.b"));
  EXPECT_FALSE(At(t, "secret.txt"));
}

TEST_F(WorktreeSnapshotTest, ModesFollowTheOwnerExecuteBit) {
  Tracked("tool", "#!/bin/sh\n", 0644);
  git_oid base = Base();
  MakeFile(U("tool"), "#!/bin/sh\n", 0744);
  MakeFile(U("script"), "#!/bin/sh\n", 0700);
  MakeFile(U("data"), "d", 0611);  // group/other execute bits do not count
  git_oid t = Snapshot(&base);
  EXPECT_EQ(At(t, "tool")->mode, GIT_FILEMODE_BLOB_EXECUTABLE);
  EXPECT_EQ(At(t, "script")->mode, GIT_FILEMODE_BLOB_EXECUTABLE);
  EXPECT_EQ(At(t, "data")->mode, GIT_FILEMODE_BLOB);
}

TEST_F(WorktreeSnapshotTest, SymlinksAreRecordedAsLinksNeverFollowed) {
  Tracked("f", "file");
  git_oid base = Base();
  MakeSymlinkAt("/etc/passwd", U("abs"));
  MakeSymlinkAt("../outside", U("d/rel"));
  MakeSymlinkAt("missing", U("f"));  // a tracked file replaced by a link
  git_oid t = Snapshot(&base);
  EXPECT_EQ(At(t, "abs")->mode, GIT_FILEMODE_LINK);
  EXPECT_EQ(Content(t, "abs"), "/etc/passwd");
  EXPECT_EQ(Content(t, "d/rel"), "../outside");
  EXPECT_EQ(At(t, "f")->mode, GIT_FILEMODE_LINK);
  EXPECT_EQ(Content(t, "f"), "missing");
}

TEST_F(WorktreeSnapshotTest, GitlinksAreKeptAndNeverEntered) {
  git_oid commit;
  ASSERT_EQ(
      git_oid_fromstr(&commit, "89abcdef0123456789abcdef0123456789abcdef"), 0);
  Tracked("top", "t");
  Gitlink("mods/sub", commit);
  Gitlink("gone", commit);
  git_oid base = Base();
  MakeFile(U("mods/sub/new.c"), "inside the submodule");
  MakeFile(U("mods/sib"), "beside it");
  MakeWhiteoutAt(U("gone"));
  git_oid t = Snapshot(&base);
  auto sub = At(t, "mods/sub");
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->mode, GIT_FILEMODE_COMMIT);
  EXPECT_TRUE(git_oid_equal(&sub->id, &commit));
  EXPECT_FALSE(At(t, "mods/sub/new.c"));
  EXPECT_EQ(Content(t, "mods/sib"), "beside it");
  auto gone = At(t, "gone");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->mode, GIT_FILEMODE_COMMIT);
}

TEST_F(WorktreeSnapshotTest, OpaqueDirectoryReplacesItsContent) {
  Tracked("d/a", "a");
  Tracked("d/sub/b", "b");
  Tracked("other", "o");
  git_oid base = Base();
  MakeOpaqueDir(U("d"));
  MakeFile(U("d/c"), "c");
  MakeFile(U("d/a"), "a");  // same bytes as before: recorded again, same blob
  git_oid t = Snapshot(&base);
  EXPECT_EQ(Content(t, "d/c"), "c");
  EXPECT_EQ(Content(t, "d/a"), "a");
  EXPECT_FALSE(At(t, "d/sub"));
  EXPECT_EQ(Content(t, "other"), "o");
}

TEST_F(WorktreeSnapshotTest, FileReplacesDirectory) {
  Tracked("d/x", "x");
  Tracked("d/y/z", "z");
  git_oid base = Base();
  MakeFile(U("d"), "a file now");
  git_oid t = Snapshot(&base);
  EXPECT_EQ(At(t, "d")->mode, GIT_FILEMODE_BLOB);
  EXPECT_EQ(Content(t, "d"), "a file now");
}

TEST_F(WorktreeSnapshotTest, IgnoredFileOverDirectoryStillRemovesIt) {
  Tracked(".gitignore", "d\n");
  Tracked("d/x", "x");
  git_oid base = Base();
  MakeFile(U("d"), "ignored file");
  SnapshotStats stats;
  git_oid t = Snapshot(&base, &stats);
  EXPECT_FALSE(At(t, "d"));
  EXPECT_EQ(stats.ignored_skipped, 1u);
}

TEST_F(WorktreeSnapshotTest, DirectoryReplacesFile) {
  Tracked("f", "file");
  Tracked("g", "file");
  git_oid base = Base();
  MakeOpaqueDir(U("f"));  // rm f; mkdir f: an opaque directory over a whiteout
  MakeFile(U("f/inner"), "i");
  fs::create_directory(U("g"));  // a plain upper dir over the lower file
  MakeFile(U("g/inner"), "j");
  git_oid t = Snapshot(&base);
  EXPECT_EQ(At(t, "f")->mode, GIT_FILEMODE_TREE);
  EXPECT_EQ(Content(t, "f/inner"), "i");
  EXPECT_EQ(At(t, "g")->mode, GIT_FILEMODE_TREE);
  EXPECT_EQ(Content(t, "g/inner"), "j");
}

TEST_F(WorktreeSnapshotTest, NullBaseBuildsFromTheUpperAlone) {
  MakeFile(U("a/b"), "1");
  MakeFile(U("c"), "2");
  MakeFile(U(".git/config"), "never recorded");
  git_oid t = Snapshot(nullptr);
  EXPECT_EQ(Content(t, "a/b"), "1");
  EXPECT_EQ(Content(t, "c"), "2");
  EXPECT_FALSE(At(t, ".git"));
}

TEST_F(WorktreeSnapshotTest, LargeFilesAreStreamedWhole) {
  Tracked("big", "small");
  git_oid base = Base();
  std::string big(5 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  MakeFile(U("big"), big);
  git_oid t = Snapshot(&base);
  EXPECT_EQ(Content(t, "big"), big);
  git_oid want;
  ASSERT_EQ(git_odb_hash(&want, big.data(), big.size(), GIT_OBJECT_BLOB), 0);
  EXPECT_TRUE(git_oid_equal(&At(t, "big")->id, &want));
}

TEST_F(WorktreeSnapshotTest, MissingBaseIsAnError) {
  git_oid ghost;
  ASSERT_EQ(git_oid_fromstr(&ghost, "3333333333333333333333333333333333333333"),
            0);
  MakeFile(U("f"), "x");
  auto r = BuildWorktreeTree(repo_.get(), &ghost, layers_, nullptr);
  EXPECT_FALSE(r.ok());
}

// Names git refuses are left out of the tree and listed, once each (a
// directory once for all it holds), and the rest of the change is still
// recorded; nothing fails on a name. An ignored one is left out silently.
TEST_F(WorktreeSnapshotTest, NamesGitRefusesAreSkippedAndListed) {
  Tracked("a", "1");
  Tracked(".gitignore", "ignored-dir/\n");
  git_oid base = Base();
  MakeFile(U(".GIT/config"), "[core]\n");
  MakeFile(U(".GIT/hooks/post-checkout"), "#!/bin/sh\n", 0755);
  MakeFile(U("git~1/x"), "x");
  MakeFile(U(".git./x"), "x");
  MakeFile(U("sub/.GIT/x"), "x");
  MakeFile(U("sub/fine.txt"), "fine");
  MakeSymlinkAt("target", U("GITMOD~1"));
  MakeSymlinkAt("target", U(".gitmodules."));
  MakeSymlinkAt("target", U(".gitmodules "));
  MakeFile(U("ignored-dir/.GIT/x"), "x");
  MakeFile(U("a"), "2");
  SnapshotStats stats;
  git_oid t = Snapshot(&base, &stats);
  EXPECT_EQ(Content(t, "a"), "2");
  EXPECT_EQ(Content(t, "sub/fine.txt"), "fine");
  std::vector<std::string> skipped;
  for (const SkippedPath& k : stats.skipped) {
    skipped.push_back(k.path);
    EXPECT_FALSE(k.reason.empty());
    EXPECT_FALSE(At(t, k.path)) << k.path;
  }
  EXPECT_EQ(skipped, (std::vector<std::string>{".GIT", ".git.", ".gitmodules ",
                                               ".gitmodules.", "GITMOD~1",
                                               "git~1", "sub/.GIT"}));
  EXPECT_FALSE(At(t, "ignored-dir"));
  EXPECT_EQ(stats.blobs_written, 2u);  // a, sub/fine.txt
}

// Trees deeper than PATH_MAX (issue 13), with the open-files limit lowered
// to 64 above what the test holds (the old scan held two descriptors per
// level) and no C++ stack per level (the old scan and tree build recursed,
// hundreds of bytes per level: 30,000 levels overflow the 8 MB stack; the
// scan and the tree build are tested at 100,000 levels on their own).
TEST_F(WorktreeSnapshotTest, AnUntrackedChainOf30000DirectoriesIsRecorded) {
  constexpr size_t kDepth = 30000;
  ASSERT_EQ(acqfs::test::MakeChain(root_ + "/upper", "d", kDepth,
                                   [](int fd, size_t level) -> std::string {
                                     if (level != kDepth) return "";
                                     return acqfs::test::WriteAt(fd, "deep.txt",
                                                                 "deep\n");
                                   }),
            "");
  git_oid t{};
  {
    acqfs::test::FdLimit limit(64);
    ASSERT_TRUE(limit.ok());
    SnapshotStats stats;
    t = Snapshot(nullptr, &stats);
    EXPECT_EQ(stats.blobs_written, 1u);
  }
  EXPECT_EQ(DeepContent(repo_.get(), t,
                        acqfs::test::ChainPath("d", kDepth, "deep.txt")),
            "deep\n");
  EXPECT_EQ(acqfs::test::RemoveDeep(U("d")), "");
}

TEST_F(WorktreeSnapshotTest, TrackedAndIgnoredPathsDeeperThanPathMax) {
  constexpr size_t kDepth = 3000;  // 6,000 bytes of "d/"
  const std::string dir = acqfs::test::ChainPath("d", kDepth);
  Tracked(".gitignore", "*.log\n");
  // The base records two files at the bottom; the lower holds them too.
  ASSERT_EQ(acqfs::test::MakeChain(
                root_ + "/lower", "d", kDepth,
                [](int fd, size_t level) -> std::string {
                  if (level != kDepth) return "";
                  std::string why = acqfs::test::WriteAt(fd, "t.txt", "old\n");
                  return why.empty()
                             ? acqfs::test::WriteAt(fd, "x.log", "log\n")
                             : why;
                }),
            "");
  base_.push_back(TreeEdit{TreeEdit::kPut, dir + "/t.txt", GIT_FILEMODE_BLOB,
                           Blob("old\n")});
  base_.push_back(TreeEdit{TreeEdit::kPut, dir + "/x.log", GIT_FILEMODE_BLOB,
                           Blob("log\n")});
  git_oid base = Base();
  // The sandbox changed t.txt and made an ignored and a plain file there.
  ASSERT_EQ(acqfs::test::MakeChain(
                root_ + "/upper", "d", kDepth,
                [](int fd, size_t level) -> std::string {
                  if (level != kDepth) return "";
                  for (const char* n : {"t.txt", "new.txt", "new.log"}) {
                    std::string why = acqfs::test::WriteAt(fd, n, "new\n");
                    if (!why.empty()) return why;
                  }
                  return "";
                }),
            "");
  git_oid t{};
  SnapshotStats stats;
  {
    acqfs::test::FdLimit limit(64);
    ASSERT_TRUE(limit.ok());
    t = Snapshot(&base, &stats);
  }
  EXPECT_EQ(DeepContent(repo_.get(), t, dir + "/t.txt"), "new\n");
  EXPECT_EQ(DeepContent(repo_.get(), t, dir + "/new.txt"), "new\n");
  EXPECT_EQ(DeepContent(repo_.get(), t, dir + "/new.log"), "<missing>");
  EXPECT_EQ(DeepContent(repo_.get(), t, dir + "/x.log"), "log\n");
  EXPECT_EQ(stats.ignored_skipped, 1u);
  EXPECT_EQ(acqfs::test::RemoveDeep(L("d")), "");
  EXPECT_EQ(acqfs::test::RemoveDeep(U("d")), "");
}

}  // namespace
}  // namespace acqfs::gitbridge
