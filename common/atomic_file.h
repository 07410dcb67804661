// Replacing a file's content so that a crash at any instant leaves either
// the old content or the new one, never a mix or an empty file: the new
// content goes to a temporary file in the same directory, which is
// fsync'ed and renamed over the file, and then the directory is fsync'ed
// so that the rename itself is durable.
// Thread-safety: plain functions; concurrent writers of one path each
// leave one whole version (the last rename wins).
#ifndef ACQFS_COMMON_ATOMIC_FILE_H_
#define ACQFS_COMMON_ATOMIC_FILE_H_

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/error.h"

namespace acqfs {

// How far a replacement must last. kDurable: across a crash of the machine
// (the file and the directory are fsync'ed). kWhileRunning: only for the
// processes that read it meanwhile, for a record of something that cannot
// outlive the machine's power (a daemon's pid and mount): the rename alone
// still shows them one whole version, old or new, and no fsync waits for
// the disk.
enum class Durability { kDurable, kWhileRunning };

// Who owns the new file. kCaller: this process's file-system ids.
// kDirectory: when this process is root, the owner and group of the
// directory it is in (a root command's manifest in a user's sandbox folder
// stays the user's, docs/stack.md); otherwise as kCaller.
enum class FileOwner { kCaller, kDirectory };

// Replaces the file `path` (created when missing) with `content` and the
// permission bits `mode` exactly (the umask does not apply), owned as
// `owner` says (set on the temporary file, before it takes the name). The
// temporary file is ".<name>.<random>" beside it, created exclusively; on
// failure it is removed and `path` keeps its old content. Errors name the
// operation and the path (the temporary file's for the steps on it).
Status WriteFileAtomically(const std::string& path, std::string_view content,
                           mode_t mode,
                           Durability durability = Durability::kDurable,
                           FileOwner owner = FileOwner::kCaller);

// The same steps for a temporary file the caller made and holds open (a
// lock file such as git's config.lock, which must be taken before the
// content is decided): writes `content` to `fd` from offset 0, fsyncs it,
// renames `temp` (in the same directory as `path`) over `path` and fsyncs
// the directory. The file keeps the mode it was created with. On failure
// `temp` is left for the caller to remove.
Status ReplaceWithTemp(int fd, const std::string& temp, const std::string& path,
                       std::string_view content);

}  // namespace acqfs

#endif  // ACQFS_COMMON_ATOMIC_FILE_H_
