// For tests that run git and libgit2 on temporary repositories: a private
// HOME and fixed git identities for the whole test program
// (GitEnvironment, registered by including this header), and Git(), which
// runs a git command line in a directory. Includes the shell
// (harness/command.h: Sh, ShellQuote), file (harness/fs_util.h) and Result
// (harness/result_assert.h) helpers such tests use with it.
// Header-only (inline), so registering the environment needs no linker
// tricks; the including program must link libgit2 (e.g. acqfs_gitbridge).
// Thread-safety: GitEnvironment runs once per program; Git() as Sh().
#ifndef ACQFS_TESTS_HARNESS_GIT_ENV_H_
#define ACQFS_TESTS_HARNESS_GIT_ENV_H_

#include <git2.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/result_assert.h"

namespace acqfs::test {

// A private HOME and fixed identities, so neither `git` nor libgit2 reads
// the machine's own configuration.
class GitEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/acqfs-test-home-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    home_ = tmpl;
    ::setenv("HOME", home_.c_str(), 1);
    ::setenv("XDG_CONFIG_HOME", home_.c_str(), 1);
    ::setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
    for (const char* k : {"GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"})
      ::setenv(k, "Test", 1);
    for (const char* k : {"GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"})
      ::setenv(k, "test@example.com", 1);
    git_libgit2_init();
  }
  void TearDown() override {
    git_libgit2_shutdown();
    std::filesystem::remove_all(home_);
  }

 private:
  std::string home_;
};
inline const auto* const kGitTestEnvironment =
    ::testing::AddGlobalTestEnvironment(new GitEnvironment);

// Runs `git -C DIR ARGS` (ARGS a shell command line) with Sh(); returns its
// output without trailing newlines.
inline std::string Git(const std::string& dir, const std::string& args) {
  std::string out = Sh("git -C " + ShellQuote(dir) + " " + args);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_GIT_ENV_H_
