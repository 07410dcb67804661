// The Overlay's lookups (fs/overlay.h): the node for a name, the st_ino
// rules, what GetAttr reports, and the lookup counts the kernel gives back.
#include <sys/stat.h>

#include "common/owner_access.h"
#include "common/sys.h"
#include "fs/overlay.h"
#include "fs/overlay_internal.h"

namespace acqfs {

uint64_t Overlay::InoFor(const ChildInfo& c) const {
  if (!c.upper) return c.lower_ino;
  if (c.origin) return c.origin;  // made from a lower object: keep its number
  // A merged directory is the lower directory's continuation.
  if (S_ISDIR(c.upper_st.st_mode) && c.lower && S_ISDIR(c.lower_st.st_mode) &&
      c.opaque != OpaqueMark::kOpaque)
    return c.lower_ino;
  return TagUpper(c.upper_st.st_ino);
}

void Overlay::FixStat(const Node* node, struct stat* st) const {
  st->st_ino = node->ino;
  // A merged directory's link count would count subdirectories of both
  // layers; 1 means "not counted" (find(1) and the kernel overlayfs agree).
  // With hidden paths every directory says 1: its lower count could reveal
  // a hidden subdirectory.
  // A directory of one layer alone (an upper one, or one frozen layer's)
  // keeps its own count, as on the kernel overlayfs.
  const bool spans =
      node->merged() && (node->upper || __builtin_popcount(node->lower) > 1);
  if (node->is_dir() &&
      (spans || (layers_.policy && layers_.policy->hides_patterns())))
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
  if (c.lower && S_ISDIR(c.lower_st.st_mode) && S_ISDIR(st.st_mode)) {
    node->lower = c.lower_dirs;
    node->lower_xw = c.lower_xw;
  } else if (c.lower && !S_ISDIR(c.lower_st.st_mode) && !S_ISDIR(st.st_mode)) {
    node->lower = LowerBit(c.lower_layer);
  }
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
    auto s = StatLocked(known, StatFor::kLookup);
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

void Overlay::CloseGate(const std::string& name) {
  std::lock_guard<std::mutex> g(gate_mu_);
  gate_name_ = name;
  gate_closed_.store(true, std::memory_order_release);
}

void Overlay::OpenGate() {
  {
    std::lock_guard<std::mutex> g(gate_mu_);
    gate_closed_.store(false, std::memory_order_release);
  }
  gate_cv_.notify_all();
}

void Overlay::NoteGatedDir(Node* parent, const std::string& name, Node* node) {
  NoteObjectStore(parent, name, node);
  if (!gate_closed_.load(std::memory_order_acquire) || parent != root()) return;
  std::lock_guard<std::mutex> g(gate_mu_);
  if (name == gate_name_) gate_dir_.store(node, std::memory_order_release);
}

void Overlay::NoteObjectStore(Node* parent, const std::string& name,
                              Node* node) {
  if (!node->is_dir()) return;
  if (parent == root()) {
    if (name == ".git") git_dir_.store(node, std::memory_order_release);
  } else if (parent == git_dir_.load(std::memory_order_acquire)) {
    if (name == "objects") objects_dir_.store(node, std::memory_order_release);
    if (name == "modules") modules_dir_.store(node, std::memory_order_release);
  } else if (!module_store_paths_.empty()) {
    NoteModuleStore(parent, node);
  }
  if (parent == objects_dir_.load(std::memory_order_acquire)) {
    if (name == "pack") pack_dir_.store(node, std::memory_order_release);
    if (name == "info") info_dir_.store(node, std::memory_order_release);
  } else if (parent == info_dir_.load(std::memory_order_acquire)) {
    if (name == "commit-graphs")
      graphs_dir_.store(node, std::memory_order_release);
  }
}

void Overlay::NoteModuleStore(Node* parent, Node* node) {
  // Only below .git/modules (a walk up the parents, under tree_mu_), and
  // then by path: a submodule's name may hold slashes.
  const Node* modules = modules_dir_.load(std::memory_order_acquire);
  if (!modules) return;
  const Node* p = parent;
  while (p && p != modules) p = p->parent;
  if (!p) return;
  const std::string path = PathLocked(node);
  for (size_t i = 0; i < module_store_paths_.size(); ++i)
    if (module_store_paths_[i] == path)
      module_stores_[i].store(node, std::memory_order_release);
}

bool Overlay::ModuleStore(const Node* node, size_t first_slot) const {
  for (size_t i = 0; i < module_store_paths_.size(); ++i)
    if (i % kModuleSlots >= first_slot &&
        module_stores_[i].load(std::memory_order_acquire) == node)
      return true;
  return false;
}

bool Overlay::SharedObjectStoreDir(Node* node) const {
  if (!node->is_dir()) return false;
  // A loose object's fan-out directory too: the host's gc empties it, and
  // a listing the kernel kept named objects gone (`git fsck`: "unable to
  // mmap ...: No such file or directory"). Its parent is read under the
  // tree lock (a rename moves it), once a store is known.
  if (objects_dir_.load(std::memory_order_acquire) ||
      !module_store_paths_.empty()) {
    SharedLock l(tree_mu_);
    const Node* parent = node->parent;
    if (parent && (parent == objects_dir_.load(std::memory_order_acquire) ||
                   (!module_store_paths_.empty() && ModuleStore(parent, 0) &&
                    !ModuleStore(parent, 1))))
      return true;
  }
  return node == objects_dir_.load(std::memory_order_acquire) ||
         node == pack_dir_.load(std::memory_order_acquire) ||
         node == info_dir_.load(std::memory_order_acquire) ||
         node == graphs_dir_.load(std::memory_order_acquire) ||
         (!module_store_paths_.empty() && ModuleStore(node, 0));
}

Overlay::StoreFile Overlay::ObjectStoreFileLocked(const Node* node) const {
  if (node->is_dir() || node->upper.load() || node->unlinked ||
      node->lower != LowerBit(0) || !node->parent)
    return StoreFile::kNone;
  const Node* dir = node->parent;
  if (dir == pack_dir_.load(std::memory_order_acquire) ||
      dir == info_dir_.load(std::memory_order_acquire) ||
      dir == graphs_dir_.load(std::memory_order_acquire))
    return StoreFile::kMapped;
  const Node* objects = objects_dir_.load(std::memory_order_acquire);
  if (objects != nullptr && dir->parent == objects)  // a fan-out directory
    return StoreFile::kLoose;
  if (module_store_paths_.empty()) return StoreFile::kNone;
  if (ModuleStore(dir, 1)) return StoreFile::kMapped;
  return dir->parent && ModuleStore(dir->parent, 0) &&
                 !ModuleStore(dir->parent, 1)
             ? StoreFile::kLoose
             : StoreFile::kNone;
}

void Overlay::WaitAtGate(Node* dir) {
  if (!gate_closed_.load(std::memory_order_acquire) ||
      dir != gate_dir_.load(std::memory_order_acquire))
    return;
  std::unique_lock<std::mutex> g(gate_mu_);
  gate_cv_.wait(g,
                [&] { return !gate_closed_.load(std::memory_order_acquire); });
}

void Overlay::WaitAtGatedName(Node* parent, const std::string& name) {
  if (!gate_closed_.load(std::memory_order_acquire) || parent != root()) return;
  std::unique_lock<std::mutex> g(gate_mu_);
  if (name != gate_name_) return;
  gate_cv_.wait(g,
                [&] { return !gate_closed_.load(std::memory_order_acquire); });
}

Result<Node*> Overlay::Lookup(Node* parent, const std::string& name) {
  WaitAtGate(parent);
  WaitAtGatedName(parent, name);
  SharedLock l(tree_mu_);
  auto node = LookupLocked(parent, name, true);
  if (node) NoteGatedDir(parent, name, *node);
  return node;
}

Result<Node*> Overlay::Lookup(Node* parent, const std::string& name,
                              struct stat* st, bool* host_object) {
  WaitAtGate(parent);
  WaitAtGatedName(parent, name);
  // Notes what a found node is (tree_mu_ held).
  auto found = [&](const Result<Node*>& node) {
    if (!node) return;
    NoteGatedDir(parent, name, *node);
    if (host_object)
      *host_object = ObjectStoreFileLocked(*node) != StoreFile::kNone;
  };
  bool stale = false;
  {
    SharedLock l(tree_mu_);
    auto node = LookupLocked(parent, name, true, st, &stale);
    if (!stale) {
      found(node);
      return node;
    }
  }
  // The node held for the name is gone from the disk: only the exclusive
  // lock may take the name from it (the lookup is then made afresh).
  Reaper reap(&table_);
  ExclusiveLock l(tree_mu_, tree_gen_);
  auto node = LookupLocked(parent, name, true, st, nullptr);
  found(node);
  return node;
}

// ---------------------------------------------------------------- reading

bool Overlay::HostReplacedLocked(const Node* node,
                                 const struct stat& path_st) const {
  if (node->is_dir() || node->upper.load() || node->unlinked ||
      node->lower != LowerBit(0) || path_st.st_ino == node->ino)
    return false;
  const uint32_t followed = node->followed_ino();
  return followed == 0 || path_st.st_ino != followed;
}

Result<struct stat> Overlay::StatCachedData(Node* node,
                                            const std::string& what) {
  FileLease f = files_.Find(node, false, false);
  if (!f) return Error::Of(ENOENT, "stat (" + what + ")", PathLocked(node));
  return sys::Fstat(f.get(), what);
}

Result<struct stat> Overlay::StatLocked(Node* node, StatFor who) {
  struct stat st;
  if (const Node::RemovedDir* gone = node->removed_dir()) return gone->st;
  if (node->unlinked) {
    // No name, and no kept data when the host took the name away (the
    // node's data then lives only in the file cache's descriptor).
    auto s = node->has_kept() ? kept_.Stat(node->kept())
                              : StatCachedData(node, "removed by the host");
    if (!s) return s.error();
    st = *s;
  } else {
    const Layer& layer = LayerOf(node);
    auto s = layer.StatVia(PathLocked(node), Gen());
    if (!s) return s.error();
    st = *s;
    if (HostReplacedLocked(node, st)) {
      const std::string what = "stat (the host replaced it)";
      if (who == StatFor::kLookup)
        return Error::Of(ENOENT, what, PathLocked(node));
      if (who == StatFor::kPath)
        return Error::Of(ESTALE, what, PathLocked(node));
      auto held = StatCachedData(node, "replaced by the host");
      if (!held) return Error::Of(ESTALE, what, PathLocked(node));
      st = *held;
    }
  }
  if ((st.st_mode & S_IFMT) != node->type)
    return Error::Of(ENOENT, "stat (type changed)", PathLocked(node));
  FixStat(node, &st);
  return st;
}

Result<struct stat> Overlay::GetAttr(Node* node, bool by_path) {
  SharedLock l(tree_mu_);
  const StatFor who = by_path ? StatFor::kPath : StatFor::kHolder;
  // A stat that raced a widened mode (common/owner_access.h) is taken again
  // once the mode is back.
  const uint64_t seq = owner_access::Seq();
  auto st = StatLocked(node, who);
  if (owner_access::Raced(seq)) {
    owner_access::Settled();
    st = StatLocked(node, who);
  }
  return st;
}

uint64_t Overlay::LowerEntryIno(const DirView& view, const MergedEntry& e) {
  if (e.lower_layer == 0) return e.lower_ino;
  // A frozen layer's object: its origin marker, or the one below it.
  auto c = ResolveChild(layers_, view, e.name);
  if (c && c->exists) return InoFor(*c);
  return TagUpper(e.lower_ino);
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

Overlay::HostChangeNodes Overlay::NodesOfHostChange(const std::string& dir,
                                                    const std::string& name) {
  HostChangeNodes out;
  SharedLock l(tree_mu_);
  TableLock t(table_mu_);
  Node* node = table_.root();
  for (size_t start = 0; node && start < dir.size();) {
    size_t slash = dir.find('/', start);
    if (slash == std::string::npos) slash = dir.size();
    node = node->Child(std::string_view(dir).substr(start, slash - start));
    start = slash + 1;
  }
  if (!node || !node->is_dir() || node->unlinked) return out;
  out.dir = node;
  out.dir_shows_host = (node->lower & LowerBit(0)) && node->merged();
  if (Node* e = node->Child(name);
      e && !e->upper.load() && !e->unlinked && (e->lower & LowerBit(0)))
    out.entry = e;
  return out;
}

}  // namespace acqfs
