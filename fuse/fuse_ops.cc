#include "fuse/fuse_ops.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "common/sys.h"
#include "fs/boundary_note.h"
#include "fs/fd_budget.h"
#include "fuse/audit_sink.h"
#include "fuse/fuse_uapi.h"
#include "fuse/passthrough.h"
#include "fuse/setid.h"
#include "fuse/uring_transport.h"

namespace acqfs {
namespace {

FuseContext* Ctx(fuse_req_t req) {
  return static_cast<FuseContext*>(fuse_req_userdata(req));
}

Node* NodeOf(fuse_req_t req, fuse_ino_t ino) {
  if (ino == FUSE_ROOT_ID) return Ctx(req)->overlay->root();
  return reinterpret_cast<Node*>(ino);
}

fuse_ino_t IdOf(fuse_req_t req, Node* node) {
  if (node == Ctx(req)->overlay->root()) return FUSE_ROOT_ID;
  return reinterpret_cast<fuse_ino_t>(node);
}

Creds CredsOf(fuse_req_t req) {
  const fuse_ctx* c = fuse_req_ctx(req);
  return Creds{c->uid, c->gid};
}

void ReplyError(fuse_req_t req, const Error& e) {
  if (e.err == EMFILE || e.err == ENFILE) {
    // The daemon's own descriptors ran out despite its budget: the sandbox
    // must not read that as its own limit.
    spdlog::error("{} (descriptor budget exhausted; replied EIO)", e.Message());
    fuse_reply_err(req, EIO);
    return;
  }
  if (e.err == ENOENT || e.err == EEXIST || e.err == ENODATA ||
      e.err == ENOTEMPTY || e.err == ENOTSUP)
    spdlog::debug("{}", e.Message());
  else
    spdlog::warn("{}", e.Message());
  fuse_reply_err(req, e.err);
}

// Runs a handler, turning allocation failures and any stray exception into
// an errno reply, so no exception ever crosses into libfuse.
template <class F>
void Guard(fuse_req_t req, F&& f) noexcept {
  try {
    f();
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
  } catch (...) {
    fuse_reply_err(req, EIO);
  }
}

// The audit record of a request that changes the sandbox
// (fuse/audit_sink.h): made before the Overlay runs it, so that its paths
// are the names the caller gave, and written with the request's outcome.
// Nothing at all when the log is off.
class Audited {
 public:
  Audited(fuse_req_t req, audit::Op op) : req_(req), sink_(Ctx(req)->audit) {
    if (sink_ == nullptr) return;
    ClearBoundaryNote();
    r_ = sink_->Make(req, op);
  }
  ~Audited() = default;  // a handler that threw: no record
  Audited(const Audited&) = delete;
  Audited& operator=(const Audited&) = delete;
  bool on() const { return sink_ != nullptr; }
  audit::Record& r() { return r_; }
  // The path of `node`, or of `name` in `parent`, from the root.
  std::string Path(Node* node) const {
    return on() ? Ctx(req_)->overlay->PathOf(node) : std::string();
  }
  std::string Path(Node* parent, const char* name) const {
    return on() ? sys::Join(Ctx(req_)->overlay->PathOf(parent), name)
                : std::string();
  }
  void Done(int err) {
    if (sink_ == nullptr) return;
    sink_->Changed(std::move(r_), err);
    sink_ = nullptr;
  }
  void Done(const Status& s) { Done(s ? 0 : s.err()); }
  template <class T>
  void Done(const Result<T>& r) {
    Done(r ? 0 : r.err());
  }
  // Not recorded (a request that turned out to change nothing).
  void Drop() { sink_ = nullptr; }

 private:
  fuse_req_t req_;
  AuditSink* sink_;
  audit::Record r_;
};

// The fh of a file handle the kernel will RELEASE (-o handles): a handle
// owns no descriptor (the Overlay's file cache serves every request by
// node), so it only marks the open as counted, and whether the kernel
// reads and writes it through a backing file (fuse/passthrough.h).
constexpr uint64_t kCountedOpen = 1;
constexpr uint64_t kPassedOpen = 2;

// How an open of `node` (counted, -o handles) is answered: its backing id,
// or 0 for a cached open; counted in the mount's BackingTable either way.
// Behind the write gate, so that a checkpoint finds every backing file
// made before it and none is made of a file it is moving
// (Overlay::SetLiveBackings).
uint32_t PassthroughOpen(fuse_req_t req, Node* node) {
  BackingTable* table = Ctx(req)->backing;
  if (table == nullptr) return 0;
  Overlay* ov = Ctx(req)->overlay;
  auto gate = ov->HoldOffFreeze();
  // The source, open until the table has made its id (the kernel takes a
  // reference of its own).
  UniqueFd held;
  return table->Open(node, [&]() -> Result<int> {
    auto fd = ov->PassthroughSource(node);
    if (!fd) return fd.error();
    held = std::move(*fd);
    return held.get();
  });
}

// Undoes PassthroughOpen for an open the kernel will not RELEASE.
void PassthroughRelease(fuse_req_t req, Node* node, uint32_t id) {
  if (BackingTable* table = Ctx(req)->backing) table->Release(node, id != 0);
}

// The descriptor a data request works through: the node's, from the
// Overlay's file cache (whatever the handle, in both file modes).
Result<FileLease> FileOf(fuse_req_t req, fuse_ino_t ino, bool write) {
  return Ctx(req)->overlay->FileFor(NodeOf(req, ino), write);
}

// How long the kernel may cache `node`'s attributes: the mount's timeout,
// but none for the directories of the git object store the host's git
// rewrites (Overlay::SharedObjectStoreDir), so a listing of them the kernel
// cached goes as soon as their mtime moves.
double AttrTimeout(fuse_req_t req, Node* node) {
  return Ctx(req)->overlay->SharedObjectStoreDir(node) ? 0.0
                                                       : Ctx(req)->timeout;
}

// Records the size the kernel is told for `node` (Node::told_size).
void Told(Node* node, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  node->told_size.store(size < Node::kUnknownSize ? static_cast<uint32_t>(size)
                                                  : Node::kUnknownSize);
}

// A file of the host's object store (`host_object`, Overlay::Lookup) is
// looked up each time it is opened: git must see ENOENT for one the host's
// gc deleted, as on a disk.
void FillEntry(fuse_req_t req, Node* node, const struct stat& st,
               fuse_entry_param* e, bool host_object = false) {
  std::memset(e, 0, sizeof *e);
  e->ino = IdOf(req, node);
  e->attr = st;
  Told(node, st);
  e->attr_timeout = AttrTimeout(req, node);
  e->entry_timeout = host_object ? 0.0 : Ctx(req)->timeout;
}

// Replies to a request that produced a node (lookup, mkdir, ...).
void ReplyNode(fuse_req_t req, Result<Node*> node) {
  Overlay* ov = Ctx(req)->overlay;
  if (!node) return ReplyError(req, node.error());
  auto st = ov->GetAttr(*node);
  if (!st) {
    ov->Forget(*node, 1);
    return ReplyError(req, st.error());
  }
  fuse_entry_param e;
  FillEntry(req, *node, *st, &e);
  fuse_reply_entry(req, &e);
}

int OpenFlags(fuse_req_t req, int flags) {
  if (Ctx(req)->writeback_cache) {
    // The kernel may read through any handle to fill partial pages, and it
    // keeps the file offset for O_APPEND itself.
    if ((flags & O_ACCMODE) == O_WRONLY) flags = (flags & ~O_ACCMODE) | O_RDWR;
    flags &= ~O_APPEND;
  }
  return flags;
}

// Never FOPEN_DIRECT_IO, not even for O_DIRECT: the kernel then serves an
// O_DIRECT open as ext4 does (its generic direct I/O path, through the
// daemon's WRITE and READ), which writes back and drops the page cache
// around each direct write, clears set-id bits first (file_remove_privs:
// a SETATTR the daemon answers), and lets the file be mapped. With
// FOPEN_DIRECT_IO the kernel refused mmap (ENODEV) of a file made by
// open(O_CREAT|O_DIRECT), and of any O_DIRECT open with -o handles, and
// left the page cache to whatever invalidation the FUSE path does.
void SetOpenInfo(fuse_file_info* fi, uint64_t fh) {
  fi->fh = fh;
  fi->keep_cache = 1;
}

// ---------------------------------------------------------------- callbacks

void OpInit(void* userdata, struct fuse_conn_info* conn) {
  auto* ctx = static_cast<FuseContext*>(userdata);
  auto want = [&](unsigned cap) {
    if (conn->capable & cap) conn->want |= cap;
  };
  if (ctx->writeback_cache) want(FUSE_CAP_WRITEBACK_CACHE);
  // Every request read with read(2), never spliced: the session's read
  // hook must see each request's opcode (an O_TMPFILE's FUSE_TMPFILE,
  // which libfuse 3.14 does not know, is handed on as a CREATE; see
  // fuse/mount.cc). libfuse asks for splicing by default; what it saved,
  // one copy of a large WRITE's data, is measured in docs/architecture.md
  // (choice 8).
  conn->want &= ~FUSE_CAP_SPLICE_READ;
  want(FUSE_CAP_SPLICE_WRITE);
  want(FUSE_CAP_SPLICE_MOVE);
  want(FUSE_CAP_PARALLEL_DIROPS);
  want(FUSE_CAP_CACHE_SYMLINKS);
  want(FUSE_CAP_READDIRPLUS);
  // Every READDIR a READDIRPLUS, not only a listing's first page: a
  // listing fills the kernel's dentries and attributes of all its entries
  // (what the warm walk is for), dozens per request instead of one LOOKUP
  // each.
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  want(FUSE_CAP_AUTO_INVAL_DATA);
  want(FUSE_CAP_ASYNC_READ);
  // An io_submit(2) of an O_DIRECT write is carried out before io_submit
  // returns, not in the background. The kernel drops the page cache over a
  // direct write's range before the write and, for a write that completes
  // in the call, again after it; an asynchronous one (FUSE_ASYNC_DIO,
  // which libfuse asks for by default) gets no second drop, so a buffered
  // read racing it could cache the old bytes for good, and with -o
  // writeback (which trusts the kernel's own mtime, so nothing else drops
  // them) read them back after the write (DirectIoWriteback.*).
  conn->want &= ~FUSE_CAP_ASYNC_DIO;
  conn->want &= ~FUSE_CAP_EXPORT_SUPPORT;
  // The default file mode: handles where the opens of upper files can be
  // passed through (they pay for their OPEN and RELEASE), else handle-less
  // (docs/benchmarks.md, "Passthrough against the handle-less default").
  if (ctx->file_mode_auto)
    ctx->no_open =
        !(ctx->backing != nullptr && (ctx->init_offered & FUSE_INIT_EXT) &&
          (ctx->init_offered2 & fuse_uapi::kPassthrough2));
  // --audit-reads records opens, which only a mode answering OPEN sees.
  if (ctx->file_mode_auto && ctx->audit != nullptr && ctx->audit->WantsReads())
    ctx->no_open = false;
  if (ctx->no_open && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT)) {
    ctx->listings = std::make_unique<ListingCache>();
    // open(O_TRUNC) must reach the daemon as a SETATTR, since no OPEN will.
    conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
  } else if (ctx->no_open)
    spdlog::warn("no_open: the kernel does not offer it; files use OPEN");
  spdlog::info("fuse init: capable={:#x} want={:#x} max_write={} no_open={}",
               conn->capable, conn->want, conn->max_write, HandleLess(ctx));
  if (ctx->audit != nullptr) ctx->audit->SetHandleLess(HandleLess(ctx));
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, [&] {
    struct stat st;
    bool host_object = false;
    Overlay* ov = Ctx(req)->overlay;
    AuditSink* audit = Ctx(req)->audit;
    if (audit != nullptr) ClearBoundaryNote();
    auto node = ov->Lookup(NodeOf(req, parent), name, &st, &host_object);
    if (!node && audit != nullptr && BoundaryNoted())
      audit->LookedUp(req, sys::Join(ov->PathOf(NodeOf(req, parent)), name),
                      node.err());
    if (!node && node.err() == ENOENT) {
      if (spdlog::should_log(spdlog::level::debug))
        spdlog::debug("{}", node.error().Message());
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.entry_timeout = Ctx(req)->timeout;  // negative entry
      fuse_reply_entry(req, &e);
      return;
    }
    if (!node) return ReplyError(req, node.error());
    // Its data from the lookup on: the host's unlink between git's open and
    // its first read takes nothing (errors are the read's to report).
    if (host_object) (void)ov->FileFor(*node, false);
    fuse_entry_param e;
    FillEntry(req, *node, st, &e, host_object);
    fuse_reply_entry(req, &e);
  });
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Guard(req, [&] {
    FuseContext* ctx = Ctx(req);
    if (ctx->listings) ctx->listings->Drop(NodeOf(req, ino));
    ctx->overlay->Forget(NodeOf(req, ino), nlookup);
    fuse_reply_none(req);
  });
}

void OpForgetMulti(fuse_req_t req, size_t count,
                   struct fuse_forget_data* forgets) {
  Guard(req, [&] {
    FuseContext* ctx = Ctx(req);
    for (size_t i = 0; i < count; i++) {
      Node* node = NodeOf(req, forgets[i].ino);
      if (ctx->listings) ctx->listings->Drop(node);
      ctx->overlay->Forget(node, forgets[i].nlookup);
    }
    fuse_reply_none(req);
  });
}

// Without a handle the kernel asks for a stat(2) through a name it cached
// (with one, FUSE_GETATTR_FH: an fstat(2) or a read of an open file, whose
// file is the node's whatever happened to the name since).
void OpGetattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Guard(req, [&] {
    Node* node = NodeOf(req, ino);
    auto st = Ctx(req)->overlay->GetAttr(node, /*by_path=*/fi == nullptr);
    if (!st) return ReplyError(req, st.error());
    Told(node, *st);
    fuse_reply_attr(req, &*st, AttrTimeout(req, node));
  });
}

// The caller's privileges, read from /proc once per request and only when
// asked (fuse/setid.h).
class CallerOf {
 public:
  explicit CallerOf(fuse_req_t req) : req_(req) {}
  Result<CallerPrivilege> operator()() {
    if (!read_) {
      read_ = true;
      priv_ = ReadCallerPrivilege(fuse_req_ctx(req_)->pid);
      if (!priv_)
        spdlog::debug("set-id bits: {} (the caller counts as unprivileged)",
                      priv_.error().Message());
    }
    return priv_;
  }

 private:
  fuse_req_t req_;
  bool read_ = false;
  Result<CallerPrivilege> priv_ = Error::Of(ESRCH, "not read", "");
};

// For a write, or a truncate, by a caller the kernel did not check: which
// set-id bits it takes (fuse/setid.h), for Overlay::WriteData to clear.
// The caller's privileges are read once, and only when a file has such a
// bit.
Overlay::SetIdRule SetIdRuleOf(fuse_req_t req) {
  auto caller = std::make_shared<CallerOf>(req);
  return [caller](mode_t mode, gid_t gid) -> mode_t {
    auto c = (*caller)();
    if (c && c->cap_fsetid) return 0;
    return SetIdBitsToClear(mode, gid, SetIdChange::kUnprivilegedWrite,
                            *caller);
  };
}

// What libfuse 3.14 passes of a SETATTR's kernel flags (fuse_setattr_in's
// valid): FATTR_KILL_SUIDGID arrives as FUSE_SET_ATTR_KILL_SUID (the same
// bit). The kernel sets it for a chown of a non-directory and for a
// truncate by a caller without CAP_FSETID. A SETATTR with none of these
// (a ctime alone is what -o writeback adds to a chown(-1, -1)) sets
// nothing.
constexpr int kSetAttrKnown = FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID |
                              FUSE_SET_ATTR_GID | FUSE_SET_ATTR_SIZE |
                              FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                              FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;

// The records of one SETATTR: a truncate, a chmod, a chown and a utimes
// are one request when the kernel merges them (tar, the writeback cache).
class SetattrAudit {
 public:
  SetattrAudit(fuse_req_t req, Node* node, const SetAttrRequest& r)
      : req_(req), r_(r) {
    AuditSink* a = Ctx(req)->audit;
    if (a == nullptr) return;
    ClearBoundaryNote();
    path_ = Ctx(req)->overlay->PathOf(node);
    sink_ = a;
  }
  void Done(int err) {
    if (sink_ == nullptr) return;
    auto one = [&](audit::Op op, auto&& fill) {
      audit::Record rec = sink_->Make(req_, op);
      rec.path = path_;
      fill(rec);
      sink_->Changed(std::move(rec), err);
    };
    if (r_.set_size)
      one(audit::Op::kTruncate, [&](audit::Record& rec) {
        rec.size = static_cast<uint64_t>(r_.size);
      });
    if (r_.set_mode)
      one(audit::Op::kChmod,
          [&](audit::Record& rec) { rec.mode = r_.mode & 07777; });
    if (r_.set_uid || r_.set_gid)
      one(audit::Op::kChown, [&](audit::Record& rec) {
        rec.owner_uid = r_.set_uid ? int64_t{r_.uid} : -1;
        rec.owner_gid = r_.set_gid ? int64_t{r_.gid} : -1;
      });
    if (r_.set_atime || r_.set_mtime)
      one(audit::Op::kUtimes, [](audit::Record&) {});
    sink_ = nullptr;
  }

 private:
  fuse_req_t req_;
  const SetAttrRequest& r_;
  AuditSink* sink_ = nullptr;
  std::string path_;
};

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
               struct fuse_file_info* fi) {
  Guard(req, [&] {
    SetAttrRequest r;
    r.set_mode = to_set & FUSE_SET_ATTR_MODE;
    r.set_uid = to_set & FUSE_SET_ATTR_UID;
    r.set_gid = to_set & FUSE_SET_ATTR_GID;
    r.set_size = to_set & FUSE_SET_ATTR_SIZE;
    r.set_atime = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW);
    r.set_mtime = to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW);
    r.atime_now = to_set & FUSE_SET_ATTR_ATIME_NOW;
    r.mtime_now = to_set & FUSE_SET_ATTR_MTIME_NOW;
    r.mode = attr->st_mode;
    r.uid = attr->st_uid;
    r.gid = attr->st_gid;
    r.size = attr->st_size;
    r.atime = attr->st_atim;
    r.mtime = attr->st_mtim;
    Overlay* ov = Ctx(req)->overlay;
    Node* node = NodeOf(req, ino);
    SetattrAudit audited(req, node, r);
    // The set-id bits the kernel leaves to the daemon (fuse/setid.h): a
    // flagged chown or truncate, or a SETATTR with nothing to set (a
    // chown(-1, -1), or the privileges a write by a caller without
    // CAP_FSETID drops).
    const bool kill = to_set & FUSE_SET_ATTR_KILL_SUID;
    if (!node->is_dir() && (kill || !(to_set & kSetAttrKnown))) {
      auto before = ov->GetAttr(node);
      if (!before) return ReplyError(req, before.error());
      const mode_t m = before->st_mode;
      if (m & (S_ISUID | S_ISGID)) {
        SetIdChange change = SetIdChange::kChown;
        if (kill && r.set_size && !r.set_uid && !r.set_gid)
          change = SetIdChange::kUnprivilegedWrite;
        r.clear_setid = SetIdBitsToClear(before->st_mode, before->st_gid,
                                         change, CallerOf(req));
      }
    }
    auto st = ov->SetAttr(node, r, -1);
    audited.Done(st ? 0 : st.err());
    if (!st) return ReplyError(req, st.error());
    Told(node, *st);
    fuse_reply_attr(req, &*st, Ctx(req)->timeout);
  });
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  Guard(req, [&] {
    auto t = Ctx(req)->overlay->ReadLink(NodeOf(req, ino));
    if (!t) return ReplyError(req, t.error());
    fuse_reply_readlink(req, t->c_str());
  });
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
             dev_t rdev) {
  Guard(req, [&] {
    Audited a(req, S_ISREG(mode) ? audit::Op::kCreate : audit::Op::kMknod);
    a.r().path = a.Path(NodeOf(req, parent), name);
    a.r().mode = mode;
    auto made = Ctx(req)->overlay->Mknod(NodeOf(req, parent), name, mode, rdev,
                                         CredsOf(req));
    a.Done(made);
    ReplyNode(req, std::move(made));
  });
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Guard(req, [&] {
    Audited a(req, audit::Op::kMkdir);
    a.r().path = a.Path(NodeOf(req, parent), name);
    a.r().mode = mode;
    auto made =
        Ctx(req)->overlay->Mkdir(NodeOf(req, parent), name, mode, CredsOf(req));
    a.Done(made);
    ReplyNode(req, std::move(made));
  });
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent,
               const char* name) {
  Guard(req, [&] {
    Audited a(req, audit::Op::kSymlink);
    a.r().path = a.Path(NodeOf(req, parent), name);
    if (a.on()) a.r().path2 = link;
    auto made = Ctx(req)->overlay->Symlink(NodeOf(req, parent), name, link,
                                           CredsOf(req));
    a.Done(made);
    ReplyNode(req, std::move(made));
  });
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent,
            const char* name) {
  Guard(req, [&] {
    Audited a(req, audit::Op::kLink);
    a.r().path = a.Path(NodeOf(req, parent), name);
    a.r().path2 = a.Path(NodeOf(req, ino));
    auto made =
        Ctx(req)->overlay->Link(NodeOf(req, ino), NodeOf(req, parent), name);
    a.Done(made);
    ReplyNode(req, std::move(made));
  });
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, [&] {
    Audited a(req, audit::Op::kUnlink);
    a.r().path = a.Path(NodeOf(req, parent), name);
    Status s = Ctx(req)->overlay->Unlink(NodeOf(req, parent), name);
    a.Done(s);
    if (!s) return ReplyError(req, s.error());
    fuse_reply_err(req, 0);
  });
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, [&] {
    Audited a(req, audit::Op::kRmdir);
    a.r().path = a.Path(NodeOf(req, parent), name);
    Status s = Ctx(req)->overlay->Rmdir(NodeOf(req, parent), name);
    a.Done(s);
    if (!s) return ReplyError(req, s.error());
    fuse_reply_err(req, 0);
  });
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name,
              fuse_ino_t newparent, const char* newname, unsigned int flags) {
  Guard(req, [&] {
    Audited a(req, audit::Op::kRename);
    a.r().path = a.Path(NodeOf(req, parent), name);
    a.r().path2 = a.Path(NodeOf(req, newparent), newname);
    if (a.on() && (flags & RENAME_EXCHANGE)) a.r().name = "exchange";
    Status s = Ctx(req)->overlay->Rename(
        NodeOf(req, parent), name, NodeOf(req, newparent), newname, flags);
    a.Done(s);
    if (!s) return ReplyError(req, s.error());
    fuse_reply_err(req, 0);
  });
}

// The records of an OPEN: a truncate (O_TRUNC), a refused open for
// writing (a kWrite that never happened), an open for reading that
// --audit-reads asks for.
template <class T>
void AuditOpen(fuse_req_t req, AuditSink* audit, const std::string& rel,
               int flags, const Result<T>& opened) {
  const int err = opened ? 0 : opened.err();
  if ((flags & O_ACCMODE) == O_RDONLY) {
    if (audit->WantsReads()) audit->OpenedForReading(req, rel, err);
    return;
  }
  if (err != 0) {
    audit::Record r = audit->Make(req, audit::Op::kWrite);
    r.path = rel;
    return audit->Changed(std::move(r), err);
  }
  if (flags & O_TRUNC) {
    audit::Record r = audit->Make(req, audit::Op::kTruncate);
    r.path = rel;
    audit->Changed(std::move(r), 0);
  }
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Guard(req, [&] {
    // The handle-less mode: ENOSYS tells the kernel to stop sending OPEN
    // and RELEASE for files; it then reads and writes with fh 0.
    if (HandleLess(Ctx(req))) return (void)fuse_reply_err(req, ENOSYS);
    Overlay* ov = Ctx(req)->overlay;
    Node* node = NodeOf(req, ino);
    const bool writing = (fi->flags & O_ACCMODE) != O_RDONLY;
    AuditSink* audit = Ctx(req)->audit;
    std::string rel;
    if (audit != nullptr && (writing || audit->WantsReads())) {
      ClearBoundaryNote();
      rel = ov->PathOf(node);
    }
    // open(O_TRUNC) truncates here (the kernel sends no SETATTR for it
    // with atomic O_TRUNC), so the set-id bits it drops are the daemon's.
    auto f = ov->Open(node, OpenFlags(req, fi->flags),
                      (fi->flags & O_TRUNC) ? SetIdRuleOf(req) : nullptr);
    if (audit != nullptr) AuditOpen(req, audit, rel, fi->flags, f);
    if (!f) return ReplyError(req, f.error());
    f->reset();  // the open holds no descriptor
    const uint32_t id = PassthroughOpen(req, node);
    if (audit != nullptr && writing && id != 0)
      audit->OpenedForWritingUnseen(req, node, rel);
    SetOpenInfo(fi, id != 0 ? kPassedOpen : kCountedOpen);
    ReplyBacking with(id);
    if (fuse_reply_open(req, fi) != 0) {
      PassthroughRelease(req, node, id);
      ov->ReleaseOpen(node);
    }
  });
}

// CREATE is answered in both file modes, never ENOSYS: the kernel's
// fallback for ENOSYS (MKNOD, then an ordinary open of the new file) loses
// FMODE_CREATED, so the VFS checks the new file's mode against the caller
// and a non-root open(O_CREAT|O_EXCL|O_RDWR, 0444), git's way of writing
// loose objects, fails with EACCES where ext4 succeeds. Handle-less, the
// open Create counts is given back at once and the reply carries fh 0:
// the kernel RELEASEs it (until it has seen an OPEN answered ENOSYS,
// after which it sends no RELEASE at all), and a RELEASE of fh 0 is a
// no-op (OpRelease).
//
// An open(O_TMPFILE) arrives here too: libfuse 3.14 knows no FUSE_TMPFILE,
// so the session's read hook hands it on as a CREATE of the name
// kTmpfileName ("/", which no real name can be; fuse/mount.cc), whose
// request and reply have the same shape.
void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              struct fuse_file_info* fi) {
  Guard(req, [&] {
    Overlay* ov = Ctx(req)->overlay;
    const bool counted = !HandleLess(Ctx(req));
    const bool tmpfile = std::strcmp(name, kTmpfileName) == 0;
    Audited a(req, audit::Op::kCreate);
    a.r().path = tmpfile ? a.Path(NodeOf(req, parent))
                         : a.Path(NodeOf(req, parent), name);
    if (a.on() && tmpfile) a.r().name = "O_TMPFILE";
    a.r().mode = mode;
    const std::string rel = a.r().path;
    auto r = tmpfile ? ov->CreateTmpfile(NodeOf(req, parent), mode, fi->flags,
                                         CredsOf(req))
                     : ov->Create(NodeOf(req, parent), name, mode,
                                  OpenFlags(req, fi->flags), CredsOf(req));
    a.Done(r);
    if (!r) return ReplyError(req, r.error());
    Node* node = r->first;
    if (!counted) ov->ReleaseOpen(node);
    auto st = ov->GetAttr(node);
    if (!st) {
      if (counted) ov->ReleaseOpen(node);
      ov->Forget(node, 1);
      return ReplyError(req, st.error());
    }
    const uint32_t id = counted ? PassthroughOpen(req, node) : 0;
    if (id != 0 && (fi->flags & O_ACCMODE) != O_RDONLY)
      if (AuditSink* audit = Ctx(req)->audit)
        audit->OpenedForWritingUnseen(req, node, rel);
    SetOpenInfo(fi, !counted ? 0 : id != 0 ? kPassedOpen : kCountedOpen);
    fuse_entry_param e;
    FillEntry(req, node, *st, &e);
    ReplyBacking with(id);
    if (fuse_reply_create(req, &e, fi) != 0 && counted) {
      PassthroughRelease(req, node, id);
      ov->ReleaseOpen(node);
    }
  });
}

// A read that made its node follow the host's replacement of the file
// (Overlay::FileFor) arrives with the kernel still caching the old file's
// size, and without an open before it in the handle-less mode. The cached
// attributes must go, but when matters: dropping them bumps the kernel's
// attribute version, after which the short reply of a file that shrank no
// longer sets the new, smaller size, and the reader would get zeros up to
// the old one. So for a file that grew (against the size the kernel was
// told, Node::told_size) they go before the reply: the reader gets the old
// size's worth, and its next read asks for the new size. For one that
// shrank they go after it: the short reply sets the size. (Told size
// unknown: grown when the file reaches past the range the kernel asked
// for.)
void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
            struct fuse_file_info* fi) {
  Guard(req, [&] {
    Overlay* ov = Ctx(req)->overlay;
    Node* node = NodeOf(req, ino);
    bool followed = false;
    auto f = ov->FileFor(node, false, &followed);
    if (!f) return ReplyError(req, f.error());
    int fd = f->get();
    bool drop_after = false;
    if (followed) {
      struct stat st;
      if (::fstat(fd, &st) != 0) st.st_size = 0;
      const uint64_t now = static_cast<uint64_t>(st.st_size);
      const uint32_t told = node->told_size.load();
      const bool shrank = told != Node::kUnknownSize
                              ? now < told
                              : now <= static_cast<uint64_t>(off) + size;
      if (shrank)
        drop_after = true;
      else
        ov->DropCachedAttrs(node);
    }
    // On a ring worker the data is read straight into the entry's payload
    // buffer, which the reply then is (fuse/uring_transport.h): never
    // spliced, which would send the reply to /dev/fuse.
    size_t room = 0;
    if (char* into = UringTransport::ReplyBuffer(&room)) {
      if (size > room)  // the kernel never asks more than max_pages
        return ReplyError(
            req, Error::Of(EIO, "read (more than the ring entry holds)", ""));
      size_t got = 0;
      while (got < size) {
        ssize_t r =
            ::pread(fd, into + got, size - got, off + static_cast<off_t>(got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ReplyError(req, Error::Errno("read", ""));
        if (r == 0) break;
        got += static_cast<size_t>(r);
      }
      fuse_reply_buf(req, into, got);
      if (drop_after) ov->DropCachedAttrs(node);
      return;
    }
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags =
        static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = fd;
    buf.buf[0].pos = off;
    fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
    if (drop_after) ov->DropCachedAttrs(node);
  });
}

// A refused delayed write (from the page cache: fi->writepage) leaves the
// kernel's pages holding bytes that were never stored: they are dropped
// (see fuse/page_dropper.h) once the refusal is sent.
// The record of a data request that wrote `len` bytes at `off` (or meant
// to): coalesced with the file's other writes, or a refusal of its own.
void AuditWrite(fuse_req_t req, AuditSink* audit, Node* node, off_t off,
                size_t len, const Result<int64_t>& r) {
  const int err = !r ? r.err() : *r < 0 ? static_cast<int>(-*r) : 0;
  const uint64_t done = err == 0 ? static_cast<uint64_t>(*r) : len;
  audit->Wrote(
      req, node, [&] { return Ctx(req)->overlay->PathOf(node); },
      static_cast<uint64_t>(off), done, err);
}

void OpWriteBuf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec* in_buf,
                off_t off, struct fuse_file_info* fi) {
  PageDropper* dropper = fi && fi->writepage ? Ctx(req)->page_dropper : nullptr;
  auto refuse = [&](const Error& e) {
    ReplyError(req, e);
    if (dropper) dropper->Drop(ino);
  };
  Guard(req, [&] {
    Overlay* ov = Ctx(req)->overlay;
    size_t len = fuse_buf_size(in_buf);
    auto copy = [&](int fd) -> int64_t {
      struct fuse_bufvec out = FUSE_BUFVEC_INIT(len);
      out.buf[0].flags =
          static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      out.buf[0].fd = fd;
      out.buf[0].pos = off;
      return fuse_buf_copy(&out, in_buf, static_cast<fuse_buf_copy_flags>(0));
    };
    AuditSink* audit = Ctx(req)->audit;
    if (audit != nullptr) ClearBoundaryNote();
    auto r = ov->WriteData(NodeOf(req, ino), Overlay::DataOp::kWrite,
                           Quota::Charge::Span(off, static_cast<off_t>(len)),
                           copy, nullptr);
    if (audit != nullptr) AuditWrite(req, audit, NodeOf(req, ino), off, len, r);
    if (!r) return refuse(r.error());
    int64_t n = *r;
    if (n < 0) {
      fuse_reply_err(req, static_cast<int>(-n));
      if (dropper) dropper->Drop(ino);
      return;
    }
    fuse_reply_write(req, static_cast<size_t>(n));
  });
}

// Nothing to do at close(2) (data goes straight to the layer files, and the
// writeback cache, when on, is flushed by the kernel before FLUSH): ENOSYS
// makes the kernel stop sending FLUSH for the rest of the mount, one round
// trip less per close.
void OpFlush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  fuse_reply_err(req, ENOSYS);
}

void OpRelease(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Guard(req, [&] {
    // Only counted opens (-o handles); handle-less, no RELEASE is sent.
    if (fi->fh == kCountedOpen || fi->fh == kPassedOpen) {
      Node* node = NodeOf(req, ino);
      if (AuditSink* audit = Ctx(req)->audit) audit->EndOfWrites(node);
      // The table first: the open count holds the node it names.
      PassthroughRelease(req, node, fi->fh == kPassedOpen ? 1 : 0);
      Ctx(req)->overlay->ReleaseOpen(node);
    }
    fuse_reply_err(req, 0);
  });
}

void OpFsync(fuse_req_t req, fuse_ino_t ino, int datasync,
             struct fuse_file_info* fi) {
  Guard(req, [&] {
    Status s = Ctx(req)->overlay->Fsync(NodeOf(req, ino), datasync != 0);
    if (AuditSink* audit = Ctx(req)->audit)
      audit->EndOfWrites(NodeOf(req, ino));
    fuse_reply_err(req, s ? 0 : s.err());
  });
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Guard(req, [&] {
    // Handle-less directories too: ENOSYS makes the kernel stop sending
    // OPENDIR and RELEASEDIR and cache every listing (FOPEN_CACHE_DIR).
    if (HandleLess(Ctx(req))) return (void)fuse_reply_err(req, ENOSYS);
    auto dh = std::make_unique<DirListing>();
    fi->fh = HandleOf(dh.get());
    // The kernel may keep the listing in its page cache across opens; it
    // drops it when it changes the directory itself, or when the
    // directory's mtime moves (a host edit seen after the attr timeout).
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    // The kernel's handle owns the listing once the reply got through.
    if (fuse_reply_open(req, fi) == 0) dh.release();
  });
}

void DoReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
               struct fuse_file_info* fi, bool plus) {
  Overlay* ov = Ctx(req)->overlay;
  Node* dir = NodeOf(req, ino);
  // Handle-less, the cache's listing, held for this request.
  std::shared_ptr<const DirListing> shared;
  const DirListing* dh = BorrowHandle(fi->fh);
  if (dh == nullptr) {
    if (!Ctx(req)->listings)
      return ReplyError(req, Error::Of(EBADF, "readdir without a handle", ""));
    auto l = Ctx(req)->listings->Get(
        dir, off, [&](DirListing* out) { return ListInto(ov, dir, out); });
    if (!l) return ReplyError(req, l.error());
    shared = std::move(*l);
    dh = shared.get();
  } else if (off == 0 || !dh->listed) {
    DirListing* own = BorrowHandle(fi->fh);
    if (Status s = ListInto(ov, dir, own); !s)
      return ReplyError(req, s.error());
  }
  // The reply is built in a buffer of the worker's, kept between requests
  // and never zeroed (fuse_add_direntry* pad each entry themselves): a
  // fresh 128 KiB vector a request cost its zeroing and page faults, a
  // tenth of the daemon's time in a listing of a whole checkout.
  thread_local std::unique_ptr<char[]> reply;
  thread_local size_t reply_size = 0;
  if (reply_size < size) {
    reply.reset(new char[size]);
    reply_size = size;
  }
  char* const buf = reply.get();
  size_t used = 0;
  // Offsets are the listing's cookies (fuse/dir_listings.h), not indexes.
  for (size_t i = dh->IndexAfter(static_cast<uint64_t>(off)); i < dh->size();
       i++) {
    const DirListing::Entry ent = dh->at(i);
    const off_t next = static_cast<off_t>(dh->CookieAt(i));
    char* p = buf + used;
    size_t room = size - used;
    size_t len;
    if (!plus) {
      struct stat st {};
      st.st_ino = ent.ino;
      st.st_mode = DTTOIF(ent.type);
      len = fuse_add_direntry(req, p, room, ent.name.data(), &st, next);
    } else if (i < 2) {  // "." and "..": no lookup
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.attr.st_ino = ent.ino;
      e.attr.st_mode = S_IFDIR;
      len = fuse_add_direntry_plus(req, p, room, ent.name.data(), &e, next);
    } else {
      struct stat st;
      bool host_object = false;
      auto node = ov->Lookup(dir, std::string(ent.name), &st, &host_object);
      if (!node) continue;  // vanished since opendir
      fuse_entry_param e;
      FillEntry(req, *node, st, &e, host_object);
      len = fuse_add_direntry_plus(req, p, room, ent.name.data(), &e, next);
      if (len > room) ov->Forget(*node, 1);
    }
    if (len > room) break;
    used += len;
  }
  fuse_reply_buf(req, buf, used);
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
               struct fuse_file_info* fi) {
  Guard(req, [&] { DoReaddir(req, ino, size, off, fi, false); });
}

void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info* fi) {
  Guard(req, [&] { DoReaddir(req, ino, size, off, fi, true); });
}

void OpReleasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  TakeHandle(fi->fh);  // frees the listing
  fuse_reply_err(req, 0);
}

void OpFsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                struct fuse_file_info* fi) {
  fuse_reply_err(req, 0);
}

void OpStatfs(fuse_req_t req, fuse_ino_t ino) {
  Guard(req, [&] {
    auto st = Ctx(req)->overlay->StatFs();
    if (!st) return ReplyError(req, st.error());
    fuse_reply_statfs(req, &*st);
  });
}

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name,
                const char* value, size_t size, int flags) {
  Guard(req, [&] {
    Audited a(req, audit::Op::kSetXattr);
    a.r().path = a.Path(NodeOf(req, ino));
    if (a.on()) a.r().name = name;
    a.r().size = size;
    Status s = Ctx(req)->overlay->SetXattr(NodeOf(req, ino), name,
                                           std::string(value, size), flags);
    a.Done(s);
    if (!s) return ReplyError(req, s.error());
    fuse_reply_err(req, 0);
  });
}

void ReplyXattrValue(fuse_req_t req, const std::string& v, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, v.size());
  } else if (v.size() > size) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, v.data(), v.size());
  }
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Guard(req, [&] {
    auto v = Ctx(req)->overlay->GetXattr(NodeOf(req, ino), name);
    if (!v) return ReplyError(req, v.error());
    ReplyXattrValue(req, *v, size);
  });
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Guard(req, [&] {
    auto names = Ctx(req)->overlay->ListXattr(NodeOf(req, ino));
    if (!names) return ReplyError(req, names.error());
    std::string joined;
    for (const auto& n : *names) {
      joined += n;
      joined.push_back('\0');
    }
    ReplyXattrValue(req, joined, size);
  });
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Guard(req, [&] {
    Audited a(req, audit::Op::kRemoveXattr);
    a.r().path = a.Path(NodeOf(req, ino));
    if (a.on()) a.r().name = name;
    Status s = Ctx(req)->overlay->RemoveXattr(NodeOf(req, ino), name);
    a.Done(s);
    if (!s) return ReplyError(req, s.error());
    fuse_reply_err(req, 0);
  });
}

void OpAccess(fuse_req_t req, fuse_ino_t ino, int mask) {
  // default_permissions makes the kernel check modes; this only confirms the
  // node still exists.
  Guard(req, [&] {
    auto st = Ctx(req)->overlay->GetAttr(NodeOf(req, ino));
    fuse_reply_err(req, st ? 0 : st.err());
  });
}

void OpCopyFileRange(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
                     struct fuse_file_info* fi_in, fuse_ino_t ino_out,
                     off_t off_out, struct fuse_file_info* fi_out, size_t len,
                     int flags) {
  Guard(req, [&] {
    Overlay* ov = Ctx(req)->overlay;
    auto fin = FileOf(req, ino_in, false);
    if (!fin) return ReplyError(req, fin.error());
    int in = fin->get();
    loff_t oi = off_in, oo = off_out;
    auto copy = [&](int out) -> int64_t {
      ssize_t n = ::copy_file_range(in, &oi, out, &oo, len, flags);
      return n < 0 ? -errno : n;
    };
    // It can copy no more than the source holds past off_in.
    off_t most = static_cast<off_t>(std::min<size_t>(
        len, static_cast<size_t>(std::numeric_limits<off_t>::max())));
    if (ov->quota()) {
      struct stat src;
      if (::fstat(in, &src) != 0)
        return ReplyError(req,
                          Error::Errno("fstat (copy_file_range source)",
                                       "/" + ov->PathOf(NodeOf(req, ino_in))));
      most = std::min<off_t>(most, std::max<off_t>(0, src.st_size - off_in));
    }
    // Behind the freeze gate, as every data write (Overlay::WriteData): it
    // took none, so a checkpoint during a copy let bytes land in the layer
    // it had just frozen.
    AuditSink* audit = Ctx(req)->audit;
    if (audit != nullptr) ClearBoundaryNote();
    auto r =
        ov->WriteData(NodeOf(req, ino_out), Overlay::DataOp::kCopyFileRange,
                      Quota::Charge::Span(off_out, most), copy);
    if (audit != nullptr)
      AuditWrite(req, audit, NodeOf(req, ino_out), off_out, len, r);
    if (!r) return ReplyError(req, r.error());
    int64_t n = *r;
    if (n < 0) return (void)fuse_reply_err(req, static_cast<int>(-n));
    fuse_reply_write(req, static_cast<size_t>(n));
  });
}

void OpFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
                 off_t length, struct fuse_file_info* fi) {
  Guard(req, [&] {
    Overlay* ov = Ctx(req)->overlay;
    auto alloc = [&](int fd) -> int64_t {
      return ::fallocate(fd, mode, offset, length) == 0 ? 0 : -errno;
    };
    // Punching or collapsing frees blocks and allocates none; inserting a
    // range shifts extents (new tree blocks at most); every other mode,
    // KEEP_SIZE included, may allocate the whole range.
    Quota::Charge charge = Quota::Charge::Span(offset, length);
    if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_COLLAPSE_RANGE))
      charge = Quota::Charge::Settled();
    else if (mode & FALLOC_FL_INSERT_RANGE)
      charge = Quota::Charge::Admitted();
    AuditSink* audit = Ctx(req)->audit;
    if (audit != nullptr) ClearBoundaryNote();
    auto r = ov->WriteData(NodeOf(req, ino), Overlay::DataOp::kFallocate,
                           charge, alloc);
    // A write of no bytes of its own: the range it changed, recorded as
    // written, is what a reviewer looks at.
    if (audit != nullptr) {
      Result<int64_t> as_write = r;
      if (as_write && *as_write == 0) as_write = static_cast<int64_t>(length);
      AuditWrite(req, audit, NodeOf(req, ino), offset,
                 static_cast<size_t>(length), as_write);
    }
    if (!r) return ReplyError(req, r.error());
    int64_t rc = *r;
    fuse_reply_err(req, static_cast<int>(-rc));
  });
}

void OpLseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
             struct fuse_file_info* fi) {
  Guard(req, [&] {
    auto f = FileOf(req, ino, false);
    if (!f) return ReplyError(req, f.error());
    off_t r = ::lseek(f->get(), off, whence);
    if (r < 0) return (void)fuse_reply_err(req, errno);
    fuse_reply_lseek(req, r);
  });
}

struct fuse_lowlevel_ops MakeOps() {
  struct fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.setattr = OpSetattr;
  ops.readlink = OpReadlink;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.symlink = OpSymlink;
  ops.link = OpLink;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.rename = OpRename;
  ops.open = OpOpen;
  ops.create = OpCreate;
  ops.read = OpRead;
  ops.write_buf = OpWriteBuf;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.readdirplus = OpReaddirplus;
  ops.releasedir = OpReleasedir;
  ops.fsyncdir = OpFsyncdir;
  ops.statfs = OpStatfs;
  ops.setxattr = OpSetxattr;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.removexattr = OpRemovexattr;
  ops.access = OpAccess;
  ops.copy_file_range = OpCopyFileRange;
  ops.fallocate = OpFallocate;
  ops.lseek = OpLseek;
  return ops;
}

}  // namespace

const struct fuse_lowlevel_ops* FuseOperations() {
  static const struct fuse_lowlevel_ops ops = MakeOps();
  return &ops;
}

}  // namespace acqfs
