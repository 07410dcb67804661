#include "common/sys.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>

#include "common/dir_walk.h"
#include "common/owner_access.h"

namespace acqfs::sys {

std::string Join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (name.empty()) return dir;
  return dir + "/" + name;
}

std::string Dirname(const std::string& rel) {
  auto p = rel.rfind('/');
  return p == std::string::npos ? std::string() : rel.substr(0, p);
}

std::string Basename(const std::string& rel) {
  auto p = rel.rfind('/');
  return p == std::string::npos ? rel : rel.substr(p + 1);
}

namespace {
// Set before the daemon serves requests, cleared after (see the header).
std::atomic<FdPressureHandler> g_fd_pressure{nullptr};
std::atomic<void*> g_fd_pressure_arg{nullptr};
}  // namespace

void SetFdPressureHandler(FdPressureHandler handler, void* arg) {
  g_fd_pressure_arg = arg;
  g_fd_pressure = handler;
}

int OpenRelievingPressure(const std::function<int()>& open) {
  int fd = open();
  if (fd >= 0 || (errno != EMFILE && errno != ENFILE)) return fd;
  FdPressureHandler h = g_fd_pressure.load();
  if (!h || !h(g_fd_pressure_arg.load())) {
    errno = EMFILE;
    return -1;
  }
  return open();
}

namespace {

// One openat2 of `p` below `dirfd`, retried on EINTR/EAGAIN and under
// descriptor pressure; -1 with errno on failure.
int OpenAt2(int dirfd, const char* p, int flags, mode_t mode) {
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  if (flags & (O_CREAT | O_TMPFILE)) how.mode = mode;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  auto open = [&]() -> int {
    for (;;) {
      long fd = ::syscall(SYS_openat2, dirfd, p, &how, sizeof how);
      if (fd >= 0 || (errno != EINTR && errno != EAGAIN))
        return static_cast<int>(fd);
    }
  };
  return OpenRelievingPressure(open);
}

}  // namespace

Result<UniqueFd> OpenBeneath(int root, const std::string& rel, int flags,
                             mode_t mode, const std::string& shown) {
  if (rel.size() <= kMaxPathChunk) {
    int fd = OpenAt2(root, rel.empty() ? "." : rel.c_str(), flags, mode);
    if (fd < 0) return Error::Errno("openat2", shown);
    return UniqueFd(fd);
  }
  // Longer than one path the kernel takes (PATH_MAX with its NUL): walk it
  // a run of whole components at a time, each run opened beneath the
  // directory the one before opened, so the walk never leaves `root` and
  // follows no symlink, as one openat2 would not.
  UniqueFd dir;
  int at = root;
  size_t pos = 0;
  for (;;) {
    const size_t left = rel.size() - pos;
    if (left <= kMaxPathChunk) {
      int fd = OpenAt2(at, rel.c_str() + pos, flags, mode);
      if (fd < 0) return Error::Errno("openat2", shown);
      return UniqueFd(fd);
    }
    size_t cut = rel.rfind('/', pos + kMaxPathChunk);
    if (cut == std::string::npos || cut <= pos) {
      errno = ENAMETOOLONG;  // one component longer than any name can be
      return Error::Errno("openat2", shown);
    }
    const std::string run = rel.substr(pos, cut - pos);
    int fd = OpenAt2(at, run.c_str(), O_PATH | O_DIRECTORY, 0);
    if (fd < 0) return Error::Errno("openat2", shown);
    dir = UniqueFd(fd);
    at = dir.get();
    pos = cut + 1;
  }
}

Result<UniqueFd> OpenDirPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), O_DIRECTORY | O_CLOEXEC | flags);
  if (fd < 0) return Error::Errno("open directory", path);
  return UniqueFd(fd);
}

Result<struct stat> StatAt(int dirfd, const std::string& name,
                           const std::string& shown) {
  struct stat st;
  const char* p = name.empty() ? "" : name.c_str();
  int fl = AT_SYMLINK_NOFOLLOW | (name.empty() ? AT_EMPTY_PATH : 0);
  if (::fstatat(dirfd, p, &st, fl) != 0) return Error::Errno("fstatat", shown);
  return st;
}

Status StatAtIfExists(int dirfd, const std::string& name, struct stat* st,
                      bool* found, const std::string& shown) {
  if (::fstatat(dirfd, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0) {
    *found = true;
    return Ok();
  }
  *found = false;
  if (errno == ENOENT || errno == ENOTDIR) return Ok();
  return Error::Errno("fstatat", shown);
}

Result<struct stat> Fstat(int fd, const std::string& shown) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Error::Errno("fstat", shown);
  return st;
}

namespace {
struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};
}  // namespace

Result<std::vector<DirEntry>> ReadDir(int dirfd, const std::string& shown) {
  // getdents64 on a private descriptor: the caller's offset is not disturbed.
  int fd = OpenRelievingPressure([&] {
    int f =
        ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOATIME);
    if (f < 0 && errno == EPERM)
      f = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return f;
  });
  if (fd < 0) return Error::Errno("open directory", shown);
  UniqueFd owned(fd);
  std::vector<DirEntry> out;
  alignas(8) char buf[32768];
  for (;;) {
    long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("getdents64", shown);
    }
    if (n == 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<LinuxDirent64*>(buf + off);
      off += d->d_reclen;
      if (std::strcmp(d->d_name, ".") == 0 || std::strcmp(d->d_name, "..") == 0)
        continue;
      out.push_back(DirEntry{d->d_name, d->d_ino, d->d_type});
    }
  }
  return out;
}

Result<std::string> ReadLinkAt(int dirfd, const std::string& name,
                               const std::string& shown) {
  std::string buf(256, '\0');
  for (;;) {
    ssize_t n = ::readlinkat(dirfd, name.c_str(), buf.data(), buf.size());
    if (n < 0) return Error::Errno("readlinkat", shown);
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(n);
      return buf;
    }
    buf.resize(buf.size() * 2);
  }
}

std::string XattrPath(int dirfd, const std::string& name) {
  // "/." makes the l*xattr calls act on the directory itself rather than on
  // the /proc magic link.
  return "/proc/self/fd/" + std::to_string(dirfd) + "/" +
         (name.empty() ? std::string(".") : name);
}

Result<std::vector<std::string>> ListXattrs(const std::string& xpath,
                                            const std::string& shown,
                                            bool follow) {
  auto list = follow ? ::listxattr : ::llistxattr;
  std::vector<std::string> names;
  std::string buf;
  for (;;) {
    ssize_t n = list(xpath.c_str(), nullptr, 0);
    if (n < 0) {
      if (errno == ENOTSUP) return names;
      return Error::Errno("llistxattr", shown);
    }
    if (n == 0) return names;
    buf.resize(n);
    n = list(xpath.c_str(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == ERANGE) continue;
      return Error::Errno("llistxattr", shown);
    }
    buf.resize(n);
    break;
  }
  for (size_t i = 0; i < buf.size();) {
    size_t len = std::strlen(buf.data() + i);
    if (len) names.emplace_back(buf.data() + i, len);
    i += len + 1;
  }
  return names;
}

namespace {
// An xattr's value by `get(buf, size)` (a getxattr call, size 0 asking for
// the length), retried while the value grows between the two calls.
template <typename Get>
Result<std::string> ReadXattr(const Get& get, const char* op,
                              const std::string& key,
                              const std::string& shown) {
  std::string buf;
  for (;;) {
    ssize_t n = get(nullptr, 0);
    if (n < 0) return Error::Errno(op + (" " + key), shown);
    buf.resize(n);
    if (n == 0) return buf;
    n = get(buf.data(), buf.size());
    if (n < 0) {
      if (errno == ERANGE) continue;
      return Error::Errno(op + (" " + key), shown);
    }
    buf.resize(n);
    return buf;
  }
}
}  // namespace

// A user.* xattr needs read permission on the object to be read and write
// permission to be changed: refused that on a file of the sandbox's own, a
// daemon that is not root tries again with the owner's bit added
// (common/owner_access.h). `call` returns the syscall's result.
template <class Call>
auto AsOwnerOnRefusal(const std::string& xpath, bool follow, int fd,
                      mode_t need, Call call) -> decltype(call()) {
  auto r = call();
  if (r || r.err() != EACCES || !owner_access::Enabled()) return r;
  auto retry = [&] { r = call(); };
  if (fd >= 0)
    owner_access::Retry(fd, need, retry);
  else
    owner_access::RetryAt(xpath, follow, need, retry);
  return r;
}

Result<std::string> GetXattr(const std::string& xpath, const std::string& key,
                             const std::string& shown, bool follow) {
  auto get = follow ? ::getxattr : ::lgetxattr;
  return AsOwnerOnRefusal(xpath, follow, -1, S_IRUSR, [&] {
    return ReadXattr(
        [&](void* b, size_t n) {
          return get(xpath.c_str(), key.c_str(), b, n);
        },
        "lgetxattr", key, shown);
  });
}

Result<std::string> FGetXattr(int fd, const std::string& key,
                              const std::string& shown) {
  return AsOwnerOnRefusal("", false, fd, S_IRUSR, [&] {
    return ReadXattr(
        [&](void* b, size_t n) { return ::fgetxattr(fd, key.c_str(), b, n); },
        "fgetxattr", key, shown);
  });
}

Status SetXattr(const std::string& xpath, const std::string& key,
                const std::string& value, int flags, const std::string& shown,
                bool follow) {
  auto set = follow ? ::setxattr : ::lsetxattr;
  return AsOwnerOnRefusal(xpath, follow, -1, S_IWUSR, [&]() -> Status {
    if (set(xpath.c_str(), key.c_str(), value.data(), value.size(), flags) != 0)
      return Error::Errno("lsetxattr " + key, shown);
    return Ok();
  });
}

Status FSetXattr(int fd, const std::string& key, const std::string& value,
                 int flags, const std::string& shown) {
  return AsOwnerOnRefusal("", false, fd, S_IWUSR, [&]() -> Status {
    if (::fsetxattr(fd, key.c_str(), value.data(), value.size(), flags) != 0)
      return Error::Errno("fsetxattr " + key, shown);
    return Ok();
  });
}

Status RemoveXattr(const std::string& xpath, const std::string& key,
                   const std::string& shown, bool follow) {
  auto remove = follow ? ::removexattr : ::lremovexattr;
  return AsOwnerOnRefusal(xpath, follow, -1, S_IWUSR, [&]() -> Status {
    if (remove(xpath.c_str(), key.c_str()) != 0)
      return Error::Errno("lremovexattr " + key, shown);
    return Ok();
  });
}

Status Renameat2(int olddir, const std::string& oldname, int newdir,
                 const std::string& newname, unsigned flags,
                 const std::string& shown) {
  if (::renameat2(olddir, oldname.c_str(), newdir, newname.c_str(), flags) != 0)
    return Error::Errno("renameat2", shown);
  return Ok();
}

Result<UniqueFd> OpenBelow(const std::string& anchor, const std::string& path,
                           int flags, const std::string& what) {
  std::string base = anchor;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  if (path.size() <= base.size() + 1 ||
      path.compare(0, base.size(), base) != 0 || path[base.size()] != '/')
    return Error::Of(EINVAL, what + " (not below " + base + ")", path);
  auto root = OpenDirPath(base, O_PATH);
  if (!root) return root.error();
  auto fd =
      OpenBeneath(root->get(), path.substr(base.size() + 1), flags, 0, path);
  if (!fd) {
    Error e = fd.error();
    if (e.err == ELOOP || e.err == EXDEV)
      e.op += " (" + what + ": a symlink on the way below " + base +
              "; it is never reached through one)";
    return e;
  }
  return fd;
}

Status Fsync(int fd, const std::string& shown) {
  if (::fsync(fd) != 0) return Error::Errno("fsync", shown);
  return Ok();
}

Status SyncDirPath(const std::string& dir) {
  auto fd = OpenDirPath(dir, O_RDONLY);
  if (!fd) return fd.error();
  return Fsync(fd->get(), dir);
}

Result<std::string> ReadAll(int fd, size_t limit, const std::string& shown) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("read", shown);
    }
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > limit)
      return Error::Of(EFBIG, "file too large", shown);
    out.append(buf, static_cast<size_t>(n));
  }
}

Status PwriteAll(int fd, const void* buf, size_t n, off_t off,
                 const std::string& shown) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("pwrite", shown);
    }
    p += w;
    n -= w;
    off += w;
  }
  return Ok();
}

std::string TempName(const std::string& prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(rng() ^ counter.fetch_add(1)));
  return prefix + buf;
}

namespace {

struct RemoveState {
  const ProgressFn& progress;
  uint64_t removed = 0;
  void Count() {
    if (++removed % 1000 == 0) Report(progress, "removing files", removed);
  }
};

}  // namespace

Status RemoveTree(int dirfd, const std::string& name, const std::string& shown,
                  const ProgressFn& progress) {
  RemoveState s{progress};
  if (::unlinkat(dirfd, name.c_str(), 0) == 0) {
    s.Count();
    return Ok();
  }
  if (errno == ENOENT) return Ok();
  if (errno != EISDIR && errno != EPERM)
    return Error::Errno("unlink", shown + "/" + name);
  // Depth first with a bounded number of descriptors (WalkTree): each
  // non-directory is unlinked as it is listed, each directory once empty.
  TreeVisitor visit;
  visit.make_enterable = true;
  visit.entry = [&](int dir, const DirEntry& e,
                    const std::string& dir_shown) -> Result<bool> {
    if (::unlinkat(dir, e.name.c_str(), 0) == 0) {
      s.Count();
      return false;
    }
    if (errno == ENOENT) return false;
    if (errno == EISDIR ||
        (errno == EPERM && (e.type == DT_DIR || e.type == DT_UNKNOWN)))
      return true;
    return Error::Errno("unlink", dir_shown + "/" + e.name);
  };
  visit.leave = [&](int parent, const std::string& n,
                    const std::string& parent_shown) -> Status {
    if (::unlinkat(parent, n.c_str(), AT_REMOVEDIR) != 0)
      return Error::Errno("rmdir", parent_shown + "/" + n);
    s.Count();
    return Ok();
  };
  return WalkTree(dirfd, name, shown, visit);
}

}  // namespace acqfs::sys
