// The Overlay's removals (fs/overlay.h): unlink and rmdir, and keeping the
// data of a file that loses its last name while it may be open.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sys.h"
#include "fs/overlay.h"
#include "fs/overlay_internal.h"

namespace acqfs {

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
    node->set_kept(kept_.KeepLower(PathLocked(node), node->lower_layer()));
    return Ok();
  }
  auto k = kept_.Keep(pfd, name, shown);
  if (!k) return k.error();
  node->set_kept(std::move(*k));
  return Ok();
}

// What differs between unlink(2) and rmdir(2). The wrong type gets ext4's
// answer: EISDIR for unlink of a directory, ENOTDIR for rmdir of anything
// else.
struct Overlay::Removal {
  const char* op;  // "unlink" or "rmdir", for messages and the policy
  bool dir;        // removes a directory, which must be empty (ENOTEMPTY)
};

Status Overlay::Unlink(Node* parent, const std::string& name) {
  return Remove(parent, name, Removal{"unlink", false});
}

Status Overlay::Rmdir(Node* parent, const std::string& name) {
  return Remove(parent, name, Removal{"rmdir", true});
}

Status Overlay::Remove(Node* parent, const std::string& name,
                       const Removal& how) {
  Reaper reap(&table_);
  // Only a removed directory retires the cached directory descriptors.
  ExclusiveLock l(tree_mu_, tree_gen_, /*reshapes=*/how.dir);
  auto child = LookupLocked(parent, name, false);
  if (!child) return child.error();
  Node* node = *child;
  std::string shown = layers_.upper.Shown(sys::Join(PathLocked(parent), name));
  Result<Node::RemovedDir> removed = Error::Of(ENOENT, how.op, shown);
  Status s = [&]() -> Status {
    if (node->is_dir() != how.dir)
      return Error::Of(how.dir ? ENOTDIR : EISDIR, how.op, shown);
    ACQFS_TRY(
        CheckWritable(sys::Join(PathLocked(parent), name), how.dir, how.op));
    if (how.dir) {
      auto entries = ListMerged(layers_, ViewOf(node));
      if (!entries) return entries.error();
      if (!entries->empty()) return Error::Of(ENOTEMPTY, how.op, shown);
      removed = ReadRemovedDir(node);  // what it keeps showing
    }
    bool lower_is_dir;
    auto has_lower = LowerHas(parent, name, &lower_is_dir);
    if (!has_lower) return has_lower.error();
    ACQFS_TRY(EnsureUpper(parent));
    auto pfd = UpperDir(parent);
    if (!pfd) return pfd.error();
    // Never refused: removing is how room is made. What the directories
    // grow or give back (a whiteout's name, kept data in acqfs-tmp, a
    // removed directory and the whiteouts it held) is settled.
    Quota::Change ch(quota_.get());
    ACQFS_TRY(ch.Watch(pfd->get(), shown));
    // A file the kernel may still hold keeps its data (Node::kept); its
    // blocks count against the quota until the data goes (MaybeFreeLocked).
    const bool keep = MustKeep(node);  // never for a directory
    if (!node->upper) {
      // Only the lower has it: a whiteout hides it.
      ACQFS_TRY(LayerFormat::MakeWhiteout(pfd->get(), name, shown));
      if (keep)
        node->set_kept(kept_.KeepLower(PathLocked(node), node->lower_layer()));
      return Ok();
    }
    int tfd = layers_.tmp.get();
    ACQFS_TRY(ch.Watch(tfd, layers_.tmp_path));
    struct stat gone {};
    bool frees = false;  // removing the name frees `gone`, a non-directory
    if (quota_ && !how.dir && !keep) {
      auto st = sys::StatAt(pfd->get(), name, shown);
      if (!st) return st.error();
      gone = *st;
      frees = true;
    }
    std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
    if (*has_lower) {
      // The lower has the name too: a whiteout built in acqfs-tmp takes it,
      // renamed over a file, exchanged with a directory (which then is at
      // `tmp`).
      if (keep) ACQFS_TRY(KeepBeforeReplacing(node, pfd->get(), name, shown));
      Status r = LayerFormat::MakeWhiteout(tfd, tmp, shown);
      if (r)
        r = sys::Renameat2(tfd, tmp, pfd->get(), name,
                           how.dir ? RENAME_EXCHANGE : 0, shown);
      if (!r) {
        (void)sys::RemoveTree(tfd, tmp, layers_.tmp_path);
        kept_.Release(node->take_kept());  // the name stays
        return r;
      }
    } else if (how.dir) {
      ACQFS_TRY(sys::Renameat2(pfd->get(), name, tfd, tmp, 0, shown));
    } else if (!keep) {
      ACQFS_TRY(
          MakeCall(::unlinkat(pfd->get(), name.c_str(), 0), "unlink", shown));
    } else {
      auto k = kept_.KeepAndRemove(pfd->get(), name, shown);
      if (!k) return k.error();
      node->set_kept(std::move(*k));
    }
    if (how.dir) {
      // The upper directory is at `tmp` now, out of the upper layer.
      ch.SubEntry(tfd, tmp, layers_.tmp_path);
      return sys::RemoveTree(tfd, tmp, layers_.tmp_path);
    }
    if (frees) GiveBack(&ch, node, gone);
    return Ok();
  }();
  TableLock t(table_mu_);
  if (s) table_.DetachNameLocked(node, parent, name);
  if (s && how.dir) RemovedDirLocked(node, std::move(removed));
  table_.MaybeFreeLocked(node);
  return s;
}

}  // namespace acqfs
