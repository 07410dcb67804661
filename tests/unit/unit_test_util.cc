#include "unit_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

namespace acqfs_test {
namespace {

std::string Why(const std::string& op, const std::string& path) {
  return op + " " + path + ": " + std::strerror(errno);
}

int RemoveOne(const char* path, const struct stat*, int, struct FTW*) {
  if (::remove(path) != 0) ADD_FAILURE() << Why("remove", path);
  return 0;
}

void SnapshotDir(const std::string& root, const std::string& rel,
                 std::map<std::string, std::string>* out);

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

void SnapshotDir(const std::string& root, const std::string& rel,
                 std::map<std::string, std::string>* out) {
  std::string dir = rel.empty() ? root : root + "/" + rel;
  for (const auto& name : ListDir(dir)) {
    std::string crel = rel.empty() ? name : rel + "/" + name;
    std::string path = root + "/" + crel;
    struct stat st = Lstat(path);
    (*out)[crel] = Describe(path, st);
    if (S_ISDIR(st.st_mode)) SnapshotDir(root, crel, out);
  }
}

}  // namespace

TempTree::TempTree() {
  char tmpl[] = "/tmp/acqfs-unit-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    ADD_FAILURE() << Why("mkdtemp", tmpl);
    return;
  }
  root_ = tmpl;
  MakeDir(lower());
  MakeDir(upper());
  MakeDir(work());
}

TempTree::~TempTree() {
  if (root_.empty()) return;
  ::nftw(root_.c_str(), RemoveOne, 32, FTW_DEPTH | FTW_PHYS);
}

void WriteFile(const std::string& path, const std::string& data, mode_t mode) {
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

namespace {
// nftw(3) takes a plain function: the walk in progress (one at a time).
std::set<std::pair<dev_t, ino_t>>* g_du_seen = nullptr;
uint64_t g_du_total = 0;
std::mutex g_du_mu;
}  // namespace

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
  char buf[65536];
  ssize_t n = ::llistxattr(path.c_str(), buf, sizeof buf);
  std::vector<std::string> out;
  if (n < 0) {
    ADD_FAILURE() << Why("llistxattr", path);
    return out;
  }
  for (ssize_t i = 0; i < n;) {
    std::string k(buf + i);
    i += k.size() + 1;
    if (!k.empty()) out.push_back(k);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void SetTimes(const std::string& path, time_t sec, long nsec) {
  struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};
  if (::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
    ADD_FAILURE() << Why("utimensat", path);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

struct stat Lstat(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) ADD_FAILURE() << Why("lstat", path);
  return st;
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) {
    ADD_FAILURE() << Why("opendir", path);
    return out;
  }
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  out["."] = Describe(root, Lstat(root));
  SnapshotDir(root, "", &out);
  return out;
}

acqfs::Result<acqfs::Layers> OpenLayers(const TempTree& tree,
                                        acqfs::XattrNamespace ns) {
  return acqfs::Layers::Open(tree.lower(), tree.upper(), tree.work(), ns);
}

std::vector<std::string> Names(const std::vector<acqfs::MergedEntry>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

bool IsRoot() { return ::geteuid() == 0; }

}  // namespace acqfs_test
