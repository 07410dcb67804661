// Set-id bits the daemon clears itself. The mount tells the kernel that the
// daemon handles them (FUSE_HANDLE_KILLPRIV and FUSE_HANDLE_KILLPRIV_V2 in
// the INIT reply, see fuse/mount.cc), so the kernel no longer sends the mode
// it computed; the daemon takes S_ISUID and S_ISGID away where ext4 does
// (the kernel's chown_common, setattr_should_drop_sgid and
// setattr_should_drop_suidgid):
//   - a chown of a non-directory drops S_ISUID, and S_ISGID when group
//     execute is set or when the caller is neither in the file's group nor
//     holds CAP_FSETID;
//   - a write or truncate by a caller without CAP_FSETID drops the same
//     bits of a regular file (S_ISGID without group execute when the caller
//     is not in the file's group).
// What the caller holds is read from /proc/PID/status, and only when the
// file has a set-id bit the rule leaves open (the rare case).
// Thread-safety: free functions, no shared state.
#ifndef ACQFS_FUSE_SETID_H_
#define ACQFS_FUSE_SETID_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace acqfs {

// What a request's caller holds that the set-id rules ask about.
struct CallerPrivilege {
  bool cap_fsetid = false;  // CAP_FSETID, effective, in the daemon's user ns
  gid_t fsgid = static_cast<gid_t>(-1);
  std::vector<gid_t> groups;  // supplementary
  bool InGroup(gid_t gid) const;
};

// Parses the text of /proc/PID/status ("Gid:", "Groups:", "CapEff:").
// `same_user_ns`: the caller's user namespace is the daemon's; a capability
// held in another namespace does not count (the kernel's capable() asks
// the initial one).
Result<CallerPrivilege> ParseProcStatus(const std::string& text,
                                        bool same_user_ns);

// Reads it for thread `pid` (fuse_req_ctx's pid). Fails when the caller
// is gone or not visible (pid 0: outside the daemon's pid namespace).
Result<CallerPrivilege> ReadCallerPrivilege(pid_t pid);

// Which change asks.
enum class SetIdChange {
  // A chown (also chown(-1, -1), which the kernel sends as a SETATTR with
  // nothing to set, as it does for the privileges a write drops; for such
  // a writer, who lacks CAP_FSETID, both rules agree).
  kChown,
  // A write or truncate by a caller the kernel found without CAP_FSETID.
  kUnprivilegedWrite,
};

// The set-id bits `change` takes from a file of mode `mode` and group
// `gid` (before the change). `caller` is asked only when the answer
// depends on it; when it fails, the caller counts as holding nothing.
mode_t SetIdBitsToClear(mode_t mode, gid_t gid, SetIdChange change,
                        const std::function<Result<CallerPrivilege>()>& caller);

}  // namespace acqfs

#endif  // ACQFS_FUSE_SETID_H_
