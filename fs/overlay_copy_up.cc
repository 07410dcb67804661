// The Overlay's copy-up (fs/overlay.h): a node into the upper layer, a
// merged directory materialised, with the quota's reservations; the copying
// itself is fs/copy_up.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/overlay.h"
#include "fs/overlay_internal.h"

namespace acqfs {

// ---------------------------------------------------------------- copy-up

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

Status Overlay::EnsureUpper(Node* node) {
  if (node->upper) return Ok();
  if (node->unlinked || !node->parent)
    return Error::Of(ENOENT, "copy up", "(unlinked)");
  std::string rel = PathLocked(node);
  ACQFS_TRY(CheckWritable(rel, node->is_dir(), "copy up"));
  ACQFS_TRY(EnsureUpper(node->parent));
  const LowerSource from{node->lower_layer(), node->ino};
  if (!quota_) {
    ACQFS_TRY(acqfs::CopyUp(layers_, rel, from));
    node->upper = true;
    return Ok();
  }
  // Reserved before: what the copy is sure to take; settled after: the
  // copy's blocks and what its parent directory (and acqfs-tmp, where it is
  // built) grew.
  auto st = LayerOf(node).Stat(rel);
  if (!st) return st.error();
  auto pfd = UpperDir(node->parent);
  if (!pfd) return pfd.error();
  std::string shown = layers_.upper.Shown(rel);
  Quota::Change ch(quota_.get());  // after pfd, which it watches
  ACQFS_TRY(ch.Reserve(CopyEstimate(*st, false), "/" + rel));
  ACQFS_TRY(ch.Watch(pfd->get(), shown));
  ACQFS_TRY(ch.Watch(layers_.tmp.get(), layers_.tmp_path));
  ACQFS_TRY(acqfs::CopyUp(layers_, rel, from));
  node->upper = true;
  uint64_t made = ch.AddNew(pfd->get(), std::string(node->name()), shown);
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
  ExclusiveLock l(tree_mu_);
  return EnsureUpper(node);
}

void Overlay::MarkMaterialised(Node* dir) {
  dir->upper = true;
  dir->children.ForEach([this](NameLink* link) {
    if (link->is_alias()) return;
    Node* child = static_cast<Node*>(link);
    child->upper = true;
    child->lower = 0;
    child->lower_xw = 0;
    child->opaque = false;
    child->xwhiteouts = false;
    if (child->is_dir()) MarkMaterialised(child);
  });
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
    s = sys::Renameat2(tfd, tmp, pfd->get(), std::string(dir->name()), flags,
                       shown);
  }
  if (s) {
    ch.AddEntry(pfd->get(), std::string(dir->name()), shown);
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
        auto st = LayerOf(node).Stat(PathLocked(node));
        if (!st) return st.error();
        estimate += CopyEstimate(*st, true);
      }
    }
    return Materialise(node, estimate);
  }
  return EnsureUpper(node);
}

Status Overlay::InstallUpperFile(const std::string& rel, int src_fd) {
  const std::string shown = layers_.upper.Shown(rel);
  // Copied outside the tree lock (acqfs-tmp is the daemon's alone), then
  // published under it.
  const std::string temp = sys::TempName("install.");
  ACQFS_TRY(CopyLowerFdTo(layers_, src_fd, layers_.tmp.get(), temp, shown));
  auto drop = [&](Status s) {
    (void)::unlinkat(layers_.tmp.get(), temp.c_str(), 0);
    return s;
  };
  ExclusiveLock l(tree_mu_, tree_gen_);
  auto parent = sys::OpenBeneath(layers_.upper.root(), sys::Dirname(rel),
                                 O_RDONLY | O_DIRECTORY, 0, shown);
  if (!parent) return drop(parent.error());
  // The parent keeps its times, as after a copy-up into it.
  auto pst = sys::Fstat(parent->get(), shown);
  if (!pst) return drop(pst.error());
  const std::string name = sys::Basename(rel);
  Status s = sys::Renameat2(layers_.tmp.get(), temp, parent->get(), name,
                            RENAME_NOREPLACE, shown);
  if (!s) return drop(s);
  struct timespec ts[2] = {pst->st_atim, pst->st_mtim};
  if (::futimens(parent->get(), ts) != 0)
    return Error::Errno("utimensat", shown);
  if (quota_) {
    auto made = sys::StatAt(parent->get(), name, shown);
    if (made) quota_->Force(Quota::Bytes(*made));
  }
  return Ok();
}

}  // namespace acqfs
