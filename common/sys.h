// Checked system-call wrappers. Each returns Result/Status with an Error that
// names the operation and the path, retries EINTR where the call can see it,
// and never follows symlinks unless the name says so.
// Thread-safety: stateless functions, safe from any thread.
#ifndef ACQFS_COMMON_SYS_H_
#define ACQFS_COMMON_SYS_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "common/progress_fn.h"

namespace acqfs::sys {

// Joins a relative path and a name ("" is the root): Join("", "a") == "a".
std::string Join(const std::string& dir, const std::string& name);
// The parent part and the last component of a relative path.
std::string Dirname(const std::string& rel);
std::string Basename(const std::string& rel);

// Descriptor pressure. When an open fails with EMFILE or ENFILE, the
// process calls its pressure handler, which gives descriptors back (the
// daemon evicts its file cache) and returns true if it freed any; the open
// is then tried once more. The daemon sets the handler before it serves
// requests and clears it (nullptr) after; it must take no lock a caller of
// an open may hold. Every open in fs/ of a descriptor the daemon may need
// under load goes through OpenRelievingPressure.
using FdPressureHandler = bool (*)(void* arg);
void SetFdPressureHandler(FdPressureHandler handler, void* arg);
// Runs `open` (a descriptor, or -1 with errno); on EMFILE/ENFILE relieves
// the pressure and runs it once more.
int OpenRelievingPressure(const std::function<int()>& open);

// Opens `rel` below the directory `root` with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS): no component, the last one
// included, may be a symlink (with O_PATH|O_NOFOLLOW the link itself opens).
// `rel` == "" opens `root` itself. `shown` names the path in errors.
// `rel` may be longer than PATH_MAX: it is then walked a run of whole
// components (at most kMaxPathChunk bytes) at a time, each run beneath the
// directory the previous one opened, with the same rules.
constexpr size_t kMaxPathChunk = 4000;
Result<UniqueFd> OpenBeneath(int root, const std::string& rel, int flags,
                             mode_t mode, const std::string& shown);

// Opens `path`, which must lie strictly below the directory `anchor` (both
// absolute), walking from `anchor` with OpenBeneath's rules: no symlink
// followed on the way. EINVAL (naming `anchor`) when `path` is not below
// it; ELOOP/EXDEV say that a symlink stood on the way. `what` starts the
// error's operation ("open a layer").
Result<UniqueFd> OpenBelow(const std::string& anchor, const std::string& path,
                           int flags, const std::string& what);

// Opens a directory by absolute path, O_DIRECTORY|O_CLOEXEC plus `flags`.
Result<UniqueFd> OpenDirPath(const std::string& path, int flags);

Result<struct stat> StatAt(int dirfd, const std::string& name,
                           const std::string& shown);
// Like StatAt, but ENOENT/ENOTDIR become an empty result instead of an error.
// Returns true in *found when the name exists.
Status StatAtIfExists(int dirfd, const std::string& name, struct stat* st,
                      bool* found, const std::string& shown);
Result<struct stat> Fstat(int fd, const std::string& shown);
// A stat's ctime and mtime in nanoseconds since the epoch.
inline int64_t CtimeNs(const struct stat& st) {
  return int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
}
inline int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

struct DirEntry {
  std::string name;
  uint64_t ino;
  unsigned char type;  // DT_*
};
// Reads every entry of an open directory except "." and "..".
Result<std::vector<DirEntry>> ReadDir(int dirfd, const std::string& shown);

Result<std::string> ReadLinkAt(int dirfd, const std::string& name,
                               const std::string& shown);

// Extended attributes of `name` inside `dirfd` (never following a symlink at
// `name`), through /proc/self/fd so that symlinks and special files work too.
// `follow`: the path is a descriptor's own /proc/self/fd entry (a file that
// has no name), whose magic link the call follows to the file itself.
std::string XattrPath(int dirfd, const std::string& name);
Result<std::vector<std::string>> ListXattrs(const std::string& xpath,
                                            const std::string& shown,
                                            bool follow = false);
// ENODATA is reported as an error with err == ENODATA.
Result<std::string> GetXattr(const std::string& xpath, const std::string& key,
                             const std::string& shown, bool follow = false);
// The same through an open descriptor (not O_PATH).
Result<std::string> FGetXattr(int fd, const std::string& key,
                              const std::string& shown);
// Sets an xattr through an open descriptor (a nameless O_TMPFILE inode has
// no path to name it by).
Status FSetXattr(int fd, const std::string& key, const std::string& value,
                 int flags, const std::string& shown);
Status SetXattr(const std::string& xpath, const std::string& key,
                const std::string& value, int flags, const std::string& shown,
                bool follow = false);
Status RemoveXattr(const std::string& xpath, const std::string& key,
                   const std::string& shown, bool follow = false);

Status Renameat2(int olddir, const std::string& oldname, int newdir,
                 const std::string& newname, unsigned flags,
                 const std::string& shown);

// fsync(fd), or an error naming `shown`.
Status Fsync(int fd, const std::string& shown);
// Opens the directory `dir` and fsyncs it (making the entries made or
// removed in it durable).
Status SyncDirPath(const std::string& dir);

// Reads `fd` to its end; EFBIG when it holds more than `limit` bytes.
Result<std::string> ReadAll(int fd, size_t limit, const std::string& shown);

// Full writes/reads at an offset, retrying short transfers and EINTR.
Status PwriteAll(int fd, const void* buf, size_t n, off_t off,
                 const std::string& shown);

// Removes `name` in `dirfd` and everything below it, never following a
// symlink (directories it may not enter are made 0700 first). `shown` names
// `dirfd` in errors. A missing `name` is not an error. `progress` hears
// "removing files" with the count every 1,000 entries.
Status RemoveTree(int dirfd, const std::string& name, const std::string& shown,
                  const ProgressFn& progress = {});

// A random name for temporary entries: "<prefix><16 hex digits>".
std::string TempName(const std::string& prefix);

}  // namespace acqfs::sys

#endif  // ACQFS_COMMON_SYS_H_
