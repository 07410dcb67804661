#include "harness/temp_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "harness/fs_util.h"
#include "harness/mounts.h"

namespace acqfs::test {
namespace {

using UniqueDir = std::unique_ptr<DIR, int (*)(DIR*)>;

std::string ErrnoText(const std::string& op, const std::string& path) {
  return op + ": " + path + ": " + std::strerror(errno);
}

// Opens the directory `name` inside `parent_fd` without following symlinks,
// granting the owner rwx first when its mode forbids it.
int OpenDirForRemoval(int parent_fd, const std::string& name) {
  int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(parent_fd, name.c_str(), flags);
  if (fd < 0 && errno == EACCES) {
    ::fchmodat(parent_fd, name.c_str(), 0700, 0);
    fd = ::openat(parent_fd, name.c_str(), flags);
  }
  if (fd >= 0) ::fchmod(fd, 0700);  // so that entries can be unlinked
  return fd;
}

std::vector<std::string> EntryNames(int dir_fd) {
  std::vector<std::string> names;
  int dup_fd = ::dup(dir_fd);
  if (dup_fd < 0) return names;
  UniqueDir dir(::fdopendir(dup_fd), &::closedir);
  if (!dir) {
    ::close(dup_fd);
    return names;
  }
  while (dirent* e = ::readdir(dir.get())) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  return names;
}

void RemoveEntry(int parent_fd, const std::string& name,
                 const std::string& shown, dev_t dev, std::string* errors);

// Removes the contents of the directory open as `dir_fd`.
void RemoveContents(int dir_fd, const std::string& shown, dev_t dev,
                    std::string* errors) {
  for (const auto& name : EntryNames(dir_fd)) {
    RemoveEntry(dir_fd, name, shown + "/" + name, dev, errors);
  }
}

void RemoveEntry(int parent_fd, const std::string& name,
                 const std::string& shown, dev_t dev, std::string* errors) {
  struct stat st;
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno != ENOENT) *errors += ErrnoText("fstatat", shown) + "\n";
    return;
  }
  if (st.st_dev != dev) {
    *errors += "not crossing into another filesystem: " + shown + "\n";
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    ScopedFd fd(OpenDirForRemoval(parent_fd, name));
    if (!fd.valid()) {
      *errors += ErrnoText("open directory", shown) + "\n";
      return;
    }
    RemoveContents(fd.get(), shown, dev, errors);
  }
  int flags = S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0;
  if (::unlinkat(parent_fd, name.c_str(), flags) != 0 && errno != ENOENT) {
    *errors += ErrnoText("unlinkat", shown) + "\n";
  }
}

}  // namespace

::testing::AssertionResult RemoveTreeSafely(const std::string& dir) {
  std::string errors;
  for (const auto& m : MountsBelow(dir)) {
    errors += ForceUnmount(m.mount_point);
  }
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << ErrnoText("lstat", dir);
  }
  RemoveEntry(AT_FDCWD, dir, dir, st.st_dev, &errors);
  if (errors.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "removing " << dir << ":\n" << errors;
}

TempDir::TempDir() {
  std::string templ =
      std::string(kTestRootPrefix) + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << ErrnoText("mkdtemp", templ);
    return;
  }
  path_ = templ;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  EXPECT_TRUE(RemoveTreeSafely(path_));
}

std::string TempDir::MakeDir(const std::string& rel, mode_t mode, uid_t uid,
                             gid_t gid) {
  std::string path = path_;
  size_t start = 0;
  while (start < rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    path += "/" + rel.substr(start, end - start);
    if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
      ADD_FAILURE() << ErrnoText("mkdir", path);
      return path;
    }
    if (::chmod(path.c_str(), mode) != 0 ||
        ::lchown(path.c_str(), uid, gid) != 0) {
      ADD_FAILURE() << ErrnoText("chmod/chown", path);
    }
    start = end + 1;
  }
  return path;
}

}  // namespace acqfs::test
