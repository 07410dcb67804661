// The Overlay's attribute changes and xattrs (fs/overlay.h).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "common/owner_access.h"
#include "common/sys.h"
#include "fs/overlay.h"
#include "fs/overlay_internal.h"

namespace acqfs {

// ---------------------------------------------------------------- attributes

Result<UniqueFd> Overlay::OpenAttrTarget(Node* node, int fh_fd) {
  (void)fh_fd;
  // Only through the node's own upper copy (its kept data once it has no
  // name): never through anything that might reach the lower.
  ACQFS_TRY(MakeChangeable(node));
  if (node->unlinked) return kept_.Open(node->kept(), O_PATH | O_NOFOLLOW);
  return layers_.upper.Open(PathLocked(node), O_PATH | O_NOFOLLOW);
}

void Overlay::RemovedDirLocked(Node* node, Result<Node::RemovedDir> d) {
  if (!node->unlinked) return;
  if (!d) {
    spdlog::warn("{}: a descriptor of the removed directory will not stat",
                 d.error().Message());
    return;
  }
  node->set_removed_dir(std::move(*d));
}

// As ext4 changes a removed directory's inode: the attributes asked for,
// and the ctime, in memory (nothing of it is left on the disk).
Result<struct stat> Overlay::SetRemovedDirAttr(Node* node,
                                               const SetAttrRequest& req) {
  struct stat* st = &node->mutable_removed_dir()->st;
  if (req.set_size) return Error::Of(EISDIR, "truncate", "(removed)");
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (req.set_mode) st->st_mode = (st->st_mode & S_IFMT) | (req.mode & 07777);
  if (req.set_uid) st->st_uid = req.uid;
  if (req.set_gid) st->st_gid = req.gid;
  if (req.set_atime) st->st_atim = req.atime_now ? now : req.atime;
  if (req.set_mtime) st->st_mtim = req.mtime_now ? now : req.mtime;
  st->st_ctim = now;
  return *st;
}

// An xattr set (`value`) or removed (null) on such a directory, with
// setxattr(2)'s flags and ext4's limit of one block for them all.
Status Overlay::SetRemovedDirXattr(Node* node, const std::string& name,
                                   const std::string* value, int flags) {
  Node::RemovedDir* d = node->mutable_removed_dir();
  const std::string shown = "(removed) " + name;
  auto it = d->xattrs.begin();
  while (it != d->xattrs.end() && it->first != name) ++it;
  const bool found = it != d->xattrs.end();
  if (value == nullptr) {
    if (!found) return Error::Of(ENODATA, "removexattr", shown);
    d->xattrs.erase(it);
  } else {
    if (found && (flags & XATTR_CREATE))
      return Error::Of(EEXIST, "setxattr", shown);
    if (!found && (flags & XATTR_REPLACE))
      return Error::Of(ENODATA, "setxattr", shown);
    size_t total = name.size() + value->size();
    for (const auto& x : d->xattrs)
      if (x.first != name) total += x.first.size() + x.second.size();
    if (total > 4096) return Error::Of(ENOSPC, "setxattr", shown);
    if (found)
      it->second = *value;
    else
      d->xattrs.emplace_back(name, *value);
  }
  ::clock_gettime(CLOCK_REALTIME, &d->st.st_ctim);
  return Ok();
}

Result<struct stat> Overlay::SetAttr(Node* node, const SetAttrRequest& req,
                                     int fh_fd) {
  ExclusiveLock l(tree_mu_);
  if (node->removed_dir()) return SetRemovedDirAttr(node, req);
  std::string shown =
      node->unlinked ? "(unlinked)" : layers_.upper.Shown(PathLocked(node));
  if (!node->unlinked)
    ACQFS_TRY(CheckWritable(PathLocked(node), node->is_dir(), "setattr"));
  ACQFS_TRY(MakeChangeable(node));
  // The node's cached writable descriptor, when there is one, is its upper
  // copy open: everything is changed through it (a truncate works whatever
  // the file's mode now says), with no path to resolve. Else an O_PATH
  // descriptor of the upper copy, changed through its /proc entry.
  FileLease cached = files_.Find(node, true, true);
  UniqueFd target;
  int fd;
  if (cached) {
    fd = cached.get();
    fh_fd = fd;
  } else {
    auto t = OpenAttrTarget(node, fh_fd);
    if (!t) return t.error();
    target = std::move(*t);
    fd = target.get();
  }
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  auto set_mode = [&](mode_t mode) {
    return cached ? ::fchmod(fd, mode) : ::chmod(proc.c_str(), mode);
  };
  if (req.set_mode && set_mode(req.mode & 07777) != 0)
    return Error::Errno("chmod", shown);
  if (req.set_uid || req.set_gid) {
    uid_t u = req.set_uid ? req.uid : static_cast<uid_t>(-1);
    gid_t g = req.set_gid ? req.gid : static_cast<gid_t>(-1);
    if (::fchownat(fd, "", u, g, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0)
      return Error::Errno("chown", shown);
  }
  if (req.set_size) {
    // Through the request's handle when it can write, else a new one.
    auto truncate = [&](int wfd) -> Result<int64_t> {
      auto op = [&]() -> int64_t {
        return ::ftruncate(wfd, req.size) == 0 ? 0 : -errno;
      };
      if (!quota_) return op();
      // A truncate allocates nothing (a longer file has a hole); settled to
      // what it frees.
      return quota_->Charged(&node->charged, wfd, Quota::Charge::Settled(), op,
                             shown);
    };
    int64_t rc = -EBADF;
    if (fh_fd >= 0) {
      auto r = truncate(fh_fd);
      if (!r) return r.error();
      rc = *r;
    }
    if (rc != 0) {
      int f = ::open(proc.c_str(), O_WRONLY | O_CLOEXEC);
      Result<UniqueFd> opened =
          f >= 0 ? Result<UniqueFd>(UniqueFd(f))
                 : Result<UniqueFd>(Error::Errno("open for truncate", shown));
      // A file the daemon's user owns with a mode that denies it writing
      // (the kernel let the caller truncate: common/owner_access.h).
      if (!opened && opened.err() == EACCES) {
        owner_access::Retry(fd, S_IWUSR, [&] {
          int w = ::open(proc.c_str(), O_WRONLY | O_CLOEXEC);
          if (w >= 0) opened = UniqueFd(w);
        });
      }
      if (!opened) return opened.error();
      UniqueFd owned = std::move(*opened);
      auto r = truncate(owned.get());
      if (!r) return r.error();
      if (*r != 0) return Error::Of(static_cast<int>(-*r), "truncate", shown);
    }
  }
  if (req.set_atime || req.set_mtime) {
    struct timespec ts[2];
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_nsec = UTIME_OMIT;
    if (req.set_atime) {
      ts[0] = req.atime;
      if (req.atime_now) ts[0].tv_nsec = UTIME_NOW;
    }
    if (req.set_mtime) {
      ts[1] = req.mtime;
      if (req.mtime_now) ts[1].tv_nsec = UTIME_NOW;
    }
    if (::utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0)
      return Error::Errno("utimensat", shown);
  }
  auto st = sys::Fstat(fd, shown);
  if (!st) return st.error();
  if (mode_t drop = st->st_mode & req.clear_setid; drop != 0) {
    if (set_mode(st->st_mode & 07777 & ~drop) != 0)
      return Error::Errno("chmod (clear set-id bits)", shown);
    st = sys::Fstat(fd, shown);
    if (!st) return st.error();
  }
  FixStat(node, &*st);
  return st;
}

// ---------------------------------------------------------------- xattrs

// Where a node's xattrs are reached: its parent directory in `layer` and its
// name there ("" and the root directory itself for the root), through
// /proc/self/fd so that no symlink is followed. The descriptor must stay open
// while the path is used.
struct Overlay::XattrTarget {
  UniqueFd dir;
  std::string path;     // for l*xattr
  bool follow = false;  // for *xattr: `path` is a descriptor's magic link
  std::string shown;    // for messages
};

Result<Overlay::XattrTarget> Overlay::XattrTargetOf(Node* node,
                                                    const Layer& layer,
                                                    bool borrow) {
  XattrTarget t;
  if (node->unlinked) {
    // The kept data's own descriptor, through its /proc entry (followed).
    auto fd = kept_.Open(node->kept(), O_PATH | O_NOFOLLOW);
    if (!fd) return fd.error();
    t.path = "/proc/self/fd/" + std::to_string(fd->get());
    t.follow = true;
    t.dir = std::move(*fd);
    t.shown = "(unlinked)";
    return t;
  }
  std::string path = PathLocked(node);
  const bool root = node == table_.root();
  const std::string dir_rel = root ? "" : sys::Dirname(path);
  int dirfd;
  if (borrow) {
    auto fd = layer.DirFd(dir_rel, Gen(), &t.dir);
    if (!fd) return fd.error();
    dirfd = *fd;
  } else {
    auto fd = layer.OpenDir(dir_rel);
    if (!fd) return fd.error();
    t.dir = std::move(*fd);
    dirfd = t.dir.get();
  }
  t.path = sys::XattrPath(dirfd, root ? "" : sys::Basename(path));
  t.shown = layer.Shown(path);
  return t;
}

// The node's cached readable descriptor of its upper copy, if any: a
// regular file's xattrs are read through it (fgetxattr), with no path to
// resolve. The kernel asks for security.capability before every chown and
// the first write of each file.
FileLease Overlay::UpperFileOf(Node* node) {
  if (!S_ISREG(node->type) || node->unlinked ||
      &LayerOf(node) != &layers_.upper)
    return nullptr;
  return files_.Find(node, false, true);
}

Result<std::string> Overlay::GetXattr(Node* node, const std::string& name) {
  if (layers_.format.IsPrivateXattr(name))
    return Error::Of(ENODATA, "getxattr", name);
  SharedLock l(tree_mu_);
  if (const Node::RemovedDir* d = node->removed_dir()) {
    for (const auto& [n, v] : d->xattrs)
      if (n == name) return v;
    return Error::Of(ENODATA, "getxattr", "(removed) " + name);
  }
  if (FileLease f = UpperFileOf(node))
    return sys::FGetXattr(f.get(), name, layers_.upper.Shown(PathLocked(node)));
  auto t = XattrTargetOf(node, LayerOf(node), /*borrow=*/true);
  if (!t) return t.error();
  return sys::GetXattr(t->path, name, t->shown, t->follow);
}

Result<std::vector<std::string>> Overlay::ListXattr(Node* node) {
  SharedLock l(tree_mu_);
  if (const Node::RemovedDir* d = node->removed_dir()) {
    std::vector<std::string> out;
    for (const auto& x : d->xattrs) out.push_back(x.first);
    return out;
  }
  auto t = XattrTargetOf(node, LayerOf(node), /*borrow=*/true);
  if (!t) return t.error();
  auto names = sys::ListXattrs(t->path, t->shown, t->follow);
  if (!names) return names.error();
  std::vector<std::string> out;
  for (auto& n : *names)
    if (!layers_.format.IsPrivateXattr(n)) out.push_back(std::move(n));
  return out;
}

Status Overlay::SetXattr(Node* node, const std::string& name,
                         const std::string& value, int flags) {
  if (layers_.format.IsPrivateXattr(name))
    return Error::Of(EPERM, "setxattr", name);
  ExclusiveLock l(tree_mu_);
  if (node->removed_dir()) return SetRemovedDirXattr(node, name, &value, flags);
  if (!node->unlinked)
    ACQFS_TRY(CheckWritable(PathLocked(node), node->is_dir(), "setxattr"));
  ACQFS_TRY(MakeChangeable(node));
  auto t = XattrTargetOf(node, layers_.upper);
  if (!t) return t.error();
  if (!quota_)
    return sys::SetXattr(t->path, name, value, flags, t->shown, t->follow);
  // Admitted while the quota is not passed; settled to the block the value
  // may have taken (ext4 keeps small ones in the inode).
  Status done = Ok();
  return XattrCharged(
      node, *t, Quota::Charge::Admitted(),
      [&]() -> int64_t {
        done = sys::SetXattr(t->path, name, value, flags, t->shown, t->follow);
        return done ? 0 : -done.err();
      },
      &done);
}

Status Overlay::XattrCharged(Node* node, const XattrTarget& t,
                             Quota::Charge charge,
                             const std::function<int64_t()>& op,
                             const Status* done) {
  auto obj = node->unlinked
                 ? kept_.Open(node->kept(), O_PATH | O_NOFOLLOW)
                 : layers_.upper.Open(PathLocked(node), O_PATH | O_NOFOLLOW);
  if (!obj) return obj.error();
  uint64_t* record = S_ISREG(node->type) ? &node->charged : nullptr;
  auto r = quota_->Charged(record, obj->get(), charge, op, t.shown);
  if (!r) return r.error();
  return *done;
}

Status Overlay::RemoveXattr(Node* node, const std::string& name) {
  if (layers_.format.IsPrivateXattr(name))
    return Error::Of(ENODATA, "removexattr", name);
  ExclusiveLock l(tree_mu_);
  if (node->removed_dir()) return SetRemovedDirXattr(node, name, nullptr, 0);
  if (!node->unlinked)
    ACQFS_TRY(CheckWritable(PathLocked(node), node->is_dir(), "removexattr"));
  ACQFS_TRY(MakeChangeable(node));
  auto t = XattrTargetOf(node, layers_.upper);
  if (!t) return t.error();
  if (!quota_) return sys::RemoveXattr(t->path, name, t->shown, t->follow);
  Status done = Ok();
  return XattrCharged(
      node, *t, Quota::Charge::Settled(),
      [&]() -> int64_t {
        done = sys::RemoveXattr(t->path, name, t->shown, t->follow);
        return done ? 0 : -done.err();
      },
      &done);
}

// ------------------------------------------------- removed directories

Result<Node::RemovedDir> Overlay::ReadRemovedDir(Node* node) {
  Node::RemovedDir d;
  auto st = StatLocked(node);
  if (!st) return st.error();
  d.st = *st;
  d.st.st_nlink = 0;
  // The parent's descriptor from the thread's cache, as GetXattr's: no
  // open and close more per rmdir.
  auto t = XattrTargetOf(node, LayerOf(node), /*borrow=*/true);
  if (!t) return t.error();
  auto names = sys::ListXattrs(t->path, t->shown, t->follow);
  if (!names) return names.error();
  for (const std::string& n : *names) {
    if (layers_.format.IsPrivateXattr(n)) continue;
    auto v = sys::GetXattr(t->path, n, t->shown, t->follow);
    if (!v && v.err() == ENODATA) continue;  // went meanwhile
    if (!v) return v.error();
    d.xattrs.emplace_back(n, std::move(*v));
  }
  return d;
}

}  // namespace acqfs
