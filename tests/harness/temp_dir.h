// TempDir: a fresh directory /tmp/acqfs-test-<pid>-XXXXXX (<pid> the test
// process's), removed with everything below it when the object dies.
//
// Removal first unmounts whatever is still mounted at or below the directory
// (deepest first; see ForceUnmount), then deletes the tree without ever
// crossing into another filesystem (an entry on another device is left alone
// and reported), making read-only files and 0000 directories writable on the
// way. Failures are reported as non-fatal test failures.
// Thread-safety: none; one owner.
#ifndef ACQFS_TESTS_HARNESS_TEMP_DIR_H_
#define ACQFS_TESTS_HARNESS_TEMP_DIR_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <string>

namespace acqfs::test {

// Every TempDir lives under a path starting with this prefix, then the pid
// of the process that made it: the CTest cleanup script
// (tests/cleanup_mounts.sh) relies on both, and leaves alone the roots of
// test processes still alive (another test run on the same machine).
inline constexpr char kTestRootPrefix[] = "/tmp/acqfs-test-";

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The directory itself (absolute, no trailing slash).
  const std::string& path() const { return path_; }
  // path() + "/" + rel.
  std::string Sub(const std::string& rel) const { return path_ + "/" + rel; }
  // Creates path()/rel (parents included) with `mode`, owned by uid:gid when
  // they are not -1, and returns its path. Reports a failure on error.
  std::string MakeDir(const std::string& rel, mode_t mode = 0755,
                      uid_t uid = static_cast<uid_t>(-1),
                      gid_t gid = static_cast<gid_t>(-1));

 private:
  std::string path_;
};

// Unmounts everything at or below `dir`, then removes `dir` recursively
// without crossing filesystems. Safe on a missing `dir`.
::testing::AssertionResult RemoveTreeSafely(const std::string& dir);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_TEMP_DIR_H_
