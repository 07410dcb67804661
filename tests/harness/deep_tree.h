// Helpers of the tests of trees deeper than PATH_MAX (issue 13): building a
// chain of nested directories one level at a time through directory
// descriptors (no path longer than a name is ever passed to the kernel),
// removing it again (sys::RemoveTree; nftw and std::filesystem::remove_all
// walk full paths and stop at PATH_MAX), and capping this process's
// open-files limit so that a walk holding a descriptor per level fails.
// Header-only (inline); the fs and git-bridge tests include it.
// Thread-safety: single-threaded test code (FdLimit changes the process's
// limit).
#ifndef ACQFS_TESTS_HARNESS_DEEP_TREE_H_
#define ACQFS_TESTS_HARNESS_DEEP_TREE_H_

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

#include "common/sys.h"

namespace acqfs::test {

// Descriptors this process has open now.
inline size_t OpenFdCount() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (d && ::readdir(d)) n++;
  if (d) ::closedir(d);
  return n - 3;  // ".", ".." and the DIR's own descriptor
}

// Lowers the soft open-files limit to what the process uses plus `room`
// for the life of the object.
class FdLimit {
 public:
  explicit FdLimit(size_t room) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    struct rlimit low = saved_;
    low.rlim_cur = OpenFdCount() + room;
    ok_ = ::setrlimit(RLIMIT_NOFILE, &low) == 0;
  }
  ~FdLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  FdLimit(const FdLimit&) = delete;
  FdLimit& operator=(const FdLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  struct rlimit saved_;
  bool ok_ = false;
};

// "name/name/.../name" (`depth` times), then "/leaf" unless leaf is "".
inline std::string ChainPath(const std::string& name, size_t depth,
                             const std::string& leaf = "") {
  std::string p;
  for (size_t i = 0; i < depth; ++i) {
    if (i) p += '/';
    p += name;
  }
  if (!leaf.empty()) p += (p.empty() ? "" : "/") + leaf;
  return p;
}

// Makes `depth` nested directories named `name` (mode 0755) below the
// existing directory `parent`, through directory descriptors, calling
// `at(dirfd, level)` in each new one (level 1 is the shallowest) when
// given. "" on success, else what failed.
inline std::string MakeChain(
    const std::string& parent, const std::string& name, size_t depth,
    const std::function<std::string(int dirfd, size_t level)>& at = {}) {
  int d = ::open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return "open " + parent + ": " + std::strerror(errno);
  for (size_t level = 1; level <= depth; ++level) {
    if (::mkdirat(d, name.c_str(), 0755) != 0 && errno != EEXIST) {
      std::string why = std::strerror(errno);
      ::close(d);
      return "mkdir at level " + std::to_string(level) + ": " + why;
    }
    int n = ::openat(d, name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ::close(d);
    if (n < 0) return "open level " + std::to_string(level);
    d = n;
    if (at) {
      std::string why = at(d, level);
      if (!why.empty()) {
        ::close(d);
        return why;
      }
    }
  }
  ::close(d);
  return "";
}

// Writes `data` to the file `name` of `dirfd` (mode 0644). "" on success.
inline std::string WriteAt(int dirfd, const std::string& name,
                           const std::string& data) {
  int f = ::openat(dirfd, name.c_str(),
                   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f < 0) return "create " + name + ": " + std::strerror(errno);
  ssize_t n = ::write(f, data.data(), data.size());
  ::close(f);
  if (n != static_cast<ssize_t>(data.size())) return "write " + name;
  return "";
}

// Removes `path` and everything below it, however deep. "" on success.
inline std::string RemoveDeep(const std::string& path) {
  acqfs::Status s = acqfs::sys::RemoveTree(AT_FDCWD, path, path);
  return s ? std::string() : s.error().Message();
}

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_DEEP_TREE_H_
