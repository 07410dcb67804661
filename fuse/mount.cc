#include "fuse/mount.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/fuse.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fs/copy_up_source.h"
#include "fs/fd_budget.h"
#include "fs/host_watch.h"
#include "fs/layer.h"
#include "fs/overlay.h"
#include "fuse/audit_sink.h"
#include "fuse/fuse_ops.h"
#include "fuse/fuse_uapi.h"
#include "fuse/kernel_notify.h"
#include "fuse/passthrough.h"
#include "fuse/uring_transport.h"
#include "fuse/warm_walk.h"

namespace acqfs {
namespace {

// Owners for libfuse objects.
struct SessionDeleter {
  void operator()(fuse_session* s) const { fuse_session_destroy(s); }
};
using UniqueSession = std::unique_ptr<fuse_session, SessionDeleter>;
struct LoopConfigDeleter {
  void operator()(fuse_loop_config* c) const { fuse_loop_cfg_destroy(c); }
};
using UniqueLoopConfig = std::unique_ptr<fuse_loop_config, LoopConfigDeleter>;
struct ArgsOwner {
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  ~ArgsOwner() { fuse_opt_free_args(&args); }
};
// libfuse's SIGINT/SIGTERM/SIGHUP handlers for a session, from Set until
// the owner ends.
class SignalHandlers {
 public:
  SignalHandlers() = default;
  SignalHandlers(const SignalHandlers&) = delete;
  SignalHandlers& operator=(const SignalHandlers&) = delete;
  ~SignalHandlers() {
    if (se_ != nullptr) fuse_remove_signal_handlers(se_);
  }
  bool Set(fuse_session* se) {
    if (fuse_set_signal_handlers(se) != 0) return false;
    se_ = se;
    return true;
  }

 private:
  fuse_session* se_ = nullptr;
};
// A session's mount, from Mount until Unmount or the owner's end (so each
// early return unmounts what it mounted).
class SessionMount {
 public:
  SessionMount() = default;
  SessionMount(const SessionMount&) = delete;
  SessionMount& operator=(const SessionMount&) = delete;
  ~SessionMount() { Unmount(); }
  bool Mount(fuse_session* se, const std::string& mountpoint) {
    if (fuse_session_mount(se, mountpoint.c_str()) != 0) return false;
    se_ = se;
    return true;
  }
  void Unmount() {
    if (se_ != nullptr) fuse_session_unmount(se_);
    se_ = nullptr;
  }

 private:
  fuse_session* se_ = nullptr;
};

// Every mount made with the same layers shows the same tree. The fsname was
// checked (CheckFsname): it holds no comma that libfuse would split at.
std::string MountOptions(const MountConfig& c) {
  std::string o = "fsname=" + c.fsname + ",subtype=acqfs,default_permissions," +
                  c.vfs.LibfuseOptions();
  if (c.allow_other) o += ",allow_other";
  return o;
}

// Checks that the format can be written on this upper layer before any
// request depends on it: a 0/0 whiteout and the opaque xattr.
Status ProbeFormat(const Layers& layers) {
  std::string name = sys::TempName("#probe.");
  int tfd = layers.tmp.get();
  Status s = LayerFormat::MakeWhiteout(tfd, name, layers.tmp_path);
  if (s) (void)::unlinkat(tfd, name.c_str(), 0);
  if (!s) return s;
  if (::mkdirat(tfd, name.c_str(), 0700) != 0)
    return Error::Errno("mkdir", layers.tmp_path);
  s = layers.format.SetOpaque(tfd, name, layers.tmp_path + "/" + name);
  (void)::unlinkat(tfd, name.c_str(), AT_REMOVEDIR);
  return s;
}

// A whole decimal number, or a decimal fraction for `fraction`: digits and
// at most one '.', nothing else (no sign, blank, exponent, hex, inf or nan,
// which strtod and strtoul would take).
bool ParseNumber(const std::string& text, bool fraction, double* out) {
  if (text.empty() || text == ".") return false;
  size_t dots = 0;
  for (char ch : text) {
    if (ch == '.' && fraction && ++dots == 1) continue;
    if (ch < '0' || ch > '9') return false;
  }
  char* end = nullptr;
  errno = 0;
  double v = fraction
                 ? std::strtod(text.c_str(), &end)
                 : static_cast<double>(std::strtoul(text.c_str(), &end, 10));
  if (errno != 0 || end != text.c_str() + text.size() || v < 0) return false;
  *out = v;
  return true;
}

// The pressure handler (sys::SetFdPressureHandler): an open failed with
// EMFILE or ENFILE, so the file cache gives half its descriptors back
// (leases keep those in use open). The per-thread directory caches are left
// alone: their descriptors are borrowed by callers that may be mid-use.
bool RelieveFdPressure(void* arg) {
  auto* ov = static_cast<Overlay*>(arg);
  size_t cached = ov->cached_files();
  size_t freed = ov->ShrinkFiles(cached / 2);
  spdlog::warn("descriptors ran out: evicted {} of {} cached files", freed,
               cached);
  return freed > 0;
}

// Owns the pressure handler's registration for the serving loop.
struct PressureHandlerScope {
  explicit PressureHandlerScope(Overlay* ov) {
    sys::SetFdPressureHandler(&RelieveFdPressure, ov);
  }
  ~PressureHandlerScope() { sys::SetFdPressureHandler(nullptr, nullptr); }
  PressureHandlerScope(const PressureHandlerScope&) = delete;
  PressureHandlerScope& operator=(const PressureHandlerScope&) = delete;
};

// ------------------------------------------------- the session's own I/O
//
// libfuse 3.14 asks for FUSE_CAP_HANDLE_KILLPRIV by default but never puts
// FUSE_HANDLE_KILLPRIV into its INIT reply, and knows nothing of
// FUSE_HANDLE_KILLPRIV_V2. Without them the kernel sends a GETATTR inside
// every chown, to compute the mode without set-id bits itself. The
// session's reads and writes go through these hooks (fuse_session_custom_io)
// so that the INIT reply gains both flags, when the kernel offered them;
// the daemon then clears set-id bits itself (fuse/setid.h). Every other
// request and reply passes untouched.
//
// The INIT request is the first the kernel sends; every request comes
// through `read` (the daemon does not let libfuse splice requests, see
// OpInit); libfuse answers INIT on the thread that read it, before any
// other request is read.

// FUSE_TMPFILE (Linux 6.3+, open(O_TMPFILE)) is unknown to libfuse 3.14,
// which would answer ENOSYS, and the kernel then EOPNOTSUPP for good. Its
// body is a CREATE's (fuse_create_in, then the dentry's name, "/"), and so
// is its reply (entry, then open): the request goes on as a CREATE whose
// name is kTmpfileName, which OpCreate tells apart. `n` is the request's
// length; returns the new one.
ssize_t TmpfileAsCreate(char* buf, size_t len, ssize_t n) {
  const size_t body = sizeof(fuse_in_header) + sizeof(fuse_create_in);
  if (static_cast<size_t>(n) < body || body + sizeof kTmpfileName > len)
    return n;  // malformed: libfuse answers it (ENOSYS)
  std::memcpy(buf + body, kTmpfileName, sizeof kTmpfileName);
  fuse_in_header h;
  std::memcpy(&h, buf, sizeof h);
  h.opcode = FUSE_CREATE;
  h.len = static_cast<uint32_t>(body + sizeof kTmpfileName);
  std::memcpy(buf, &h, sizeof h);
  return static_cast<ssize_t>(h.len);
}

// What every request goes through before libfuse sees it, on either
// transport (the /dev/fuse read hook below, the ring's RequestHook): an
// O_TMPFILE's FUSE_TMPFILE becomes a CREATE, the warm walk hears of a
// change, and INIT's offered flags are kept. `buf` holds `n` bytes, room
// for `len`; returns the request's new length.
size_t PrepareRequest(FuseContext* ctx, char* buf, size_t len, size_t n) {
  if (n < sizeof(fuse_in_header)) return n;
  fuse_in_header h;
  std::memcpy(&h, buf, sizeof h);
  if (h.opcode == FUSE_TMPFILE) {
    if (ctx->warm) ctx->warm->NoteWrite();
    return static_cast<size_t>(
        TmpfileAsCreate(buf, len, static_cast<ssize_t>(n)));
  }
  // Only the agent changes anything (the walk only lists and looks up).
  // An open for writing counts too: the writes through a passed-through
  // open never reach the daemon (fuse/passthrough.h).
  if (ctx->warm) {
    bool writes = ChangesTheFileSystem(h.opcode);
    if (!writes && h.opcode == FUSE_OPEN &&
        n >= sizeof h + sizeof(fuse_open_in)) {
      fuse_open_in in;
      std::memcpy(&in, buf + sizeof h, sizeof in);
      writes = (in.flags & O_ACCMODE) != O_RDONLY || (in.flags & O_TRUNC);
    }
    if (writes) ctx->warm->NoteWrite();
  }
  if (!ctx->init_replied.load(std::memory_order_relaxed)) {
    if (h.opcode == FUSE_INIT &&
        n >= sizeof h + offsetof(fuse_init_in, flags) + sizeof(uint32_t)) {
      fuse_init_in in;
      std::memset(&in, 0, sizeof in);
      std::memcpy(&in, buf + sizeof h, std::min(sizeof in, n - sizeof h));
      ctx->init_unique = h.unique;
      ctx->init_offered = in.flags;
      // flags2 is there only in the extended request.
      if ((in.flags & FUSE_INIT_EXT) &&
          n >= sizeof h + offsetof(fuse_init_in, flags2) + sizeof(uint32_t))
        ctx->init_offered2 = in.flags2;
    }
  }
  return n;
}

size_t RingRequestHook(void* arg, char* buf, size_t cap, size_t n) {
  return PrepareRequest(static_cast<FuseContext*>(arg), buf, cap, n);
}

ssize_t SessionRead(int fd, void* buf, size_t len, void* userdata) {
  ssize_t n = ::read(fd, buf, len);
  if (n <= 0) return n;
  return static_cast<ssize_t>(
      PrepareRequest(static_cast<FuseContext*>(userdata),
                     static_cast<char*>(buf), len, static_cast<size_t>(n)));
}

// Adds FUSE_OVER_IO_URING to the INIT reply `out` when the kernel offered
// it and the mount wants it; otherwise tells the transport why not.
// Returns whether it was added.
bool AskForRing(FuseContext* ctx, fuse_uapi::InitOut* out, size_t out_len) {
  if (ctx->uring == nullptr) return false;
  std::string why;
  if (!(ctx->init_offered & FUSE_INIT_EXT) ||
      !(ctx->init_offered2 & fuse_uapi::kOverIoUring2)) {
    const std::string p = EnableUringParameter();
    why = p.empty()  ? "the kernel has no FUSE over io_uring (Linux 6.14+)"
          : p == "N" ? "the kernel offers no ring: "
                       "/sys/module/fuse/parameters/enable_uring is N"
                     : "the kernel did not offer FUSE_OVER_IO_URING";
  } else if (out_len <
             offsetof(fuse_uapi::InitOut, flags2) + sizeof(uint32_t)) {
    why = "libfuse's INIT reply has no flags2";
  }
  if (!why.empty()) {
    ctx->uring->Decline(why);
    return false;
  }
  out->flags |= FUSE_INIT_EXT;
  out->flags2 |= fuse_uapi::kOverIoUring2;
  return true;
}

// Whether the daemon holds CAP_SYS_ADMIN in the initial user namespace,
// which FUSE_DEV_IOC_BACKING_OPEN requires; "" if so, else why not.
std::string PassthroughPrivilegeMissing() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0)
    return std::string("capget: ") + std::strerror(errno);
  if (!(data[0].effective & (1u << CAP_SYS_ADMIN)))
    return "the daemon lacks CAP_SYS_ADMIN";
  struct stat mine, init;
  if (::stat("/proc/self/ns/user", &mine) == 0 &&
      ::stat("/proc/1/ns/user", &init) == 0 && mine.st_ino != init.st_ino)
    return "the daemon runs in a user namespace (CAP_SYS_ADMIN must be the "
           "initial namespace's)";
  return "";
}

// Adds FUSE_PASSTHROUGH (with a stacking depth of 1: the backing files are
// upper files, on a file system that stacks on nothing) to the INIT reply
// `out` when the kernel offered it and the mount may use it; otherwise
// says why not. Returns whether it was added.
bool AskForPassthrough(FuseContext* ctx, fuse_uapi::InitOut* out,
                       size_t out_len) {
  if (ctx->backing == nullptr) return false;
  std::string why;
  if (HandleLess(ctx))
    why = "the handle-less mode answers no OPEN (-o handles would)";
  else if (!(ctx->init_offered & FUSE_INIT_EXT) ||
           !(ctx->init_offered2 & fuse_uapi::kPassthrough2))
    why = "the kernel does not offer FUSE_PASSTHROUGH (Linux 6.9+)";
  else if (out_len <
           offsetof(fuse_uapi::InitOut, max_stack_depth) + sizeof(uint32_t))
    why = "libfuse's INIT reply has no max_stack_depth";
  else if (out->flags & FUSE_WRITEBACK_CACHE)
    why = "the writeback cache is on";
  if (!why.empty()) {
    spdlog::info("passthrough: off ({})", why);
    return false;
  }
  out->flags |= FUSE_INIT_EXT;
  out->flags2 |= fuse_uapi::kPassthrough2;
  out->max_stack_depth = 1;
  return true;
}

// The size of a ring entry's payload buffer the kernel asks for
// (fuse_uring_create: the largest of 8 KiB, max_write and max_pages
// pages), from the INIT reply.
size_t RingPayloadSize(const fuse_uapi::InitOut& out) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t pages = (out.flags & FUSE_MAX_PAGES) ? out.max_pages : 32;
  return std::max({size_t{8192}, size_t{out.max_write}, pages * page});
}

ssize_t SessionWritev(int fd, struct iovec* iov, int count, void* userdata) {
  auto* ctx = static_cast<FuseContext*>(userdata);
  // An OPEN or CREATE answered with a backing file (fuse/passthrough.h).
  std::vector<struct iovec> passed;
  thread_local std::vector<char> passed_body;
  if (const uint32_t id = ReplyBacking::Current(); id != 0) {
    if (PassthroughReply(iov, count, id, &passed, &passed_body))
      iov = passed.data();
  }
  // A ring worker's reply goes into its entry.
  ssize_t captured = 0;
  if (UringTransport::CaptureReply(iov, count, &captured)) return captured;
  if (ctx->init_replied.load(std::memory_order_relaxed) || count < 2 ||
      iov[0].iov_len != sizeof(fuse_out_header))
    return ::writev(fd, iov, count);
  fuse_out_header h;
  std::memcpy(&h, iov[0].iov_base, sizeof h);
  if (ctx->init_unique == 0 || h.unique != ctx->init_unique)
    return ::writev(fd, iov, count);
  ctx->init_replied.store(true, std::memory_order_relaxed);
  // The reply's body is fuse_init_out or an older, shorter form of it.
  if (h.error != 0 ||
      iov[1].iov_len < offsetof(fuse_init_out, flags) + sizeof(uint32_t) ||
      iov[1].iov_len > sizeof(fuse_init_out))
    return ::writev(fd, iov, count);
  fuse_init_out out;
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, iov[1].iov_base, iov[1].iov_len);
  // Both or neither: the daemon's clearing needs V2's flag on a chown
  // (FATTR_KILL_SUIDGID); with the first alone the kernel would send a
  // chown with no sign of the bits it leaves.
  const uint32_t want = FUSE_HANDLE_KILLPRIV | FUSE_HANDLE_KILLPRIV_V2;
  if ((ctx->init_offered & want) == want)
    ctx->init_flags_added = want & ~out.flags;
  // Lookups and listings of one directory side by side. libfuse 3.14's
  // reply never carries FUSE_PARALLEL_DIROPS, whatever the daemon wants
  // (FUSE_CAP_PARALLEL_DIROPS in conn->want is dropped), so the kernel
  // took a mutex of the directory's around every LOOKUP and READDIR in it
  // (fuse_lock_inode): a thread's lookup waited for another's in the same
  // directory. The Overlay needs no such help: lookups run under its
  // shared tree lock and change the node table under the table's mutex,
  // as lookups in different directories always have
  // (docs/architecture.md, "Locking").
  if (ctx->parallel_dirops && (ctx->init_offered & FUSE_PARALLEL_DIROPS))
    ctx->init_flags_added |= FUSE_PARALLEL_DIROPS & ~out.flags;
  out.flags |= ctx->init_flags_added;
  fuse_uapi::InitOut ext;
  static_assert(sizeof ext == sizeof out);
  std::memcpy(&ext, &out, sizeof ext);
  const bool ring = AskForRing(ctx, &ext, iov[1].iov_len);
  const bool passthrough = AskForPassthrough(ctx, &ext, iov[1].iov_len);
  std::memcpy(&out, &ext, sizeof out);
  spdlog::info(
      "fuse init: the reply gains flags {:#x} (the kernel offered {:#x}); "
      "set-id bits are cleared by {}; lookups in one directory {}",
      ctx->init_flags_added, ctx->init_offered,
      (out.flags & FUSE_HANDLE_KILLPRIV_V2) ? "the daemon" : "the kernel",
      (out.flags & FUSE_PARALLEL_DIROPS) ? "run side by side"
                                         : "are serialized by the kernel");
  std::vector<struct iovec> patched(iov, iov + count);
  patched[1].iov_base = &out;
  if (ring)
    patched[1].iov_len = std::max(
        patched[1].iov_len, offsetof(fuse_init_out, flags2) + sizeof(uint32_t));
  ssize_t n = ::writev(fd, patched.data(), count);
  if (passthrough) {
    if (n >= 0) {
      ctx->backing->Enable();
      spdlog::info("passthrough: on (opens of upper files with one name)");
    } else {
      spdlog::info("passthrough: off (the INIT reply failed: {})",
                   std::strerror(errno));
    }
  }
  // The kernel has taken the reply (its connection is initialized): the
  // ring's entries may be registered now.
  if (ring) {
    if (n >= 0)
      ctx->uring->Begin(fd, RingPayloadSize(ext));
    else
      ctx->uring->Decline(std::string("the INIT reply failed: ") +
                          std::strerror(errno));
  }
  return n;
}

ssize_t SessionSplice(int fdin, off_t* offin, int fdout, off_t* offout,
                      size_t len, unsigned int flags, void* userdata) {
  (void)userdata;
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

}  // namespace

const std::vector<std::string>& DaemonOptionNames() {
  static const std::vector<std::string> names = {"userxattr",
                                                 "timeout=SECONDS",
                                                 "threads=N",
                                                 "writeback",
                                                 "handles",
                                                 "no_open",
                                                 "nopassthrough",
                                                 "uring",
                                                 "nouring",
                                                 "nosync_copyup",
                                                 "warm",
                                                 "nowarm",
                                                 "warm_limit=ENTRIES",
                                                 "warm_threads=N",
                                                 "warm_nice=N",
                                                 "host_watch",
                                                 "nohost_watch",
                                                 "parallel_dirops",
                                                 "noparallel_dirops",
                                                 "debug",
                                                 "allow_other",
                                                 "audit",
                                                 "noaudit"};
  return names;
}

std::string MountOptionsHelp() {
  std::string text = "Options: ";
  for (const auto& n : DaemonOptionNames()) text += n + ", ";
  return text +
         "noallow_other; and mount flags: ro, rw, exec, noexec, nodev, "
         "dev, nosuid, suid, noatime, nodiratime, nolazytime, async, "
         "fsname=NAME";
}

namespace {

// Whether `o` is a word or a key=value of DaemonOptionNames.
bool IsDaemonOption(const std::string& o) {
  for (const auto& n : DaemonOptionNames()) {
    const size_t eq = n.find('=');
    if (eq == std::string::npos ? o == n
                                : o.compare(0, eq + 1, n, 0, eq + 1) == 0)
      return true;
  }
  return false;
}

}  // namespace

Status ApplyMountOption(const std::string& o, MountConfig* c) {
  auto value = [&](const char* key) -> const char* {
    size_t n = std::strlen(key);
    return o.compare(0, n, key) == 0 ? o.c_str() + n : nullptr;
  };
  double v = 0;
  bool vfs = false;
  ACQFS_TRY(TakeVfsOption(o, ::geteuid() == 0, &c->vfs, &vfs));
  if (vfs) return Ok();
  if (const char* name = value("fsname=")) {
    ACQFS_TRY(CheckFsname(name, o));
    c->fsname = name;
    return Ok();
  }
  if (!IsDaemonOption(o)) return Error::Of(EINVAL, "mount option (unknown)", o);
  if (o == "userxattr") {
    c->force_userxattr = true;
  } else if (o == "allow_other") {
    c->allow_other = true;
  } else if (o == "writeback") {
    c->writeback_cache = true;
  } else if (o == "no_open") {
    c->no_open = true;
    c->file_mode_chosen = true;
  } else if (o == "handles") {
    c->no_open = false;
    c->file_mode_chosen = true;
  } else if (o == "parallel_dirops") {
    c->parallel_dirops = true;
  } else if (o == "noparallel_dirops") {
    c->parallel_dirops = false;
  } else if (o == "nosync_copyup") {
    c->sync_copy_up = false;
  } else if (o == "warm") {
    c->warm = true;
  } else if (o == "nowarm") {
    c->warm = false;
  } else if (o == "uring") {
    // Refused unless the kernel will offer the ring, which it does at INIT
    // only while its parameter is Y (should it change before the INIT,
    // the daemon log says the mount fell back).
    const std::string p = EnableUringParameter();
    if (p.empty())
      return Error::Of(EOPNOTSUPP,
                       "mount option (this kernel has no FUSE over io_uring: "
                       "Linux 6.14+)",
                       o);
    if (p != "Y")
      return Error::Of(EINVAL,
                       "mount option (FUSE over io_uring needs "
                       "/sys/module/fuse/parameters/enable_uring at Y; it "
                       "reads " +
                           p + ")",
                       o);
    c->uring = UringMode::kRequired;
  } else if (o == "nouring") {
    c->uring = UringMode::kOff;
  } else if (o == "nopassthrough") {
    c->passthrough = false;
  } else if (o == "audit") {
    c->audit = true;
  } else if (o == "noaudit") {
    c->audit = false;
  } else if (o == "host_watch") {
    c->host_watch = true;
  } else if (o == "nohost_watch") {
    c->host_watch = false;
  } else if (const char* w = value("warm_limit=")) {
    if (!ParseNumber(w, false, &v) || v > 1e9)
      return Error::Of(EINVAL,
                       "mount option (warm_limit must be 0 to 1000000000 "
                       "entries)",
                       o);
    c->warm_limit = static_cast<uint64_t>(v);
  } else if (const char* w = value("warm_threads=")) {
    if (!ParseNumber(w, false, &v) || v < 1 || v > 64)
      return Error::Of(EINVAL, "mount option (warm_threads must be 1 to 64)",
                       o);
    c->warm_threads = static_cast<unsigned>(v);
  } else if (const char* w = value("warm_nice=")) {
    if (!ParseNumber(w, false, &v) || v > 19)
      return Error::Of(EINVAL, "mount option (warm_nice must be 0 to 19)", o);
    c->warm_nice = static_cast<int>(v);
  } else if (o == "debug") {
    c->debug = true;
  } else if (const char* t = value("timeout=")) {
    if (!ParseNumber(t, true, &v))
      return Error::Of(EINVAL, "mount option (not a number of seconds)", o);
    c->timeout = v;
  } else if (const char* n = value("threads=")) {
    if (!ParseNumber(n, false, &v) || v < 1 || v > 256)
      return Error::Of(EINVAL, "mount option (threads must be 1 to 256)", o);
    c->max_threads = static_cast<unsigned>(v);
  } else {
    return Error::Of(EINVAL, "mount option (unknown)", o);
  }
  return Ok();
}

Status CheckPolicyEnforceable(const MountConfig& c) {
  if (c.audit && !c.audit_reads.empty() && c.no_open && c.file_mode_chosen)
    return Error::Of(EINVAL,
                     "mount option (--audit-reads records opens, which the "
                     "handle-less mode never sees; drop no_open)",
                     "no_open");
  if (c.writeback_cache && c.policy &&
      (c.policy->quota_bytes() > 0 || c.policy->has_read_only()))
    return Error::Of(EINVAL,
                     "mount option (the writeback cache would report a "
                     "quota or read-only error after the write had returned; "
                     "drop writeback)",
                     "writeback");
  return Ok();
}

namespace {

class SessionControl : public MountControl {
 public:
  SessionControl(Overlay* ov, fuse_session* se, const FuseContext* ctx)
      : ov_(ov), se_(se), ctx_(ctx) {}

  Status Checkpoint(const std::string& new_upper,
                    const std::function<Status()>& commit) override {
    // The records of writes so far belong to the layer being frozen.
    if (ctx_->audit != nullptr) (void)ctx_->audit->Flush();
    auto stale = ov_->Freeze(new_upper, commit);
    if (!stale) return stale.error();
    // Outside the Overlay's locks: the kernel may send requests meanwhile.
    for (const auto& n : *stale) {
      int rc = fuse_lowlevel_notify_inval_entry(se_, IdOf(n.parent),
                                                n.name.c_str(), n.name.size());
      if (rc != 0 && rc != -ENOENT)
        spdlog::warn("checkpoint: forget the name {}: {}", n.name,
                     std::strerror(-rc));
    }
    spdlog::info("checkpoint: the upper is {} now", new_upper);
    return Ok();
  }
  Status Rewind(const std::vector<std::string>& frozen,
                const std::string& new_upper,
                const std::function<Status()>& commit) override {
    if (ctx_->audit != nullptr) (void)ctx_->audit->Flush();
    auto r = ov_->Restack(frozen, new_upper, commit);
    if (!r) return r.error();
    for (const auto& n : r->names) {
      int rc = fuse_lowlevel_notify_inval_entry(se_, IdOf(n.parent),
                                                n.name.c_str(), n.name.size());
      if (rc != 0 && rc != -ENOENT)
        spdlog::warn("rewind: forget the name {}: {}", n.name,
                     std::strerror(-rc));
    }
    for (Node* node : r->nodes)
      (void)fuse_lowlevel_notify_inval_inode(se_, IdOf(node), 0, 0);
    (void)fuse_lowlevel_notify_inval_inode(se_, FUSE_ROOT_ID, 0, 0);
    spdlog::info("rewind: the upper is {} now, over {} frozen layers",
                 new_upper, frozen.size());
    return Ok();
  }
  Status Squash(unsigned count, const std::string& merged,
                const std::function<Status()>& commit) override {
    ACQFS_TRY(ov_->ReplaceFrozen(count, merged, commit));
    spdlog::info("squash: {} frozen layers served as {}", count, merged);
    return Ok();
  }
  std::string UpperPath() override { return ov_->UpperRootPath(); }
  // ctx_->uring is set before the control channel starts and cleared after
  // it stops (RunFilesystem).
  std::string Transport() override {
    return ctx_->uring != nullptr ? ctx_->uring->Transport() : "/dev/fuse";
  }
  // ctx_->backing: as ctx_->uring.
  int64_t PassedThrough() override {
    if (ctx_->backing == nullptr || !ctx_->backing->enabled()) return -1;
    return static_cast<int64_t>(ctx_->backing->passed_through());
  }
  AuditState Audit() override {
    AuditState a;
    if (ctx_->audit == nullptr) return a;
    const audit::WriterStats st = ctx_->audit->Stats();
    a.on = true;
    a.written = st.written;
    a.lost = st.dropped;
    a.incomplete = ctx_->audit->Incomplete();
    return a;
  }
  Status FlushAudit() override {
    return ctx_->audit == nullptr ? Ok() : ctx_->audit->Flush();
  }

 private:
  fuse_ino_t IdOf(Node* n) const {
    return n == ov_->root() ? FUSE_ROOT_ID : reinterpret_cast<fuse_ino_t>(n);
  }

  Overlay* ov_;
  fuse_session* se_;
  const FuseContext* ctx_;
};

}  // namespace

// Drops what the kernel caches of a host change (fs/host_watch.h): the
// entry's name and the directory's listing and attributes for a name made,
// removed or renamed; the file's attributes, and for a write its pages, for
// a change in place. Called on the watch's thread, which holds no lock of
// the daemon's: the kernel may wait for a worker's reply (a page being
// read) before it lets go. The overlay is read first, the kernel told
// after (a notification that waits past the watch's stop never reaches
// the overlay again).
// The id the kernel knows `n` by (fuse_ops.cc's IdOf, for threads that
// have no request).
static uint64_t NodeIdOf(Overlay* ov, Node* n) {
  return n == ov->root() ? FUSE_ROOT_ID : reinterpret_cast<uint64_t>(n);
}

static void InvalidateHostChange(const KernelNotify& notify, Overlay* ov,
                                 const HostChange& c) {
  if (c.kind == HostChange::kLost) {
    spdlog::warn("host watch: {}{}; host edits there show after the timeout",
                 c.why, c.dir.empty() ? "" : " (at " + c.dir + ")");
    return;
  }
  const Overlay::HostChangeNodes n = ov->NodesOfHostChange(c.dir, c.name);
  if (!n.dir) return;
  const uint64_t dir = NodeIdOf(ov, n.dir);
  const uint64_t entry = n.entry ? NodeIdOf(ov, n.entry) : 0;
  if (c.kind == HostChange::kEntry) {
    if (!n.dir_shows_host) return;  // an opaque directory hides the host's
    (void)notify.InvalEntry(dir, c.name);
    (void)notify.InvalInode(dir, 0, 0);
    return;
  }
  if (entry)
    (void)notify.InvalInode(entry, c.kind == HostChange::kContent ? 0 : -1, 0);
}

namespace {

// The mount's audit log, opened beneath the sandbox's state directory.
Result<std::unique_ptr<AuditSink>> OpenAudit(const MountConfig& config,
                                             Overlay* overlay) {
  AuditSink::Options so;
  for (const auto& g : config.audit_reads) {
    auto p = PathGlob::Parse(g);
    if (!p) return Error::Of(p.err(), "--audit-reads " + p.error().op, g);
    so.read_globs.push_back(std::move(*p));
  }
  auto dir = sys::OpenBelow(config.anchor, config.audit_dir,
                            O_DIRECTORY | O_RDONLY, "open the audit log's");
  if (!dir) return dir.error();
  audit::WriterOptions wo;
  if (config.audit_max > 0) wo.max_bytes = config.audit_max;
  auto w = audit::Writer::Open(dir->get(), config.audit_dir, wo);
  if (!w) return w.error();
  auto sink =
      std::make_unique<AuditSink>(std::move(*w), overlay, std::move(so));
  sink->Mounted();
  spdlog::info("audit log: {}/{}/{} (at most {} bytes{})", config.audit_dir,
               audit::kAuditDirName, audit::kAuditLogName, wo.max_bytes,
               config.audit_reads.empty()
                   ? ""
                   : ", opens for reading of " +
                         std::to_string(config.audit_reads.size()) +
                         " patterns");
  return sink;
}

}  // namespace

Status RunFilesystem(const MountConfig& config, const ReadyCallback& ready,
                     const ControlStarter& control) {
  auto fail = [&](const Error& e) -> Status {
    ready(e);
    return e;
  };
  XattrNamespace ns = LayerFormat::DefaultNamespace(config.force_userxattr);
  auto layers = Layers::Open(config.lower, config.upper, config.work, ns,
                             config.frozen, config.anchor);
  if (!layers) return fail(layers.error());
  if (Status s = ProbeFormat(*layers); !s) return fail(s.error());
  layers->sync_copy_up = config.sync_copy_up;
  layers->policy = config.policy;
  if (Status s = CheckPolicyEnforceable(config); !s) return fail(s.error());
  if (!config.sources_dir.empty() && config.sources_since_ns > 0) {
    auto src = CopyUpSources::Open(config.sources_dir, config.sources_since_ns,
                                   /*create=*/true);
    if (!src) return fail(src.error());
    layers->sources = *src;
  }
  auto limit = RaiseFdLimit();
  if (!limit) return fail(limit.error());
  // The ring's workers (fuse/uring_transport.h): as many per CPU queue as
  // spreads the session's threads over the queues, at least one each.
  // Why the mount runs on /dev/fuse alone, when it is known before INIT.
  std::string no_ring = config.uring == UringMode::kOff ? "-o nouring" : "";
  unsigned ring_queues = 0, ring_per_queue = 0;
  if (config.uring != UringMode::kOff) {
    auto cpus = PossibleCpus();
    if (!cpus && config.uring == UringMode::kRequired)
      return fail(cpus.error());
    if (cpus) {
      ring_queues = *cpus;
      ring_per_queue = std::max(1u, config.max_threads / ring_queues);
    } else {
      no_ring = cpus.error().Message();
    }
  }
  auto budget =
      FdBudget::Plan(*limit, config.max_threads, ring_queues * ring_per_queue);
  if (!budget && ring_queues > 0 && config.uring != UringMode::kRequired) {
    // A limit too low for the ring's workers too: /dev/fuse alone.
    no_ring = "the open-files limit of " + std::to_string(*limit) +
              " leaves no room for the ring's " +
              std::to_string(ring_queues * ring_per_queue) + " workers";
    ring_queues = ring_per_queue = 0;
    budget = FdBudget::Plan(*limit, config.max_threads);
  }
  if (!budget) return fail(budget.error());
  auto overlay = Overlay::Create(std::move(*layers));
  if (!overlay) return fail(overlay.error());
  const bool install = config.install_fd >= 0 && !config.install_rel.empty();
  if (install)
    (*overlay)->CloseGate(
        config.install_rel.substr(0, config.install_rel.find('/')));
  (*overlay)->SetDescriptorBudget(budget->files, budget->kept, budget->pinned);
  Layer::SetDirCacheSlots(budget->dir_cache);
  spdlog::info("descriptors: {}", budget->Describe());
  PressureHandlerScope pressure(overlay->get());

  FuseContext ctx;
  ctx.overlay = overlay->get();
  ctx.timeout = config.timeout;
  ctx.writeback_cache = config.writeback_cache;
  ctx.no_open = config.no_open;
  ctx.file_mode_auto = !config.file_mode_chosen;
  ctx.parallel_dirops = config.parallel_dirops;
  ctx.debug = config.debug;

  ArgsOwner args;
  std::vector<std::string> argv = {"acqfs", "-o", MountOptions(config)};
  if (config.debug) argv.push_back("-d");
  for (auto& a : argv)
    if (fuse_opt_add_arg(&args.args, a.c_str()) != 0)
      return fail(Error::Of(ENOMEM, "fuse_opt_add_arg", a));

  UniqueSession se(fuse_session_new(&args.args, FuseOperations(),
                                    sizeof(fuse_lowlevel_ops), &ctx));
  if (!se)
    return fail(Error::Of(EINVAL, "fuse_session_new", config.mountpoint));
  // Owned from here, so that every early return undoes what was done (the
  // mount first: the walk's child may wait on it) before the caller hears
  // of the failure.
  SignalHandlers signals;
  std::unique_ptr<WarmWalk> warm;
  SessionMount mounted;
  auto fail_mounted = [&](const Error& e) -> Status {
    mounted.Unmount();
    return fail(e);
  };
  if (!signals.Set(se.get()))
    return fail(Error::Of(EIO, "fuse_set_signal_handlers", config.mountpoint));
  if (!mounted.Mount(se.get(), config.mountpoint))
    return fail(
        Error::Of(EIO, "mount (see the daemon log)", config.mountpoint));
  // libfuse 3.14 cannot pass nodiratime; the kernel takes it in a remount
  // of the mount's own flags (which sends the daemon nothing).
  if (config.vfs.nodiratime)
    if (Status s = SetMountFlags(config.mountpoint, config.vfs); !s)
      return fail_mounted(s.error());
  // Never a flag asked for and silently not applied: fusermount3 (an
  // ordinary user's mounts) drops what it deems unsafe without failing.
  if (Status s = CheckMountedAs(config.mountpoint, config.vfs, config.fsname);
      !s)
    return fail_mounted(s.error());
  {
    struct fuse_custom_io io;
    std::memset(&io, 0, sizeof io);
    io.read = SessionRead;
    io.writev = SessionWritev;
    io.splice_receive = SessionSplice;
    io.splice_send = SessionSplice;
    int io_rc =
        fuse_session_custom_io(se.get(), &io, fuse_session_fd(se.get()));
    if (io_rc != 0)
      return fail_mounted(
          Error::Of(-io_rc, "fuse_session_custom_io", config.mountpoint));
  }
  spdlog::info("mounted {} (lower {}, upper {}, xattrs {})", config.mountpoint,
               config.lower, config.upper,
               ns == XattrNamespace::kTrusted ? "trusted" : "user");
  // Forked before any thread of the daemon's starts.
  if (config.warm && config.warm_limit > 0 && config.timeout > 0) {
    WarmWalkOptions wo;
    wo.mountpoint = config.mountpoint;
    wo.max_entries = config.warm_limit;
    wo.threads = config.warm_threads;
    wo.nice = config.warm_nice;
    // Entries the kernel caches for less than the walk takes are no help.
    wo.max_seconds = std::min(30.0, config.timeout / 2);
    auto w = WarmWalk::Start(wo);
    if (w)
      warm = std::move(*w);
    else
      spdlog::warn("warm walk not started: {}", w.error().Message());
  } else {
    // Said in any case, so a reader of the log (the tests' harness, which
    // waits for the walk's line before a test changes the lower) knows no
    // walk will come.
    spdlog::info("warm walk: off ({})", !config.warm ? "-o nowarm"
                                        : config.warm_limit == 0
                                            ? "warm_limit=0"
                                            : "timeout=0");
  }
  // Notifications from threads other than the workers go through a
  // descriptor of their own (fuse/kernel_notify.h).
  auto notify = KernelNotify::Open(fuse_session_fd(se.get()));
  if (!notify) return fail_mounted(notify.error());
  auto dropper = PageDropper::Start(*notify);
  if (!dropper) return fail_mounted(dropper.error());
  ctx.page_dropper = dropper->get();
  // A node that starts to follow the host's replacement of its file
  // (Overlay::SetAttrInvalidator): its cached attributes only (offset -1:
  // no page is touched, so a worker may send it while the kernel waits
  // for that worker's read), before the read is answered.
  (*overlay)->SetAttrInvalidator([n = *notify, ov = overlay->get()](Node* x) {
    int e = n->InvalInode(NodeIdOf(ov, x), -1, 0);
    if (e != 0 && e != ENOENT)
      spdlog::warn(
          "drop the cached attributes of a host file the host replaced: {}",
          std::strerror(e));
  });
  // The audit log (fuse/audit_sink.h): its writer's thread starts after
  // the warm walk's fork, like every thread. A log that cannot be opened
  // fails the mount: the sandbox is never served unrecorded unless asked
  // (-o noaudit).
  std::unique_ptr<AuditSink> audit;
  if (config.audit && !config.audit_dir.empty()) {
    auto a = OpenAudit(config, overlay->get());
    if (!a) return fail_mounted(a.error());
    audit = std::move(*a);
    ctx.audit = audit.get();
  } else {
    spdlog::info("audit log: off ({})",
                 config.audit ? "no state directory" : "-o noaudit");
  }
  // The host's changes, as they happen (fs/host_watch.h): what the kernel
  // caches of each goes at once. Started after the warm walk's fork.
  std::unique_ptr<HostWatch> host_watch;
  if (config.host_watch && config.timeout > 0) {
    Overlay* ov = overlay->get();
    auto w = HostWatch::Start(
        ov->layers().lower.root(), ov->layers().lower.root_path(),
        [n = *notify, ov](const HostChange& c) {
          InvalidateHostChange(*n, ov, c);
        },
        {".git"},
        [](size_t dirs, double secs) {
          spdlog::info("host watch: {} directories watched, {:.3f} s (done)",
                       dirs, secs);
        });
    if (w)
      host_watch = std::move(*w);
    else
      spdlog::warn("host watch: off ({}; host edits show after the timeout)",
                   w.error().Message());
  } else {
    // Said in any case, as for the warm walk: the tests' harness waits for
    // this line before a test changes the lower.
    spdlog::info("host watch: off ({})",
                 config.timeout > 0 ? "-o nohost_watch" : "timeout=0");
  }
  // The ring's workers wait for INIT's outcome (started after the warm
  // walk's fork, like every thread).
  std::unique_ptr<UringTransport> uring;
  if (ring_queues > 0) {
    UringOptions uo;
    uo.queues = ring_queues;
    uo.workers_per_queue = ring_per_queue;
    uo.hook = RingRequestHook;
    uo.hook_arg = &ctx;
    auto t = UringTransport::Create(se.get(), uo);
    if (t) {
      uring = std::move(*t);
      ctx.uring = uring.get();
    } else {
      no_ring = t.error().Message();
    }
  }
  if (!uring) spdlog::info("fuse transport: /dev/fuse ({})", no_ring);
  // Passthrough: asked for at INIT when the mount may use it.
  std::optional<LiveFileRecord> live_record;
  std::unique_ptr<BackingTable> backing;
  {
    std::string why;
    if (!config.passthrough)
      why = "-o nopassthrough";
    else if (config.no_open && config.file_mode_chosen)
      why = "the handle-less mode answers no OPEN (-o handles would)";
    else if (config.writeback_cache)
      why = "-o writeback";
    else if ((*overlay)->quota() != nullptr)
      why = "the quota must see every write";
    else
      why = PassthroughPrivilegeMissing();
    if (why.empty()) {
      auto r = LiveFileRecord::Open((*overlay)->layers().work.root(),
                                    (*overlay)->layers().work.root_path());
      if (r)
        live_record.emplace(std::move(*r));
      else
        why = r.error().Message();
    }
    if (why.empty()) {
      backing = std::make_unique<BackingTable>(fuse_session_fd(se.get()));
      backing->SetRecord(&*live_record);
      ctx.backing = backing.get();
      (*overlay)->SetLiveBackings([t = backing.get()] { return t->Live(); });
    } else {
      spdlog::info("passthrough: off ({})", why);
    }
  }
  SessionControl session_control(overlay->get(), se.get(), &ctx);
  std::function<void()> stop_control;
  if (control) stop_control = control(&session_control);
  ready(Ok());
  // Started after the warm walk's fork (which must come before any thread).
  std::thread installer;
  if (install) {
    installer = std::thread([&config, ov = overlay->get()] {
      Status s = ov->InstallUpperFile(config.install_rel, config.install_fd);
      if (config.installed) s = config.installed(s, ov->quota());
      if (s)
        spdlog::info("installed {} in the upper layer", config.install_rel);
      else
        spdlog::error("install {}: {}", config.install_rel,
                      s.error().Message());
      ov->OpenGate();
    });
  }

  UniqueLoopConfig loop(fuse_loop_cfg_create());
  fuse_loop_cfg_set_max_threads(loop.get(), config.max_threads);
  fuse_loop_cfg_set_clone_fd(loop.get(), 0);
  ctx.warm = warm.get();
  int rc = fuse_session_loop_mt(se.get(), loop.get());
  host_watch.reset();
  (*overlay)->SetAttrInvalidator(nullptr);
  if (installer.joinable()) installer.join();
  ctx.warm = nullptr;
  if (warm) warm->Stop();
  if (stop_control) stop_control();
  mounted.Unmount();
  // The ring's workers end once the unmount ends the connection; a lazy
  // unmount (files still open) leaves it up, and they are stopped. Their
  // rings go before the session's /dev/fuse descriptor.
  if (uring) {
    spdlog::info("fuse transport: {}; {} requests served on the ring",
                 uring->Describe(), uring->served());
    uring->Stop();
    ctx.uring = nullptr;
    uring.reset();
  }
  if (backing) {
    spdlog::info("passthrough: {} opens passed through{}",
                 backing->passed_through(),
                 backing->off_reason().empty()
                     ? ""
                     : " (then off: " + backing->off_reason() + ")");
    (*overlay)->SetLiveBackings(nullptr);
    ctx.backing = nullptr;
    backing.reset();
  }
  // The notifier's copy of the /dev/fuse descriptor goes too (the page
  // dropper's and the host watch's holds are gone by now, unless one of
  // them was left waiting in the kernel): only then does the kernel end
  // the connection, and abort a request of the warm walk's that the loop
  // had read but will never answer.
  if (audit) {
    ctx.audit = nullptr;
    Status s = audit->Flush();
    const audit::WriterStats st = audit->Stats();
    spdlog::info("audit log: {} records written, {} lost{}", st.written,
                 st.dropped, s ? "" : " (" + s.error().Message() + ")");
    audit.reset();
  }
  ctx.page_dropper = nullptr;
  dropper->reset();
  notify->reset();
  warm.reset();  // reaps the walk, which nothing holds any more
  spdlog::info("unmounted {} (loop returned {})", config.mountpoint, rc);
  if (rc < 0) return Error::Of(-rc, "fuse loop", config.mountpoint);
  return Ok();
}

}  // namespace acqfs
