// Tests of HostRepo: reading the host checkout, and DirtyCommit, whose tree
// must equal what `git add -A && git write-tree` makes of the same checkout
// (checked on a copy), written into the bridge while the host's files and
// .git keep every byte and mtime.
#include "gitbridge/host_repo.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "gitbridge/bridge_repo.h"
#include "harness/git_env.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::Git;
using ::acqfs::test::MakeFile;
using ::acqfs::test::ReadFile;
using ::acqfs::test::Sh;
using ::acqfs::test::ShellQuote;
using ::acqfs::test::TempDir;

// Everything about every entry below `root` that "untouched" covers: type
// and mode, size, mtime, content or link target.
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    struct stat st;
    std::string p = e.path().string();
    if (::lstat(p.c_str(), &st) != 0) continue;
    std::ostringstream s;
    s << std::oct << st.st_mode << std::dec << " " << st.st_size << " "
      << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec << " ";
    if (S_ISREG(st.st_mode)) s << ReadFile(p);
    if (S_ISLNK(st.st_mode)) s << fs::read_symlink(p).string();
    out[p.substr(root.size())] = s.str();
  }
  return out;
}

class HostRepoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    host_ = root_ + "/host";
    Sh("git init -q -b main " + ShellQuote(host_));
  }
  void TearDown() override { bridge_.reset(); }

  void CommitBaseline() {
    MakeFile(host_ + "/keep.txt", "keep\n");
    MakeFile(host_ + "/mod.txt", "mod\n");
    MakeFile(host_ + "/staged.txt", "staged\n");
    MakeFile(host_ + "/partial.txt", "partial\n");
    MakeFile(host_ + "/del.txt", "del\n");
    MakeFile(host_ + "/rm.txt", "rm\n");
    MakeFile(host_ + "/exe.sh", "#!/bin/sh\n");
    MakeFile(host_ + "/dir/nested.txt", "nested\n");
    MakeFile(host_ + "/df", "file that becomes a directory\n");
    MakeFile(host_ + "/fd/inner.txt", "directory that becomes a file\n");
    MakeFile(host_ + "/.gitignore", "*.log\nignored_dir/\n");
    MakeFile(host_ + "/.gitattributes", "crlf.txt text eol=lf\n");
    fs::create_symlink("keep.txt", host_ + "/link");
    Git(host_, "add -A");
    Git(host_, "commit -q -m baseline");
    Git(host_, "branch other");
  }

  // Every kind of change `git add -A` picks up, plus ignored files.
  void MakeDirty() {
    MakeFile(host_ + "/mod.txt", "mod changed\n");
    MakeFile(host_ + "/staged.txt", "staged changed\n");
    Git(host_, "add staged.txt");
    MakeFile(host_ + "/partial.txt", "partial staged\n");
    Git(host_, "add partial.txt");
    MakeFile(host_ + "/partial.txt", "partial working\n");
    MakeFile(host_ + "/added.txt", "added and staged\n");
    Git(host_, "add added.txt");
    fs::remove(host_ + "/del.txt");
    Git(host_, "rm -q rm.txt");
    fs::permissions(host_ + "/exe.sh", fs::perms::owner_exec,
                    fs::perm_options::add);
    MakeFile(host_ + "/new/sub/file.txt", "untracked\n");
    fs::create_symlink("mod.txt", host_ + "/newlink");
    fs::remove(host_ + "/link");
    fs::create_symlink("mod.txt", host_ + "/link");
    MakeFile(host_ + "/debug.log", "ignored\n");
    MakeFile(host_ + "/ignored_dir/x", "ignored\n");
    fs::create_directories(host_ + "/emptydir");
    fs::remove(host_ + "/df");
    MakeFile(host_ + "/df/inner.txt", "now a directory\n");
    fs::remove_all(host_ + "/fd");
    MakeFile(host_ + "/fd", "now a file\n");
    MakeFile(host_ + "/crlf.txt", "one\r\ntwo\r\n");
  }

  // The tree `git add -A && git write-tree` makes of a copy of the host.
  std::string ExpectedTree() {
    std::string copy = root_ + "/expect";
    Sh("cp -a " + ShellQuote(host_) + " " + ShellQuote(copy));
    Git(copy, "add -A");
    return Git(copy, "write-tree");
  }

  HostRepo OpenHost() {
    auto h = HostRepo::Open(host_);
    EXPECT_TRUE(h.ok()) << h.error().Message();
    return std::move(*h);
  }

  git_repository* Bridge(const HostRepo& host) {
    auto b =
        BridgeRepo::OpenOrCreate(root_ + "/bridge.git", host.objects_dir());
    EXPECT_TRUE(b.ok()) << b.error().Message();
    bridge_.emplace(std::move(*b));
    return bridge_->repo();
  }

  GitCommit LookupCommit(git_repository* repo, const git_oid& id) {
    git_commit* raw = nullptr;
    EXPECT_EQ(git_commit_lookup(&raw, repo, &id), 0) << OidHex(id);
    return GitCommit(raw);
  }

  TempDir tmp_;
  std::string root_, host_;
  std::optional<BridgeRepo> bridge_;
};

TEST_F(HostRepoTest, OpenNeedsACheckout) {
  auto h = HostRepo::Open(root_);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.err(), ENOENT);
  fs::create_directories(host_ + "/sub");
  auto sub = HostRepo::Open(host_ + "/sub");  // no search upwards
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.err(), ENOENT);
}

// A writer replacing .git/config (lock file and rename, as git and acqfs's
// remote registration do) while the checkout is opened: libgit2 stats the
// config, opens it and reads the size the stat said, so an open between the
// two used to fail with "could not read (expected N bytes, read M)"
// (LifecycleConcurrency.SixteenParallelMountsAndRemovalsOfOneCheckout
// caught it once in CI). Every open must succeed.
TEST_F(HostRepoTest, OpenWhileTheConfigIsReplacedSucceeds) {
  const std::string config = host_ + "/.git/config";
  const std::string base = ReadFile(config);
  const std::string longer =
      base + "[remote \"sandbox-x\"]\n\turl = /somewhere/else/bridge.git\n" +
      "\tfetch = +refs/heads/*:refs/remotes/sandbox-x/*\n";
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      const std::string lock = config + ".lock";
      MakeFile(lock, i % 2 ? longer : base);
      ::rename(lock.c_str(), config.c_str());
    }
  });
  int failures = 0;
  std::string first;
  for (int i = 0; i < 10000; ++i) {
    auto repo = HostRepo::Open(host_);
    if (!repo) {
      if (first.empty()) first = repo.error().Message();
      ++failures;
    }
  }
  stop = true;
  writer.join();
  EXPECT_EQ(failures, 0) << "of 10000 opens; the first: " << first;
}

TEST_F(HostRepoTest, PathsHeadBranchesAndObjects) {
  CommitBaseline();
  HostRepo host = OpenHost();
  EXPECT_EQ(host.workdir(), host_);
  EXPECT_EQ(host.gitdir(), host_ + "/.git/");
  EXPECT_EQ(host.objects_dir(), host_ + "/.git/objects");
  ASSERT_OK_AND_ASSIGN(auto head, host.Head());
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(OidHex(*head), Git(host_, "rev-parse HEAD"));
  ASSERT_OK_AND_ASSIGN(auto branches, host.Branches());
  ASSERT_EQ(branches.size(), 2u);
  EXPECT_EQ(OidHex(branches["main"]), OidHex(*head));
  EXPECT_EQ(OidHex(branches["other"]), OidHex(*head));
  EXPECT_TRUE(host.HasObject(*head));
  git_oid missing;
  git_oid_fromstr(&missing, "0123456789012345678901234567890123456789");
  EXPECT_FALSE(host.HasObject(missing));
}

TEST_F(HostRepoTest, UnbornHead) {
  HostRepo host = OpenHost();
  ASSERT_OK_AND_ASSIGN(auto head, host.Head());
  EXPECT_FALSE(head.has_value());
  ASSERT_OK_AND_ASSIGN(auto branches, host.Branches());
  EXPECT_TRUE(branches.empty());
}

TEST_F(HostRepoTest, CleanCheckoutHasNoDirtyCommit) {
  CommitBaseline();
  MakeFile(host_ + "/debug.log", "ignored\n");
  MakeFile(host_ + "/ignored_dir/x", "ignored\n");
  fs::create_directories(host_ + "/emptydir");
  HostRepo host = OpenHost();
  ASSERT_OK_AND_ASSIGN(auto dirty, host.DirtyCommit(Bridge(host)));
  EXPECT_FALSE(dirty.has_value());
}

TEST_F(HostRepoTest, DirtyCommitTreeIsWhatGitAddAllWrites) {
  CommitBaseline();
  MakeDirty();
  std::string want = ExpectedTree();
  HostRepo host = OpenHost();
  git_repository* bridge = Bridge(host);
  ASSERT_OK_AND_ASSIGN(auto dirty, host.DirtyCommit(bridge));
  ASSERT_TRUE(dirty.has_value());
  GitCommit c = LookupCommit(bridge, *dirty);
  ASSERT_TRUE(c);
  EXPECT_EQ(OidHex(*git_commit_tree_id(c.get())), want);
  ASSERT_EQ(git_commit_parentcount(c.get()), 1u);
  EXPECT_EQ(OidHex(*git_commit_parent_id(c.get(), 0)),
            Git(host_, "rev-parse HEAD"));
  EXPECT_STREQ(git_commit_author(c.get())->name, "acqfs");
  EXPECT_STREQ(git_commit_author(c.get())->email, "acqfs@localhost");
  EXPECT_STREQ(git_commit_committer(c.get())->name, "acqfs");
  EXPECT_STREQ(git_commit_message(c.get()), "acqfs: host working state");
  // The commit and its new objects are in the bridge, not in the host.
  EXPECT_FALSE(host.HasObject(*dirty));
  Git(root_ + "/bridge.git", "fsck --strict --no-dangling " + OidHex(*dirty));
}

TEST_F(HostRepoTest, SameWorkingStateGivesTheSameCommit) {
  CommitBaseline();
  MakeDirty();
  HostRepo host = OpenHost();
  git_repository* bridge = Bridge(host);
  ASSERT_OK_AND_ASSIGN(auto a, host.DirtyCommit(bridge));
  ASSERT_OK_AND_ASSIGN(auto b, host.DirtyCommit(bridge));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(OidHex(*a), OidHex(*b));
}

TEST_F(HostRepoTest, DirtyCommitNeverWritesToTheHost) {
  CommitBaseline();
  MakeDirty();
  // An unchanged file with stale stat data in the index: a status that
  // may update the index would rewrite it.
  Sh("touch -d 2001-01-01 " + ShellQuote(host_ + "/keep.txt"));
  auto before = Snapshot(host_);
  HostRepo host = OpenHost();
  git_repository* bridge = Bridge(host);
  ASSERT_OK_AND_ASSIGN(auto dirty, host.DirtyCommit(bridge));
  ASSERT_TRUE(dirty.has_value());
  auto after = Snapshot(host_);
  EXPECT_EQ(before.size(), after.size());
  for (const auto& [path, info] : before) {
    auto it = after.find(path);
    ASSERT_NE(it, after.end()) << path << " vanished";
    EXPECT_EQ(it->second, info) << path << " changed";
  }
  for (const auto& [path, info] : after)
    EXPECT_TRUE(before.count(path)) << path << " appeared";
}

TEST_F(HostRepoTest, UnbornHeadDirtyCommitHasNoParent) {
  MakeFile(host_ + "/a.txt", "a\n");
  MakeFile(host_ + "/d/b.txt", "b\n");
  MakeFile(host_ + "/staged.txt", "s\n");
  Git(host_, "add staged.txt");
  std::string want = ExpectedTree();
  HostRepo host = OpenHost();
  git_repository* bridge = Bridge(host);
  ASSERT_OK_AND_ASSIGN(auto dirty, host.DirtyCommit(bridge));
  ASSERT_TRUE(dirty.has_value());
  GitCommit c = LookupCommit(bridge, *dirty);
  ASSERT_TRUE(c);
  EXPECT_EQ(git_commit_parentcount(c.get()), 0u);
  EXPECT_EQ(OidHex(*git_commit_tree_id(c.get())), want);
}

TEST_F(HostRepoTest, OnlyDeletionsLeaveAnEmptyTree) {
  MakeFile(host_ + "/only.txt", "x\n");
  Git(host_, "add -A");
  Git(host_, "commit -q -m one");
  fs::remove(host_ + "/only.txt");
  std::string want = ExpectedTree();
  HostRepo host = OpenHost();
  git_repository* bridge = Bridge(host);
  ASSERT_OK_AND_ASSIGN(auto dirty, host.DirtyCommit(bridge));
  ASSERT_TRUE(dirty.has_value());
  GitCommit c = LookupCommit(bridge, *dirty);
  ASSERT_TRUE(c);
  EXPECT_EQ(OidHex(*git_commit_tree_id(c.get())), want);
}

// The host's own untracked files with names git refuses are left out of
// its working-state commit and listed once each; the rest is committed, and
// the host's git fsck is content with it.
TEST_F(HostRepoTest, DirtyCommitLeavesOutNamesGitRefuses) {
  CommitBaseline();
  // (libgit2's status does not list a ".GIT" directory at all.)
  MakeFile(host_ + "/GIT~1/config", "[core]\n");
  MakeFile(host_ + "/GIT~1/other", "x\n");
  MakeFile(host_ + "/.git. /x", "x\n");
  MakeFile(host_ + "/sub/git~1", "x\n");
  ASSERT_EQ(::symlink("target", (host_ + "/GITMOD~1").c_str()), 0);
  MakeFile(host_ + "/fine.txt", "fine\n");
  HostRepo host = OpenHost();
  git_repository* bridge = Bridge(host);
  std::vector<SkippedPath> skipped;
  ASSERT_OK_AND_ASSIGN(auto dirty, host.DirtyCommit(bridge, &skipped));
  ASSERT_TRUE(dirty.has_value());
  std::vector<std::string> paths;
  for (const auto& k : skipped) paths.push_back(k.path);
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(paths, (std::vector<std::string>{".git. ", "GITMOD~1", "GIT~1",
                                             "sub/git~1"}));
  std::string tree = OidHex(*dirty);
  EXPECT_EQ(Git(root_ + "/bridge.git", "show " + tree + ":fine.txt"), "fine");
  Git(root_ + "/bridge.git", "fsck --strict --no-dangling " + tree);
  // Only refused names: no commit at all.
  fs::remove(host_ + "/fine.txt");
  skipped.clear();
  ASSERT_OK_AND_ASSIGN(auto none, host.DirtyCommit(bridge, &skipped));
  EXPECT_FALSE(none.has_value());
  EXPECT_EQ(skipped.size(), 4u);
}

}  // namespace
}  // namespace acqfs::gitbridge
