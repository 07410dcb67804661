// The mount table as the kernel shows it in /proc/PID/mountinfo (proc(5)),
// parsed: one entry per line, with the propagation tags (shared:N, master:N)
// that tell whether a mount made later in one mount namespace appears in
// another (mount_namespaces(7)).
// Thread-safety: plain functions and values.
#ifndef ACQFS_COMMON_MOUNTINFO_H_
#define ACQFS_COMMON_MOUNTINFO_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace acqfs {

// One line of a mountinfo file.
struct MountEntry {
  int id = 0;              // the mount's id (statx STATX_MNT_ID)
  int parent = 0;          // the id of the mount it is mounted on
  std::string mountpoint;  // unescaped
  std::string fstype;      // e.g. "fuse.acqfs"
  std::string source;      // unescaped, e.g. "acqfs:NAME"
  // The per-mount options ("rw", "nosuid", ...) and the super block's
  // ("user_id=0", "allow_other", ...).
  std::vector<std::string> options, super_options;
  dev_t dev = 0;  // st_dev of the mounted filesystem
  // The optional fields before " - ": "shared:N", "master:N",
  // "propagate_from:N", "unbindable".
  std::vector<std::string> tags;

  bool HasOption(const std::string& option) const;
  bool HasSuperOption(const std::string& option) const;
};

// "maj:min" (numbers in `base`; mountinfo writes decimal) into a dev_t.
bool ParseMajorMinor(const std::string& text, int base, dev_t* out);

// One line; nullopt when it is not a well-formed mountinfo line.
std::optional<MountEntry> ParseMountInfoLine(const std::string& line);
// Every well-formed line of `text`, in table order (a mount stacked on the
// same mountpoint comes after the one below it).
std::vector<MountEntry> ParseMountInfo(const std::string& text);
// The mountinfo file at `path` (e.g. /proc/self/mountinfo), parsed.
Result<std::vector<MountEntry>> ReadMountInfo(const std::string& path);

// The mount that `path` (absolute, canonical) is on: the entry whose
// mountpoint is `path` or its nearest ancestor, the last of those in table
// order (the one on top). nullptr when none is (a table without "/").
const MountEntry* CoveringMount(const std::vector<MountEntry>& table,
                                const std::string& path);

// Would a mount made at `path` in the namespace whose table is `ours`
// appear in the namespace whose table is `theirs`? Only when the mount it
// lands on in ours is shared (shared:N) and the one at the same place in
// theirs is in that peer group or receives from it (shared:N or master:N).
// A private mount (no tag) propagates nowhere. (mount_namespaces(7),
// "Shared subtrees"; a namespace made in a new user namespace turns the
// shared mounts it copies into slaves, master:N.)
bool MountPropagates(const std::vector<MountEntry>& ours,
                     const std::vector<MountEntry>& theirs,
                     const std::string& path);

}  // namespace acqfs

#endif  // ACQFS_COMMON_MOUNTINFO_H_
