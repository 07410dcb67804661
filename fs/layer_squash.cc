#include "fs/layer_squash.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <unordered_set>
#include <vector>

#include "common/sys.h"
#include "fs/copy_up.h"

namespace acqfs {
namespace {

// One directory of the merge: its path, the squashed layers whose
// directory of that path takes part (topmost first), and of those the ones
// that may hold xattr whiteouts.
struct Level {
  std::string rel;
  std::vector<unsigned> chain;
  LowerMask xw = 0;
};

// A directory made, for its times to be set once it is filled.
struct Made {
  std::string rel;
  unsigned layer;
  struct stat st;
};

}  // namespace

Result<SquashStats> SquashLayers(const Layers& layers, unsigned bottom,
                                 unsigned top, const std::string& out) {
  if (bottom < 1 || bottom > top || top >= layers.lower_layers())
    return Error::Of(EINVAL, "squash (no such frozen layers)", out);
  SquashStats stats;
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
  std::vector<Level> todo = {root};
  std::vector<Made> made;
  while (!todo.empty()) {
    Level level = std::move(todo.back());
    todo.pop_back();
    const std::string shown = out + "/" + level.rel;
    auto dst =
        sys::OpenBeneath(out_root->get(), level.rel.empty() ? "." : level.rel,
                         O_PATH | O_DIRECTORY | O_NOFOLLOW, 0, shown);
    if (!dst) return dst.error();
    std::vector<UniqueFd> fds;
    for (unsigned i : level.chain) {
      auto d = layers.LowerLayer(i).OpenDir(level.rel);
      if (!d) return d.error();
      fds.push_back(std::move(*d));
    }
    std::unordered_set<std::string> decided;
    for (size_t k = 0; k < level.chain.size(); ++k) {
      const unsigned i = level.chain[k];
      const Layer& layer = layers.LowerLayer(i);
      auto ents = sys::ReadDir(fds[k].get(), layer.Shown(level.rel));
      if (!ents) return ents.error();
      for (const auto& e : *ents) {
        if (!decided.insert(e.name).second) continue;
        const std::string rel = sys::Join(level.rel, e.name);
        auto st = sys::StatAt(fds[k].get(), e.name, layer.Shown(rel));
        if (!st) return st.error();
        auto w =
            f.IsWhiteoutEntry(fds[k].get(), e.name, *st,
                              (level.xw & LowerBit(i)) != 0, layer.Shown(rel));
        if (!w) return w.error();
        if (*w) {
          ACQFS_TRY(LayerFormat::MakeWhiteout(dst->get(), e.name, shown));
          // Owned as the whiteout it stands for (a root squash of a user's
          // layers left root's whiteouts in them). One acting as the owner
          // (cli/as_owner.h) made it the owner's already, and may not give
          // it away (EPERM).
          if (layers.privileged &&
              ::fchownat(dst->get(), e.name.c_str(), st->st_uid, st->st_gid,
                         AT_SYMLINK_NOFOLLOW) != 0 &&
              errno != EPERM)
            return Error::Errno("chown whiteout (squash)", out + "/" + rel);
          ++stats.whiteouts;
          continue;
        }
        if (!S_ISDIR(st->st_mode)) {
          if (::linkat(fds[k].get(), e.name.c_str(), dst->get(), e.name.c_str(),
                       0) != 0) {
            if (errno != EMLINK)
              return Error::Errno("link (squash)", layer.Shown(rel));
            // Too many names for one inode: a copy of its own.
            ACQFS_TRY(CopyLowerTo(layers, rel, dst->get(), e.name,
                                  LowerSource{i, 0}));
          }
          ++stats.linked;
          continue;
        }
        // A directory: its chain down the squashed layers.
        Level child;
        child.rel = rel;
        bool stopped = false;
        uint64_t origin = 0;
        for (size_t q = k; q < level.chain.size(); ++q) {
          const unsigned j = level.chain[q];
          struct stat cst;
          bool found = false;
          ACQFS_TRY(sys::StatAtIfExists(fds[q].get(), e.name, &cst, &found,
                                        layers.LowerLayer(j).Shown(rel)));
          if (!found) continue;
          auto cw = f.IsWhiteoutEntry(fds[q].get(), e.name, cst,
                                      (level.xw & LowerBit(j)) != 0,
                                      layers.LowerLayer(j).Shown(rel));
          if (!cw) return cw.error();
          if (*cw || !S_ISDIR(cst.st_mode)) {
            stopped = true;
            break;
          }
          child.chain.push_back(j);
          if (!origin) {
            auto o = f.ReadOrigin(fds[q].get(), e.name,
                                  layers.LowerLayer(j).Shown(rel));
            if (!o) return o.error();
            origin = *o;
          }
          auto m = f.ReadOpaque(fds[q].get(), e.name,
                                layers.LowerLayer(j).Shown(rel));
          if (!m) return m.error();
          if (*m == OpaqueMark::kMayHoldXattrWhiteouts) child.xw |= LowerBit(j);
          if (*m == OpaqueMark::kOpaque) {
            stopped = true;
            break;
          }
        }
        if (::mkdirat(dst->get(), e.name.c_str(), 0700) != 0)
          return Error::Errno("mkdir (squash)", out + "/" + rel);
        ACQFS_TRY(CopyAttrs(layers, fds[k].get(), e.name, *st, dst->get(),
                            e.name, out + "/" + rel));
        if (!origin && stopped) origin = layers.TagStore(st->st_ino);
        if (origin)
          ACQFS_TRY(f.SetOrigin(dst->get(), e.name, origin, out + "/" + rel));
        if (stopped)
          ACQFS_TRY(f.SetOpaque(dst->get(), e.name, out + "/" + rel));
        made.push_back(Made{rel, i, *st});
        ++stats.dirs;
        todo.push_back(std::move(child));
      }
    }
  }
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
