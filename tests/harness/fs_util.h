// Small file-system helpers for tests: an owned fd, whole-file reads and
// writes, directory listings, and assertion helpers for syscalls that report
// errno by name.
//
// Helpers that can fail return ::testing::AssertionResult naming the path, so
// tests write ASSERT_TRUE(WriteFile(p, "x")) and get a readable message.
// Thread-safety: stateless functions; ScopedFd has one owner.
#ifndef ACQFS_TESTS_HARNESS_FS_UTIL_H_
#define ACQFS_TESTS_HARNESS_FS_UTIL_H_

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace acqfs::test {

// Move-only owner of a file descriptor; closes it on destruction.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ScopedFd(ScopedFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept {
    if (this != &o) Reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset(int fd = -1);
  // Closes now and returns close()'s result (errno set on -1).
  int Close();

 private:
  int fd_ = -1;
};

// "ENOENT (No such file or directory)".
std::string ErrnoName(int err);

// Writes `content` to `path` (O_CREAT|O_TRUNC, `mode` for a new file).
::testing::AssertionResult WriteFile(const std::string& path,
                                     const std::string& content,
                                     mode_t mode = 0644);
// Appends `content` with O_APPEND.
::testing::AssertionResult AppendFile(const std::string& path,
                                      const std::string& content);
// Reads the whole file into *out.
::testing::AssertionResult ReadFile(const std::string& path, std::string* out);
// lstat(2) into *st.
::testing::AssertionResult Lstat(const std::string& path, struct stat* st);
// The names in a directory except . and .., sorted.
::testing::AssertionResult ListDir(const std::string& path,
                                   std::vector<std::string>* names);
// lgetxattr into *value.
::testing::AssertionResult GetXattr(const std::string& path,
                                    const std::string& name,
                                    std::string* value);
// llistxattr, sorted.
::testing::AssertionResult ListXattrs(const std::string& path,
                                      std::vector<std::string>* names);

// Convenience for expectations: the file's content, or "<error: ...>".
std::string ContentOf(const std::string& path);
// The target of the symlink at `path`, or "<error: ...>".
std::string ReadLink(const std::string& path);
// errno of lstat(path), 0 when it exists.
int LstatErrno(const std::string& path);
// True when lstat(path) succeeds.
bool Exists(const std::string& path);

// Predicate-formatters behind the EXPECT_SYS_* macros below.
::testing::AssertionResult SysOkFormat(const char* expr_text, long rc);
::testing::AssertionResult SysErrnoFormat(const char* expr_text,
                                          const char* errno_text, long rc,
                                          int expected_errno);

}  // namespace acqfs::test

// EXPECT_SYS_OK(::mkdir(p, 0755)): the call must not return -1; on failure the
// message names the call and errno. EXPECT_SYS_ERRNO(call, ENOENT): the call
// must return -1 with that errno.
#define EXPECT_SYS_OK(expr) \
  EXPECT_PRED_FORMAT1(::acqfs::test::SysOkFormat, (expr))
#define ASSERT_SYS_OK(expr) \
  ASSERT_PRED_FORMAT1(::acqfs::test::SysOkFormat, (expr))
#define EXPECT_SYS_ERRNO(expr, err) \
  EXPECT_PRED_FORMAT2(::acqfs::test::SysErrnoFormat, (expr), err)
#define ASSERT_SYS_ERRNO(expr, err) \
  ASSERT_PRED_FORMAT2(::acqfs::test::SysErrnoFormat, (expr), err)

#endif  // ACQFS_TESTS_HARNESS_FS_UTIL_H_
