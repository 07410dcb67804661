#include "fs/copy_up.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <mutex>
#include <vector>

#include "common/sys.h"
#include "fs/copy_up_source.h"
#include "fs/layer.h"

namespace acqfs {
namespace {

std::mutex g_hook_mu;
CopyUpHook g_hook;

Status RunHook(const std::string& rel) {
  std::lock_guard<std::mutex> l(g_hook_mu);
  if (g_hook) return g_hook(rel);
  return Ok();
}

Result<UniqueFd> OpenSourceFile(int dirfd, const std::string& name,
                                const std::string& shown) {
  int fd = sys::OpenRelievingPressure([&] {
    int f = ::openat(dirfd, name.c_str(),
                     O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
    if (f < 0 && errno == EPERM)
      f = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    return f;
  });
  if (fd < 0) return Error::Errno("open for copy-up", shown);
  return UniqueFd(fd);
}

// Where a regular file's copy comes from, for its copy-up source
// (fs/copy_up_source.h): a host file (layer 0), whose source is kept when
// the host changed it since the base, or an own layer's file, whose mark the
// copy carries.
struct CopyFrom {
  bool host = false;
  std::string rel;  // the path copied
};

// Keeps the source of a copy of a host file, or carries an own file's mark,
// once the bytes of `in` are in `out`.
Status MarkSource(const Layers& layers, const CopyFrom& from, int in, int out,
                  const std::string& shown) {
  if (!from.host) return CarrySourceKey(layers.format, in, out, shown);
  if (!layers.sources) return Ok();
  auto key = layers.sources->Keep(in, out, from.rel, layers.sync_copy_up);
  if (!key) return key.error();
  if (!*key) return Ok();
  return CopyUpSources::Mark(layers.format, out, **key, shown);
}

Status CopyRegular(const Layers& layers, const CopyFrom& from, int src_dirfd,
                   const std::string& src_name, int dst_dirfd,
                   const std::string& dst_name, bool sync,
                   const std::string& shown) {
  auto in = OpenSourceFile(src_dirfd, src_name, shown);
  if (!in) return in.error();
  int ofd = sys::OpenRelievingPressure([&] {
    return ::openat(dst_dirfd, dst_name.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  });
  if (ofd < 0) return Error::Errno("create copy-up file", shown);
  UniqueFd out(ofd);
  ACQFS_TRY(CopyData(in->get(), out.get(), shown));
  if (sync && ::fsync(out.get()) != 0)
    return Error::Errno("fsync copy-up", shown);
  return MarkSource(layers, from, in->get(), out.get(), shown);
}

// Creates at dst a copy of the source entry without its attributes (for a
// directory: an empty directory).
Status CreateCopy(const Layers& layers, const CopyFrom& from, int src_dirfd,
                  const std::string& src_name, const struct stat& st,
                  int dst_dirfd, const std::string& dst_name,
                  const std::string& shown) {
  switch (st.st_mode & S_IFMT) {
    case S_IFREG:
      return CopyRegular(layers, from, src_dirfd, src_name, dst_dirfd, dst_name,
                         layers.sync_copy_up, shown);
    case S_IFDIR:
      if (::mkdirat(dst_dirfd, dst_name.c_str(), 0700) != 0)
        return Error::Errno("mkdir copy-up", shown);
      return Ok();
    case S_IFLNK: {
      auto target = sys::ReadLinkAt(src_dirfd, src_name, shown);
      if (!target) return target.error();
      if (::symlinkat(target->c_str(), dst_dirfd, dst_name.c_str()) != 0)
        return Error::Errno("symlink copy-up", shown);
      return Ok();
    }
    default:
      if (::mknodat(dst_dirfd, dst_name.c_str(), st.st_mode & S_IFMT,
                    st.st_rdev) != 0)
        return Error::Errno("mknod copy-up", shown);
      return Ok();
  }
}

// Where a copy's attributes go: an entry by name, or an open file that has
// no name yet (a copy-up in an O_TMPFILE inode).
struct Dest {
  int dirfd = -1;
  std::string name;
  int fd = -1;
};

// Copies the xattrs (but the overlay's own) of the object at the xattr
// path `src` (`follow`: a descriptor's /proc entry, see sys::XattrPath).
Status CopyXattrsFrom(const Layers& layers, const std::string& src, bool follow,
                      const Dest& dst, const std::string& shown) {
  std::string dst_path =
      dst.fd >= 0 ? std::string() : sys::XattrPath(dst.dirfd, dst.name);
  auto names = sys::ListXattrs(src, shown, follow);
  if (!names) return names.error();
  for (const auto& n : *names) {
    if (layers.format.IsPrivateXattr(n)) continue;
    auto v = sys::GetXattr(src, n, shown, follow);
    if (!v) {
      if (v.err() == ENODATA) continue;
      return v.error();
    }
    auto s = dst.fd >= 0 ? sys::FSetXattr(dst.fd, n, *v, 0, shown)
                         : sys::SetXattr(dst_path, n, *v, 0, shown);
    if (!s) {
      bool user_ns = n.rfind("user.", 0) == 0;
      // Only user.* is guaranteed to be ours to copy; security/system/trusted
      // attributes the daemon is not allowed to set are left behind.
      if (user_ns ||
          (s.err() != EPERM && s.err() != ENOTSUP && s.err() != EACCES))
        return s.error();
    }
  }
  return Ok();
}

Status CopyXattrs(const Layers& layers, int src_dirfd,
                  const std::string& src_name, const Dest& dst,
                  const std::string& shown) {
  return CopyXattrsFrom(layers, sys::XattrPath(src_dirfd, src_name), false, dst,
                        shown);
}

}  // namespace

void SetCopyUpHookForTesting(CopyUpHook hook) {
  std::lock_guard<std::mutex> l(g_hook_mu);
  g_hook = std::move(hook);
}

Status CopyData(int in, int out, const std::string& shown) {
  if (::ioctl(out, FICLONE, in) == 0) return Ok();
  off_t total = 0;
  for (;;) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 1 << 30, 0);
    if (n > 0) {
      total += n;
      continue;
    }
    if (n == 0) return Ok();
    if (errno == EINTR) continue;
    if (total == 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                       errno == EOPNOTSUPP))
      break;
    return Error::Errno("copy_file_range", shown);
  }
  std::vector<char> buf(1 << 20);
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(in, buf.data(), buf.size(), off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("read for copy-up", shown);
    }
    if (n == 0) return Ok();
    ACQFS_TRY(sys::PwriteAll(out, buf.data(), n, off, shown));
    off += n;
  }
}

namespace {

Status CopyAttrsTo(const Layers& layers, int src_dirfd,
                   const std::string& src_name, const struct stat& src_st,
                   const Dest& dst, const std::string& shown) {
  ACQFS_TRY(CopyXattrs(layers, src_dirfd, src_name, dst, shown));
  const char* dn = dst.name.c_str();
  bool by_fd = dst.fd >= 0;
  if (layers.privileged) {
    int rc = by_fd ? ::fchown(dst.fd, src_st.st_uid, src_st.st_gid)
                   : ::fchownat(dst.dirfd, dn, src_st.st_uid, src_st.st_gid,
                                AT_SYMLINK_NOFOLLOW);
    if (rc != 0) return Error::Errno("chown copy-up", shown);
  }
  if (!S_ISLNK(src_st.st_mode)) {
    mode_t mode = src_st.st_mode & 07777;
    int rc =
        by_fd ? ::fchmod(dst.fd, mode) : ::fchmodat(dst.dirfd, dn, mode, 0);
    if (rc != 0) return Error::Errno("chmod copy-up", shown);
  }
  struct timespec ts[2] = {src_st.st_atim, src_st.st_mtim};
  int rc = by_fd ? ::futimens(dst.fd, ts)
                 : ::utimensat(dst.dirfd, dn, ts, AT_SYMLINK_NOFOLLOW);
  if (rc != 0) return Error::Errno("utimensat copy-up", shown);
  return Ok();
}

// Copy-up of a regular file into a nameless O_TMPFILE inode in acqfs-tmp,
// linked into the upper directory only once it is complete (and synced): a
// crash at any instant leaves nothing behind, not even a temporary name,
// and ext4 syncs a nameless inode faster than a named one (see
// docs/benchmarks.md). Returns false, having done nothing, when the file
// system has no O_TMPFILE; the caller then uses a named temporary.
Result<bool> CopyUpViaTmpfile(const Layers& layers, int src_dirfd,
                              const std::string& rel, const struct stat& st,
                              LowerSource from, uint64_t origin,
                              const std::string& shown) {
  std::string name = sys::Basename(rel);
  int fd = sys::OpenRelievingPressure([&] {
    return ::openat(layers.tmp.get(), ".", O_TMPFILE | O_WRONLY | O_CLOEXEC,
                    0600);
  });
  if (fd < 0) {
    if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) return false;
    return Error::Errno("open O_TMPFILE for copy-up", layers.tmp_path);
  }
  UniqueFd out(fd);
  auto in = OpenSourceFile(src_dirfd, name, shown);
  if (!in) return in.error();
  ACQFS_TRY(CopyData(in->get(), out.get(), shown));
  // Synced before its attributes are set, as the kernel overlayfs does: the
  // attribute changes and the link that publishes the copy are journalled
  // in order after the data, so a copy that survives a crash is complete.
  if (layers.sync_copy_up && ::fsync(out.get()) != 0)
    return Error::Errno("fsync copy-up", shown);
  ACQFS_TRY(MarkSource(layers, CopyFrom{from.layer == 0, rel}, in->get(),
                       out.get(), shown));
  Dest dst;
  dst.fd = out.get();
  ACQFS_TRY(CopyAttrsTo(layers, src_dirfd, name, st, dst, shown));
  ACQFS_TRY(layers.format.SetOriginFd(out.get(), origin, shown));
  ACQFS_TRY(RunHook(rel));
  auto dst_dir = layers.upper.OpenDir(sys::Dirname(rel));
  if (!dst_dir) return dst_dir.error();
  std::string self = "/proc/self/fd/" + std::to_string(out.get());
  if (::linkat(AT_FDCWD, self.c_str(), dst_dir->get(), name.c_str(),
               AT_SYMLINK_FOLLOW) != 0)
    return Error::Errno("link copy-up into place", layers.upper.Shown(rel));
  return true;
}

}  // namespace

Status CopyAttrs(const Layers& layers, int src_dirfd,
                 const std::string& src_name, const struct stat& src_st,
                 int dst_dirfd, const std::string& dst_name,
                 const std::string& shown) {
  Dest dst;
  dst.dirfd = dst_dirfd;
  dst.name = dst_name;
  return CopyAttrsTo(layers, src_dirfd, src_name, src_st, dst, shown);
}

namespace {

// The named copy of the lower object `name` in `src_dirfd` (stat `st`) at
// `dst_dirfd`/`dst_name`, with its attributes and origin marker. On failure
// whatever it made is removed.
Status CopyNamed(const Layers& layers, const CopyFrom& from, int src_dirfd,
                 const std::string& name, uint64_t origin,
                 const struct stat& st, int dst_dirfd,
                 const std::string& dst_name, const std::string& shown) {
  Status s =
      CreateCopy(layers, from, src_dirfd, name, st, dst_dirfd, dst_name, shown);
  if (s) s = CopyAttrs(layers, src_dirfd, name, st, dst_dirfd, dst_name, shown);
  if (s) s = layers.format.SetOrigin(dst_dirfd, dst_name, origin, shown);
  if (!s) (void)sys::RemoveTree(dst_dirfd, dst_name, shown);
  return s;
}

}  // namespace

Status CopyLowerTo(const Layers& layers, const std::string& rel, int dst_dirfd,
                   const std::string& dst_name, LowerSource from) {
  const Layer& src = layers.LowerLayer(from.layer);
  std::string shown = src.Shown(rel);
  auto src_dir = src.OpenDir(sys::Dirname(rel));
  if (!src_dir) return src_dir.error();
  std::string name = sys::Basename(rel);
  auto st = sys::StatAt(src_dir->get(), name, shown);
  if (!st) return st.error();
  return CopyNamed(layers, CopyFrom{from.layer == 0, rel}, src_dir->get(), name,
                   from.origin ? from.origin : st->st_ino, *st, dst_dirfd,
                   dst_name, shown);
}

Status CopyLowerFdTo(const Layers& layers, int src_fd, int dst_dirfd,
                     const std::string& dst_name, const std::string& shown) {
  auto st = sys::Fstat(src_fd, shown);
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode))
    return Error::Of(EINVAL, "copy from a descriptor (not a regular file)",
                     shown);
  // Reopened for reading through the descriptor's /proc entry, which
  // reaches the inode even when no name of it is left.
  std::string proc = "/proc/self/fd/" + std::to_string(src_fd);
  int in_fd = sys::OpenRelievingPressure([&] {
    int f = ::open(proc.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
    if (f < 0 && errno == EPERM) f = ::open(proc.c_str(), O_RDONLY | O_CLOEXEC);
    return f;
  });
  if (in_fd < 0) return Error::Errno("open for a copy", shown);
  UniqueFd in(in_fd);
  int out_fd = sys::OpenRelievingPressure([&] {
    return ::openat(dst_dirfd, dst_name.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  });
  if (out_fd < 0) return Error::Errno("create a copy", shown);
  UniqueFd out(out_fd);
  Status s = CopyData(in.get(), out.get(), shown);
  if (s && layers.sync_copy_up && ::fsync(out.get()) != 0)
    s = Error::Errno("fsync a copy", shown);
  Dest dst;
  dst.fd = out.get();
  if (s) s = CopyXattrsFrom(layers, proc, /*follow=*/true, dst, shown);
  if (s && layers.privileged &&
      ::fchown(out.get(), st->st_uid, st->st_gid) != 0)
    s = Error::Errno("chown a copy", shown);
  if (s && ::fchmod(out.get(), st->st_mode & 07777) != 0)
    s = Error::Errno("chmod a copy", shown);
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (s && ::futimens(out.get(), ts) != 0)
    s = Error::Errno("utimensat a copy", shown);
  if (s) s = layers.format.SetOriginFd(out.get(), st->st_ino, shown);
  if (!s) (void)::unlinkat(dst_dirfd, dst_name.c_str(), 0);
  return s;
}

Status CopyUp(const Layers& layers, const std::string& rel, LowerSource from) {
  std::string dir = sys::Dirname(rel), name = sys::Basename(rel);
  const Layer& src = layers.LowerLayer(from.layer);
  std::string shown = src.Shown(rel);
  auto src_dir = src.OpenDir(dir);
  if (!src_dir) return src_dir.error();
  auto st = sys::StatAt(src_dir->get(), name, shown);
  if (!st) return st.error();
  const uint64_t origin = from.origin ? from.origin : st->st_ino;
  if (S_ISREG(st->st_mode)) {
    auto done =
        CopyUpViaTmpfile(layers, src_dir->get(), rel, *st, from, origin, shown);
    if (!done) return done.error();
    if (*done) return Ok();
  }
  std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
  int tfd = layers.tmp.get();
  auto cleanup = [&] { (void)sys::RemoveTree(tfd, tmp, layers.tmp_path); };
  Status s = CopyNamed(layers, CopyFrom{from.layer == 0, rel}, src_dir->get(),
                       name, origin, *st, tfd, tmp, shown);
  if (s) s = RunHook(rel);
  if (!s) {
    cleanup();
    return s;
  }
  auto dst_dir = layers.upper.OpenDir(dir);
  if (!dst_dir) {
    cleanup();
    return dst_dir.error();
  }
  s = sys::Renameat2(tfd, tmp, dst_dir->get(), name, RENAME_NOREPLACE,
                     layers.upper.Shown(rel));
  if (!s) cleanup();
  return s;
}

namespace {

// One directory of a merged copy whose top is `dst_root`/`top` (see
// BuildMergedCopy): `dst_rel` is where it goes, relative to `dst_root`.
// The directory's own entries are copied with its descriptors open; they
// are closed before its subdirectories are built, so the descriptors in
// use do not grow with the depth of the tree.
Status BuildMergedLevel(const Layers& layers, const DirView& dir, int dst_root,
                        const std::string& dst_rel, uint64_t origin) {
  std::string shown = layers.upper.Shown(dir.path);
  struct Subdir {
    std::string name;
    DirView view;
    uint64_t origin;
  };
  std::vector<Subdir> subdirs;
  {
    auto dst_parent = sys::OpenBeneath(dst_root, sys::Dirname(dst_rel),
                                       O_PATH | O_DIRECTORY, 0, shown);
    if (!dst_parent) return dst_parent.error();
    if (::mkdirat(dst_parent->get(), sys::Basename(dst_rel).c_str(), 0700) != 0)
      return Error::Errno("mkdir materialise", shown);
    auto dst =
        sys::OpenBeneath(dst_root, dst_rel, O_PATH | O_DIRECTORY, 0, shown);
    if (!dst) return dst.error();
    auto entries = ListMerged(layers, dir);
    if (!entries) return entries.error();
    UniqueFd upper_fd;
    if (dir.upper) {
      auto u = layers.upper.OpenDir(dir.path);
      if (!u) return u.error();
      upper_fd = std::move(*u);
    }
    // Each lower layer's directory, opened when an entry comes from it.
    UniqueFd lower_fd[kMaxLowerLayers];
    auto lower_dir = [&](unsigned i) -> Result<int> {
      if (!lower_fd[i]) {
        auto l = layers.LowerLayer(i).OpenDir(dir.path);
        if (!l) return l.error();
        lower_fd[i] = std::move(*l);
      }
      return lower_fd[i].get();
    };
    for (const auto& e : *entries) {
      std::string rel = sys::Join(dir.path, e.name);
      auto c = ResolveChild(layers, dir, e.name);
      if (!c) return c.error();
      if (!c->exists) continue;
      if (c->is_dir()) {
        uint64_t child_origin = c->origin;
        if (!child_origin && c->lower && S_ISDIR(c->lower_st.st_mode))
          child_origin = c->lower_ino;
        subdirs.push_back(Subdir{e.name, c->AsDir(rel), child_origin});
        continue;
      }
      int d = dst->get();
      if (c->upper) {
        if (::linkat(upper_fd.get(), e.name.c_str(), d, e.name.c_str(), 0) == 0)
          continue;
        ACQFS_TRY(CreateCopy(layers, CopyFrom{false, rel}, upper_fd.get(),
                             e.name, c->upper_st, d, e.name,
                             layers.upper.Shown(rel)));
        ACQFS_TRY(CopyAttrs(layers, upper_fd.get(), e.name, c->upper_st, d,
                            e.name, layers.upper.Shown(rel)));
        if (c->origin)
          ACQFS_TRY(layers.format.SetOrigin(d, e.name, c->origin,
                                            layers.upper.Shown(rel)));
      } else {
        const Layer& src = layers.LowerLayer(c->lower_layer);
        auto lfd = lower_dir(c->lower_layer);
        if (!lfd) return lfd.error();
        ACQFS_TRY(CreateCopy(layers, CopyFrom{c->lower_layer == 0, rel}, *lfd,
                             e.name, c->lower_st, d, e.name, src.Shown(rel)));
        ACQFS_TRY(CopyAttrs(layers, *lfd, e.name, c->lower_st, d, e.name,
                            src.Shown(rel)));
        ACQFS_TRY(
            layers.format.SetOrigin(d, e.name, c->lower_ino, src.Shown(rel)));
      }
    }
  }
  for (const Subdir& sub : subdirs)
    ACQFS_TRY(BuildMergedLevel(layers, sub.view, dst_root,
                               dst_rel + "/" + sub.name, sub.origin));
  // The directory's own attributes last (adding entries moved its times),
  // from the upper when it has one.
  const Layer& meta_layer =
      dir.upper ? layers.upper : layers.LowerLayer(TopLowerLayer(dir.lower));
  std::string base = sys::Basename(dir.path);
  auto meta_dir = meta_layer.OpenDir(sys::Dirname(dir.path));
  if (!meta_dir) return meta_dir.error();
  auto meta_st = sys::StatAt(meta_dir->get(), base, shown);
  if (!meta_st) return meta_st.error();
  auto dst_parent = sys::OpenBeneath(dst_root, sys::Dirname(dst_rel),
                                     O_PATH | O_DIRECTORY, 0, shown);
  if (!dst_parent) return dst_parent.error();
  std::string dst_base = sys::Basename(dst_rel);
  ACQFS_TRY(CopyAttrs(layers, meta_dir->get(), base, *meta_st,
                      dst_parent->get(), dst_base, shown));
  if (!origin) return Ok();
  return layers.format.SetOrigin(dst_parent->get(), dst_base, origin, shown);
}

}  // namespace

Status BuildMergedCopy(const Layers& layers, const DirView& dir, int dst_dirfd,
                       const std::string& dst_name, uint64_t origin) {
  return BuildMergedLevel(layers, dir, dst_dirfd, dst_name, origin);
}

}  // namespace acqfs
