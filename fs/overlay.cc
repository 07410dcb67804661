#include "fs/overlay.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>

#include "common/sys.h"
#include "fs/copy_up.h"

namespace acqfs {

using SharedLock = std::shared_lock<std::shared_mutex>;
// The tree lock taken to change something. Taking it moves the tree
// generation on, which retires every directory descriptor cached under the
// previous one (Layer::DirFd).
class ExclusiveLock {
 public:
  ExclusiveLock(std::shared_mutex& mu, std::atomic<uint64_t>& gen) : l_(mu) {
    gen.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::unique_lock<std::shared_mutex> l_;
};
using TableLock = std::lock_guard<std::mutex>;

// ---------------------------------------------------------------- set-up

Overlay::Overlay(Layers layers) : layers_(std::move(layers)) {}

Overlay::~Overlay() = default;

Result<std::unique_ptr<Overlay>> Overlay::Create(Layers layers) {
  std::unique_ptr<Overlay> ov(new Overlay(std::move(layers)));
  const Layers& l = ov->layers_;
  auto lst = sys::Fstat(l.lower.root(), l.lower.root_path());
  if (!lst) return lst.error();
  auto ust = sys::Fstat(l.upper.root(), l.upper.root_path());
  if (!ust) return ust.error();
  ov->same_dev_ = lst->st_dev == ust->st_dev;
  // The daemon's umask, which its own creation calls apply (FixNewMode
  // undoes it): read once, before any request is served.
  ov->daemon_umask_ = ::umask(022);
  ::umask(ov->daemon_umask_);
  auto view = RootView(l);
  if (!view) return view.error();
  auto node = std::make_unique<Node>(lst->st_ino, S_IFDIR);
  node->upper = true;
  node->lower_dir = true;
  node->opaque = !view->merged;
  node->xwhiteouts = view->xwhiteouts;
  node->nlookup = 1;
  ov->table_.AddRoot(std::move(node));
  if (l.policy && l.policy->quota_bytes() > 0) {
    // The upper layer and acqfs-tmp (emptied by Layers::Open, but a
    // directory that keeps the room it grew).
    auto used = Quota::Measure(l.upper.root(), l.upper.root_path());
    if (!used) return used.error();
    uint64_t total = *used;
    if (l.tmp) {
      auto tmp = Quota::Measure(l.tmp.get(), l.tmp_path);
      if (!tmp) return tmp.error();
      total += *tmp;
    }
    ov->quota_ = std::make_unique<Quota>(l.policy->quota_bytes(), total);
    ov->table_.set_quota(ov->quota_.get());
  }
  return ov;
}

// ---------------------------------------------------------------- helpers

std::string Overlay::PathLocked(const Node* node) const {
  std::vector<const std::string*> parts;
  for (const Node* n = node; n && n != table_.root(); n = n->parent)
    parts.push_back(&n->name);
  std::string p;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!p.empty()) p += '/';
    p += **it;
  }
  return p;
}

std::string Overlay::PathOf(Node* node) {
  SharedLock l(tree_mu_);
  return PathLocked(node);
}

uint64_t Overlay::ParentIno(Node* dir) {
  SharedLock l(tree_mu_);
  return dir->parent ? dir->parent->ino : dir->ino;
}

DirView Overlay::ViewOf(const Node* dir) const {
  DirView v;
  v.path = PathLocked(dir);
  v.upper = dir->upper;
  v.merged = dir->merged();
  v.xwhiteouts = dir->xwhiteouts;
  return v;
}

uint64_t Overlay::TagUpper(uint64_t ino) const {
  return same_dev_ ? ino : (ino | (uint64_t{1} << 63));
}

uint64_t Overlay::InoFor(const ChildInfo& c) const {
  if (!c.upper) return c.lower_st.st_ino;
  if (c.origin) return c.origin;  // made from a lower object: keep its number
  // A merged directory is the lower directory's continuation.
  if (S_ISDIR(c.upper_st.st_mode) && c.lower && S_ISDIR(c.lower_st.st_mode) &&
      c.opaque != OpaqueMark::kOpaque)
    return c.lower_st.st_ino;
  return TagUpper(c.upper_st.st_ino);
}

Result<UniqueFd> Overlay::UpperDir(const Node* dir) {
  return layers_.upper.OpenDir(PathLocked(dir));
}

Result<bool> Overlay::LowerHas(const Node* parent, const std::string& name,
                               bool* is_dir) {
  *is_dir = false;
  if (!parent->merged()) return false;
  struct stat st;
  bool found = false;
  ACQFS_TRY(layers_.lower.StatIfExists(sys::Join(PathLocked(parent), name), &st,
                                       &found));
  *is_dir = found && S_ISDIR(st.st_mode);
  return found;
}

void Overlay::FixStat(const Node* node, struct stat* st) const {
  st->st_ino = node->ino;
  // A merged directory's link count would count subdirectories of both
  // layers; 1 means "not counted" (find(1) and the kernel overlayfs agree).
  // With hidden paths every directory says 1: its lower count could reveal
  // a hidden subdirectory.
  if (node->is_dir() &&
      (node->merged() || (layers_.policy && layers_.policy->hides_anything())))
    st->st_nlink = 1;
  // An unlinked file has no links, wherever its data is kept (a name
  // in acqfs-tmp, the lower file it was): as fstat says on ext4.
  if (node->unlinked && !node->is_dir()) st->st_nlink = 0;
}

// ---------------------------------------------------------------- counts

void Overlay::Forget(Node* node, uint64_t count) {
  Reaper reap(&table_);
  SharedLock l(tree_mu_);
  TableLock t(table_mu_);
  table_.UncountLookupsLocked(node, count);
  table_.MaybeFreeLocked(node);
}

void Overlay::AddOpen(Node* node) {
  TableLock t(table_mu_);
  table_.AddOpenLocked(node);
}

void Overlay::ReleaseOpen(Node* node) {
  Reaper reap(&table_);
  SharedLock l(tree_mu_);
  TableLock t(table_mu_);
  table_.ReleaseOpenLocked(node);
  table_.MaybeFreeLocked(node);
}

// ---------------------------------------------------------------- lookup

Result<Node*> Overlay::NodeForChild(Node* parent, const std::string& name,
                                    const ChildInfo& c, bool count) {
  const struct stat& st = c.upper ? c.upper_st : c.lower_st;
  bool hard_link = c.upper && !S_ISDIR(st.st_mode) && st.st_nlink > 1;
  TableLock t(table_mu_);
  if (Node* known = parent->Child(name)) {
    if (count) table_.AddLookupLocked(known);
    return known;
  }
  if (hard_link) {
    if (Node* h = table_.UpperLinkLocked(c.upper_st.st_ino)) {
      table_.AttachLocked(h, parent, name);
      if (count) table_.AddLookupLocked(h);
      return h;
    }
  }
  auto node = std::make_unique<Node>(InoFor(c), st.st_mode & S_IFMT);
  node->upper = c.upper;
  node->lower_dir = c.lower && S_ISDIR(c.lower_st.st_mode);
  node->opaque = c.opaque == OpaqueMark::kOpaque;
  node->xwhiteouts = c.opaque == OpaqueMark::kMayHoldXattrWhiteouts;
  node->nlookup = count ? 1 : 0;
  Node* raw = node.get();
  table_.AddNodeLocked(std::move(node));
  if (hard_link) table_.SetUpperLinkLocked(raw, c.upper_st.st_ino);
  table_.AttachLocked(raw, parent, name);
  return raw;
}

Result<Node*> Overlay::LookupLocked(Node* parent, const std::string& name,
                                    bool count, struct stat* st, bool* stale) {
  if (!parent->is_dir()) return Error::Of(ENOTDIR, "lookup", name);
  if (parent->unlinked) return Error::Of(ENOENT, "lookup", name);
  Node* known = nullptr;
  {
    TableLock t(table_mu_);
    known = parent->Child(name);
    if (known && count) table_.AddLookupLocked(known);
  }
  if (known) {
    if (!st) return known;
    auto s = StatLocked(known);
    if (s) {
      *st = *s;
      return known;
    }
    // ENOENT: the object is gone or has another type now; ENOTDIR: a
    // directory on its path is no longer one. Either way the name no
    // longer leads to this node, and keeping the binding would answer
    // ENOENT for the name, and for whatever is created there next, for as
    // long as the kernel holds the node.
    const bool gone = s.err() == ENOENT || s.err() == ENOTDIR;
    if (!gone || stale) {
      if (stale) *stale = gone;
      if (count) MaybeFreeAfterLookup(known);
      return s.error();
    }
    TableLock t(table_mu_);
    if (count) table_.UncountLookupsLocked(known, 1);
    table_.DropStaleNameLocked(known, parent, name);
  }
  DirView v = ViewOf(parent);
  auto c = ResolveChild(layers_, v, name, Gen());
  if (!c) return c.error();
  if (!c->exists) return Error::Of(ENOENT, "lookup", sys::Join(v.path, name));
  auto node = NodeForChild(parent, name, *c, count);
  if (node && st) {
    *st = c->upper ? c->upper_st : c->lower_st;
    FixStat(*node, st);
  }
  return node;
}

// Gives back the lookup LookupLocked counted on a node it then failed on.
void Overlay::MaybeFreeAfterLookup(Node* node) {
  TableLock t(table_mu_);
  table_.UncountLookupsLocked(node, 1);
  table_.MaybeFreeLocked(node);
}

Result<Node*> Overlay::Lookup(Node* parent, const std::string& name) {
  SharedLock l(tree_mu_);
  return LookupLocked(parent, name, true);
}

Result<Node*> Overlay::Lookup(Node* parent, const std::string& name,
                              struct stat* st) {
  bool stale = false;
  {
    SharedLock l(tree_mu_);
    auto node = LookupLocked(parent, name, true, st, &stale);
    if (!stale) return node;
  }
  // The node held for the name is gone from the disk: only the exclusive
  // lock may take the name from it (the lookup is then made afresh).
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_, tree_gen_);
  return LookupLocked(parent, name, true, st, nullptr);
}

// ---------------------------------------------------------------- reading

Result<struct stat> Overlay::StatLocked(Node* node) {
  struct stat st;
  if (node->unlinked) {
    auto s = kept_.Stat(node->kept());
    if (!s) return s.error();
    st = *s;
  } else {
    const Layer& layer = node->upper ? layers_.upper : layers_.lower;
    auto s = layer.StatVia(PathLocked(node), Gen());
    if (!s) return s.error();
    st = *s;
  }
  if ((st.st_mode & S_IFMT) != node->type)
    return Error::Of(ENOENT, "stat (type changed)", PathLocked(node));
  FixStat(node, &st);
  return st;
}

Result<struct stat> Overlay::GetAttr(Node* node) {
  SharedLock l(tree_mu_);
  return StatLocked(node);
}

// The number lookup would give an upper entry nobody looked up yet, at the
// cost of one getxattr (its origin marker) in the common cases; only an
// unmarked directory over a lower one needs the full lookup rule.
uint64_t Overlay::UpperEntryIno(const DirView& view, int upper_dir,
                                const MergedEntry& e) {
  std::string shown = layers_.upper.Shown(sys::Join(view.path, e.name));
  auto origin = layers_.format.ReadOrigin(upper_dir, e.name, shown);
  if (origin && *origin) return *origin;
  if (e.in_lower && e.type == DT_DIR) {
    auto c = ResolveChild(layers_, view, e.name);
    if (c && c->exists) return InoFor(*c);
  }
  return TagUpper(e.upper_ino);
}

Result<std::vector<ListedEntry>> Overlay::ReadDir(Node* dir) {
  SharedLock l(tree_mu_);
  if (dir->unlinked) return std::vector<ListedEntry>{};
  DirView view = ViewOf(dir);
  auto entries = ListMerged(layers_, view);
  if (!entries) return entries.error();
  UniqueFd upper_dir;
  if (view.upper) {
    auto u = layers_.upper.OpenDir(view.path);
    if (!u) return u.error();
    upper_dir = std::move(*u);
  }
  std::vector<ListedEntry> out;
  out.reserve(entries->size());
  for (auto& e : *entries) {
    uint64_t ino = 0;
    {
      TableLock t(table_mu_);
      if (Node* known = dir->Child(e.name)) ino = known->ino;
    }
    if (!ino && !e.in_upper) ino = e.lower_ino;
    if (!ino) ino = UpperEntryIno(view, upper_dir.get(), e);
    out.push_back(ListedEntry{std::move(e.name), e.type, ino});
  }
  return out;
}

Result<std::string> Overlay::ReadLink(Node* node) {
  SharedLock l(tree_mu_);
  if (node->unlinked) {
    auto fd = kept_.Open(node->kept(), O_PATH | O_NOFOLLOW);
    if (!fd) return fd.error();
    return sys::ReadLinkAt(fd->get(), "", "(unlinked)");
  }
  const Layer& layer = node->upper ? layers_.upper : layers_.lower;
  std::string path = PathLocked(node);
  auto dir = layer.OpenDir(sys::Dirname(path));
  if (!dir) return dir.error();
  return sys::ReadLinkAt(dir->get(), sys::Basename(path), layer.Shown(path));
}

Result<struct statvfs> Overlay::StatFs() {
  struct statvfs st;
  if (::fstatvfs(layers_.upper.root(), &st) != 0)
    return Error::Errno("fstatvfs", layers_.upper.root_path());
  if (quota_) {
    // Under a quota the sandbox sees the quota as the size of its file
    // system and what the quota leaves as free, as ext4 shows a directory
    // tree under a project quota (ext4_statfs_project), never more than
    // the disk has free.
    const uint64_t unit = st.f_frsize ? st.f_frsize : st.f_bsize;
    const uint64_t limit = quota_->limit() / unit;
    const uint64_t used = (quota_->used() + unit - 1) / unit;
    if (unit && st.f_blocks > limit) {
      const uint64_t left = limit > used ? limit - used : 0;
      st.f_blocks = limit;
      st.f_bfree = std::min<uint64_t>(st.f_bfree, left);
      st.f_bavail = std::min<uint64_t>(st.f_bavail, left);
    }
  }
  return st;
}

// ---------------------------------------------------------------- copy-up

Status Overlay::CheckWritable(const std::string& rel, bool is_dir,
                              const char* op) const {
  if (!layers_.policy || !layers_.policy->ReadOnly(rel, is_dir)) return Ok();
  return Error::Of(EROFS, std::string(op) + " (read-only by the policy)",
                   "/" + rel);
}

Status Overlay::ForEachBelow(Node* dir, const BelowVisitor& visit) {
  std::vector<DirView> todo = {ViewOf(dir)};
  while (!todo.empty()) {
    DirView view = std::move(todo.back());
    todo.pop_back();
    auto entries = ListMerged(layers_, view);
    if (!entries) return entries.error();
    for (const auto& e : *entries) {
      auto c = ResolveChild(layers_, view, e.name);
      if (!c) return c.error();
      if (!c->exists) continue;
      std::string rel = sys::Join(view.path, e.name);
      ACQFS_TRY(visit(rel, *c));
      if (c->is_dir()) todo.push_back(c->AsDir(rel));
    }
  }
  return Ok();
}

Status Overlay::CheckMovable(Node* dir, const char* op) {
  if (!layers_.policy || !layers_.policy->has_read_only()) return Ok();
  return ForEachBelow(dir, [&](const std::string& rel, const ChildInfo& c) {
    return CheckWritable(rel, c.is_dir(), op);
  });
}

namespace {
// What copying the lower object `st` into the upper is sure to allocate:
// a regular file's data, dense (a copy made by copy_file_range or
// read/write fills the holes), a symlink's blocks as the lower has them, a
// directory's too when its entries are copied with it (`with_entries`; a
// copy-up makes it empty). What the copy really holds is settled
// afterwards.
uint64_t CopyEstimate(const struct stat& st, bool with_entries) {
  const uint64_t block = st.st_blksize > 0 ? st.st_blksize : 4096;
  if (S_ISREG(st.st_mode))
    return (static_cast<uint64_t>(st.st_size) + block - 1) / block * block;
  if (S_ISLNK(st.st_mode) || (S_ISDIR(st.st_mode) && with_entries))
    return Quota::Bytes(st);
  return 0;
}
}  // namespace

Result<uint64_t> Overlay::CopyEstimateBelow(Node* dir) {
  uint64_t total = 0;
  ACQFS_TRY(ForEachBelow(dir, [&](const std::string&, const ChildInfo& c) {
    if (!c.upper) total += CopyEstimate(c.lower_st, true);
    return Ok();
  }));
  return total;
}

void Overlay::GiveBack(Quota::Change* ch, Node* node, const struct stat& st) {
  if (!quota_ || S_ISDIR(st.st_mode) || st.st_nlink > 1) return;
  if (!S_ISREG(st.st_mode)) return ch->Sub(Quota::Bytes(st));
  // The file cache may hold the file's data until the node goes (a kernel
  // that looked the name up can still open it): given back then.
  quota_->Hold(&node->charged, Quota::Bytes(st));
  node->quota_owed = true;
}

Status Overlay::EnsureUpper(Node* node) {
  if (node->upper) return Ok();
  if (node->unlinked || !node->parent)
    return Error::Of(ENOENT, "copy up", "(unlinked)");
  std::string rel = PathLocked(node);
  ACQFS_TRY(CheckWritable(rel, node->is_dir(), "copy up"));
  ACQFS_TRY(EnsureUpper(node->parent));
  if (!quota_) {
    ACQFS_TRY(acqfs::CopyUp(layers_, rel));
    node->upper = true;
    return Ok();
  }
  // Reserved before: what the copy is sure to take; settled after: the
  // copy's blocks and what its parent directory (and acqfs-tmp, where it is
  // built) grew.
  auto st = layers_.lower.Stat(rel);
  if (!st) return st.error();
  auto pfd = UpperDir(node->parent);
  if (!pfd) return pfd.error();
  std::string shown = layers_.upper.Shown(rel);
  Quota::Change ch(quota_.get());  // after pfd, which it watches
  ACQFS_TRY(ch.Reserve(CopyEstimate(*st, false), "/" + rel));
  ACQFS_TRY(ch.Watch(pfd->get(), shown));
  ACQFS_TRY(ch.Watch(layers_.tmp.get(), layers_.tmp_path));
  ACQFS_TRY(acqfs::CopyUp(layers_, rel));
  node->upper = true;
  uint64_t made = ch.AddNew(pfd->get(), node->name, shown);
  if (S_ISREG(st->st_mode)) quota_->Seen(&node->charged, made);
  return Ok();
}

Status Overlay::MakeChangeable(Node* node) {
  if (!node->unlinked) return EnsureUpper(node);
  if (!node->kept().in_lower()) return Ok();
  // A kept lower file gets a copy of its own in acqfs-tmp, charged to the
  // quota (given back with the kept data).
  Quota::Change ch(quota_.get());
  if (quota_) {
    auto st = kept_.Stat(node->kept());
    if (!st) return st.error();
    ACQFS_TRY(ch.Reserve(CopyEstimate(*st, false), "(unlinked)"));
    ACQFS_TRY(ch.Watch(layers_.tmp.get(), layers_.tmp_path));
  }
  ACQFS_TRY(kept_.MakeChangeable(node->mutable_kept()));
  node->upper = true;
  if (quota_) {
    auto copy = kept_.Stat(node->kept());
    if (copy) {
      ch.Add(Quota::Bytes(*copy));
      quota_->Seen(&node->charged, Quota::Bytes(*copy));
    }
  }
  return Ok();
}

Status Overlay::CopyUp(Node* node) {
  ExclusiveLock l(tree_mu_, tree_gen_);
  return EnsureUpper(node);
}

void Overlay::MarkMaterialised(Node* dir) {
  dir->upper = true;
  if (!dir->children) return;
  for (auto& [name, child] : *dir->children) {
    if (child->parent != dir || child->name != name) continue;  // alias
    child->upper = true;
    child->lower_dir = false;
    child->opaque = false;
    child->xwhiteouts = false;
    if (child->is_dir()) MarkMaterialised(child);
  }
}

Status Overlay::Materialise(Node* dir, uint64_t estimate) {
  ACQFS_TRY(EnsureUpper(dir->parent));
  std::string path = PathLocked(dir);
  std::string shown = layers_.upper.Shown(path);
  std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
  int tfd = layers_.tmp.get();
  auto pfd = UpperDir(dir->parent);
  if (!pfd) return pfd.error();
  // Reserved: the lower objects it copies. Settled: the new tree (its
  // directories and copies; upper files are hard-linked, nothing new), less
  // the old upper directory it replaces (its directories and whiteouts; its
  // files live on in the new tree).
  Quota::Change ch(quota_.get());
  ACQFS_TRY(ch.Reserve(estimate, shown));
  ACQFS_TRY(ch.Watch(pfd->get(), shown));
  ACQFS_TRY(ch.Watch(tfd, layers_.tmp_path));
  Status s = BuildMergedCopy(layers_, ViewOf(dir), tfd, tmp, dir->ino);
  if (s) s = layers_.format.SetOpaque(tfd, tmp, shown);
  if (s) {
    unsigned flags = dir->upper ? RENAME_EXCHANGE : RENAME_NOREPLACE;
    s = sys::Renameat2(tfd, tmp, pfd->get(), dir->name, flags, shown);
  }
  if (s) {
    ch.AddEntry(pfd->get(), dir->name, shown);
    if (dir->upper) ch.SubEntry(tfd, tmp, layers_.tmp_path);
  }
  // After an exchange `tmp` holds the old upper directory; either way it is
  // junk now.
  Status rm = sys::RemoveTree(tfd, tmp, layers_.tmp_path);
  if (!s) return s;
  {
    TableLock t(table_mu_);
    MarkMaterialised(dir);
    dir->opaque = true;
    dir->xwhiteouts = false;
  }
  return rm;
}

Status Overlay::PrepareToMove(Node* node) {
  if (node->is_dir() && node->merged()) {
    uint64_t estimate = 0;
    if (quota_) {
      auto bytes = CopyEstimateBelow(node);
      if (!bytes) return bytes.error();
      estimate = *bytes;
      if (!node->upper) {
        auto st = layers_.lower.Stat(PathLocked(node));
        if (!st) return st.error();
        estimate += CopyEstimate(*st, true);
      }
    }
    return Materialise(node, estimate);
  }
  return EnsureUpper(node);
}

// ---------------------------------------------------------------- creation

Status Overlay::ChownNew(int dirfd, const std::string& name, int pfd,
                         const Creds& creds, const std::string& shown) {
  if (!layers_.privileged) return Ok();
  auto pst = sys::Fstat(pfd, shown);
  if (!pst) return pst.error();
  gid_t gid = (pst->st_mode & S_ISGID) ? pst->st_gid : creds.gid;
  if (::fchownat(dirfd, name.c_str(), creds.uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
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

namespace {
Status MakeCall(int rc, const char* op, const std::string& shown) {
  if (rc != 0) return Error::Errno(op, shown);
  return Ok();
}
}  // namespace

Result<Node*> Overlay::Mkdir(Node* parent, const std::string& name, mode_t mode,
                             Creds creds) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_, tree_gen_);
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
  ExclusiveLock l(tree_mu_, tree_gen_);
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  if (S_ISCHR(mode) && rdev == 0)  // would read back as a whiteout
    return Error::Of(EPERM, "mknod 0/0 character device", shown);
  ACQFS_TRY(Publish(
      parent, name, false, &creds, mode, [&](int d, const std::string& n) {
        return MakeCall(::mknodat(d, n.c_str(), mode, rdev), "mknod", shown);
      }));
  return LookupLocked(parent, name, true);
}

Result<Node*> Overlay::Symlink(Node* parent, const std::string& name,
                               const std::string& target, Creds creds) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_, tree_gen_);
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
    ExclusiveLock l(tree_mu_, tree_gen_);
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

Result<Node*> Overlay::Link(Node* node, Node* parent, const std::string& name) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_, tree_gen_);
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  if (node->is_dir()) return Error::Of(EPERM, "link", shown);
  if (node->unlinked) return Error::Of(ENOENT, "link", shown);
  ACQFS_TRY(CheckWritable(PathLocked(node), false, "link from"));
  ACQFS_TRY(
      CheckWritable(sys::Join(PathLocked(parent), name), false, "link to"));
  ACQFS_TRY(EnsureUpper(node));
  auto src_dir = UpperDir(node->parent);
  if (!src_dir) return src_dir.error();
  std::string src_name = node->name;
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

// ---------------------------------------------------------------- removal

bool Overlay::MustKeep(Node* node) {
  if (node->is_dir()) return false;
  TableLock t(table_mu_);
  return !node->HasAliases() && table_.MayBeOpenLocked(node);
}

Status Overlay::KeepBeforeReplacing(Node* node, int pfd,
                                    const std::string& name,
                                    const std::string& shown) {
  if (!node->upper) {
    node->set_kept(kept_.KeepLower(PathLocked(node)));
    return Ok();
  }
  auto k = kept_.Keep(pfd, name, shown);
  if (!k) return k.error();
  node->set_kept(std::move(*k));
  return Ok();
}

Status Overlay::Unlink(Node* parent, const std::string& name) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_, tree_gen_);
  auto child = LookupLocked(parent, name, false);
  if (!child) return child.error();
  Node* node = *child;
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  Status s = [&]() -> Status {
    if (node->is_dir()) return Error::Of(EISDIR, "unlink", shown);
    ACQFS_TRY(
        CheckWritable(sys::Join(PathLocked(parent), name), false, "unlink"));
    bool lower_is_dir;
    auto has_lower = LowerHas(parent, name, &lower_is_dir);
    if (!has_lower) return has_lower.error();
    ACQFS_TRY(EnsureUpper(parent));
    auto pfd = UpperDir(parent);
    if (!pfd) return pfd.error();
    // Never refused: removing is how room is made. What the directories
    // grow (a whiteout's name, kept data in acqfs-tmp) is settled.
    Quota::Change ch(quota_.get());
    ACQFS_TRY(ch.Watch(pfd->get(), shown));
    ACQFS_TRY(ch.Watch(layers_.tmp.get(), layers_.tmp_path));
    // A file the kernel may still hold keeps its data (Node::kept); its
    // blocks count against the quota until the data goes (MaybeFreeLocked).
    const bool keep = MustKeep(node);
    struct stat gone {};
    bool frees = false;  // removing the name frees `gone`
    if (quota_ && node->upper && !keep) {
      auto st = sys::StatAt(pfd->get(), name, shown);
      if (!st) return st.error();
      gone = *st;
      frees = true;
    }
    if (!node->upper) {
      ACQFS_TRY(LayerFormat::MakeWhiteout(pfd->get(), name, shown));
      if (keep) node->set_kept(kept_.KeepLower(PathLocked(node)));
      return Ok();
    }
    if (!*has_lower) {
      if (!keep)
        ACQFS_TRY(
            MakeCall(::unlinkat(pfd->get(), name.c_str(), 0), "unlink", shown));
      else if (auto k = kept_.KeepAndRemove(pfd->get(), name, shown); k)
        node->set_kept(std::move(*k));
      else
        return k.error();
      if (frees) GiveBack(&ch, node, gone);
      return Ok();
    }
    if (keep) ACQFS_TRY(KeepBeforeReplacing(node, pfd->get(), name, shown));
    int tfd = layers_.tmp.get();
    std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
    Status r = LayerFormat::MakeWhiteout(tfd, tmp, shown);
    if (r) r = sys::Renameat2(tfd, tmp, pfd->get(), name, 0, shown);
    if (!r) {
      (void)sys::RemoveTree(tfd, tmp, layers_.tmp_path);
      kept_.Release(node->take_kept());  // the name stays
      return r;
    }
    if (frees) GiveBack(&ch, node, gone);
    return Ok();
  }();
  TableLock t(table_mu_);
  if (s) table_.DetachNameLocked(node, parent, name);
  table_.MaybeFreeLocked(node);
  return s;
}

Status Overlay::Rmdir(Node* parent, const std::string& name) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_, tree_gen_);
  auto child = LookupLocked(parent, name, false);
  if (!child) return child.error();
  Node* node = *child;
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  Status s = [&]() -> Status {
    if (!node->is_dir()) return Error::Of(ENOTDIR, "rmdir", shown);
    ACQFS_TRY(
        CheckWritable(sys::Join(PathLocked(parent), name), true, "rmdir"));
    auto entries = ListMerged(layers_, ViewOf(node));
    if (!entries) return entries.error();
    if (!entries->empty()) return Error::Of(ENOTEMPTY, "rmdir", shown);
    bool lower_is_dir;
    auto has_lower = LowerHas(parent, name, &lower_is_dir);
    if (!has_lower) return has_lower.error();
    ACQFS_TRY(EnsureUpper(parent));
    auto pfd = UpperDir(parent);
    if (!pfd) return pfd.error();
    // Never refused; gives back the removed directory and the whiteouts it
    // held.
    Quota::Change ch(quota_.get());
    ACQFS_TRY(ch.Watch(pfd->get(), shown));
    if (!node->upper) return LayerFormat::MakeWhiteout(pfd->get(), name, shown);
    int tfd = layers_.tmp.get();
    ACQFS_TRY(ch.Watch(tfd, layers_.tmp_path));
    std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
    if (*has_lower) {
      ACQFS_TRY(LayerFormat::MakeWhiteout(tfd, tmp, shown));
      Status r =
          sys::Renameat2(tfd, tmp, pfd->get(), name, RENAME_EXCHANGE, shown);
      if (r) ch.SubEntry(tfd, tmp, layers_.tmp_path);
      Status rm = sys::RemoveTree(tfd, tmp, layers_.tmp_path);
      return r ? rm : r;
    }
    ACQFS_TRY(sys::Renameat2(pfd->get(), name, tfd, tmp, 0, shown));
    ch.SubEntry(tfd, tmp, layers_.tmp_path);
    return sys::RemoveTree(tfd, tmp, layers_.tmp_path);
  }();
  TableLock t(table_mu_);
  if (s) table_.DetachNameLocked(node, parent, name);
  table_.MaybeFreeLocked(node);
  return s;
}

// ---------------------------------------------------------------- rename

Status Overlay::ClearUpperDir(Quota::Change* ch, int pfd,
                              const std::string& name,
                              const std::string& shown) {
  // Swap the (empty in the merged view, but maybe holding whiteouts) upper
  // directory for an empty opaque one, so a rename can replace it.
  int tfd = layers_.tmp.get();
  std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
  if (::mkdirat(tfd, tmp.c_str(), 0700) != 0)
    return Error::Errno("mkdir", layers_.tmp_path);
  Status s = layers_.format.SetOpaque(tfd, tmp, shown);
  if (s) s = sys::Renameat2(tfd, tmp, pfd, name, RENAME_EXCHANGE, shown);
  if (s) {
    ch->AddNew(pfd, name, shown);
    ch->SubEntry(tfd, tmp, layers_.tmp_path);
  }
  Status rm = sys::RemoveTree(tfd, tmp, layers_.tmp_path);
  return s ? rm : s;
}

// One rename's operands and what the layers hold under its two names.
struct Overlay::RenameOp {
  Node* parent = nullptr;
  std::string name;
  Node* new_parent = nullptr;
  std::string new_name;
  unsigned flags = 0;
  bool exchange = false;
  Node* a = nullptr;  // the source
  Node* b = nullptr;  // what the target name holds now, if anything
  std::string shown;
  bool src_lower = false, src_lower_dir = false;
  bool dst_lower = false, dst_lower_dir = false;
};

Status Overlay::CheckRename(const RenameOp& op) {
  if ((op.flags & RENAME_NOREPLACE) && op.b)
    return Error::Of(EEXIST, "rename", op.shown);
  if (op.exchange && !op.b)
    return Error::Of(ENOENT, "rename exchange", op.shown);
  if (!op.b || op.exchange || op.a == op.b) return Ok();
  if (op.a->is_dir() && !op.b->is_dir())
    return Error::Of(ENOTDIR, "rename", op.shown);
  if (!op.a->is_dir() && op.b->is_dir())
    return Error::Of(EISDIR, "rename", op.shown);
  if (op.b->is_dir()) {
    auto entries = ListMerged(layers_, ViewOf(op.b));
    if (!entries) return entries.error();
    if (!entries->empty()) return Error::Of(ENOTEMPTY, "rename", op.shown);
  }
  return Ok();
}

Status Overlay::SetOpaqueCounted(Quota::Change* ch, int dirfd,
                                 const std::string& name,
                                 const std::string& shown) {
  // The marker may take an xattr block of the directory's own.
  struct stat before {};
  if (ch->active()) {
    auto st = sys::StatAt(dirfd, name, shown);
    if (!st) return st.error();
    before = *st;
  }
  ACQFS_TRY(layers_.format.SetOpaque(dirfd, name, shown));
  if (ch->active()) {
    auto st = sys::StatAt(dirfd, name, shown);
    if (st) {
      ch->Add(Quota::Bytes(*st));
      ch->Sub(Quota::Bytes(before));
    }
  }
  return Ok();
}

// Makes both ends upper, materialising moved directories, and marks a
// directory opaque when it will land where the lower has a directory.
Status Overlay::PrepareRename(Quota::Change* ch, RenameOp& op, int pfd,
                              int npfd) {
  if (op.a->is_dir() && op.dst_lower_dir && !op.a->opaque) {
    ACQFS_TRY(SetOpaqueCounted(ch, pfd, op.name, op.shown));
    op.a->opaque = true;
  }
  if (op.exchange && op.b->is_dir() && op.src_lower_dir && !op.b->opaque) {
    ACQFS_TRY(SetOpaqueCounted(ch, npfd, op.new_name, op.shown));
    op.b->opaque = true;
  }
  if (op.b && !op.exchange) {
    // The file renamed over keeps its data while the kernel may hold it.
    if (MustKeep(op.b))
      ACQFS_TRY(KeepBeforeReplacing(op.b, npfd, op.new_name, op.shown));
    if (op.b->upper && op.b->is_dir())
      ACQFS_TRY(ClearUpperDir(ch, npfd, op.new_name, op.shown));
  }
  return Ok();
}

// The upper-layer move itself, leaving a whiteout at the source when the
// lower has that name.
Status Overlay::MoveInUpper(const RenameOp& op, int pfd, int npfd) {
  if (op.exchange)
    return sys::Renameat2(pfd, op.name, npfd, op.new_name, RENAME_EXCHANGE,
                          op.shown);
  if (!op.b) {
    struct stat st;
    bool found = false;
    ACQFS_TRY(sys::StatAtIfExists(npfd, op.new_name, &st, &found, op.shown));
    if (found) {  // a whiteout: swap it to the source, keep it if needed
      ACQFS_TRY(sys::Renameat2(pfd, op.name, npfd, op.new_name, RENAME_EXCHANGE,
                               op.shown));
      if (op.src_lower) return Ok();
      return MakeCall(::unlinkat(pfd, op.name.c_str(), 0), "unlink", op.shown);
    }
  }
  if (op.src_lower) {
    if (::renameat2(pfd, op.name.c_str(), npfd, op.new_name.c_str(),
                    RENAME_WHITEOUT) == 0)
      return Ok();
    if (errno != EPERM && errno != EINVAL && errno != EOPNOTSUPP)
      return Error::Errno("rename", op.shown);
  }
  ACQFS_TRY(sys::Renameat2(pfd, op.name, npfd, op.new_name, 0, op.shown));
  if (op.src_lower) return LayerFormat::MakeWhiteout(pfd, op.name, op.shown);
  return Ok();
}

// Moves the nodes to their new names (table_mu_ held).
void Overlay::RecordRenameLocked(const RenameOp& op) {
  if (op.b && !op.exchange)
    table_.DetachNameLocked(op.b, op.new_parent, op.new_name);
  table_.MoveNameLocked(op.a, op.parent, op.name, op.new_parent, op.new_name);
  op.a->lower_dir = op.dst_lower_dir;
  if (op.b && op.exchange) {
    table_.MoveNameLocked(op.b, op.new_parent, op.new_name, op.parent, op.name);
    op.b->lower_dir = op.src_lower_dir;
  }
}

Status Overlay::Rename(Node* parent, const std::string& name, Node* new_parent,
                       const std::string& new_name, unsigned flags) {
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_, tree_gen_);
  RenameOp op;
  op.parent = parent;
  op.name = name;
  op.new_parent = new_parent;
  op.new_name = new_name;
  op.flags = flags;
  op.exchange = (flags & RENAME_EXCHANGE) != 0;
  op.shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) ||
      (flags & RENAME_NOREPLACE && flags & RENAME_EXCHANGE))
    return Error::Of(EINVAL, "rename flags", op.shown);
  auto src = LookupLocked(parent, name, false);
  if (!src) return src.error();
  op.a = *src;
  // A directory that lost its name has no path to move anything into.
  if (new_parent->unlinked)
    return Error::Of(ENOENT, "rename to", sys::Join("(unlinked)", new_name));
  auto dst = LookupLocked(new_parent, new_name, false);
  if (dst)
    op.b = *dst;
  else if (dst.err() != ENOENT)
    return dst.error();

  Status s = [&]() -> Status {
    ACQFS_TRY(CheckRename(op));
    if (op.a == op.b) return Ok();  // two names of one file: nothing to do
    ACQFS_TRY(CheckWritable(sys::Join(PathLocked(parent), name), op.a->is_dir(),
                            "rename from"));
    ACQFS_TRY(CheckWritable(sys::Join(PathLocked(new_parent), new_name),
                            op.a->is_dir(), "rename to"));
    if (op.b && op.exchange)
      ACQFS_TRY(CheckWritable(sys::Join(PathLocked(new_parent), new_name),
                              op.b->is_dir(), "rename from"));
    if (op.a->is_dir()) ACQFS_TRY(CheckMovable(op.a, "rename from"));
    if (op.b && op.b->is_dir() && op.exchange)
      ACQFS_TRY(CheckMovable(op.b, "rename from"));
    auto src_lower = LowerHas(parent, name, &op.src_lower_dir);
    if (!src_lower) return src_lower.error();
    auto dst_lower = LowerHas(new_parent, new_name, &op.dst_lower_dir);
    if (!dst_lower) return dst_lower.error();
    op.src_lower = *src_lower;
    op.dst_lower = *dst_lower;
    ACQFS_TRY(EnsureUpper(parent));
    ACQFS_TRY(EnsureUpper(new_parent));
    ACQFS_TRY(PrepareToMove(op.a));
    if (op.exchange) ACQFS_TRY(PrepareToMove(op.b));
    auto pfd = UpperDir(parent);
    if (!pfd) return pfd.error();
    auto npfd = UpperDir(new_parent);
    if (!npfd) return npfd.error();
    // Never refused (the copies above were). Settles what the directories
    // grew and gives back what the name renamed over held, unless that is
    // kept for a process that may hold it (given back when the kept data
    // goes, MaybeFreeLocked).
    Quota::Change ch(quota_.get());
    ACQFS_TRY(ch.Watch(pfd->get(), op.shown));
    ACQFS_TRY(ch.Watch(npfd->get(), op.shown));
    ACQFS_TRY(ch.Watch(layers_.tmp.get(), layers_.tmp_path));
    struct stat over {};
    bool frees = false;  // the move frees `over`, what the target held
    if (quota_ && op.b && !op.exchange && op.b != op.a && op.b->upper) {
      auto st = sys::StatAt(npfd->get(), new_name, op.shown);
      if (!st) return st.error();
      over = *st;
      frees = true;
    }
    Status moved = PrepareRename(&ch, op, pfd->get(), npfd->get());
    if (moved && frees && op.b->is_dir()) {
      // ClearUpperDir left an empty directory there, which the move frees.
      auto st = sys::StatAt(npfd->get(), new_name, op.shown);
      if (!st) moved = st.error();
      if (st) over = *st;
    }
    if (moved) moved = MoveInUpper(op, pfd->get(), npfd->get());
    if (op.b && op.b->has_kept()) {
      if (!moved) kept_.Release(op.b->take_kept());  // the name stays
      frees = false;  // counted until the kept data goes
    }
    if (moved && frees) {
      if (op.b->is_dir())
        ch.Sub(Quota::Bytes(over));
      else
        GiveBack(&ch, op.b, over);
    }
    return moved;
  }();
  TableLock t(table_mu_);
  if (s && op.a != op.b) RecordRenameLocked(op);
  table_.MaybeFreeLocked(op.a);
  if (op.b) table_.MaybeFreeLocked(op.b);
  return s;
}

// ---------------------------------------------------------------- data

// Opens `rel` in the upper with `flags`, for data access. A writer whose
// read-write open is refused (a mode that denies the daemon's user reading,
// when it is not root) gets a write-only descriptor.
Result<UniqueFd> Overlay::OpenAccess(const std::string& rel, int flags) {
  auto fd = layers_.upper.Open(rel, flags | O_NOFOLLOW);
  if (!fd && fd.err() == EACCES && (flags & O_ACCMODE) == O_RDWR)
    fd = layers_.upper.Open(rel, (flags & ~O_ACCMODE) | O_WRONLY | O_NOFOLLOW);
  return fd;
}

Result<OpenFile> Overlay::OpenDataLocked(Node* node, bool write) {
  OpenFile f;
  Result<UniqueFd> fd = Error::Of(EIO, "open", "");
  if (node->unlinked) {
    if (write) ACQFS_TRY(MakeChangeable(node));
    f.from_lower = node->kept().in_lower();
    fd = kept_.Open(node->kept(), write ? O_RDWR : O_RDONLY);
    if (!fd && write && fd.err() == EACCES)
      fd = kept_.Open(node->kept(), O_WRONLY);
  } else if (write) {
    std::string path = PathLocked(node);
    ACQFS_TRY(CheckWritable(path, false, "open for writing"));
    ACQFS_TRY(EnsureUpper(node));
    fd = OpenAccess(path, O_RDWR);
  } else {
    std::string path = PathLocked(node);
    f.from_lower = !node->upper;
    fd = node->upper ? layers_.upper.Open(path, O_RDONLY | O_NOFOLLOW)
                     : layers_.lower.OpenForReading(path);
  }
  if (!fd) return fd.error();
  int acc = ::fcntl(fd->get(), F_GETFL) & O_ACCMODE;
  f.readable = acc != O_WRONLY;
  f.writable = acc != O_RDONLY;
  f.fd = std::move(*fd);
  return f;
}

Result<FileLease> Overlay::FileFor(Node* node, bool write) {
  if (FileLease f = files_.Find(node, write, node->upper.load())) return f;
  // Only a write that copies the file (up, or out of the lower once it
  // has no name) needs the tree lock exclusive.
  auto copies = [&] { return !node->upper.load() || node->kept().in_lower(); };
  auto f = [&]() -> Result<OpenFile> {
    {
      SharedLock l(tree_mu_);
      if (!write || !copies()) return OpenDataLocked(node, write);
    }
    ExclusiveLock l(tree_mu_, tree_gen_);
    return OpenDataLocked(node, write);
  }();
  if (!f) return f.error();
  return files_.Put(node, std::move(*f));
}

Result<FileLease> Overlay::Open(Node* node, int flags) {
  const bool trunc = (flags & O_TRUNC) != 0;
  const bool write = (flags & O_ACCMODE) != O_RDONLY || trunc;
  AddOpen(node);
  auto f = FileFor(node, write);
  if (f && trunc) {
    int fd = f->get();
    auto op = [&]() -> int64_t { return ::ftruncate(fd, 0) == 0 ? 0 : -errno; };
    std::string shown = layers_.upper.Shown(PathOf(node));
    auto r = quota_ ? quota_->Charged(&node->charged, fd,
                                      Quota::Charge::Settled(), op, shown)
                    : Result<int64_t>(op());
    if (!r)
      f = r.error();
    else if (*r != 0)
      f = Error::Of(static_cast<int>(-*r), "truncate", shown);
  }
  if (!f) ReleaseOpen(node);
  return f;
}

// ---------------------------------------------------------------- attributes

Result<UniqueFd> Overlay::OpenAttrTarget(Node* node, int fh_fd) {
  (void)fh_fd;
  // Only through the node's own upper copy (its kept data once it has no
  // name): never through anything that might reach the lower.
  ACQFS_TRY(MakeChangeable(node));
  if (node->unlinked) return kept_.Open(node->kept(), O_PATH | O_NOFOLLOW);
  return layers_.upper.Open(PathLocked(node), O_PATH | O_NOFOLLOW);
}

Result<struct stat> Overlay::SetAttr(Node* node, const SetAttrRequest& req,
                                     int fh_fd) {
  ExclusiveLock l(tree_mu_, tree_gen_);
  std::string shown =
      node->unlinked ? "(unlinked)" : layers_.upper.Shown(PathLocked(node));
  if (!node->unlinked)
    ACQFS_TRY(CheckWritable(PathLocked(node), node->is_dir(), "setattr"));
  auto target = OpenAttrTarget(node, fh_fd);
  if (!target) return target.error();
  // A truncate goes through the node's cached writable descriptor when
  // there is one (it works whatever the file's mode now says).
  FileLease cached = files_.Find(node, true, true);
  if (cached) fh_fd = cached.get();
  int fd = target->get();
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  if (req.set_mode && ::chmod(proc.c_str(), req.mode & 07777) != 0)
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
      if (f < 0) return Error::Errno("open for truncate", shown);
      UniqueFd owned(f);
      auto r = truncate(f);
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
                                                    const Layer& layer) {
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
  auto dir = layer.OpenDir(root ? "" : sys::Dirname(path));
  if (!dir) return dir.error();
  t.path = sys::XattrPath(dir->get(), root ? "" : sys::Basename(path));
  t.dir = std::move(*dir);
  t.shown = layer.Shown(path);
  return t;
}

Result<std::string> Overlay::GetXattr(Node* node, const std::string& name) {
  if (layers_.format.IsPrivateXattr(name))
    return Error::Of(ENODATA, "getxattr", name);
  SharedLock l(tree_mu_);
  auto t = XattrTargetOf(node, node->upper ? layers_.upper : layers_.lower);
  if (!t) return t.error();
  return sys::GetXattr(t->path, name, t->shown, t->follow);
}

Result<std::vector<std::string>> Overlay::ListXattr(Node* node) {
  SharedLock l(tree_mu_);
  auto t = XattrTargetOf(node, node->upper ? layers_.upper : layers_.lower);
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
  ExclusiveLock l(tree_mu_, tree_gen_);
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
  ExclusiveLock l(tree_mu_, tree_gen_);
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

}  // namespace acqfs
