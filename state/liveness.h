// Liveness of sandboxes, read from the system without FUSE and without
// disturbing anyone: is a sandbox mounted with its daemon serving it, is it a
// stale mount whose daemon died (every access gives ENOTCONN), or neither;
// and how much disk a directory tree (an upper layer) uses.
//
// A sandbox's daemon is alive while some process holds the lock on
// <state>/<name>/lock: an open file description lock (fcntl F_OFD_SETLK, a
// write lock on the whole file). `acqfs mount` takes it before it changes
// anything and the daemon inherits the descriptor, so it is released only
// when the daemon has ended. Such a lock belongs to the open file, not to a
// process id, so it stays visible whatever pid namespace asks; LockHeld()
// tests it with F_OFD_GETLK and never takes it, which would race with a
// concurrent `acqfs mount`.
//
// The daemon records its pid, and once mounted the device number and the
// mount id of its mount, in daemon.pid ("<pid>\n<major>:<minor>\n<id>\n";
// see DaemonRecord), and removes the file when it ends cleanly. These tell
// the sandbox's own mount apart from a later mount of another sandbox on the
// same mountpoint (a dead mount keeps its device number and id until it is
// detached), so acqfs never takes someone else's live mount for a dead one
// of its own. Before it unmounts, acqfs also proves that the mountpoint
// leads to that very mount (CheckReaches): one mounted over it (a tmpfs on
// the dead mountpoint) is never unmounted in its place.
//
//   kMounted     meta.mountpoint holds a fuse.acqfs mount with the device
//                daemon.pid records, and the lock is held;
//   kStale       it holds that mount, and the lock is free: the daemon died
//                without unmounting (SIGKILL, a crash);
//   kNotMounted  anything else (also a daemon that is still starting, or
//                has unmounted and is about to exit).
// Thread-safety: plain functions and values.
#ifndef ACQFS_STATE_LIVENESS_H_
#define ACQFS_STATE_LIVENESS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/mountinfo.h"
#include "state/state.h"

namespace acqfs::cli {

enum class MountState { kNotMounted, kMounted, kStale };

// "not mounted", "mounted", "stale".
const char* MountStateName(MountState state);
// "not-mounted", "mounted", "stale" (for JSON).
const char* MountStateJsonName(MountState state);

// Every mount whose mountpoint is `mountpoint` (absolute, canonical), in
// the order of the mount table (bottom to top for mounts stacked there);
// empty when /proc/self/mountinfo is unreadable.
std::vector<MountEntry> MountsAt(const std::string& mountpoint);
// The fuse.acqfs ones among them.
std::vector<MountEntry> AcqfsMountsAt(const std::string& mountpoint);

// The mount `path` leads to now (the one on top of any others there) and
// its device, from statx(2) with AT_STATX_DONT_SYNC: no request reaches a
// FUSE daemon, so a dead mount answers too. The last component is not
// followed when it is a symlink.
struct ReachedMount {
  int id = 0;
  dev_t dev = 0;
};
Result<ReachedMount> MountReachedAt(const std::string& path);

// Proves, right before an unmount, that `path` leads to the mount `own`
// (the same mount id and device): Ok, or an error that names what is there
// instead, such as another mount covering it (EBUSY), which acqfs never
// unmounts.
Status CheckReaches(const std::string& path, const MountEntry& own);

// Takes the sandbox lock on `fd` (open on the lock file `path`) without
// waiting; EWOULDBLOCK when another open file holds it.
Status LockSandbox(int fd, const std::string& path);

// Does another open file hold the lock on the file at `path`? false when the
// file does not exist.
Result<bool> LockHeld(const std::string& path);

// The processes that hold the lock on the file at `path` (its open file
// description locks show no pid in /proc/locks): every process with a
// descriptor of that file whose /proc/PID/fdinfo lists a lock. Processes
// this one may not inspect are not seen. Sorted; empty when none is seen.
std::vector<pid_t> LockHolders(const std::string& path);

// The content of daemon.pid: "<pid>\n", then once mounted
// "<major>:<minor>\n<mount id>\n".
struct DaemonRecord {
  pid_t pid = 0;
  std::optional<dev_t> mount_dev;  // set once the daemon has mounted
  std::optional<int> mount_id;     // the same (missing in older records)
};
std::string FormatDaemonRecord(const DaemonRecord& record);
// nullopt when the file is missing or holds no pid.
std::optional<DaemonRecord> ReadDaemonRecord(const std::string& pid_path);

struct SandboxLiveness {
  MountState state = MountState::kNotMounted;
  bool daemon_alive = false;  // the sandbox's lock is held
  bool own_mount = false;     // meta.mountpoint holds the sandbox's mount
  // That mount: the fuse.acqfs mount at meta.mountpoint whose device (and
  // mount id, when recorded) daemon.pid records. It may be covered by
  // another mount; CheckReaches tells.
  std::optional<MountEntry> mount;
};
// Probes one sandbox; fails only when its lock cannot be tested.
Result<SandboxLiveness> ProbeSandbox(const SandboxPaths& paths,
                                     const SandboxMeta& meta);

// The canonical form of `path`: realpath(3) of it, or, when that fails (a
// dead FUSE mount answers ENOTCONN, a name that does not exist yet), of its
// deepest existing ancestor with the rest appended.
std::string CanonicalPath(const std::string& path);

// The canonical form of a path given as a mountpoint, found without sending
// a request to any FUSE daemon: the canonical form of its parent
// (CanonicalPath) and its last component, which is followed only when it is
// a symlink (seen with statx AT_STATX_DONT_SYNC, which a FUSE mount answers
// from the kernel's cache). So a live mount is left alone and a dead or
// hung one (ENOTCONN, a stopped daemon) never blocks the caller. A trailing
// "/" is dropped; "." and ".." are taken lexically after that.
std::string MountpointPath(const std::string& path);

// Bytes of disk the tree at `dir` uses: st_blocks * 512 of every entry,
// `dir` included, each inode counted once (hard links), symlinks never
// followed and other filesystems never entered. Entries that vanish during
// the walk are skipped.
Result<uint64_t> DiskUsage(const std::string& dir);

}  // namespace acqfs::cli

#endif  // ACQFS_STATE_LIVENESS_H_
