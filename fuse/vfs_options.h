// The mount(8) options of an acqfs mount: the VFS's flags (ro, nosuid, ...)
// and its source (fsname). Each one is either applied, so that
// /proc/self/mountinfo shows it and the kernel enforces it, or refused with
// an error naming it; none is accepted and ignored (docs/architecture.md,
// "Mount options"). Also the remount of a running mount (`mount -o
// remount,ro`, `acqfs remount`), and the check, after a mount, that the
// kernel applied what was asked (fusermount3 drops dev and suid for an
// ordinary user without failing).
// Thread-safety: plain functions and values.
#ifndef ACQFS_FUSE_VFS_OPTIONS_H_
#define ACQFS_FUSE_VFS_OPTIONS_H_

#include <string>
#include <vector>

#include "common/error.h"
#include "common/mountinfo.h"

namespace acqfs {

// The per-mount flags of an acqfs mount. Always noatime: the kernel's FUSE
// never updates an access time itself (its inodes are S_NOATIME) and the
// daemon reads the layers with O_NOATIME, so noatime is what every acqfs
// mount does, and the flag says so.
struct VfsFlags {
  bool read_only = false;   // ro
  bool dev = false;         // dev (root only); nodev by default
  bool suid = false;        // suid (root only); nosuid by default
  bool noexec = false;      // noexec
  bool nodiratime = false;  // nodiratime (root only: fusermount3 lacks it)

  // The MS_* flags of mount(2) for these.
  unsigned long MsFlags() const;
  // As libfuse 3.14's -o takes them (it knows ro/rw, suid, dev, exec,
  // noatime, not nodiratime): "noatime,rw,nosuid,nodev".
  std::string LibfuseOptions() const;
  // The per-mount options /proc/self/mountinfo shows for these, as
  // options that must be there ("ro", "nosuid", ...) and ones that must
  // not; for the check after a mount.
  std::vector<std::pair<std::string, bool>> Expected() const;
};

// Takes `option` when it is a VFS option: sets `*taken` and applies it to
// `flags`; `privileged`: the caller is root (dev, suid and nodiratime are
// refused otherwise). Refuses, naming the option: the atime options that
// ask for updates acqfs never makes (atime, relatime, strictatime, ...),
// lazytime, sync and dirsync (EINVAL), and the root-only ones for an
// ordinary user (EPERM). The error's op says why, its path is the option.
Status TakeVfsOption(const std::string& option, bool privileged,
                     VfsFlags* flags, bool* taken);

// A mount's source, as `fsname=` or the helper's SOURCE give it: 1 to 255
// bytes, none of them a comma, blank, backslash or control character
// (mountinfo and fstab escape those, and libfuse splits -o at commas).
// EINVAL naming `what` otherwise.
Status CheckFsname(const std::string& fsname, const std::string& what);

// What /proc/self/mountinfo says of the topmost mount at `mountpoint`
// (absolute, canonical); EINVAL when nothing is mounted there.
Result<MountEntry> ReadMountedAs(const std::string& mountpoint);

// Checks that the fuse.acqfs mount at `mountpoint` has `flags` and the
// source `fsname`; EPERM naming the option the kernel did not apply.
Status CheckMountedAs(const std::string& mountpoint, const VfsFlags& flags,
                      const std::string& fsname);

// Sets the per-mount flags of the mount at `mountpoint` to `flags`
// (mount(2) with MS_REMOUNT|MS_BIND): for the flags libfuse cannot pass.
Status SetMountFlags(const std::string& mountpoint, const VfsFlags& flags);

// `mount -o remount,OPTIONS MOUNTPOINT` of a fuse.acqfs mount: the VFS
// options in `options` applied over the mount's present flags (mount(2)
// with MS_REMOUNT; the kernel's FUSE lets the old API change ro/rw and the
// per-mount flags). Options mount(8) repeats from the mount as it is
// (its source, user_id=, group_id=, default_permissions, allow_other) are
// taken when they match it and refused otherwise: they cannot change
// without a new mount. Needs root (fusermount3 cannot remount): EPERM
// otherwise. Every refusal names the option.
Status Remount(const std::string& mountpoint,
               const std::vector<std::string>& options, bool privileged);

}  // namespace acqfs

#endif  // ACQFS_FUSE_VFS_OPTIONS_H_
