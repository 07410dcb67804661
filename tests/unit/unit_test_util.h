// Helpers for the unit tests of acqfs_layer: a private temporary tree holding
// lower/, upper/ and work/, plain-syscall builders for the layers, a
// recursive snapshot of a host tree, and assertion macros for Result/Status.
// Nothing here uses acqfs code to build or inspect the layers, so the tests
// check the product against the kernel's view of the directories.
// Thread-safety: single-threaded test code.
#ifndef ACQFS_TESTS_UNIT_UNIT_TEST_UTIL_H_
#define ACQFS_TESTS_UNIT_UNIT_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fs/layer.h"
#include "fs/layer_format.h"

// Asserts that a Result/Status is ok, printing the error otherwise.
#define ASSERT_OK(expr)                                        \
  do {                                                         \
    const auto& acqfs_assert_r_ = (expr);                      \
    ASSERT_TRUE(acqfs_assert_r_.ok())                          \
        << #expr << ": " << acqfs_assert_r_.error().Message(); \
  } while (0)
#define EXPECT_OK(expr)                                        \
  do {                                                         \
    const auto& acqfs_expect_r_ = (expr);                      \
    EXPECT_TRUE(acqfs_expect_r_.ok())                          \
        << #expr << ": " << acqfs_expect_r_.error().Message(); \
  } while (0)
// Asserts that a Result/Status failed with errno `e`.
#define EXPECT_ERRNO(e, expr)                                    \
  do {                                                           \
    const auto& acqfs_expect_r_ = (expr);                        \
    EXPECT_FALSE(acqfs_expect_r_.ok()) << #expr << " succeeded"; \
    EXPECT_EQ(acqfs_expect_r_.err(), (e)) << #expr;              \
  } while (0)

#define ACQFS_UNIT_CONCAT2(a, b) a##b
#define ACQFS_UNIT_CONCAT(a, b) ACQFS_UNIT_CONCAT2(a, b)
// `lhs = value of expr`, asserting that expr is ok.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ACQFS_UNIT_ASSIGN_IMPL(ACQFS_UNIT_CONCAT(acqfs_r_, __LINE__), lhs, expr)
#define ACQFS_UNIT_ASSIGN_IMPL(tmp, lhs, expr)                     \
  auto tmp = (expr);                                               \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.error().Message(); \
  lhs = std::move(tmp).value()

namespace acqfs_test {

// A directory made with mkdtemp under /tmp, holding lower/, upper/ and work/,
// removed with everything below it on destruction.
class TempTree {
 public:
  TempTree();
  ~TempTree();
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const std::string& root() const { return root_; }
  std::string lower() const { return root_ + "/lower"; }
  std::string upper() const { return root_ + "/upper"; }
  std::string work() const { return root_ + "/work"; }
  std::string tmp() const { return work() + "/acqfs-tmp"; }
  std::string L(const std::string& rel) const { return lower() + "/" + rel; }
  std::string U(const std::string& rel) const { return upper() + "/" + rel; }

 private:
  std::string root_;
};

// Plain-syscall helpers. Each one fails the current test (ADD_FAILURE) when
// the syscall fails, naming the path.
void WriteFile(const std::string& path, const std::string& data,
               mode_t mode = 0644);
std::string ReadFile(const std::string& path);
// What du(1) says the tree at `path` holds: the st_blocks (in bytes) of
// every inode in it once, `path` included. Independent of Quota::Measure,
// so that tests can check it.
uint64_t DiskUsage(const std::string& path);
void MakeDir(const std::string& path, mode_t mode = 0755);
void MakeSymlink(const std::string& target, const std::string& path);
void MakeFifo(const std::string& path, mode_t mode = 0644);
// A 0/0 character device, written with mknod directly.
void MakeDeviceWhiteout(const std::string& path);
void SetXattr(const std::string& path, const std::string& key,
              const std::string& value);
std::optional<std::string> GetXattr(const std::string& path,
                                    const std::string& key);
std::vector<std::string> ListXattrs(const std::string& path);
// Sets atime and mtime (seconds, nanoseconds) without following symlinks.
void SetTimes(const std::string& path, time_t sec, long nsec = 0);
bool Exists(const std::string& path);
struct stat Lstat(const std::string& path);
// Sorted names in a directory (without "." and "..").
std::vector<std::string> ListDir(const std::string& path);

// A recursive description of a host tree: relative path -> type, mode, uid,
// gid, size, rdev, nlink, mtime, ctime, xattrs and the content (regular
// files) or target (symlinks). Two snapshots are equal when the tree is
// unchanged in all of those.
std::map<std::string, std::string> Snapshot(const std::string& root);

// Opens the layers of `tree`, failing the test on error.
acqfs::Result<acqfs::Layers> OpenLayers(
    const TempTree& tree,
    acqfs::XattrNamespace ns = acqfs::XattrNamespace::kUser);

// Sorted names of a merged listing.
std::vector<std::string> Names(const std::vector<acqfs::MergedEntry>& v);

bool IsRoot();

}  // namespace acqfs_test

#endif  // ACQFS_TESTS_UNIT_UNIT_TEST_UTIL_H_
