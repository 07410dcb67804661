// The Overlay's rename (fs/overlay.h): checks, preparing both ends, the
// move in the upper layer and in the node table.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sys.h"
#include "fs/copy_up_source.h"
#include "fs/overlay.h"
#include "fs/overlay_internal.h"

namespace acqfs {

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
  // The lower directories under each name (ChildInfo::lower_dirs).
  LowerMask src_dirs = 0, src_xw = 0, dst_dirs = 0, dst_xw = 0;
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
  // What the lower layers hold at a node's new name (a moved node was made
  // upper first: only a directory's lower directories matter).
  auto land = [](Node* n, bool lower_dir, LowerMask dirs, LowerMask xw) {
    n->lower = n->is_dir() && lower_dir ? dirs : 0;
    n->lower_xw = n->is_dir() && lower_dir ? xw : 0;
  };
  land(op.a, op.dst_lower_dir, op.dst_dirs, op.dst_xw);
  if (op.b && op.exchange) {
    table_.MoveNameLocked(op.b, op.new_parent, op.new_name, op.parent, op.name);
    land(op.b, op.src_lower_dir, op.src_dirs, op.src_xw);
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

  // What a directory renamed over keeps showing (RemovedDirLocked).
  Result<Node::RemovedDir> over_dir = Error::Of(ENOENT, "rename", op.shown);
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
    auto src_lower = LowerAt(parent, name);
    if (!src_lower) return src_lower.error();
    auto dst_lower = LowerAt(new_parent, new_name);
    if (!dst_lower) return dst_lower.error();
    op.src_lower = src_lower->lower;
    op.src_lower_dir = op.src_lower && S_ISDIR(src_lower->lower_st.st_mode);
    op.src_dirs = src_lower->lower_dirs;
    op.src_xw = src_lower->lower_xw;
    op.dst_lower = dst_lower->lower;
    op.dst_lower_dir = op.dst_lower && S_ISDIR(dst_lower->lower_st.st_mode);
    op.dst_dirs = dst_lower->lower_dirs;
    op.dst_xw = dst_lower->lower_xw;
    ACQFS_TRY(EnsureUpper(parent));
    ACQFS_TRY(EnsureUpper(new_parent));
    ACQFS_TRY(PrepareToMove(op.a));
    if (op.exchange) ACQFS_TRY(PrepareToMove(op.b));
    auto pfd = UpperDir(parent);
    if (!pfd) return pfd.error();
    auto npfd = UpperDir(new_parent);
    if (!npfd) return npfd.error();
    if (layers_.sources && !op.exchange && S_ISREG(op.a->type) &&
        op.dst_lower && !op.dst_lower_dir && dst_lower->lower_layer == 0 &&
        !(op.b && op.b->upper))
      KeepReplacedHostFile(pfd->get(), name,
                           sys::Join(PathLocked(new_parent), new_name));
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
    if (op.b && op.b->is_dir() && !op.exchange) over_dir = ReadRemovedDir(op.b);
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
  if (s && op.b && op.b != op.a && !op.exchange && op.b->is_dir())
    RemovedDirLocked(op.b, std::move(over_dir));
  table_.MaybeFreeLocked(op.a);
  if (op.b) table_.MaybeFreeLocked(op.b);
  return s;
}

void Overlay::KeepReplacedHostFile(int src_dirfd, const std::string& src_name,
                                   const std::string& dst_rel) {
  const std::string xpath = sys::XattrPath(src_dirfd, src_name);
  const std::string mark = layers_.format.SourceKey();
  auto own = sys::GetXattr(xpath, mark, dst_rel);
  if (own || own.err() != ENODATA) return;  // its own source, or no xattrs
  auto host = layers_.lower.OpenForReading(dst_rel);
  if (!host) return;
  auto key = layers_.sources->Keep(host->get(), host->get(), dst_rel,
                                   layers_.sync_copy_up);
  if (!key || !*key) return;
  (void)sys::SetXattr(xpath, mark, **key, 0, dst_rel);
}

}  // namespace acqfs
