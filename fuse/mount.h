// Mounting: turns a MountConfig into a running FUSE session over an Overlay.
// RunFilesystem blocks until the filesystem is unmounted (or the daemon gets
// SIGTERM/SIGINT/SIGHUP, which unmount it cleanly).
// Thread-safety: call once per process.
#ifndef ACQFS_FUSE_MOUNT_H_
#define ACQFS_FUSE_MOUNT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "fs/policy.h"
#include "fs/quota.h"
#include "fuse/vfs_options.h"

namespace acqfs {

enum class UringMode { kWhenOffered, kRequired, kOff };

struct MountConfig {
  std::string lower, upper, work, mountpoint;
  // The frozen layers between the lower and the upper, bottom first
  // (docs/stack.md).
  std::vector<std::string> frozen;
  // The state directory the sandbox's own layers (upper, work, frozen) lie
  // below, opened under it with no symlink followed (Layer::OpenUnder); ""
  // for the mount helper's layers, given by path.
  std::string anchor;
  bool allow_other = false;
  // The mount's VFS flags (ro, dev, suid, noexec, nodiratime; always
  // noatime) and its source as mountinfo shows it (fuse/vfs_options.h).
  VfsFlags vfs;
  std::string fsname = "acqfs";
  bool force_userxattr = false;  // use user.overlay.* even when privileged
  double timeout = 60.0;         // entry/attr/negative-entry cache seconds
  bool writeback_cache = false;  // see docs/architecture.md: mtimes diverge
  // Handle-less reads and writes: the kernel sends no OPEN/RELEASE for
  // files (docs/architecture.md, "Handle-less files"). `-o no_open` asks
  // for it, `-o handles` turns it off; neither (`file_mode_chosen` false):
  // handles when the daemon may pass the opens of upper files through
  // (`passthrough`; decided at INIT, when the kernel's offer is known),
  // else handle-less (docs/benchmarks.md, "Passthrough against the
  // handle-less default").
  bool no_open = true;
  bool file_mode_chosen = false;
  // fsync each copy-up before publishing it (the kernel overlayfs default);
  // `-o nosync_copyup` turns it off: copy-ups still survive the daemon's
  // death, but not a machine crash.
  bool sync_copy_up = true;
  unsigned max_threads = 4;
  // Lookups and listings of one directory on several workers at once
  // (FUSE_PARALLEL_DIROPS, which the daemon adds to libfuse's INIT reply);
  // `-o noparallel_dirops` leaves the kernel to serialize them.
  bool parallel_dirops = true;
  // The warm walk after mount (fuse/warm_walk.h): `-o nowarm` turns it
  // off, `-o warm_limit=N` bounds its entries (0: off).
  bool warm = true;
  // Watch the host's tree and drop what the kernel caches of each change
  // as it lands (fs/host_watch.h); `-o nohost_watch`: host edits show
  // after the timeout.
  bool host_watch = true;
  // FUSE over io_uring (fuse/uring_transport.h): when the kernel offers it
  // (the default), required (`-o uring`, refused by ApplyMountOption
  // unless /sys/module/fuse/parameters/enable_uring is Y; a descriptor
  // limit too low for the ring's workers is then an error, not a fallback),
  // or never (`-o nouring`).
  UringMode uring = UringMode::kWhenOffered;
  // FUSE passthrough (fuse/passthrough.h) for the opens of upper files,
  // when the kernel offers it, the daemon may use it (CAP_SYS_ADMIN) and
  // the mount answers OPEN (-o handles) without a writeback cache or a
  // quota; `-o nopassthrough` turns it off.
  bool passthrough = true;
  // The audit log (fuse/audit_sink.h, docs/audit.md): on unless `-o
  // noaudit`, when `audit_dir` (the sandbox's state directory, opened
  // below `anchor` with no symlink followed) is set; its bound, and the
  // paths whose opens for reading it records (--audit-reads). A log that
  // cannot be opened fails the mount.
  bool audit = true;
  std::string audit_dir;
  uint64_t audit_max = 0;  // 0: audit::kDefaultAuditMax
  std::vector<std::string> audit_reads;
  uint64_t warm_limit = 1000000;
  // `-o warm_threads=N`, 1 to 64: enough requests in flight that the
  // walk's listings are not queued behind a parallel `git status`'s
  // lookups (docs/benchmarks.md, "The warm walk in 32 threads").
  unsigned warm_threads = 32;
  int warm_nice = 0;   // `-o warm_nice=N`, 0 to 19: the walk's nice value
  bool debug = false;  // libfuse request tracing
  // The sandbox's policy (hidden paths, read-only paths, quota), or null.
  std::shared_ptr<const Policy> policy;
  // Where copy-ups of host files the host changed at or after
  // `sources_since_ns` (the base's instant) keep what they started from
  // (fs/copy_up_source.h); "" or 0: nowhere.
  std::string sources_dir;
  int64_t sources_since_ns = 0;
  // A file the daemon copies into the upper layer at `install_rel` right
  // after the mount, on a thread of its own, while lookups of the first
  // component of `install_rel` in the root wait (Overlay::CloseGate): the
  // base's copy of the host's index (gitbridge/git_base.h), too large to
  // copy before the mount. -1: none. The descriptor stays the caller's.
  int install_fd = -1;
  std::string install_rel;
  // Called on that thread with the copy's outcome before the gate opens;
  // may mend a failure, or add to the upper below the gate (the base's
  // staged objects), charging what it adds to `quota` (null: none), and
  // returns what the log says of it.
  std::function<Status(const Status&, Quota* quota)> installed;
};

// Refuses (EINVAL, naming the option) a combination of options that would
// let the policy go unenforced: the writeback cache reports a write's
// EDQUOT or EROFS only after write(2) has returned, when the data is lost.
Status CheckPolicyEnforceable(const MountConfig& config);

// Applies one daemon option ("userxattr", "allow_other", "writeback",
// "debug", "timeout=SECONDS", "threads=N", "no_open", "handles",
// "nosync_copyup", "warm", "nowarm", "warm_limit=N", "warm_threads=N",
// "warm_nice=N", "parallel_dirops", "noparallel_dirops", "uring",
// "nouring", "nopassthrough"), a VFS option
// (TakeVfsOption: ro, rw, noatime, noexec, ...; dev, suid and nodiratime
// only for root, judged by the caller's effective uid) or "fsname=NAME"
// (CheckFsname) to `config`. EINVAL, naming the option, when it is unknown,
// refused or its value is not a valid number (`uring` while the kernel
// will not offer the ring; EOPNOTSUPP on a kernel without it); EPERM for a
// root-only option asked by an ordinary user.
Status ApplyMountOption(const std::string& option, MountConfig* config);

// The daemon options ApplyMountOption takes, as `acqfs mount --help` lists
// them: a word ("writeback"), or a key and what its value is
// ("timeout=SECONDS"). ApplyMountOption refuses any other word or key as
// unknown before it looks further, so an option cannot be accepted and
// missing from the help (MountOptions.EveryNameInTheHelpIsTaken).
const std::vector<std::string>& DaemonOptionNames();

// The -o text of `acqfs mount --help`: the daemon options, noallow_other,
// and the mount flags.
std::string MountOptionsHelp();

// Called once: with Ok() when the mount is usable, or with the reason it
// could not be made.
using ReadyCallback = std::function<void(const Status&)>;

// What the daemon's control channel (daemon/control.h) may ask of the running
// filesystem. Its methods may be called from any thread but a request's.
class MountControl {
 public:
  virtual ~MountControl() = default;
  // A checkpoint (Overlay::Freeze): the upper becomes the topmost frozen
  // layer and `new_upper` (an empty directory) the upper, once `commit`
  // has recorded that on disk; then the kernel forgets the names Freeze
  // returns.
  virtual Status Checkpoint(const std::string& new_upper,
                            const std::function<Status()>& commit) = 0;
  // A rewind (Overlay::Restack): the stack `frozen` (bottom first) under
  // the empty upper `new_upper`, once `commit` has recorded it; then the
  // kernel forgets every name and drops the caches of every node.
  virtual Status Rewind(const std::vector<std::string>& frozen,
                        const std::string& new_upper,
                        const std::function<Status()>& commit) = 0;
  // A squash (Overlay::ReplaceFrozen): frozen layers 1..count replaced by
  // `merged`, once `commit` has recorded it.
  virtual Status Squash(unsigned count, const std::string& merged,
                        const std::function<Status()>& commit) = 0;
  // The upper layer's directory now.
  virtual std::string UpperPath() = 0;
  // The FUSE transport the daemon serves requests on now: "io_uring" or
  // "/dev/fuse" (fuse/uring_transport.h); "" when unknown.
  virtual std::string Transport() { return ""; }
  // FUSE passthrough (fuse/passthrough.h): the opens passed through so
  // far, or -1 while the mount does not pass opens through.
  virtual int64_t PassedThrough() { return -1; }
  // The audit log (docs/audit.md): whether it is on, the records written
  // and lost since the mount, and whether any was lost.
  struct AuditState {
    bool on = false;
    uint64_t written = 0;
    uint64_t lost = 0;
    bool incomplete = false;
  };
  virtual AuditState Audit() { return {}; }
  // Writes the audit log's pending records (the writes of files still
  // open) and its queue to disk, for `acqfs log`.
  virtual Status FlushAudit() { return Ok(); }
};
// Called once the mount is usable; what it returns is called before the
// session ends (to stop what it started). Null: no control channel.
using ControlStarter = std::function<std::function<void()>(MountControl*)>;

// Mounts and serves requests until unmounted. Returns Ok on a clean end.
Status RunFilesystem(const MountConfig& config, const ReadyCallback& ready,
                     const ControlStarter& control = nullptr);

}  // namespace acqfs

#endif  // ACQFS_FUSE_MOUNT_H_
