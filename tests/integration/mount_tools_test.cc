// Real tools inside the mount: git (status without rewriting the index,
// diff, add, commit, checkout) and make of a small C program.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

class Git : public MountTest {
 protected:
  CommandResult RunGitInMount(const std::vector<std::string>& args) {
    return RunGit(sandbox().mountpoint(), args, home());
  }
  // Runs git and fails the test on a non-zero exit; returns stdout.
  std::string GitOk(const std::vector<std::string>& args) {
    CommandResult r = RunGitInMount(args);
    EXPECT_TRUE(r.ok()) << r.Describe();
    return r.out;
  }
};

using Build = MountTest;

TEST_F(Git, StatusMatchesTheLowerCheckout) {
  EXPECT_EQ(GitOk({"status", "--porcelain"}), lower::kGitStatus);
}

// The sandbox's index is its own copy of the host's, made at the mount
// (docs/git-bridge.md, "The base"); git status trusts its stat data and
// leaves it as it is.
TEST_F(Git, StatusDoesNotRewriteTheIndex) {
  struct stat before;
  ASSERT_SYS_OK(::lstat(U(".git/index").c_str(), &before));
  GitOk({"status", "--porcelain"});
  GitOk({"status"});
  struct stat after;
  ASSERT_SYS_OK(::lstat(U(".git/index").c_str(), &after));
  EXPECT_EQ(after.st_ino, before.st_ino)
      << "git status rewrote .git/index: the stat data acqfs reports for "
         "untouched files differs from the lower's (st_ino, ctime, mtime, "
         "size, uid or gid)";
  EXPECT_EQ(LstatErrno(U(".git/index.lock")), ENOENT);
}

TEST_F(Git, DiffQuietSucceedsOnUnchangedFiles) {
  CommandResult clean = RunGitInMount({"diff", "--quiet", "--", "src", "docs",
                                       "hello", "links", "hard", "xattr"});
  EXPECT_EQ(clean.exit_code, 0) << clean.Describe();
  CommandResult dirty = RunGitInMount({"diff", "--quiet", "--", "README.md"});
  EXPECT_EQ(dirty.exit_code, 1) << dirty.Describe();
}

TEST_F(Git, SeesChangesMadeThroughTheMount) {
  ASSERT_TRUE(AppendFile(M(lower::kFileA), "more\n"));
  ASSERT_SYS_OK(::unlink(M(lower::kFileB).c_str()));
  ASSERT_SYS_OK(::rename(M("src/top.txt").c_str(), M("src/top2.txt").c_str()));
  EXPECT_EQ(GitOk({"status", "--porcelain", "--untracked-files=all"}),
            " M README.md\n"
            " M docs/a.txt\n"
            " D docs/b.txt\n"
            " D src/top.txt\n"
            "?? scratch.txt\n"
            "?? src/top2.txt\n");
}

TEST_F(Git, AddCommitAndCheckoutNewBranch) {
  GitOk({"add", "-A"});
  GitOk({"commit", "-q", "-m", "commit inside acqfs"});
  EXPECT_EQ(GitOk({"status", "--porcelain"}), "");
  GitOk({"checkout", "-q", "-b", "newbranch"});
  EXPECT_EQ(GitOk({"rev-parse", "--abbrev-ref", "HEAD"}), "newbranch\n");
  EXPECT_EQ(GitOk({"rev-list", "--count", "HEAD"}), "2\n");
  EXPECT_EQ(GitOk({"show", "HEAD:README.md"}), lower::kReadmeContent);
  GitOk({"fsck", "--no-dangling", "--no-progress"});
  // Switching back rewrites files in the work tree through the mount.
  GitOk({"checkout", "-q", "HEAD~1"});
  EXPECT_EQ(ContentOf(M(lower::kReadme)), "# demo repository\n");
  EXPECT_EQ(LstatErrno(M(lower::kUntracked)), ENOENT)
      << "scratch.txt was committed on newbranch, so checking out the older "
         "commit removes it";
}

TEST_F(Git, LowerRepositoryStaysAtItsCommit) {
  GitOk({"add", "-A"});
  GitOk({"commit", "-q", "-m", "commit inside acqfs"});
  CommandResult lower_log =
      RunGit(lower(), {"rev-list", "--count", "HEAD"}, home());
  ASSERT_TRUE(lower_log.ok()) << lower_log.Describe();
  EXPECT_EQ(lower_log.out, "1\n");
  CommandResult lower_status =
      RunGit(lower(), {"status", "--porcelain"}, home());
  EXPECT_EQ(lower_status.out, lower::kGitStatus);
}

TEST_F(Build, MakeBuildsAndRunsTheProgram) {
  const std::string dir = M(lower::kHelloDir);
  CommandResult make = RunCommand({"make", "-C", dir}, 120);
  ASSERT_TRUE(make.ok()) << make.Describe();
  CommandResult run = RunCommand({dir + "/hello"}, 30);
  ASSERT_TRUE(run.ok()) << run.Describe();
  EXPECT_EQ(run.out, lower::kHelloOutput);
  CommandResult up_to_date = RunCommand({"make", "-q", "-C", dir}, 60);
  EXPECT_EQ(up_to_date.exit_code, 0)
      << "make thinks hello is stale right after building it: "
      << up_to_date.Describe();
  ASSERT_SYS_OK(::utimensat(AT_FDCWD, (dir + "/main.c").c_str(), nullptr, 0));
  CommandResult stale = RunCommand({"make", "-q", "-C", dir}, 60);
  EXPECT_EQ(stale.exit_code, 1)
      << "make must see main.c as newer: " << stale.Describe();
  EXPECT_TRUE(Exists(U("hello/hello")));
  EXPECT_FALSE(Exists(L("hello/hello")));
}

TEST_F(Build, ScriptWrittenInTheMountRuns) {
  ASSERT_TRUE(WriteFile(M("new.sh"), "#!/bin/sh\necho \"args: $*\"\n", 0755));
  CommandResult r = RunCommand({M("new.sh"), "a", "b"}, 30);
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, "args: a b\n");
}

}  // namespace
}  // namespace acqfs::test
