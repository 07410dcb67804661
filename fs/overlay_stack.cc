// The Overlay's part in a checkpoint while mounted (fs/overlay.h, Freeze):
// the upper layer becomes the topmost frozen layer and an empty one takes
// its place, at a point where nothing moves.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer_format.h"
#include "fs/live_files.h"
#include "fs/overlay.h"
#include "fs/overlay_internal.h"

namespace acqfs {

// Nothing moves while it lives: no write is in flight (the write gate), no
// request runs (the tree lock), the table is locked; freed nodes are reaped
// once it ends (the Reaper, declared first, goes last).
class Overlay::QuiescentPoint {
 public:
  explicit QuiescentPoint(Overlay* ov)
      : writes_(ov->freeze_mu_),
        reap_(&ov->table_),
        tree_(ov->tree_mu_, ov->tree_gen_),
        table_(ov->table_mu_) {}

 private:
  std::unique_lock<std::shared_mutex> writes_;
  Reaper reap_;
  ExclusiveLock tree_;
  TableLock table_;
};

std::shared_lock<std::shared_mutex> Overlay::HoldOffFreeze() {
  return std::shared_lock<std::shared_mutex>(freeze_mu_);
}

Result<std::vector<Overlay::StaleName>> Overlay::Freeze(
    const std::string& new_upper, const std::function<Status()>& commit) {
  if (layers_.lower_layers() >= kMaxLowerLayers)
    return Error::Of(EMLINK,
                     "checkpoint (the stack holds " +
                         std::to_string(kMaxLowerLayers - 1) +
                         " frozen layers: squash it first)",
                     layers_.upper.root_path());
  auto next = Layer::OpenUnder(layers_.anchor, new_upper);
  if (!next) return next.error();
  // The quiescent point: the writes in flight end (each holds
  // HoldOffFreeze from its descriptor's lease to its last byte), new ones
  // wait, and so does every other request (the tree lock).
  QuiescentPoint quiet(this);
  // Files the kernel writes through on its own (passthrough; no gate holds
  // their writes off): each gets the copy the frozen layer will keep, made
  // now, so that a disk without room for them refuses the checkpoint
  // rather than leave a file the kernel writes in a frozen layer. Then the
  // new stack is recorded on disk, before anything else changes: if the
  // daemon dies from here on, it holds every write acknowledged (all are
  // in the old upper).
  auto live = CommitWithLiveCopies(commit, new_upper);
  if (!live) return live.error();
  const unsigned frozen_bit_number = layers_.lower_layers();
  const LowerMask bit = LowerBit(frozen_bit_number);
  std::vector<StaleName> stale;
  Node* root = table_.root();
  table_.ForEachNodeLocked([&](Node* n) {
    if (n->unlinked || !n->upper) return;  // kept data: in no layer
    if (n->is_dir()) {
      n->lower = n->opaque ? bit : (n->lower | bit);
      n->lower_xw = n->xwhiteouts ? (n->opaque ? bit : (n->lower_xw | bit))
                                  : (n->opaque ? 0 : n->lower_xw);
    } else {
      n->lower = bit;
      n->lower_xw = 0;
      // Its other names are separate lower files from now on (as the
      // kernel overlayfs, without index=on, breaks a lower hard link on
      // copy-up): the kernel must look them up again.
      for (const auto& a : n->aliases())
        stale.push_back(StaleName{a->parent, std::string(a->name())});
    }
    n->opaque = false;
    n->xwhiteouts = false;
    n->charged = Quota::kUnseen;
    n->upper = n == root;  // the new upper's root exists
  });
  for (const auto& s : stale)
    table_.DetachNameLocked(FindAlias(s), s.parent, s.name);
  table_.ClearUpperLinksLocked();
  layers_.frozen.push_back(std::move(layers_.upper));
  layers_.upper = std::move(*next);
  // The kernel's open files keep writing the inode they opened: it moves
  // on into the new upper, and its copy takes its place in the frozen
  // layer (a write the kernel made during the copy may or may not be in
  // it, as in a copy of any file being written). The stack is committed:
  // a failure here (the parent directories' copy-up) leaves that file in
  // the frozen layer, where the kernel's writes land, and is logged.
  for (const LiveFile& f : *live) {
    if (Status s = CarryIntoNewUpper(f); !s)
      spdlog::error(
          "checkpoint: {} stays open in the layer it froze, where writes "
          "through its open files land: {}",
          f.rel, s.error().Message());
    (void)::unlinkat(layers_.tmp.get(), f.copy.c_str(), 0);
  }
  // Every descriptor into the old upper goes: a cached one would write a
  // frozen layer, or read a file's old copy once it is copied up anew.
  // The pinned ones read the host (layer 0), which no checkpoint changes.
  files_.Shrink(0);
  return stale;
}

std::vector<Overlay::LiveFile> Overlay::LiveFilesLocked() {
  std::vector<LiveFile> out;
  if (!live_backings_) return out;
  for (const void* p : live_backings_()) {
    // A node with an open file is held by its open count.
    Node* n = const_cast<Node*>(static_cast<const Node*>(p));
    if (n->unlinked || !n->upper || n->is_dir() || !n->parent) continue;
    LiveFile f{n, PathLocked(n), {}, {}};
    for (const auto& a : n->aliases()) {
      const std::string dir = PathLocked(a->parent);
      f.other_names.push_back(dir.empty() ? std::string(a->name())
                                          : dir + "/" + std::string(a->name()));
    }
    out.push_back(std::move(f));
  }
  return out;
}

Result<std::vector<Overlay::LiveFile>> Overlay::CommitWithLiveCopies(
    const std::function<Status()>& commit, const std::string& new_upper) {
  std::vector<LiveFile> live = LiveFilesLocked();
  ACQFS_TRY(CopyLiveFiles(&live));
  Status s = commit();
  if (s) s = layers_.claim.TakeUpper(new_upper);
  if (!s) {
    for (const LiveFile& f : live)
      (void)::unlinkat(layers_.tmp.get(), f.copy.c_str(), 0);
    return s.error();
  }
  return live;
}

Status Overlay::CopyLiveFiles(std::vector<LiveFile>* live) {
  for (LiveFile& f : *live) {
    const std::string shown = layers_.upper.Shown(f.rel);
    auto src = layers_.upper.Open(f.rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    Status s = src ? Ok() : Status(src.error());
    std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
    if (s) s = ReplicateFile(src->get(), layers_.tmp.get(), tmp, shown);
    if (!s) {
      for (const LiveFile& g : *live) {
        if (&g == &f) break;
        (void)::unlinkat(layers_.tmp.get(), g.copy.c_str(), 0);
      }
      return Error::Of(s.err(),
                       "checkpoint (a copy of a file open through "
                       "passthrough, for the layer it freezes: " +
                           s.error().Message() + ")",
                       shown);
    }
    f.copy = std::move(tmp);
  }
  return Ok();
}

Status Overlay::CarryIntoNewUpper(const LiveFile& f) {
  const std::string shown = layers_.upper.Shown(f.rel);
  // Its parents in the new upper, as for any copy-up from the frozen layer.
  ACQFS_TRY(EnsureUpper(f.node->parent));
  const Layer& frozen = layers_.frozen.back();
  auto fdir = frozen.OpenDir(sys::Dirname(f.rel));
  if (!fdir) return fdir.error();
  auto udir = layers_.upper.OpenDir(sys::Dirname(f.rel));
  if (!udir) return udir.error();
  const std::string name = sys::Basename(f.rel);
  // The copy into the new upper, then swapped with the open file in one
  // step: the frozen layer never lacks the file.
  ACQFS_TRY(sys::Renameat2(layers_.tmp.get(), f.copy, udir->get(), name,
                           RENAME_NOREPLACE, shown));
  ACQFS_TRY(sys::Renameat2(fdir->get(), name, udir->get(), name,
                           RENAME_EXCHANGE, shown));
  f.node->upper = true;
  // Other names a link gave the file while it was open stay in the frozen
  // layer: they name the copy now (checkpoints break hard links, as the
  // kernel overlayfs's copy-up does).
  for (const std::string& other : f.other_names) {
    auto odir = frozen.OpenDir(sys::Dirname(other));
    if (!odir) return odir.error();
    ACQFS_TRY(LinkOver(fdir->get(), name, odir->get(), sys::Basename(other),
                       frozen.Shown(other)));
  }
  return Ok();
}

Status Overlay::LeaveNameless(const LiveFile& f) {
  const std::string shown = layers_.upper.Shown(f.rel);
  auto udir = layers_.upper.OpenDir(sys::Dirname(f.rel));
  if (!udir) return udir.error();
  const std::string name = sys::Basename(f.rel);
  // The copy (CopyLiveFiles) takes the name; the open file takes the
  // copy's name in acqfs-tmp, which the caller removes.
  ACQFS_TRY(sys::Renameat2(layers_.tmp.get(), f.copy, udir->get(), name,
                           RENAME_EXCHANGE, shown));
  // The copy's other names: a link made while the file was open.
  for (const std::string& other : f.other_names) {
    auto odir = layers_.upper.OpenDir(sys::Dirname(other));
    if (!odir) return odir.error();
    ACQFS_TRY(LinkOver(udir->get(), name, odir->get(), sys::Basename(other),
                       layers_.upper.Shown(other)));
  }
  return Ok();
}

Node* Overlay::FindAlias(const StaleName& s) const {
  // table_mu_ held: the node whose alias (s.parent, s.name) is.
  return s.parent->Child(s.name);
}

Result<Overlay::Restacked> Overlay::Restack(
    const std::vector<std::string>& frozen, const std::string& new_upper,
    const std::function<Status()>& commit) {
  if (frozen.size() >= kMaxLowerLayers)
    return Error::Of(EMLINK, "rewind (too many frozen layers)", new_upper);
  std::vector<Layer> layers;
  for (const auto& f : frozen) {
    auto l = Layer::OpenUnder(layers_.anchor, f);
    if (!l) return l.error();
    layers.push_back(std::move(*l));
  }
  auto next = Layer::OpenUnder(layers_.anchor, new_upper);
  if (!next) return next.error();
  // The quota counts the current stack (docs/sandboxes.md, "Quota"), as a
  // mount measures it: what leaves it (the frozen layers above the
  // checkpoint, the old upper, kept as an undo point or dropped) is given
  // back, what joins it is taken. Frozen layers do not change: measured
  // before the quiescent point; the old upper, at it.
  int64_t delta = 0;
  if (quota_) {
    auto among = [](const std::vector<Layer>& v, const Layer& l) {
      return std::any_of(v.begin(), v.end(), [&](const Layer& x) {
        return x.root_path() == l.root_path();
      });
    };
    for (const Layer& f : layers) {
      if (among(layers_.frozen, f)) continue;
      auto b = Quota::Measure(f.root(), f.root_path());
      if (!b) return b.error();
      delta += static_cast<int64_t>(*b);
    }
    for (const Layer& f : layers_.frozen) {
      if (among(layers, f)) continue;
      auto b = Quota::Measure(f.root(), f.root_path());
      if (!b) return b.error();
      delta -= static_cast<int64_t>(*b);
    }
    auto b = Quota::Measure(next->root(), next->root_path());
    if (!b) return b.error();
    delta += static_cast<int64_t>(*b);
  }
  QuiescentPoint quiet(this);
  // Files the kernel writes through on its own (passthrough) leave the
  // upper that becomes the undo point, a copy in their place (made before
  // the commit: no room for it refuses the rewind): their open files go on
  // with a file of no name, as with one unlinked.
  auto live = CommitWithLiveCopies(commit, new_upper);
  if (!live) return live.error();
  for (const LiveFile& f : *live) {
    if (Status s = LeaveNameless(f); !s)
      spdlog::error(
          "rewind: {} stays open in the layer the undo point keeps, where "
          "writes through its open files land: {}",
          f.rel, s.error().Message());
    (void)::unlinkat(layers_.tmp.get(), f.copy.c_str(), 0);
  }
  if (quota_) {
    // The stack is recorded: an old upper that cannot be measured stays
    // counted (until a remount measures the new stack) rather than fail.
    if (auto b =
            Quota::Measure(layers_.upper.root(), layers_.upper.root_path()))
      delta -= static_cast<int64_t>(*b);
    if (delta > 0)
      quota_->Force(static_cast<uint64_t>(delta));
    else
      quota_->Release(static_cast<uint64_t>(-delta));
  }
  Restacked out;
  // Every name the table knows goes (deepest first, so that a parent is
  // still there when its child loses its name); the nodes the kernel holds
  // are told to drop their caches.
  struct Named {
    size_t depth;
    Node* parent;
    std::string name;
  };
  std::vector<Named> names;
  Node* root = table_.root();
  table_.ForEachNodeLocked([&](Node* n) {
    if (n != root && n->nlookup > 0) out.nodes.push_back(n);
    // Its file left the stack with its layer (given back above): nothing
    // of it is counted any more, but kept data (quota_owed), which is in
    // no layer.
    if (!n->quota_owed) n->charged = Quota::kUnseen;
    auto depth = [](const Node* p) {
      size_t d = 0;
      for (; p; p = p->parent) ++d;
      return d;
    };
    if (n->parent)
      names.push_back(
          Named{depth(n->parent), n->parent, std::string(n->name())});
    for (const auto& a : n->aliases())
      names.push_back(
          Named{depth(a->parent), a->parent, std::string(a->name())});
  });
  std::sort(names.begin(), names.end(),
            [](const Named& a, const Named& b) { return a.depth > b.depth; });
  for (const auto& n : names) {
    Node* child = n.parent->Child(n.name);
    if (!child) continue;
    out.names.push_back(StaleName{n.parent, n.name});
    table_.DetachNameLocked(child, n.parent, n.name);
  }
  table_.ClearUpperLinksLocked();
  layers_.frozen = std::move(layers);
  layers_.upper = std::move(*next);
  // The kernel may also cache a name as missing (a negative entry), which
  // the table never knew. Below a directory it knew, the directory's own
  // name going prunes them; in the root nothing does. So every name of the
  // new stack's root (in any of its layers: a whiteout's too, harmless)
  // is told to be forgotten: `stat` said ENOENT after a rewind to a
  // checkpoint holding the name, and open(O_CREAT) EEXIST.
  {
    std::set<std::string> root_names;
    auto collect = [&](const Layer& l) {
      if (auto names = sys::ReadDir(l.root(), l.root_path()))
        for (const auto& e : *names) root_names.insert(e.name);
    };
    for (const Layer& f : layers_.frozen) collect(f);
    collect(layers_.lower);
    for (const auto& n : root_names) out.names.push_back(StaleName{root, n});
  }
  auto view = RootView(layers_);
  if (!view) return view.error();  // the stack is recorded: a remount reads it
  root->lower = view->lower ? view->lower : LowerBit(0);
  root->lower_xw = view->lower_xw;
  root->opaque = !view->merged();
  root->xwhiteouts = view->xwhiteouts;
  root->charged = Quota::kUnseen;
  files_.DropAll();
  return out;
}

Status Overlay::ReplaceFrozen(unsigned count, const std::string& merged,
                              const std::function<Status()>& commit) {
  if (count < 1 || count > layers_.frozen.size())
    return Error::Of(EINVAL, "squash (no such frozen layers)", merged);
  auto next = Layer::OpenUnder(layers_.anchor, merged);
  if (!next) return next.error();
  QuiescentPoint quiet(this);
  ACQFS_TRY(commit());
  // Layers 1..count become layer 1; those above move down by count - 1.
  auto remap_mask = [count](LowerMask m) -> LowerMask {
    const uint64_t w = m;
    const uint64_t low = w & 1;
    const uint64_t mid =
        w & (((uint64_t{1} << (count + 1)) - 1) & ~uint64_t{1});
    const uint64_t high = (w >> (count + 1)) << 2;
    return static_cast<LowerMask>(low | (mid ? 2 : 0) | high);
  };
  auto remap_layer = [count](unsigned i) -> unsigned {
    if (i == 0) return 0;
    return i <= count ? 1 : i - (count - 1);
  };
  table_.ForEachNodeLocked([&](Node* n) {
    n->lower = remap_mask(n->lower);
    // The merged layer holds no xattr whiteouts (squash makes 0/0 ones).
    n->lower_xw = remap_mask(n->lower_xw) & ~LowerBit(1);
    if (n->has_kept() && n->kept().in_lower())
      n->mutable_kept()->set_layer(remap_layer(n->kept().layer()));
  });
  layers_.frozen.erase(layers_.frozen.begin(), layers_.frozen.begin() + count);
  layers_.frozen.insert(layers_.frozen.begin(), std::move(*next));
  files_.DropAll();
  return Ok();
}

}  // namespace acqfs
