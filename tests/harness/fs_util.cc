#include "harness/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

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

// ---- Building helpers ------------------------------------------------------

namespace {

std::string Why(const std::string& op, const std::string& path) {
  return op + " " + path + ": " + std::strerror(errno);
}

std::string Describe(const std::string& path, const struct stat& st) {
  std::ostringstream d;
  d << "mode=" << std::oct << st.st_mode << std::dec << " uid=" << st.st_uid
    << " gid=" << st.st_gid << " nlink=" << st.st_nlink;
  if (!S_ISDIR(st.st_mode)) d << " size=" << st.st_size;
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    d << " rdev=" << major(st.st_rdev) << ":" << minor(st.st_rdev);
  d << " mtime=" << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec
    << " ctime=" << st.st_ctim.tv_sec << "." << st.st_ctim.tv_nsec;
  for (const auto& k : ListXattrs(path)) {
    auto v = GetXattr(path, k);
    d << " xattr[" << k << "]=" << (v ? *v : std::string("<unreadable>"));
  }
  if (S_ISREG(st.st_mode)) d << " data=" << ReadFile(path);
  if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
    d << " target=" << (n >= 0 ? std::string(buf, n) : "<unreadable>");
  }
  return d.str();
}

void DescribeDir(const std::string& root, const std::string& rel,
                 std::map<std::string, std::string>* out) {
  std::string dir = rel.empty() ? root : root + "/" + rel;
  for (const auto& name : ListDir(dir)) {
    std::string crel = rel.empty() ? name : rel + "/" + name;
    std::string path = root + "/" + crel;
    struct stat st = Lstat(path);
    (*out)[crel] = Describe(path, st);
    if (S_ISDIR(st.st_mode)) DescribeDir(root, crel, out);
  }
}

// nftw(3) takes a plain function: the DiskUsage walk in progress (one at a
// time).
std::set<std::pair<dev_t, ino_t>>* g_du_seen = nullptr;
uint64_t g_du_total = 0;
std::mutex g_du_mu;

}  // namespace

void MakeFile(const std::string& path, const std::string& data, mode_t mode) {
  std::string parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::create_directories(parent, ec) && ec)
    ADD_FAILURE() << "create_directories " << parent << ": " << ec.message();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    ADD_FAILURE() << Why("open", path);
    return;
  }
  if (::write(fd, data.data(), data.size()) !=
      static_cast<ssize_t>(data.size()))
    ADD_FAILURE() << Why("write", path);
  if (::fchmod(fd, mode) != 0) ADD_FAILURE() << Why("fchmod", path);
  ::close(fd);
}

std::string ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    ADD_FAILURE() << Why("open", path);
    return "";
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      ADD_FAILURE() << Why("read", path);
      break;
    }
    if (n == 0) break;
    out.append(buf, n);
  }
  ::close(fd);
  return out;
}

void MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) ADD_FAILURE() << Why("mkdir", path);
  if (::chmod(path.c_str(), mode) != 0) ADD_FAILURE() << Why("chmod", path);
}

void MakeSymlink(const std::string& target, const std::string& path) {
  if (::symlink(target.c_str(), path.c_str()) != 0)
    ADD_FAILURE() << Why("symlink", path);
}

void MakeFifo(const std::string& path, mode_t mode) {
  if (::mkfifo(path.c_str(), mode) != 0) ADD_FAILURE() << Why("mkfifo", path);
  if (::chmod(path.c_str(), mode) != 0) ADD_FAILURE() << Why("chmod", path);
}

void MakeDeviceWhiteout(const std::string& path) {
  if (::mknod(path.c_str(), S_IFCHR | 0, makedev(0, 0)) != 0)
    ADD_FAILURE() << Why("mknod", path);
}

void SetXattr(const std::string& path, const std::string& key,
              const std::string& value) {
  if (::lsetxattr(path.c_str(), key.c_str(), value.data(), value.size(), 0) !=
      0)
    ADD_FAILURE() << Why("lsetxattr " + key, path);
}

std::optional<std::string> GetXattr(const std::string& path,
                                    const std::string& key) {
  char buf[65536];
  ssize_t n = ::lgetxattr(path.c_str(), key.c_str(), buf, sizeof buf);
  if (n < 0) return std::nullopt;
  return std::string(buf, n);
}

std::vector<std::string> ListXattrs(const std::string& path) {
  std::vector<std::string> out;
  if (auto r = ListXattrs(path, &out); !r) ADD_FAILURE() << r.message();
  return out;
}

void SetTimes(const std::string& path, time_t sec, long nsec) {
  struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};
  if (::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
    ADD_FAILURE() << Why("utimensat", path);
}

struct stat Lstat(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) ADD_FAILURE() << Why("lstat", path);
  return st;
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  if (auto r = ListDir(path, &out); !r) ADD_FAILURE() << r.message();
  return out;
}

uint64_t DiskUsage(const std::string& path) {
  std::lock_guard<std::mutex> l(g_du_mu);
  std::set<std::pair<dev_t, ino_t>> seen;
  g_du_seen = &seen;
  g_du_total = 0;
  int rc = ::nftw(
      path.c_str(),
      [](const char*, const struct stat* st, int, struct FTW*) {
        if (g_du_seen->insert({st->st_dev, st->st_ino}).second)
          g_du_total += static_cast<uint64_t>(st->st_blocks) * 512;
        return 0;
      },
      16, FTW_PHYS);
  EXPECT_EQ(rc, 0) << "nftw " << path;
  g_du_seen = nullptr;
  return g_du_total;
}

std::map<std::string, std::string> DescribeTree(const std::string& root) {
  std::map<std::string, std::string> out;
  out["."] = Describe(root, Lstat(root));
  DescribeDir(root, "", &out);
  return out;
}

bool IsRoot() { return ::geteuid() == 0; }

}  // namespace acqfs::test
