// BuildWorktreeTree over a stack of layers (the host, frozen layers, the
// upper): the tree export records for a checkpointed sandbox equals the tree
// of the same content squashed by hand into one upper layer, and holds what
// the merged view shows.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/git_ptr.h"
#include "gitbridge/delta_scan.h"
#include "gitbridge/tree_build.h"
#include "gitbridge/worktree_snapshot.h"
#include "harness/fs_util.h"
#include "harness/git_test_util.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::MakeFile;
using ::acqfs::test::TempDir;

class WorktreeStackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    for (const char* d : {"host", "l1", "l2", "upper", "squashed"})
      fs::create_directory(root_ + "/" + d);
    git_repository* raw = nullptr;
    ASSERT_EQ(git_repository_init(&raw, (root_ + "/repo.git").c_str(), 1), 0);
    repo_.reset(raw);
  }
  void TearDown() override { repo_.reset(); }

  std::string P(const std::string& layer, const std::string& rel) {
    return root_ + "/" + layer + "/" + rel;
  }
  void File(const std::string& layer, const std::string& rel,
            const std::string& data, mode_t mode = 0644) {
    MakeFile(P(layer, rel), data, mode);
  }
  void Whiteout(const std::string& layer, const std::string& rel) {
    ::acqfs::test::MakeWhiteoutAt(P(layer, rel));
  }
  void Opaque(const std::string& layer, const std::string& rel) {
    ::acqfs::test::MakeOpaqueDir(P(layer, rel));
  }
  void Symlink(const std::string& layer, const std::string& target,
               const std::string& rel) {
    ::acqfs::test::MakeSymlinkAt(target, P(layer, rel));
  }
  // A host file recorded in the base tree.
  void Tracked(const std::string& rel, const std::string& data,
               mode_t mode = 0644) {
    File("host", rel, data, mode);
    git_oid id = ::acqfs::test::MakeBlob(repo_.get(), data);
    base_.push_back(TreeEdit{
        TreeEdit::kPut, rel,
        (mode & S_IXUSR) ? GIT_FILEMODE_BLOB_EXECUTABLE : GIT_FILEMODE_BLOB,
        id});
  }
  git_oid Base() {
    auto r = ApplyTreeEdits(repo_.get(), nullptr, base_);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    return r.ok() ? *r : git_oid{};
  }
  git_oid Snapshot(const git_oid* base, const std::string& upper,
                   const std::vector<std::string>& frozen,
                   SnapshotStats* stats) {
    auto l = Layers::OpenForReading(P("host", ""), P(upper, ""),
                                    XattrNamespace::kUser, frozen);
    EXPECT_TRUE(l.ok()) << l.error().Message();
    if (!l.ok()) return git_oid{};
    auto r = BuildWorktreeTree(repo_.get(), base, *l, stats);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    return r.ok() ? *r : git_oid{};
  }
  std::string Content(const git_oid& tree, const std::string& path,
                      git_filemode_t* mode = nullptr) {
    return ::acqfs::test::BlobAt(repo_.get(), tree, path, mode);
  }

  GitLibrary lib_;
  TempDir tmp_;
  std::string root_;
  GitRepository repo_;
  std::vector<TreeEdit> base_;
};

TEST_F(WorktreeStackTest, AStackExportsTheTreeOfItsLayersSquashedIntoOne) {
  Tracked(".gitignore", "*.log\n");
  Tracked("a.txt", "a");
  Tracked("b.txt", "b");
  Tracked("dir/x", "x");
  Tracked("dir/y", "y");
  Tracked("tool.sh", "run");
  Symlink("host", "a.txt", "link");
  base_.push_back(TreeEdit{TreeEdit::kPut, "link", GIT_FILEMODE_LINK, {}});
  ASSERT_EQ(
      git_blob_create_from_buffer(&base_.back().id, repo_.get(), "a.txt", 5),
      0);
  Tracked("keep/k", "k");
  const git_oid base = Base();

  // L1: a.txt edited, dir renamed to moved/, tool.sh made executable, a new
  // file, an ignored log.
  File("l1", "a.txt", "a1");
  Whiteout("l1", "dir");
  Opaque("l1", "moved");
  File("l1", "moved/x", "x");
  File("l1", "moved/y", "y");
  File("l1", "tool.sh", "run", 0755);
  File("l1", "new1", "n1");
  File("l1", "debug.log", "noise");
  // L2: a.txt back to the host's bytes, moved/y deleted, b.txt deleted, a
  // new file, the link retargeted.
  File("l2", "a.txt", "a");
  Whiteout("l2", "moved/y");
  Whiteout("l2", "b.txt");
  File("l2", "new2", "n2");
  Symlink("l2", "b.txt", "link");
  // The upper: new1 deleted again, moved/z, b.txt made again with new bytes.
  Whiteout("upper", "new1");
  File("upper", "moved/z", "z");
  File("upper", "b.txt", "b again");

  // The same content squashed by hand into one upper layer.
  File("squashed", "a.txt", "a");
  Whiteout("squashed", "dir");
  Opaque("squashed", "moved");
  File("squashed", "moved/x", "x");
  File("squashed", "moved/z", "z");
  File("squashed", "tool.sh", "run", 0755);
  File("squashed", "debug.log", "noise");
  File("squashed", "new2", "n2");
  Symlink("squashed", "b.txt", "link");
  File("squashed", "b.txt", "b again");

  SnapshotStats stack_stats, squashed_stats;
  const git_oid stacked =
      Snapshot(&base, "upper", {P("l1", ""), P("l2", "")}, &stack_stats);
  const git_oid squashed = Snapshot(&base, "squashed", {}, &squashed_stats);
  EXPECT_TRUE(git_oid_equal(&stacked, &squashed))
      << OidHex(stacked) << " != " << OidHex(squashed);
  EXPECT_FALSE(git_oid_equal(&stacked, &base));

  // What the merged view shows.
  git_filemode_t mode{};
  EXPECT_EQ(Content(stacked, "a.txt"), "a");
  EXPECT_EQ(Content(stacked, "b.txt"), "b again");
  EXPECT_EQ(Content(stacked, "dir/x"), "<missing>");
  EXPECT_EQ(Content(stacked, "moved/x"), "x");
  EXPECT_EQ(Content(stacked, "moved/y"), "<missing>");
  EXPECT_EQ(Content(stacked, "moved/z"), "z");
  EXPECT_EQ(Content(stacked, "new1"), "<missing>");
  EXPECT_EQ(Content(stacked, "new2"), "n2");
  EXPECT_EQ(Content(stacked, "debug.log"), "<missing>");
  EXPECT_EQ(Content(stacked, "keep/k"), "k");
  EXPECT_EQ(Content(stacked, "link", &mode), "b.txt");
  EXPECT_EQ(mode, GIT_FILEMODE_LINK);
  EXPECT_EQ(Content(stacked, "tool.sh", &mode), "run");
  EXPECT_EQ(mode, GIT_FILEMODE_BLOB_EXECUTABLE);
  EXPECT_EQ(stack_stats.ignored_skipped, 1u);
  EXPECT_EQ(stack_stats.blobs_written, squashed_stats.blobs_written);
}

// The change list export reads blobs from names the layer of each object.
TEST_F(WorktreeStackTest, ChangesNameTheLayerHoldingTheObject) {
  Tracked("f", "host");
  Tracked("g", "host");
  File("l1", "f", "frozen");
  File("l1", "g", "frozen");
  File("upper", "g", "upper");
  File("upper", "h", "new");
  auto l = Layers::OpenForReading(P("host", ""), P("upper", ""),
                                  XattrNamespace::kUser, {P("l1", "")});
  ASSERT_TRUE(l.ok()) << l.error().Message();
  auto changes = ScanUpper(*l);
  ASSERT_TRUE(changes.ok()) << changes.error().Message();
  ASSERT_EQ(changes->size(), 3u);
  EXPECT_EQ((*changes)[0].path, "f");
  EXPECT_EQ((*changes)[0].layer, 1u);
  EXPECT_EQ((*changes)[1].path, "g");
  EXPECT_EQ((*changes)[1].layer, 2u);
  EXPECT_EQ((*changes)[2].path, "h");
  EXPECT_EQ((*changes)[2].layer, 2u);
}

}  // namespace
}  // namespace acqfs::gitbridge
