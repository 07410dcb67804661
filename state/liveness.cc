#include "state/liveness.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "common/dir_walk.h"
#include "common/handle.h"
#include "common/sys.h"
#include "state/paths.h"
#include "state/process.h"

namespace acqfs::cli {
namespace {

// A directory of a live upper layer may go, or turn into something else,
// between reading its parent and opening it.
bool Vanished(int err) {
  return err == ENOENT || err == ENOTDIR || err == ELOOP;
}

// The one of `mounts` the sandbox's daemon recorded as its own: the same
// device, and the same mount id when the record has one.
std::optional<MountEntry> OwnMount(const std::vector<MountEntry>& mounts,
                                   const std::optional<DaemonRecord>& record) {
  if (!record || !record->mount_dev) return std::nullopt;
  for (const auto& m : mounts) {
    if (m.dev != *record->mount_dev) continue;
    if (record->mount_id && m.id != *record->mount_id) continue;
    return m;
  }
  return std::nullopt;
}

std::string DevText(dev_t dev) {
  return std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
}

}  // namespace

const char* MountStateName(MountState state) {
  switch (state) {
    case MountState::kMounted:
      return "mounted";
    case MountState::kStale:
      return "stale";
    case MountState::kNotMounted:
      break;
  }
  return "not mounted";
}

const char* MountStateJsonName(MountState state) {
  return state == MountState::kNotMounted ? "not-mounted"
                                          : MountStateName(state);
}

std::vector<MountEntry> MountsAt(const std::string& mountpoint) {
  std::vector<MountEntry> found;
  auto table = ReadMountInfo("/proc/self/mountinfo");
  if (!table) return found;
  for (auto& e : *table)
    if (e.mountpoint == mountpoint) found.push_back(std::move(e));
  return found;
}

std::vector<MountEntry> AcqfsMountsAt(const std::string& mountpoint) {
  std::vector<MountEntry> found;
  for (auto& m : MountsAt(mountpoint))
    if (m.fstype == "fuse.acqfs") found.push_back(std::move(m));
  return found;
}

Result<ReachedMount> MountReachedAt(const std::string& path) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(),
              AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC,
              STATX_MNT_ID, &sx) != 0)
    return Error::Errno("statx", path);
  if (!(sx.stx_mask & STATX_MNT_ID))
    return Error::Of(ENOTSUP, "statx (the kernel gives no mount id)", path);
  ReachedMount r;
  r.id = static_cast<int>(sx.stx_mnt_id);
  r.dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  return r;
}

Status CheckReaches(const std::string& path, const MountEntry& own) {
  const std::string mine = "the sandbox's mount (fuse.acqfs, device " +
                           DevText(own.dev) + ", mount id " +
                           std::to_string(own.id) + ")";
  auto reached = MountReachedAt(path);
  if (!reached && (reached.err() == ENOENT || reached.err() == ENOTDIR ||
                   reached.err() == ELOOP))
    return Error::Of(EBUSY,
                     mine +
                         " is hidden: its mountpoint no longer leads to it (" +
                         std::string(std::strerror(reached.err())) +
                         "), as when another mount covers a directory above "
                         "it; acqfs unmounts only its own mount",
                     path);
  if (!reached) return reached.error();
  if (reached->id == own.id && reached->dev == own.dev) return Ok();
  for (const auto& m : MountsAt(path)) {
    if (m.id != reached->id) continue;
    return Error::Of(EBUSY,
                     mine + " is covered by a " + m.fstype + " mount (device " +
                         DevText(m.dev) + ", mount id " + std::to_string(m.id) +
                         ") on top of it; acqfs unmounts only its own mount: "
                         "unmount that one first",
                     path);
  }
  return Error::Of(EBUSY,
                   mine +
                       " is hidden: the path leads to another mount "
                       "(device " +
                       DevText(reached->dev) + ", mount id " +
                       std::to_string(reached->id) +
                       "); acqfs unmounts only its own mount",
                   path);
}

Status LockSandbox(int fd, const std::string& path) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return Ok();
  if (errno == EAGAIN || errno == EACCES)
    return Error::Of(EWOULDBLOCK, "lock", path);
  return Error::Errno("lock", path);
}

Result<bool> LockHeld(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return false;
    return Error::Errno("open", path);
  }
  // A read lock would conflict with any write lock: the kernel describes
  // the one that is held, or answers F_UNLCK.
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd.get(), F_OFD_GETLK, &fl) != 0)
    return Error::Errno("test lock", path);
  return fl.l_type != F_UNLCK;
}

std::vector<pid_t> LockHolders(const std::string& path) {
  std::vector<pid_t> out;
  struct stat want;
  if (::stat(path.c_str(), &want) != 0) return out;
  auto proc = sys::OpenDirPath("/proc", O_RDONLY);
  if (!proc) return out;
  auto pids = sys::ReadDir(proc->get(), "/proc");
  if (!pids) return out;
  for (const auto& p : *pids) {
    char* end = nullptr;
    const long pid = std::strtol(p.name.c_str(), &end, 10);
    if (end == p.name.c_str() || *end != '\0' || pid <= 0) continue;
    const std::string fd_dir = "/proc/" + p.name + "/fd";
    auto fds = sys::OpenDirPath(fd_dir, O_RDONLY);
    if (!fds) continue;
    auto entries = sys::ReadDir(fds->get(), fd_dir);
    if (!entries) continue;
    for (const auto& e : *entries) {
      struct stat st;
      if (::fstatat(fds->get(), e.name.c_str(), &st, 0) != 0 ||
          st.st_dev != want.st_dev || st.st_ino != want.st_ino)
        continue;
      std::ifstream info("/proc/" + p.name + "/fdinfo/" + e.name);
      std::string line;
      bool locked = false;
      while (!locked && std::getline(info, line))
        locked = line.rfind("lock:", 0) == 0;
      if (locked) {
        out.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string FormatDaemonRecord(const DaemonRecord& record) {
  std::string s = std::to_string(record.pid) + "\n";
  if (record.mount_dev) {
    s += DevText(*record.mount_dev) + "\n";
    if (record.mount_id) s += std::to_string(*record.mount_id) + "\n";
  }
  return s;
}

std::optional<DaemonRecord> ReadDaemonRecord(const std::string& pid_path) {
  std::ifstream in(pid_path);
  DaemonRecord r;
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return std::nullopt;
  r.pid = static_cast<pid_t>(pid);
  std::string dev_text;
  dev_t dev;
  if (in >> dev_text && ParseMajorMinor(dev_text, 10, &dev)) {
    r.mount_dev = dev;
    long id = 0;
    if (in >> id && id > 0) r.mount_id = static_cast<int>(id);
  }
  return r;
}

namespace {

// Is the daemon `pid` on its way out: its leader a zombie while its last
// threads finish (a daemon killed holds its lock until the last one has
// closed its descriptors, which can take tens of milliseconds)? A pid this
// namespace cannot see is not taken for one.
bool Exiting(pid_t pid) {
  auto st = ReadProcStat(pid);
  return st && st->comm == "acqfs" && (st->state == 'Z' || st->state == 'X');
}

}  // namespace

Result<SandboxLiveness> ProbeSandbox(const SandboxPaths& paths,
                                     const SandboxMeta& meta) {
  auto held = LockHeld(paths.lock);
  if (!held) return held.error();
  SandboxLiveness l;
  auto record = ReadDaemonRecord(paths.pid);
  // A daemon that is exiting still holds the lock for a moment: waited
  // for (at most 2 s), so that a crashed sandbox reads as stale at once.
  for (int i = 0; *held && record && Exiting(record->pid) && i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    held = LockHeld(paths.lock);
    if (!held) return held.error();
  }
  l.daemon_alive = *held;
  std::vector<MountEntry> mounts;
  if (!meta.mountpoint.empty()) mounts = AcqfsMountsAt(meta.mountpoint);
  l.mount = OwnMount(mounts, record);
  l.own_mount = l.mount.has_value();
  if (l.own_mount)
    l.state = l.daemon_alive ? MountState::kMounted : MountState::kStale;
  return l;
}

std::string CanonicalPath(const std::string& path) {
  auto real = RealPath(path);
  if (real) return *real;
  std::string abs = Absolute(path);
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  auto slash = abs.rfind('/');
  if (slash == std::string::npos || abs == "/") return abs;
  std::string parent = slash == 0 ? "/" : abs.substr(0, slash);
  std::string base = abs.substr(slash + 1);
  std::string canon_parent = CanonicalPath(parent);
  if (base == "." || base.empty()) return canon_parent;
  if (base == "..") {
    auto s = canon_parent.rfind('/');
    return s == 0 || s == std::string::npos ? "/" : canon_parent.substr(0, s);
  }
  return canon_parent == "/" ? "/" + base : canon_parent + "/" + base;
}

std::string MountpointPath(const std::string& path) {
  std::string p = Absolute(path);
  int links = 0;
  for (;;) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    const auto slash = p.rfind('/');
    if (p == "/" || slash == std::string::npos) return CanonicalPath(p);
    const std::string parent_path = slash == 0 ? "/" : p.substr(0, slash);
    const std::string base = p.substr(slash + 1);
    if (base == ".") {
      p = parent_path;
      continue;
    }
    if (base == "..") {
      std::string up = MountpointPath(parent_path);
      const auto s = up.rfind('/');
      return s == 0 || s == std::string::npos ? "/" : up.substr(0, s);
    }
    const std::string parent = CanonicalPath(parent_path);
    const std::string joined = parent == "/" ? "/" + base : parent + "/" + base;
    struct statx sx {};
    if (::statx(AT_FDCWD, joined.c_str(),
                AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC,
                STATX_TYPE, &sx) != 0 ||
        !S_ISLNK(sx.stx_mode))
      return joined;  // also what cannot be looked at: taken as it is
    if (++links > 40) return joined;  // a loop of symlinks, as Linux counts
    char buf[4096];
    ssize_t n = ::readlink(joined.c_str(), buf, sizeof buf);
    if (n <= 0 || static_cast<size_t>(n) >= sizeof buf) return joined;
    std::string target(buf, static_cast<size_t>(n));
    p = target[0] == '/' ? target : parent + "/" + target;
  }
}

Result<uint64_t> DiskUsage(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Error::Errno("open directory", dir);
  UniqueFd root(fd);
  auto top = sys::Fstat(root.get(), dir);
  if (!top) return top.error();
  uint64_t total = static_cast<uint64_t>(top->st_blocks) * 512;
  std::set<std::pair<dev_t, ino_t>> linked;  // inodes with nlink > 1 seen
  // Depth first on a DirStack (common/dir_walk.h): at most 8 directories
  // are open however deep the upper is, and each is opened relative to its
  // parent (a path from the root would cost O(depth) per directory). The
  // subdirectories still to visit are kept by name, one list per level.
  DirStack stack(root.get(), dir, 8, DirStack::kPathOnly);
  std::vector<std::vector<std::string>> pending;
  auto list = [&]() -> Status {
    std::vector<std::string> subdirs;
    auto entries = sys::ReadDir(stack.top(), stack.Shown());
    if (!entries && !Vanished(entries.err())) return entries.error();
    if (entries) {
      for (const auto& e : *entries) {
        struct stat st;
        if (::fstatat(stack.top(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) !=
            0) {
          if (errno == ENOENT) continue;
          return Error::Errno("fstatat", stack.ShownChild(e.name));
        }
        if (st.st_dev != top->st_dev) continue;  // another filesystem
        if (!S_ISDIR(st.st_mode) && st.st_nlink > 1 &&
            !linked.insert({st.st_dev, st.st_ino}).second)
          continue;  // a hard link counted already
        total += static_cast<uint64_t>(st.st_blocks) * 512;
        if (S_ISDIR(st.st_mode)) subdirs.push_back(e.name);
      }
    }
    pending.push_back(std::move(subdirs));
    return Ok();
  };
  ACQFS_TRY(list());
  while (!pending.empty()) {
    std::vector<std::string>& todo = pending.back();
    if (todo.empty()) {
      pending.pop_back();
      if (!pending.empty()) ACQFS_TRY(stack.Pop());
      continue;
    }
    std::string name = std::move(todo.back());
    todo.pop_back();
    // A directory of a live upper layer may go meanwhile.
    Status in = stack.Push(name);
    if (!in && Vanished(in.err())) continue;
    if (!in) return in.error();
    ACQFS_TRY(list());
  }
  return total;
}

}  // namespace acqfs::cli
