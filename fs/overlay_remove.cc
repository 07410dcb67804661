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

}  // namespace acqfs
