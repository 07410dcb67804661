#include "harness/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace acqfs::test {
namespace {

::testing::AssertionResult Failed(const std::string& op,
                                  const std::string& path, int err) {
  return ::testing::AssertionFailure()
         << op << ": " << path << ": " << ErrnoName(err);
}

::testing::AssertionResult WriteAll(int fd, const std::string& content,
                                    const std::string& path) {
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Failed("write", path, n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult WriteWithFlags(const std::string& path,
                                          const std::string& content, int flags,
                                          mode_t mode) {
  ScopedFd fd(::open(path.c_str(), flags | O_WRONLY | O_CLOEXEC, mode));
  if (!fd.valid()) return Failed("open", path, errno);
  if (auto r = WriteAll(fd.get(), content, path); !r) return r;
  // close() reports deferred write errors (a FUSE flush), so check it.
  if (fd.Close() != 0) return Failed("close", path, errno);
  return ::testing::AssertionSuccess();
}

std::vector<std::string> SplitNul(const std::string& list) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find('\0', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) names.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

int ScopedFd::Close() {
  int rc = fd_ >= 0 ? ::close(fd_) : 0;
  fd_ = -1;
  return rc;
}

void ScopedFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string ErrnoName(int err) {
  const char* name = ::strerrorname_np(err);
  return std::string(name ? name : std::to_string(err)) + " (" +
         std::strerror(err) + ")";
}

::testing::AssertionResult WriteFile(const std::string& path,
                                     const std::string& content, mode_t mode) {
  return WriteWithFlags(path, content, O_CREAT | O_TRUNC, mode);
}

::testing::AssertionResult AppendFile(const std::string& path,
                                      const std::string& content) {
  return WriteWithFlags(path, content, O_APPEND, 0);
}

::testing::AssertionResult ReadFile(const std::string& path, std::string* out) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Failed("open", path, errno);
  out->clear();
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Failed("read", path, errno);
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Lstat(const std::string& path, struct stat* st) {
  if (::lstat(path.c_str(), st) != 0) return Failed("lstat", path, errno);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult ListDir(const std::string& path,
                                   std::vector<std::string>* names) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), &::closedir);
  if (!dir) return Failed("opendir", path, errno);
  names->clear();
  errno = 0;
  while (dirent* e = ::readdir(dir.get())) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names->push_back(n);
  }
  if (errno != 0) return Failed("readdir", path, errno);
  std::sort(names->begin(), names->end());
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult GetXattr(const std::string& path,
                                    const std::string& name,
                                    std::string* value) {
  ssize_t n = ::lgetxattr(path.c_str(), name.c_str(), nullptr, 0);
  if (n < 0) return Failed("lgetxattr " + name, path, errno);
  value->assign(static_cast<size_t>(n), '\0');
  n = ::lgetxattr(path.c_str(), name.c_str(), value->data(), value->size());
  if (n < 0) return Failed("lgetxattr " + name, path, errno);
  value->resize(static_cast<size_t>(n));
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult ListXattrs(const std::string& path,
                                      std::vector<std::string>* names) {
  ssize_t n = ::llistxattr(path.c_str(), nullptr, 0);
  if (n < 0) return Failed("llistxattr", path, errno);
  std::string list(static_cast<size_t>(n), '\0');
  n = ::llistxattr(path.c_str(), list.data(), list.size());
  if (n < 0) return Failed("llistxattr", path, errno);
  list.resize(static_cast<size_t>(n));
  *names = SplitNul(list);
  return ::testing::AssertionSuccess();
}

std::string ContentOf(const std::string& path) {
  std::string content;
  if (auto r = ReadFile(path, &content); !r) {
    return std::string("<error: ") + r.message() + ">";
  }
  return content;
}

std::string ReadLink(const std::string& path) {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
  if (n < 0) return "<error: readlink: " + path + ": " + ErrnoName(errno) + ">";
  return std::string(buf.data(), static_cast<size_t>(n));
}

int LstatErrno(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? 0 : errno;
}

bool Exists(const std::string& path) { return LstatErrno(path) == 0; }

::testing::AssertionResult SysOkFormat(const char* expr_text, long rc) {
  if (rc != -1) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << expr_text << " failed: " << ErrnoName(errno);
}

::testing::AssertionResult SysErrnoFormat(const char* expr_text,
                                          const char* errno_text, long rc,
                                          int expected_errno) {
  int err = errno;
  if (rc == -1 && err == expected_errno) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << expr_text << " should fail with " << ErrnoName(expected_errno)
          << " but ";
  if (rc != -1) return failure << "returned " << rc;
  return failure << "failed with " << ErrnoName(err);
}

}  // namespace acqfs::test
