// The Overlay (fs/overlay.h): set-up, and the helpers every operation uses
// (paths, layer views, the policy's read-only check, walks below a
// directory, statfs). The operations live in fs/overlay_*.cc.
#include "fs/overlay.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

#include "common/owner_access.h"
#include "common/sys.h"
#include "fs/boundary_note.h"
#include "fs/overlay_internal.h"

namespace acqfs {

// ---------------------------------------------------------------- set-up

Overlay::Overlay(Layers layers) : layers_(std::move(layers)) {}

Overlay::~Overlay() {
  if (owns_owner_access_) owner_access::Disable();
}

Result<std::unique_ptr<Overlay>> Overlay::Create(Layers layers) {
  std::unique_ptr<Overlay> ov(new Overlay(std::move(layers)));
  const Layers& l = ov->layers_;
  auto lst = sys::Fstat(l.lower.root(), l.lower.root_path());
  if (!lst) return lst.error();
  auto ust = sys::Fstat(l.upper.root(), l.upper.root_path());
  if (!ust) return ust.error();
  ov->layers_.store_on_host_dev = lst->st_dev == ust->st_dev;
  if (l.policy && l.policy->own_git()) {
    for (const std::string& m : l.policy->own_modules())
      for (const char* sub : {"/objects", "/objects/pack", "/objects/info",
                              "/objects/info/commit-graphs"})
        ov->module_store_paths_.push_back(m + sub);
    ov->module_stores_ =
        std::make_unique<std::atomic<Node*>[]>(ov->module_store_paths_.size());
    for (size_t i = 0; i < ov->module_store_paths_.size(); ++i)
      ov->module_stores_[i].store(nullptr);
  }
  // A daemon that is not root does what the kernel let the caller do on
  // the sandbox's files whose mode denies it (common/owner_access.h); only
  // with the layers claimed (a work area to journal in).
  if (!l.privileged && l.tmp.is_valid()) {
    ACQFS_TRY(owner_access::Enable(l.upper.root(), l.work.root()));
    ov->owns_owner_access_ = true;
  }
  // The daemon's umask, which its own creation calls apply (FixNewMode
  // undoes it): read once, before any request is served.
  ov->daemon_umask_ = ::umask(022);
  ::umask(ov->daemon_umask_);
  auto view = RootView(l);
  if (!view) return view.error();
  auto node = std::make_unique<Node>(lst->st_ino, S_IFDIR);
  node->upper = true;
  node->lower = view->lower ? view->lower : LowerBit(0);
  node->lower_xw = view->lower_xw;
  node->opaque = !view->merged();
  node->xwhiteouts = view->xwhiteouts;
  node->nlookup = 1;
  ov->table_.AddRoot(std::move(node));
  if (l.policy && l.policy->quota_bytes() > 0) {
    // The upper layer and acqfs-tmp (emptied by Layers::Open, but a
    // directory that keeps the room it grew).
    auto used = Quota::Measure(l.upper.root(), l.upper.root_path());
    if (!used) return used.error();
    uint64_t total = *used;
    // The frozen layers are the sandbox's disk too (a checkpoint must not
    // make room).
    for (const Layer& f : l.frozen) {
      auto bytes = Quota::Measure(f.root(), f.root_path());
      if (!bytes) return bytes.error();
      total += *bytes;
    }
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
  std::vector<std::string_view> parts;
  size_t size = 0;
  for (const Node* n = node; n && n != table_.root(); n = n->parent) {
    parts.push_back(n->name());
    size += n->name().size() + 1;
  }
  std::string p;
  p.reserve(size);
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!p.empty()) p += '/';
    p += *it;
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
  if (dir->merged()) {
    v.lower = dir->lower;
    v.lower_xw = dir->lower_xw;
  }
  v.xwhiteouts = dir->xwhiteouts;
  return v;
}

uint64_t Overlay::TagUpper(uint64_t ino) const { return layers_.TagStore(ino); }

Result<UniqueFd> Overlay::UpperDir(const Node* dir) {
  return layers_.upper.OpenDir(PathLocked(dir));
}

Result<ChildInfo> Overlay::LowerAt(const Node* parent,
                                   const std::string& name) {
  if (!parent->merged()) return ChildInfo{};
  DirView v = ViewOf(parent);
  v.upper = false;
  // What the lower layers hold, hidden by the policy or not: a whiteout
  // must hide a hidden lower object too, for the kernel overlayfs mounting
  // these layers.
  return ResolveChild(layers_, v, name, Gen(), /*apply_policy=*/false);
}

Result<bool> Overlay::LowerHas(const Node* parent, const std::string& name,
                               bool* is_dir) {
  *is_dir = false;
  auto c = LowerAt(parent, name);
  if (!c) return c.error();
  *is_dir = c->lower && S_ISDIR(c->lower_st.st_mode);
  return c->lower;
}

Status Overlay::CheckWritable(const std::string& rel, bool is_dir,
                              const char* op) const {
  if (!layers_.policy || !layers_.policy->ReadOnly(rel, is_dir)) return Ok();
  NoteBoundary(kRefusedReadOnly, rel);
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

void Overlay::GiveBack(Quota::Change* ch, Node* node, const struct stat& st) {
  if (!quota_ || S_ISDIR(st.st_mode) || st.st_nlink > 1) return;
  if (!S_ISREG(st.st_mode)) return ch->Sub(Quota::Bytes(st));
  // The file cache may hold the file's data until the node goes (a kernel
  // that looked the name up can still open it): given back then.
  quota_->Hold(&node->charged, Quota::Bytes(st));
  node->quota_owed = true;
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

}  // namespace acqfs
