#include "fs/layer_squash.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <unordered_set>
#include <vector>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer_chain.h"

namespace acqfs {
namespace {

// One directory of the merge: its path, the squashed layers whose
// directory of that path takes part (topmost first), and of those the ones
// that may hold xattr whiteouts.
struct Level {
  std::string rel;
  std::vector<unsigned> chain;
  LowerMask xw = 0;
  // The directory merges with a directory of its path in the layers below
  // the squashed ones (so a child's lookup goes on down there).
  bool below = true;
};

// A directory made, for its times to be set once it is filled.
struct Made {
  std::string rel;
  struct stat st;
};

// What a squash writes and where, and what it has done so far.
struct Squash {
  const Layers& layers;
  unsigned bottom;  // the lowest squashed layer
  const std::string& out;
  int out_root;
  SquashStats stats;
  std::vector<Level> todo;  // directories made, still to fill
  std::vector<Made> made;
};

// The merge of `name` down the directories `fds` of `level` (one per layer
// of level.chain; invalid for one gone meanwhile), from the k-th one, whose
// listing holds the name (fs/layer_chain.h). An entry gone since it was
// listed is absent.
Result<bool> ChainOf(const Squash& sq, const Level& level,
                     const std::vector<UniqueFd>& fds, size_t k,
                     const sys::DirEntry& ent, NameChain* chain) {
  const std::string rel = sys::Join(level.rel, ent.name);
  for (size_t q = k; q < level.chain.size(); ++q) {
    if (!fds[q]) continue;
    const unsigned j = level.chain[q];
    const std::string shown = sq.layers.LowerLayer(j).Shown(rel);
    // The listing's type spares a non-directory's origin marker (a hard
    // link keeps it); a directory's is read.
    EntryRead how{
        .xattr_whiteouts = (level.xw & LowerBit(j)) != 0,
        .origin = chain->wants_origin() &&
                  (q != k || ent.type == DT_DIR || ent.type == DT_UNKNOWN)};
    auto e =
        ReadLayerEntry(sq.layers.format, fds[q].get(), ent.name, how, shown);
    if (e && e->kind == LayerEntry::kDir && chain->wants_origin() &&
        !how.origin) {
      how.origin = true;
      e = ReadLayerEntry(sq.layers.format, fds[q].get(), ent.name, how, shown);
    }
    if (!e) return e.error();
    if (q == k && e->kind == LayerEntry::kAbsent) return false;
    if (!chain->Add(j, *e, sq.layers.TagStore(e->st.st_ino))) break;
  }
  return true;
}

// Writes the whiteout `name` of `level` into `dst`, owned as `st` (the
// whiteout it stands for).
Status PutWhiteout(Squash* sq, const Level& level, int dst,
                   const std::string& name, const struct stat& st) {
  const std::string shown = sq->out + "/" + sys::Join(level.rel, name);
  ACQFS_TRY(LayerFormat::MakeWhiteout(dst, name, shown));
  // A root squash of a user's layers left root's whiteouts in them. One
  // acting as the owner (state/as_owner.h) made it the owner's already, and
  // may not give it away (EPERM).
  if (sq->layers.privileged &&
      ::fchownat(dst, name.c_str(), st.st_uid, st.st_gid,
                 AT_SYMLINK_NOFOLLOW) != 0 &&
      errno != EPERM)
    return Error::Errno("chown whiteout (squash)", shown);
  ++sq->stats.whiteouts;
  return Ok();
}

// Makes the directory `name` of `level` in `dst` for `chain` (its top a
// directory in the k-th layer of the level), to be filled later.
// Does the first entry of `rel` (in the directory `parent_rel`) in the
// layers below the squashed ones, from the highest down, say a directory?
// (Then the directory of that name merges with it, and it gives the number
// below the squash as it did above.) A layer whose parent directory is
// missing there holds nothing of the name.
Result<bool> DirectoryBelow(const Squash& sq, const std::string& parent_rel,
                            const std::string& name) {
  for (unsigned j = sq.bottom; j-- > 0;) {
    const Layer& l = sq.layers.LowerLayer(j);
    auto dir = l.OpenDir(parent_rel);
    if (!dir && (dir.err() == ENOENT || dir.err() == ENOTDIR)) continue;
    if (!dir) return dir.error();
    EntryRead how{.plain = j == 0};
    auto e = ReadLayerEntry(sq.layers.format, dir->get(), name, how,
                            l.Shown(sys::Join(parent_rel, name)));
    if (!e) return e.error();
    if (e->kind == LayerEntry::kAbsent) continue;
    return e->kind == LayerEntry::kDir;
  }
  return false;
}

Status PutDir(Squash* sq, const Level& level, int src, int dst,
              const std::string& name, const NameChain& chain) {
  const std::string rel = sys::Join(level.rel, name);
  const std::string shown = sq->out + "/" + rel;
  const LayerFormat& f = sq->layers.format;
  if (::mkdirat(dst, name.c_str(), 0700) != 0)
    return Error::Errno("mkdir (squash)", shown);
  ACQFS_TRY(CopyAttrs(sq->layers, src, name, chain.top().st, dst, name, shown));
  // The number it reported stays its number: given by a marker where no
  // directory below the squashed layers merges with it (a marker, a chain
  // stopped here, nothing there), else by the directory below, as before.
  bool below = false;
  if (level.below && !chain.stopped()) {
    auto d = DirectoryBelow(*sq, level.rel, name);
    if (!d) return d.error();
    below = *d;
  }
  if (chain.number_known() || !below)
    ACQFS_TRY(f.SetOrigin(dst, name, chain.number(), shown));
  if (chain.stopped()) ACQFS_TRY(f.SetOpaque(dst, name, shown));
  sq->made.push_back(Made{rel, chain.top().st});
  ++sq->stats.dirs;
  Level child;
  child.rel = rel;
  child.xw = static_cast<LowerMask>(chain.xattr_whiteouts());
  child.below = below;
  for (NameChain::LayerSet d = chain.dirs(); d;) {
    const unsigned j = 63 - static_cast<unsigned>(__builtin_clzll(d));
    d &= ~NameChain::Bit(j);
    child.chain.push_back(j);
  }
  sq->todo.push_back(std::move(child));
  return Ok();
}

// Writes the name `ent`, listed in the k-th directory of `level`, into
// `dst`. False when it was gone by then (a lower layer's entry of the name
// decides instead).
Result<bool> PutName(Squash* sq, const Level& level,
                     const std::vector<UniqueFd>& fds, size_t k,
                     const sys::DirEntry& ent, int dst) {
  NameChain chain;
  auto listed = ChainOf(*sq, level, fds, k, ent, &chain);
  if (!listed) return listed.error();
  if (!*listed || !(chain.found() || chain.whited_out())) return false;
  const unsigned i = level.chain[k];
  const int src = fds[k].get();
  const std::string& name = ent.name;
  if (chain.whited_out()) {
    ACQFS_TRY(PutWhiteout(sq, level, dst, name, chain.top().st));
    return true;
  }
  if (chain.is_dir()) {
    ACQFS_TRY(PutDir(sq, level, src, dst, name, chain));
    return true;
  }
  // A non-directory: the same inode (data, attributes, origin marker).
  const std::string rel = sys::Join(level.rel, name);
  if (::linkat(src, name.c_str(), dst, name.c_str(), 0) != 0) {
    if (errno == ENOENT) return false;  // gone since it was read
    if (errno != EMLINK)
      return Error::Errno("link (squash)", sq->layers.LowerLayer(i).Shown(rel));
    // Too many names for one inode: a copy of its own.
    ACQFS_TRY(CopyLowerTo(sq->layers, rel, dst, name, LowerSource{i, 0}));
  }
  ++sq->stats.linked;
  return true;
}

// Fills the directory `level` of the new layer: each name the squashed
// directories list, once, decided by its topmost entry. A squashed
// directory gone meanwhile lists nothing.
Status FillDir(Squash* sq, const Level& level) {
  const std::string shown = sq->out + "/" + level.rel;
  auto dst = sys::OpenBeneath(sq->out_root, level.rel.empty() ? "." : level.rel,
                              O_PATH | O_DIRECTORY | O_NOFOLLOW, 0, shown);
  if (!dst) return dst.error();
  std::vector<UniqueFd> fds;
  for (unsigned i : level.chain) {
    auto d = sq->layers.LowerLayer(i).OpenDir(level.rel);
    if (!d && d.err() != ENOENT && d.err() != ENOTDIR) return d.error();
    fds.push_back(d ? std::move(*d) : UniqueFd());
  }
  std::unordered_set<std::string> decided;
  for (size_t k = 0; k < level.chain.size(); ++k) {
    if (!fds[k]) continue;
    const Layer& layer = sq->layers.LowerLayer(level.chain[k]);
    auto ents = sys::ReadDir(fds[k].get(), layer.Shown(level.rel));
    if (!ents && ents.err() == ENOENT) continue;  // removed since its open
    if (!ents) return ents.error();
    for (const auto& e : *ents) {
      if (decided.count(e.name)) continue;
      auto put = PutName(sq, level, fds, k, e, dst->get());
      if (!put) return put.error();
      if (*put) decided.insert(e.name);
    }
  }
  return Ok();
}

}  // namespace

Result<SquashStats> SquashLayers(const Layers& layers, unsigned bottom,
                                 unsigned top, const std::string& out) {
  if (bottom < 1 || bottom > top || top >= layers.lower_layers())
    return Error::Of(EINVAL, "squash (no such frozen layers)", out);
  auto out_root = sys::OpenDirPath(out, O_PATH);
  if (!out_root) return out_root.error();
  const LayerFormat& f = layers.format;
  // The roots' chain: down from `top` to the first opaque root.
  Level root;
  bool root_stopped = false;
  for (unsigned i = top + 1; i-- > bottom;) {
    const Layer& l = layers.LowerLayer(i);
    root.chain.push_back(i);
    auto m = f.ReadOpaque(l.root(), "", l.root_path());
    if (!m) return m.error();
    if (*m == OpaqueMark::kMayHoldXattrWhiteouts) root.xw |= LowerBit(i);
    if (*m == OpaqueMark::kOpaque) {
      root_stopped = true;
      break;
    }
  }
  if (root_stopped) ACQFS_TRY(f.SetOpaque(out_root->get(), "", out));
  root.below = !root_stopped;
  Squash sq{layers, bottom, out, out_root->get(), {}, {std::move(root)}, {}};
  while (!sq.todo.empty()) {
    Level level = std::move(sq.todo.back());
    sq.todo.pop_back();
    ACQFS_TRY(FillDir(&sq, level));
  }
  SquashStats stats = sq.stats;
  std::vector<Made>& made = sq.made;
  // Filling a directory moved its times: set them again, deepest last made
  // first.
  for (auto it = made.rbegin(); it != made.rend(); ++it) {
    struct timespec ts[2] = {it->st.st_atim, it->st.st_mtim};
    if (::utimensat(out_root->get(), it->rel.c_str(), ts,
                    AT_SYMLINK_NOFOLLOW) != 0)
      return Error::Errno("utimensat (squash)", out + "/" + it->rel);
  }
  {
    const Layer& t = layers.LowerLayer(top);
    auto st = sys::Fstat(t.root(), t.root_path());
    if (!st) return st.error();
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    if (::utimensat(AT_FDCWD, out.c_str(), ts, 0) != 0)
      return Error::Errno("utimensat (squash)", out);
  }
  auto sync_fd = sys::OpenDirPath(out, O_RDONLY);
  if (!sync_fd) return sync_fd.error();
  if (::syncfs(sync_fd->get()) != 0) return Error::Errno("syncfs", out);
  return stats;
}

}  // namespace acqfs
