// Helpers the git-bridge repository tests share: a private HOME and fixed
// git identities for the whole test program, running git and shell commands,
// and small file helpers. Header-only (inline), so registering the
// environment needs no linker tricks.
#ifndef ACQFS_TESTS_GITBRIDGE_GIT_TEST_UTIL_H_
#define ACQFS_TESTS_GITBRIDGE_GIT_TEST_UTIL_H_

#include <git2.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace acqfs::gitbridge {

#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                    \
  auto lhs##_r = (expr);                                                   \
  ASSERT_TRUE(lhs##_r.ok()) << #expr << ": " << lhs##_r.error().Message(); \
  auto lhs = std::move(lhs##_r).value()

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

inline std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command; fails the test unless it exits 0. Returns stdout.
inline std::string Sh(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (!p) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n"
                                                             << out;
  return out;
}

inline std::string Git(const std::string& dir, const std::string& args) {
  std::string out = Sh("git -C " + Quote(dir) + " " + args);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

inline void Write(const std::string& path, const std::string& data) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace acqfs::gitbridge

#endif  // ACQFS_TESTS_GITBRIDGE_GIT_TEST_UTIL_H_
