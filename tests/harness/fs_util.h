// Small file-system helpers for tests: an owned fd, whole-file reads and
// writes, directory listings, and assertion helpers for syscalls that report
// errno by name.
//
// Two kinds of helpers. Checking ones (WriteFile, ReadFile(path, &out),
// Lstat(path, &st), ...) return ::testing::AssertionResult naming the path,
// so tests write ASSERT_TRUE(WriteFile(p, "x")), or EXPECT_FALSE when the
// operation must fail. Building ones (MakeFile, MakeDir, ReadFile(path),
// Lstat(path), ...) are for laying down and reading back fixture trees:
// they fail the current test (ADD_FAILURE, naming the path) when a syscall
// fails and return a plain value. None of them uses acqfs code, so tests
// check the product against the kernel's view of the directories.
// Thread-safety: stateless functions (DiskUsage serializes itself); ScopedFd
// has one owner.
#ifndef ACQFS_TESTS_HARNESS_FS_UTIL_H_
#define ACQFS_TESTS_HARNESS_FS_UTIL_H_

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
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

// ---- Building helpers: fail the current test on error ---------------------

// Writes `data` to `path` (O_CREAT|O_TRUNC) and gives it exactly `mode`
// (fchmod, whatever the umask), creating missing parent directories.
void MakeFile(const std::string& path, const std::string& data,
              mode_t mode = 0644);
// The whole file (not following a symlink at `path`).
std::string ReadFile(const std::string& path);
// mkdir(2), then chmod to exactly `mode`.
void MakeDir(const std::string& path, mode_t mode = 0755);
void MakeSymlink(const std::string& target, const std::string& path);
void MakeFifo(const std::string& path, mode_t mode = 0644);
// A 0/0 character device (an overlayfs whiteout), made with mknod directly.
void MakeDeviceWhiteout(const std::string& path);
void SetXattr(const std::string& path, const std::string& key,
              const std::string& value);
// The value of `key`, or nullopt when it cannot be read (no failure).
std::optional<std::string> GetXattr(const std::string& path,
                                    const std::string& key);
// Names of the extended attributes of `path`, sorted.
std::vector<std::string> ListXattrs(const std::string& path);
// Sets atime and mtime (seconds, nanoseconds) without following symlinks.
void SetTimes(const std::string& path, time_t sec, long nsec = 0);
struct stat Lstat(const std::string& path);
// Sorted names in a directory (without "." and "..").
std::vector<std::string> ListDir(const std::string& path);
// What du(1) says the tree at `path` holds: the st_blocks (in bytes) of
// every inode in it once, `path` included. Independent of Quota::Measure,
// so that tests can check it.
uint64_t DiskUsage(const std::string& path);
// A recursive description of a host tree, for "this tree did not change at
// all": relative path ("." is the root) -> type and mode, uid, gid, nlink,
// size, rdev, mtime, ctime, every xattr and the whole content (regular
// files) or target (symlinks), as text. Compare two with EXPECT_EQ. (For
// selected fields, hashes and readable diffs, see TreeSnapshot in
// harness/snapshot.h.)
std::map<std::string, std::string> DescribeTree(const std::string& root);
// Whether the test runs as root (geteuid() == 0).
bool IsRoot();

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
