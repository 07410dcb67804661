// Tests of the test harness itself. They need neither acqfs nor FUSE; the
// bind-mount case needs root (as CI has).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/lower_repo.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "harness/snapshot.h"
#include "harness/temp_dir.h"

namespace acqfs::test {
namespace {

TEST(TempDir, LivesUnderTestRootAndIsRemoved) {
  std::string path;
  {
    TempDir tmp;
    path = tmp.path();
    EXPECT_EQ(path.rfind(kTestRootPrefix, 0), 0u) << path;
    EXPECT_TRUE(Exists(path));
  }
  EXPECT_EQ(LstatErrno(path), ENOENT);
}

TEST(TempDir, RemovesReadOnlyFilesAndLockedDirectories) {
  std::string path;
  {
    TempDir tmp;
    path = tmp.path();
    std::string locked = tmp.MakeDir("a/locked");
    ASSERT_TRUE(WriteFile(locked + "/ro.txt", "x", 0444));
    ASSERT_SYS_OK(::chmod(locked.c_str(), 0));
    ASSERT_SYS_OK(::chmod((path + "/a").c_str(), 0500));
  }
  EXPECT_EQ(LstatErrno(path), ENOENT);
}

TEST(TempDir, UnmountsAndNeverCrossesIntoAMountBelow) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for the bind mount";
  TempDir outside;
  ASSERT_TRUE(WriteFile(outside.Sub("sentinel"), "keep me"));
  std::string mnt;
  {
    TempDir tmp;
    mnt = tmp.MakeDir("mnt");
    ASSERT_SYS_OK(::mount(outside.path().c_str(), mnt.c_str(), nullptr, MS_BIND,
                          nullptr));
    ASSERT_TRUE(FindMount(mnt).has_value());
  }
  EXPECT_FALSE(FindMount(mnt).has_value());
  EXPECT_EQ(ContentOf(outside.Sub("sentinel")), "keep me");
}

TEST(RunCommand, CapturesOutputAndExitCode) {
  CommandResult r = RunShell("echo out; echo err >&2; exit 3", 10);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_FALSE(r.ok());
}

TEST(RunCommand, AppliesCwdAndEnvironment) {
  TempDir tmp;
  CommandResult r = RunCommand({"sh", "-c", "pwd; echo $ACQFS_X"}, 10,
                               tmp.path(), {{"ACQFS_X", "value"}});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, tmp.path() + "\nvalue\n");
}

TEST(RunCommand, ReportsAMissingProgram) {
  CommandResult r = RunCommand({"/nonexistent/acqfs-no-such-program"}, 10);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.spawn_error.find("No such file"), std::string::npos)
      << r.Describe();
}

TEST(RunCommand, ReportsAnUnusableWorkingDirectory) {
  CommandResult r = RunCommand({"true"}, 10, "/nonexistent/acqfs-dir");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.spawn_error.rfind("chdir /nonexistent/acqfs-dir: ", 0), 0u)
      << r.Describe();
}

TEST(RunCommand, TimeoutKillsTheWholeProcessGroup) {
  TempDir tmp;
  const std::string pid_file = tmp.Sub("bg.pid");
  const auto start = std::chrono::steady_clock::now();
  CommandResult r = RunShell(
      "sleep 100 & echo $! > " + ShellQuote(pid_file) + "; sleep 100", 1);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(elapsed, std::chrono::seconds(10));
  pid_t background = ReadPidFile(pid_file);
  ASSERT_GT(background, 0);
  EXPECT_TRUE(WaitForProcessExit(background, 5))
      << "the background child of the timed-out command survived";
  KillIfAlive(background, "sleep");
}

TEST(RunCommand, ReturnsWhenALeftoverProcessHoldsThePipes) {
  TempDir tmp;
  const std::string pid_file = tmp.Sub("bg.pid");
  CommandResult r = RunShell(
      "sleep 30 & echo $! > " + ShellQuote(pid_file) + "; echo done", 20);
  pid_t background = ReadPidFile(pid_file);
  EXPECT_TRUE(r.ok()) << r.Describe();
  EXPECT_TRUE(r.pipes_left_open);
  EXPECT_EQ(r.out, "done\n");
  ASSERT_GT(background, 0);
  EXPECT_TRUE(KillIfAlive(background, "sleep"));
}

TEST(ShellQuote, QuotesWhatTheShellWouldSplit) {
  EXPECT_EQ(ShellQuote("plain/path-1"), "plain/path-1");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  CommandResult r = RunShell("printf %s " + ShellQuote("it's a $x"), 10);
  EXPECT_EQ(r.out, "it's a $x");
}

class LowerRepoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = tmp_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(repo_));
  }
  std::string P(const std::string& rel) const { return repo_ + "/" + rel; }

  TempDir tmp_;
  std::string repo_;
};

TEST_F(LowerRepoTest, HoldsEveryFileType) {
  TreeSnapshot s = Snapshot(repo_, SnapshotOptions::Everything());
  ASSERT_TRUE(s.errors.empty()) << DiffSnapshots(s, s);
  auto type_of = [&](const std::string& rel) {
    const EntryInfo* e = s.Find(rel);
    return e ? e->type : '-';
  };
  EXPECT_EQ(type_of(lower::kDeepFile), 'f');
  EXPECT_EQ(type_of(lower::kEmptyDir), 'd');
  EXPECT_EQ(type_of(lower::kLinkToFile), 'l');
  EXPECT_EQ(type_of(lower::kDanglingLink), 'l');
  EXPECT_EQ(type_of(lower::kLinkToDir), 'l');
  EXPECT_EQ(type_of(lower::kFifo), 'p');
  EXPECT_EQ(type_of(".git/index"), 'f');
  EXPECT_EQ(s.Find(lower::kDanglingLink)->target, lower::kDanglingLinkTarget);
  EXPECT_EQ(s.Find(lower::kScript)->mode, 0755u);
  EXPECT_EQ(s.Find(lower::kLargeFile)->size, lower::kLargeFileSize);
  EXPECT_EQ(s.Find(lower::kXattrFile)->xattrs.at(lower::kXattrName),
            lower::kXattrValue);
  EXPECT_EQ(s.Find(lower::kHardLinkA)->nlink, 2u);
  EXPECT_EQ(s.Find(lower::kHardLinkB)->link_group, lower::kHardLinkA);
  EXPECT_EQ(s.Find(lower::kOwnedFile)->uid, lower::kOwnedUid);
  EXPECT_EQ(ContentOf(P(lower::kReadme)), lower::kReadmeContent);
}

TEST_F(LowerRepoTest, LargeFileIsMostlyHoles) {
  struct stat st;
  ASSERT_TRUE(Lstat(P(lower::kLargeFile), &st));
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), lower::kLargeFileSize);
  EXPECT_LT(st.st_blocks * 512, 8 << 20) << "expected a sparse file";
}

TEST_F(LowerRepoTest, GitStatusLeavesTheIndexAlone) {
  struct stat before, after;
  ASSERT_TRUE(Lstat(P(".git/index"), &before));
  CommandResult r = RunGit(repo_, {"status", "--porcelain"}, tmp_.path());
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, lower::kGitStatus);
  ASSERT_TRUE(Lstat(P(".git/index"), &after));
  EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  EXPECT_EQ(before.st_ino, after.st_ino) << "git rewrote .git/index";
}

TEST_F(LowerRepoTest, SnapshotDiffNamesPathAndField) {
  TreeSnapshot before = Snapshot(repo_);
  ASSERT_SYS_OK(::chmod(P(lower::kFileA).c_str(), 0600));
  ASSERT_TRUE(WriteFile(P(lower::kFileB), "changed\n"));
  ASSERT_SYS_OK(::unlink(P(lower::kEmptyFile).c_str()));
  TreeSnapshot after = Snapshot(repo_);
  std::string diff = DiffSnapshots(before, after);
  EXPECT_NE(diff.find("docs/a.txt: mode 0644 != 0600"), std::string::npos)
      << diff;
  EXPECT_NE(diff.find("docs/b.txt: content"), std::string::npos) << diff;
  EXPECT_NE(diff.find("docs/b.txt: size 6 != 8"), std::string::npos) << diff;
  EXPECT_NE(diff.find("only in A: empty.txt (f)"), std::string::npos) << diff;
  EXPECT_FALSE(SnapshotsEqual(before, after));
  EXPECT_TRUE(SnapshotsEqual(after, Snapshot(repo_)));
}

TEST_F(LowerRepoTest, SnapshotSkipAndSubtree) {
  SnapshotOptions options;
  options.skip = {".git"};
  TreeSnapshot s = Snapshot(repo_, options);
  EXPECT_EQ(s.Find(".git"), nullptr);
  EXPECT_EQ(s.Find(".git/HEAD"), nullptr);
  ASSERT_NE(s.Find(lower::kReadme), nullptr);
  TreeSnapshot lib = Subtree(s, lower::kLibDir);
  EXPECT_NE(lib.Find("."), nullptr);
  EXPECT_NE(lib.Find("util/deep/leaf.txt"), nullptr);
  EXPECT_EQ(lib.Find(lower::kReadme), nullptr);
}

TEST(Snapshot, SerializeParseRoundTripsOddNames) {
  TempDir tmp;
  const std::string root = tmp.MakeDir("t");
  ASSERT_TRUE(WriteFile(root + "/with space\tand tab", "a"));
  ASSERT_TRUE(WriteFile(root + "/per%cent=,comma\nnl", "b"));
  ASSERT_SYS_OK(::symlink("target with space", (root + "/l").c_str()));
  ASSERT_SYS_OK(::setxattr((root + "/with space\tand tab").c_str(), "user.k",
                           "v\0,=\t", 5, 0));
  TreeSnapshot s = Snapshot(root, SnapshotOptions::Everything());
  TreeSnapshot parsed = TreeSnapshot::Parse(s.Serialize(), "parsed");
  EXPECT_TRUE(SnapshotsEqual(s, parsed));
  EXPECT_EQ(parsed.entries.size(), 4u);
}

TEST(Snapshot, ParseReportsGarbage) {
  TreeSnapshot s = TreeSnapshot::Parse("not a snapshot\n", "x");
  EXPECT_FALSE(s.errors.empty());
  TreeSnapshot t = TreeSnapshot::Parse("acqfs-snapshot 1\nE\tbroken\n", "y");
  EXPECT_EQ(t.errors.size(), 1u);
}

TEST(Mounts, FindsTheRootMount) {
  auto m = FindMount("/");
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->fs_type.empty());
}

}  // namespace
}  // namespace acqfs::test
