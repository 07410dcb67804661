// Tests of Export() without a mount: a host checkout made with git, the
// sandbox's layers laid down by hand beside it (an upper, frozen layers for
// checkpoints), and what the bridge repository holds afterwards, read back
// with git. What is published follows docs/git-bridge.md ("What an export
// publishes", "The commit structure").
#include "gitbridge/export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "gitbridge/remote.h"
#include "harness/git_env.h"
#include "harness/git_test_util.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

using ::acqfs::test::Git;
using ::acqfs::test::Lines;
using ::acqfs::test::MakeFile;
using ::acqfs::test::MakeWhiteoutAt;
using ::acqfs::test::Sh;
using ::acqfs::test::ShellQuote;
using ::acqfs::test::TempDir;

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    host_ = root_ + "/host";
    Sh("git init -q -b main " + ShellQuote(host_));
    MakeFile(host_ + "/a.txt", "a\n");
    MakeFile(host_ + "/dir/b.txt", "b\n");
    MakeFile(host_ + "/dir/sub/c.txt", "c\n");
    MakeFile(host_ + "/.gitignore", "*.log\n");
    Git(host_, "add -A");
    Git(host_, "commit -q -m base");
    head_ = Git(host_, "rev-parse HEAD");
    for (const char* d : {"upper", "l1", "l2", "state"})
      MakeDir(root_ + "/" + d);
  }

  static void MakeDir(const std::string& path) {
    ASSERT_EQ(::mkdir(path.c_str(), 0755), 0) << path;
  }
  std::string U(const std::string& rel) const {
    return root_ + "/upper/" + rel;
  }
  std::string Layer(const std::string& name) const {
    return root_ + "/" + name;
  }
  std::string bridge() const { return root_ + "/state/bridge.git"; }

  ExportConfig Config() const {
    ExportConfig c;
    c.sandbox = "t";
    c.lower = host_;
    c.upper = root_ + "/upper";
    c.bridge = bridge();
    c.xattr_namespace = XattrNamespace::kUser;
    c.policy = policy_;
    return c;
  }
  void SetPolicy(const std::vector<std::string>& hide,
                 const std::vector<std::string>& read_only) {
    auto p = Policy::Make(hide, read_only, 0);
    ASSERT_TRUE(p.ok()) << p.error().Message();
    policy_ = std::make_shared<const Policy>(std::move(*p));
  }
  ExportResult Run(const ExportConfig& c) {
    auto r = Export(c);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    return r.ok() ? std::move(*r) : ExportResult{};
  }
  ExportResult Run() { return Run(Config()); }

  // git in the bridge.
  std::string InBridge(const std::string& args) { return Git(bridge(), args); }
  // The files of the working-tree commit (or of `rev`), sorted.
  std::vector<std::string> Files(const std::string& rev = kWorktreeRef) {
    return Lines(InBridge("ls-tree -r --name-only " + rev));
  }
  std::string Show(const std::string& rev, const std::string& path) {
    return InBridge("show " + rev + ":" + path);
  }
  std::vector<std::string> Parents(const std::string& rev) {
    std::vector<std::string> p =
        Lines(InBridge("rev-list --parents -n1 " + rev));
    if (p.empty()) return {};
    std::vector<std::string> out;
    std::string line = p[0];
    for (size_t s = line.find(' '); s != std::string::npos;) {
      size_t e = line.find(' ', s + 1);
      out.push_back(line.substr(s + 1, e == std::string::npos ? e : e - s - 1));
      s = e;
    }
    return out;
  }

  TempDir tmp_;
  std::string root_, host_, head_;
  std::shared_ptr<const Policy> policy_;
};

TEST_F(ExportTest, AChangedFileIsPublishedOnTheBasesHead) {
  MakeFile(U("a.txt"), "changed\n");
  ExportResult r = Run();
  EXPECT_TRUE(r.refused.empty());
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_EQ(r.worktree_parent, head_);
  EXPECT_EQ(Show(r.worktree_commit, "a.txt"), "changed");
  EXPECT_EQ(Show(r.worktree_commit, "dir/b.txt"), "b");
  EXPECT_EQ(Parents(kWorktreeRef), std::vector<std::string>{head_});
  EXPECT_EQ(InBridge("rev-parse " + std::string(kWorktreeRef)),
            r.worktree_commit);
}

TEST_F(ExportTest, AnAddedFileIsPublished) {
  MakeFile(U("new/deep/n.txt"), "n\n");
  ExportResult r = Run();
  EXPECT_EQ(Files(),
            (std::vector<std::string>{".gitignore", "a.txt", "dir/b.txt",
                                      "dir/sub/c.txt", "new/deep/n.txt"}));
  EXPECT_EQ(Show(r.worktree_commit, "new/deep/n.txt"), "n");
}

TEST_F(ExportTest, AWhiteoutDeletesTheFileAndADirectoryWithItsContent) {
  MakeWhiteoutAt(U("a.txt"));
  MakeWhiteoutAt(U("dir/sub"));
  Run();
  EXPECT_EQ(Files(), (std::vector<std::string>{".gitignore", "dir/b.txt"}));
}

TEST_F(ExportTest, ACheckpointChainIsPublishedOnTheBaseUnderTheWorkingTree) {
  MakeFile(Layer("l1") + "/a.txt", "one\n");
  MakeFile(Layer("l2") + "/a.txt", "two\n");
  MakeFile(Layer("l2") + "/l2.txt", "2\n");
  MakeFile(U("a.txt"), "three\n");
  ExportConfig c = Config();
  c.frozen = {Layer("l1"), Layer("l2")};
  c.checkpoints = {
      {1, "first", 1000000000000000000, {Layer("l1")}, "id-1"},
      {2, "", 1000000001000000000, {Layer("l1"), Layer("l2")}, "id-2"}};
  ExportResult r = Run(c);
  EXPECT_TRUE(r.refused.empty()) << r.refused[0];
  ASSERT_EQ(r.checkpoint_commits.size(), 2u);
  const std::string cp1 = r.checkpoint_commits[0].second;
  const std::string cp2 = r.checkpoint_commits[1].second;
  EXPECT_EQ(InBridge("rev-parse refs/acqfs/checkpoints/1"), cp1);
  EXPECT_EQ(InBridge("rev-parse refs/acqfs/checkpoints/2"), cp2);
  EXPECT_EQ(Show(cp1, "a.txt"), "one");
  EXPECT_EQ(Files(cp1),
            (std::vector<std::string>{".gitignore", "a.txt", "dir/b.txt",
                                      "dir/sub/c.txt"}));
  EXPECT_EQ(Show(cp2, "a.txt"), "two");
  EXPECT_EQ(Show(cp2, "l2.txt"), "2");
  EXPECT_EQ(Show(r.worktree_commit, "a.txt"), "three");
  EXPECT_EQ(Show(r.worktree_commit, "l2.txt"), "2");
  EXPECT_EQ(Parents(cp1), std::vector<std::string>{head_});
  EXPECT_EQ(Parents(cp2), std::vector<std::string>{cp1});
  EXPECT_EQ(Parents(kWorktreeRef), (std::vector<std::string>{head_, cp2}));
  EXPECT_EQ(InBridge("log -1 --format=%s " + cp1), "first");
  EXPECT_EQ(InBridge("log -1 --format=%s " + cp2), "checkpoint 2");
  EXPECT_EQ(InBridge("log -1 --format=%at " + cp2), "1000000001");
}

TEST_F(ExportTest, PathsThePolicyHidesOrMakesReadOnlyAreNotPublished) {
  SetPolicy({".env", "secrets/"}, {"dir/sub/"});
  MakeFile(U(".env"), "TOKEN=1\n");
  MakeFile(U("secrets/key"), "k\n");
  MakeFile(U("dir/sub/c.txt"), "changed\n");
  MakeFile(U("dir/b.txt"), "b2\n");
  ExportResult r = Run();
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_EQ(Files(), (std::vector<std::string>{".gitignore", "a.txt",
                                               "dir/b.txt", "dir/sub/c.txt"}));
  EXPECT_EQ(Show(r.worktree_commit, "dir/sub/c.txt"), "c");
  EXPECT_EQ(Show(r.worktree_commit, "dir/b.txt"), "b2");
}

// The four places that decided what export publishes disagreed here: the
// scan published no change under a read-only path, but a directory the
// sandbox removed lost its read-only entries (only hidden ones were kept).
TEST_F(ExportTest, ARemovedDirectoryKeepsItsReadOnlyEntries) {
  SetPolicy({}, {"dir/sub/c.txt"});
  MakeWhiteoutAt(U("dir"));
  Run();
  EXPECT_EQ(Files(),
            (std::vector<std::string>{".gitignore", "a.txt", "dir/sub/c.txt"}));
}

// A pattern that matches directories only does not hide a file of that name:
// the sandbox saw the file, and its deletion is published (the scan judged
// a deletion as if it might be a directory, and dropped it).
TEST_F(ExportTest, TheDeletionOfAFileADirectoryPatternDoesNotHideIsPublished) {
  SetPolicy({"a.txt/"}, {});
  MakeWhiteoutAt(U("a.txt"));
  Run();
  EXPECT_EQ(Files(), (std::vector<std::string>{".gitignore", "dir/b.txt",
                                               "dir/sub/c.txt"}));
}

TEST_F(ExportTest, AnIgnoredUntrackedPathIsNotPublishedButATrackedOneIs) {
  MakeFile(U("debug.log"), "log\n");
  MakeFile(U("dir/x.log"), "log\n");
  MakeFile(U(".gitignore"), "*.log\na.txt\n");
  MakeFile(U("a.txt"), "tracked, now ignored\n");
  ExportResult r = Run();
  EXPECT_EQ(Files(), (std::vector<std::string>{".gitignore", "a.txt",
                                               "dir/b.txt", "dir/sub/c.txt"}));
  EXPECT_EQ(Show(r.worktree_commit, "a.txt"), "tracked, now ignored");
}

TEST_F(ExportTest, ANameGitRefusesIsSkippedAndNamed) {
  MakeFile(U("x/.GIT/config"), "c\n");
  MakeFile(U("ok.txt"), "ok\n");
  ExportResult r = Run();
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_EQ(r.skipped[0].path, "x/.GIT");
  EXPECT_FALSE(r.skipped[0].host);
  EXPECT_EQ(Show(r.worktree_commit, "ok.txt"), "ok");
}

TEST_F(ExportTest, ASecondExportPublishesNothingNewAndTheSameCommits) {
  MakeFile(Layer("l1") + "/a.txt", "one\n");
  MakeFile(U("new.txt"), "n\n");
  ExportConfig c = Config();
  c.frozen = {Layer("l1")};
  c.checkpoints = {{1, "cp", 1000000000000000000, {Layer("l1")}, "id-1"}};
  ExportResult first = Run(c);
  EXPECT_FALSE(first.nothing_new());
  const std::string refs = InBridge("for-each-ref");
  ExportResult second = Run(c);
  EXPECT_TRUE(second.nothing_new());
  EXPECT_EQ(second.worktree_commit, first.worktree_commit);
  EXPECT_EQ(second.checkpoint_commits, first.checkpoint_commits);
  EXPECT_EQ(InBridge("for-each-ref"), refs);
}

TEST_F(ExportTest, AReservedBranchNameIsRefused) {
  // The sandbox's own .git (in the upper) holds a branch of the reserved
  // name at a commit of its own.
  Sh("cp -a " + ShellQuote(host_ + "/.git") + " " + ShellQuote(U(".git")));
  Sh("git --git-dir=" + ShellQuote(U(".git")) +
     " --work-tree=" + ShellQuote(host_) + " commit -q --allow-empty -m agent");
  const std::string agent =
      Git(host_, "--git-dir=" + U(".git") + " rev-parse HEAD");
  Git(host_, "--git-dir=" + U(".git") + " branch acqfs-worktree " + agent);
  Git(host_, "--git-dir=" + U(".git") + " branch work " + agent);
  ExportResult r = Run();
  ASSERT_EQ(r.refused.size(), 1u);
  EXPECT_EQ(r.refused[0],
            "acqfs-worktree: the name is reserved for the working tree commit");
  EXPECT_EQ(InBridge("rev-parse refs/heads/work"), agent);
  EXPECT_EQ(InBridge("rev-parse refs/heads/main"), agent);
}

}  // namespace
}  // namespace acqfs::gitbridge
