// The Overlay's reads of directories and links, and the descriptors of file
// data (fs/overlay.h): opens, the file cache, open counts.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <utility>

#include "common/owner_access.h"
#include "common/sys.h"
#include "fs/overlay.h"
#include "fs/overlay_internal.h"

namespace acqfs {

Result<std::vector<ListedEntry>> Overlay::ReadDir(Node* dir) {
  WaitAtGate(dir);
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
    if (!ino && !e.in_upper) ino = LowerEntryIno(view, e);
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
  const Layer& layer = LayerOf(node);
  std::string path = PathLocked(node);
  auto dir = layer.OpenDir(sys::Dirname(path));
  if (!dir) return dir.error();
  return sys::ReadLinkAt(dir->get(), sys::Basename(path), layer.Shown(path));
}

// ---------------------------------------------------------------- data

namespace {

// The owner bits an open with `flags` needs.
mode_t NeededBits(int flags) {
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      return S_IRUSR;
    case O_WRONLY:
      return S_IWUSR;
    default:
      return S_IRUSR | S_IWUSR;
  }
}

// After an open with `flags` of the object `path_fd` (O_PATH) was refused
// with `refused`: the open again with the owner bits it needs, when the
// daemon (not root) owns the file (common/owner_access.h), else `refused`.
Result<UniqueFd> ReopenAsOwner(int path_fd, int flags, const Error& refused) {
  if (refused.err != EACCES) return refused;
  Result<UniqueFd> out = refused;
  const std::string proc = "/proc/self/fd/" + std::to_string(path_fd);
  owner_access::Retry(path_fd, NeededBits(flags), [&] {
    int fd = sys::OpenRelievingPressure([&] {
      return ::open(proc.c_str(), (flags & ~O_NOFOLLOW) | O_CLOEXEC);
    });
    if (fd >= 0) out = UniqueFd(fd);
  });
  return out;
}

}  // namespace

// Opens `rel` in the upper with `flags`, for data access. A writer whose
// read-write open is refused (a mode that denies the daemon's user reading,
// when it is not root) gets a write-only descriptor; one refused even that
// (a file created read-only, still open for writing) is opened by
// widening its mode for the open (common/owner_access.h).
Result<UniqueFd> Overlay::OpenAccess(const std::string& rel, int flags) {
  auto fd = layers_.upper.Open(rel, flags | O_NOFOLLOW);
  if (!fd && fd.err() == EACCES && (flags & O_ACCMODE) == O_RDWR)
    fd = layers_.upper.Open(rel, (flags & ~O_ACCMODE) | O_WRONLY | O_NOFOLLOW);
  if (!fd && fd.err() == EACCES && owner_access::Enabled()) {
    if (auto p = layers_.upper.Open(rel, O_PATH | O_NOFOLLOW))
      fd = ReopenAsOwner(p->get(), flags, fd.error());
  }
  return fd;
}

// Opens an unlinked file's kept data with `flags` (O_RDONLY or O_RDWR),
// on the same terms as OpenAccess.
Result<UniqueFd> Overlay::OpenKept(Node* node, int flags) {
  auto fd = kept_.Open(node->kept(), flags);
  if (!fd && fd.err() == EACCES && (flags & O_ACCMODE) == O_RDWR)
    fd = kept_.Open(node->kept(), O_WRONLY);
  if (!fd && fd.err() == EACCES && owner_access::Enabled() &&
      !node->kept().in_lower()) {
    if (auto p = kept_.Open(node->kept(), O_PATH | O_NOFOLLOW))
      fd = ReopenAsOwner(p->get(), flags, fd.error());
  }
  return fd;
}

Result<OpenFile> Overlay::OpenDataLocked(Node* node, bool write) {
  OpenFile f;
  Result<UniqueFd> fd = Error::Of(EIO, "open", "");
  if (node->unlinked && !node->has_kept()) {
    // The host took its name away (deleted or replaced the file), or a
    // rewind took its tree away, and the file cache no longer holds its
    // data.
    return Error::Of(ESTALE, "open (gone: removed by the host, or rewound)",
                     "");
  } else if (node->unlinked) {
    if (write) ACQFS_TRY(MakeChangeable(node));
    f.from_lower = node->kept().in_lower();
    fd = OpenKept(node, write ? O_RDWR : O_RDONLY);
  } else if (write) {
    std::string path = PathLocked(node);
    ACQFS_TRY(CheckWritable(path, false, "open for writing"));
    ACQFS_TRY(EnsureUpper(node));
    fd = OpenAccess(path, O_RDWR);
  } else {
    std::string path = PathLocked(node);
    f.from_lower = !node->upper;
    fd = node->upper
             ? OpenAccess(path, O_RDONLY)
             : layers_.LowerLayer(node->lower_layer()).OpenForReading(path);
  }
  if (!fd) return fd.error();
  uint32_t state = Node::kNeverOpened;
  const bool first =
      node->data_state.compare_exchange_strong(state, Node::kOpened);
  if (f.from_lower && !node->unlinked) {
    // The host may have replaced the file since the node was made: the
    // path then leads to an inode that is not the node's, whose data must
    // not pass for the node's (a lookup gives the name a new node)...
    auto st = sys::Fstat(fd->get(), PathLocked(node));
    if (!st) return st.error();
    if (HostReplacedLocked(node, *st)) {
      // ... unless the node's data was never opened: then no page of the
      // old file is cached and nothing maps it, and the kernel, which
      // caches the name, sends the open of the path here (the handle-less
      // mode never asks first). The node follows the new file, as an open
      // on ext4 after the replace would find it, and the kernel's cached
      // attributes (the old size) go before the data is read. Only for a
      // number that fits Node::data_state.
      if (!first || st->st_ino <= Node::kOpened || st->st_ino > UINT32_MAX)
        return Error::Of(ESTALE, "open (the host replaced it)",
                         PathLocked(node));
      node->data_state.store(static_cast<uint32_t>(st->st_ino));
      f.followed = true;
    }
    f.pinned = ObjectStoreFileLocked(node) == StoreFile::kMapped;
  }
  int acc = ::fcntl(fd->get(), F_GETFL) & O_ACCMODE;
  f.readable = acc != O_WRONLY;
  f.writable = acc != O_RDONLY;
  f.fd = std::move(*fd);
  return f;
}

Result<FileLease> Overlay::FileFor(Node* node, bool write, bool* followed) {
  if (FileLease f = files_.Find(node, write, node->upper.load())) return f;
  // Only a write that copies the file (up, or out of the lower once it
  // has no name) needs the tree lock exclusive.
  auto copies = [&] { return !node->upper.load() || node->kept().in_lower(); };
  auto f = [&]() -> Result<OpenFile> {
    {
      SharedLock l(tree_mu_);
      if (!write || !copies()) return OpenDataLocked(node, write);
    }
    ExclusiveLock l(tree_mu_);
    return OpenDataLocked(node, write);
  }();
  if (!f) return f.error();
  const bool now_follows = f->followed;
  FileLease lease = files_.Put(node, std::move(*f));
  if (now_follows) {
    if (followed)
      *followed = true;
    else
      DropCachedAttrs(node);
  }
  return lease;
}

namespace {

// A test hook (issue 33): ACQFS_TEST_PAUSE_DATA_WRITE="<op>:<ms>[,...]"
// makes every WriteData of those kinds ("write", "fallocate",
// "copy_file_range", "truncate") sleep <ms> between its lease and its
// first byte, so that a test can land a checkpoint in that window on
// purpose. Read once.
int PauseMsFor(Overlay::DataOp what) {
  static constexpr const char* kNames[] = {"write", "fallocate",
                                           "copy_file_range", "truncate"};
  static const std::array<int, 4> pauses = [] {
    std::array<int, 4> ms{};
    const char* e = std::getenv("ACQFS_TEST_PAUSE_DATA_WRITE");
    std::string v = e ? e : "";
    size_t at = 0;
    while (at < v.size()) {
      size_t end = v.find(',', at);
      if (end == std::string::npos) end = v.size();
      const std::string item = v.substr(at, end - at);
      const size_t colon = item.find(':');
      for (size_t i = 0; colon != std::string::npos && i < ms.size(); ++i)
        if (item.compare(0, colon, kNames[i]) == 0)
          ms[i] = std::atoi(item.c_str() + colon + 1);
      at = end + 1;
    }
    return ms;
  }();
  return pauses[static_cast<size_t>(what)];
}

}  // namespace

Result<int64_t> Overlay::WriteData(Node* node, DataOp what,
                                   Quota::Charge charge,
                                   const std::function<int64_t(int fd)>& op,
                                   const SetIdRule& setid) {
  auto no_freeze = HoldOffFreeze();  // until the last byte is written
  if (setid) {
    // Only a regular file with such a bit costs more than one stat.
    auto st = GetAttr(node);
    if (!st) return st.error();
    if (S_ISREG(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID))) {
      SetAttrRequest r;
      r.clear_setid = setid(st->st_mode, st->st_gid);
      if (r.clear_setid != 0) {
        auto done = SetAttr(node, r, -1);
        if (!done) return done.error();
      }
    }
  }
  auto f = FileFor(node, true);
  if (!f) return f.error();
  const int fd = f->get();
  if (int ms = PauseMsFor(what))
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  auto run = [&]() -> int64_t { return op(fd); };
  if (!quota_) return run();
  auto r = quota_->Charged(&node->charged, fd, charge, run, "");
  if (r) return r;
  Error e = r.error();
  e.path = "/" + PathOf(node);
  return e;
}

Status Overlay::Fsync(Node* node, bool datasync) {
  auto f = FileFor(node, false);
  if (!f) return f.error();
  if ((*f)->from_lower) return Ok();  // unchanged
  const int fd = f->get();
  if ((datasync ? ::fdatasync(fd) : ::fsync(fd)) != 0)
    return Error::Errno(datasync ? "fdatasync" : "fsync", "/" + PathOf(node));
  // Should the fstat fail, the file's next call sees the blocks; the fsync
  // itself succeeded.
  struct stat st;
  if (quota_ && ::fstat(fd, &st) == 0)
    quota_->CatchUp(&node->charged, Quota::Bytes(st));
  return Ok();
}

Result<FileLease> Overlay::Open(Node* node, int flags, const SetIdRule& setid) {
  const bool trunc = (flags & O_TRUNC) != 0;
  const bool write = (flags & O_ACCMODE) != O_RDONLY || trunc;
  AddOpen(node);
  Result<FileLease> f = Error::Of(EIO, "open", "");
  if (trunc) {
    // Truncated as any data write is, behind the freeze gate: a checkpoint
    // between the lease and the truncate froze a layer this truncate then
    // emptied.
    auto r = WriteData(
        node, DataOp::kTruncate, Quota::Charge::Settled(),
        [](int fd) -> int64_t { return ::ftruncate(fd, 0) == 0 ? 0 : -errno; },
        setid);
    if (!r)
      f = r.error();
    else if (*r != 0)
      f = Error::Of(static_cast<int>(-*r), "truncate", "/" + PathOf(node));
    else
      f = FileFor(node, write);
  } else {
    f = FileFor(node, write);
  }
  if (!f) ReleaseOpen(node);
  return f;
}

Result<UniqueFd> Overlay::PassthroughSource(Node* node) {
  SharedLock l(tree_mu_);
  if (!S_ISREG(node->type) || !node->upper.load() || node->unlinked ||
      !node->parent)
    return Error::Of(EXDEV, "passthrough (not an upper file)", "");
  const std::string rel = PathLocked(node);
  auto fd = layers_.upper.Open(rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (!fd) return fd.error();
  auto st = sys::Fstat(fd->get(), layers_.upper.Shown(rel));
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode) || st->st_nlink != 1)
    return Error::Of(EXDEV, "passthrough (a file with other names)",
                     layers_.upper.Shown(rel));
  return fd;
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

}  // namespace acqfs
