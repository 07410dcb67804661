// The Overlay's new entries (fs/overlay.h): mkdir, mknod, symlink, link,
// create, and publishing an entry into the upper layer.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sys.h"
#include "fs/boundary_note.h"
#include "fs/layer_format.h"
#include "fs/overlay.h"
#include "fs/overlay_internal.h"

namespace acqfs {

// ---------------------------------------------------------------- creation

namespace {

// A new entry's group: a set-group-id parent's, else the caller's.
gid_t NewEntryGid(const struct stat& parent, const Creds& creds) {
  return (parent.st_mode & S_ISGID) ? parent.st_gid : creds.gid;
}

}  // namespace

Status Overlay::ChownNew(int dirfd, const std::string& name, int pfd,
                         const Creds& creds, const std::string& shown) {
  if (!layers_.privileged) return Ok();
  auto pst = sys::Fstat(pfd, shown);
  if (!pst) return pst.error();
  if (::fchownat(dirfd, name.c_str(), creds.uid, NewEntryGid(*pst, creds),
                 AT_SYMLINK_NOFOLLOW) != 0)
    return Error::Errno("chown", shown);
  return Ok();
}

// The kernel passes the mode a process asked for, already masked by that
// process's umask: the new entry must get exactly that, so neither the
// daemon's own umask (applied by mkdirat/openat/mknodat) nor the chown of a
// new entry (which clears set-id bits) may take bits away. One stat and a
// chmod, only when a bit is at stake. A directory keeps the set-group-id
// bit it inherits from a set-group-id parent.
Status Overlay::FixNewMode(int dirfd, const std::string& name, mode_t mode,
                           const std::string& shown) {
  mode &= 07777;
  if (!(mode & daemon_umask_) && !(mode & (S_ISUID | S_ISGID))) return Ok();
  auto st = sys::StatAt(dirfd, name, shown);
  if (!st) return st.error();
  mode_t want = mode | (S_ISDIR(st->st_mode) ? st->st_mode & S_ISGID : 0);
  if ((st->st_mode & 07777) == want) return Ok();
  if (::fchmodat(dirfd, name.c_str(), want, 0) != 0)
    return Error::Errno("chmod", shown);
  return Ok();
}

Status Overlay::Publish(Node* parent, const std::string& name, bool is_dir,
                        const Creds* creds, mode_t mode, const Maker& make,
                        uint64_t* made) {
  uint64_t unused = 0;
  if (!made) made = &unused;
  std::string rel = sys::Join(PathLocked(parent), name);
  std::string shown = layers_.upper.Shown(rel);
  // A directory that lost its name (DropStaleNameLocked) has no path left
  // to create in: PathLocked would give one from the root.
  if (parent->unlinked) return Error::Of(ENOENT, "create", shown);
  auto c = ResolveChild(layers_, ViewOf(parent), name);
  if (!c) return c.error();
  if (c->exists) return Error::Of(EEXIST, "create", shown);
  {
    // Nothing is at the name, so a node still held for it is stale (its
    // object was removed outside the daemon, and the kernel has not
    // forgotten it yet): the new entry must get a node of its own, not
    // that one, whose layers no longer exist (MKDIR answered ENOENT).
    TableLock t(table_mu_);
    if (Node* old = parent->Child(name))
      table_.DropStaleNameLocked(old, parent, name);
  }
  ACQFS_TRY(CheckWritable(rel, is_dir, "create"));
  ACQFS_TRY(EnsureUpper(parent));
  auto pfd = UpperDir(parent);
  if (!pfd) return pfd.error();
  // A new entry is admitted while the quota is not passed, and settled to
  // what it took: its own blocks and what the directory grew.
  Quota::Change ch(quota_.get());
  ACQFS_TRY(ch.Reserve(0, shown));
  ACQFS_TRY(ch.Watch(pfd->get(), shown));
  if (!c->whiteout) {
    ACQFS_TRY(make(pfd->get(), name));
    Status s = [&]() -> Status {
      if (creds)
        ACQFS_TRY(ChownNew(pfd->get(), name, pfd->get(), *creds, shown));
      if (mode) ACQFS_TRY(FixNewMode(pfd->get(), name, mode, shown));
      // Over a hidden lower directory the new one is opaque, so that the
      // kernel overlayfs, mounting these layers, does not merge the two.
      bool lower_is_dir = false;
      if (is_dir && layers_.policy && layers_.policy->hides_anything()) {
        auto has = LowerHas(parent, name, &lower_is_dir);
        if (!has) return has.error();
        if (*has && lower_is_dir)
          ACQFS_TRY(layers_.format.SetOpaque(pfd->get(), name, shown));
      }
      return Ok();
    }();
    *made = ch.AddNew(pfd->get(), name, shown);  // even if a step failed
    return s;
  }
  // Replace the whiteout atomically with an entry built in the work area.
  int tfd = layers_.tmp.get();
  ACQFS_TRY(ch.Watch(tfd, layers_.tmp_path));
  uint64_t whiteout = 0;
  if (ch.active()) {
    auto w = Quota::SoleBytes(pfd->get(), name, shown);
    if (!w) return w.error();
    whiteout = *w;
  }
  std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
  Status s = make(tfd, tmp);
  if (s && creds) s = ChownNew(tfd, tmp, pfd->get(), *creds, shown);
  if (s && mode) s = FixNewMode(tfd, tmp, mode, shown);
  if (s && is_dir) s = layers_.format.SetOpaque(tfd, tmp, shown);
  if (s)
    s = sys::Renameat2(tfd, tmp, pfd->get(), name, is_dir ? RENAME_EXCHANGE : 0,
                       shown);
  if (s) {
    ch.Sub(whiteout);
    *made = ch.AddNew(pfd->get(), name, shown);
  }
  if (!s || is_dir) (void)sys::RemoveTree(tfd, tmp, layers_.tmp_path);
  return s;
}

Result<Node*> Overlay::Mkdir(Node* parent, const std::string& name, mode_t mode,
                             Creds creds) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_);
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  ACQFS_TRY(Publish(
      parent, name, true, &creds, mode, [&](int d, const std::string& n) {
        return MakeCall(::mkdirat(d, n.c_str(), mode & 07777), "mkdir", shown);
      }));
  return LookupLocked(parent, name, true);
}

Result<Node*> Overlay::Mknod(Node* parent, const std::string& name, mode_t mode,
                             dev_t rdev, Creds creds) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_);
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  if (LayerFormat::IsWhiteout(mode, rdev)) {  // would read back as one
    NoteBoundary(kRefusedSpecial, sys::Join(PathLocked(parent), name));
    return Error::Of(EPERM, "mknod 0/0 character device", shown);
  }
  ACQFS_TRY(Publish(
      parent, name, false, &creds, mode, [&](int d, const std::string& n) {
        return MakeCall(::mknodat(d, n.c_str(), mode, rdev), "mknod", shown);
      }));
  return LookupLocked(parent, name, true);
}

Result<Node*> Overlay::Symlink(Node* parent, const std::string& name,
                               const std::string& target, Creds creds) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_);
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  ACQFS_TRY(
      Publish(parent, name, false, &creds, 0, [&](int d, const std::string& n) {
        return MakeCall(::symlinkat(target.c_str(), d, n.c_str()), "symlink",
                        shown);
      }));
  return LookupLocked(parent, name, true);
}

Result<std::pair<Node*, FileLease>> Overlay::Create(Node* parent,
                                                    const std::string& name,
                                                    mode_t mode, int flags,
                                                    Creds creds) {
  (void)flags;  // O_CREAT/O_EXCL are implied; the kernel checked the rest
  Reaper reap(&table_);
  Node* node = nullptr;
  OpenFile file;
  {
    ExclusiveLock l(tree_mu_);
    std::string shown =
        layers_.upper.Shown(sys::Join(PathLocked(parent), name));
    // Read-write whatever the caller asked for, so that the file cache can
    // serve every later read and write with this descriptor (creating a
    // file grants the access whatever its mode).
    const int oflags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    uint64_t made = 0;
    ACQFS_TRY(Publish(
        parent, name, false, &creds, mode,
        [&](int d, const std::string& n) -> Status {
          int f = ::openat(d, n.c_str(), oflags, mode & 07777);
          if (f < 0) return Error::Errno("create", shown);
          file.fd.reset(f);
          return Ok();
        },
        &made));
    auto found = LookupLocked(parent, name, true);
    if (!found) return found.error();
    node = *found;
    AddOpen(node);
    if (quota_) quota_->Seen(&node->charged, made);
  }
  file.readable = file.writable = true;
  return std::make_pair(node, files_.Put(node, std::move(file)));
}

Result<std::pair<Node*, FileLease>> Overlay::CreateTmpfile(Node* parent,
                                                           mode_t mode,
                                                           int flags,
                                                           Creds creds) {
  Reaper reap(&table_);
  Node* node = nullptr;
  OpenFile file;
  {
    ExclusiveLock l(tree_mu_);
    const std::string shown =
        layers_.upper.Shown(sys::Join(PathLocked(parent), "(open O_TMPFILE)"));
    if (!parent->is_dir()) return Error::Of(ENOTDIR, "open O_TMPFILE", shown);
    if (parent->unlinked) return Error::Of(ENOENT, "open O_TMPFILE", shown);
    // Admitted while the quota is not passed, as a new file is (Publish).
    const int tfd = layers_.tmp.get();
    Quota::Change ch(quota_.get());
    ACQFS_TRY(ch.Reserve(0, shown));
    ACQFS_TRY(ch.Watch(tfd, layers_.tmp_path));
    const std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
    int f = ::openat(tfd, tmp.c_str(),
                     O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     mode & 07777);
    if (f < 0) return Error::Errno("open O_TMPFILE", shown);
    file.fd.reset(f);
    auto finish = [&]() -> Result<struct stat> {
      if (layers_.privileged) {
        auto pst = StatLocked(parent);  // for the set-group-id rule
        if (!pst) return pst.error();
        if (::fchown(f, creds.uid, NewEntryGid(*pst, creds)) != 0)
          return Error::Errno("chown", shown);
      }
      ACQFS_TRY(FixNewMode(tfd, tmp, mode, shown));
      return sys::Fstat(f, shown);
    };
    auto st = finish();
    if (!st) {
      (void)::unlinkat(tfd, tmp.c_str(), 0);
      return st.error();
    }
    const uint64_t made = ch.AddNew(tfd, tmp, shown);
    auto n = std::make_unique<Node>(TagUpper(st->st_ino), S_IFREG);
    n->upper = true;
    n->unlinked = true;
    n->linkable = !(flags & O_EXCL);
    n->nlookup = 1;
    n->opens = 1;
    n->set_kept(kept_.AdoptTmpName(tmp));
    node = n.get();
    TableLock t(table_mu_);
    table_.AddNodeLocked(std::move(n));
    if (quota_) quota_->Seen(&node->charged, made);
  }
  file.readable = file.writable = true;
  return std::make_pair(node, files_.Put(node, std::move(file)));
}

// A link of an O_TMPFILE file (Node::linkable) gives it its first name: its
// acqfs-tmp entry is linked there, and then dropped (its kept data goes).
Result<Node*> Overlay::LinkTmpfile(Node* node, Node* parent,
                                   const std::string& name,
                                   const std::string& shown) {
  const std::string tmp = node->kept().tmp_name();
  if (!node->linkable || tmp.empty()) return Error::Of(ENOENT, "link", shown);
  ACQFS_TRY(
      CheckWritable(sys::Join(PathLocked(parent), name), false, "link to"));
  ACQFS_TRY(Publish(
      parent, name, false, nullptr, 0, [&](int d, const std::string& n) {
        return MakeCall(
            ::linkat(layers_.tmp.get(), tmp.c_str(), d, n.c_str(), 0), "link",
            shown);
      }));
  TableLock t(table_mu_);
  node->unlinked = false;
  node->linkable = false;
  table_.AttachLocked(node, parent, name);
  table_.AddLookupLocked(node);
  kept_.Release(node->take_kept());
  return node;
}

Result<Node*> Overlay::Link(Node* node, Node* parent, const std::string& name) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_);
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  if (node->is_dir()) return Error::Of(EPERM, "link", shown);
  if (node->unlinked) return LinkTmpfile(node, parent, name, shown);
  ACQFS_TRY(CheckWritable(PathLocked(node), false, "link from"));
  ACQFS_TRY(
      CheckWritable(sys::Join(PathLocked(parent), name), false, "link to"));
  ACQFS_TRY(EnsureUpper(node));
  auto src_dir = UpperDir(node->parent);
  if (!src_dir) return src_dir.error();
  std::string src_name(node->name());
  ACQFS_TRY(Publish(
      parent, name, false, nullptr, 0, [&](int d, const std::string& n) {
        return MakeCall(
            ::linkat(src_dir->get(), src_name.c_str(), d, n.c_str(), 0), "link",
            shown);
      }));
  auto st = sys::StatAt(src_dir->get(), src_name, shown);
  if (!st) return st.error();
  TableLock t(table_mu_);
  table_.AttachLocked(node, parent, name);
  table_.SetUpperLinkLocked(node, st->st_ino);
  table_.AddLookupLocked(node);
  return node;
}

}  // namespace acqfs
