// owner_access: lets a daemon that is not root do, on the sandbox's own
// files, what the kernel already let the caller do, where the file's mode
// denies it to the daemon's user.
//
// A root daemon has CAP_DAC_OVERRIDE; so has the kernel overlayfs, which
// works on the upper with the mounter's credentials (in its user namespace
// when unprivileged). An ordinary user's daemon has not, and it is subject
// to the modes of the upper files it owns, where ext4 and the kernel would
// not subject the caller:
//   - a file's creating open is granted whatever mode it is created with
//     (git writes each loose object with O_CREAT|O_EXCL|O_RDWR and 0444),
//     and so is every write through a descriptor opened before a
//     chmod(0444). Once the bounded file cache (fs/file_cache.h) dropped
//     the daemon's descriptor, its own reopen was refused;
//   - stat, chmod and unlink of a file need no permission on the file, but
//     the daemon reads the file's user.overlay.* xattrs to look it up, and
//     reading a user.* xattr needs read permission: `chmod 0 f` made f
//     vanish from its directory, unreachable even to `chmod` it back.
//
// Retry adds the owner bits a refused operation needs to the mode of the
// object, for the length of one retry, and puts the mode back. Only a
// regular file or directory the daemon's user owns, in the upper layer or
// in the work area's acqfs-tmp, or with no name left, is treated so; never
// the host or a frozen layer. Before a named object's mode is widened, its
// path, number and mode are written to a journal in the work area
// (<workdir>/acqfs-modes), cleared once the mode is back: a daemon killed
// in between leaves it, and the next claim of the layers restores the mode
// (Repair) before anything reads the upper.
//
// Stat results: a stat of the object while its mode is widened would show
// the extra bits. Readers that report modes take Seq() before their stat
// and, when Raced() says a widening ran meanwhile, Settled() and stat again
// (a seqlock: odd while a mode is widened).
//
// The state is the process's: one serving daemon per process. Enable turns
// it on (a daemon that is not root, once its layers are claimed); it is off
// otherwise, and Retry then does nothing.
// Thread-safety: every function may be called from any thread; one
// widening runs at a time.
#ifndef ACQFS_COMMON_OWNER_ACCESS_H_
#define ACQFS_COMMON_OWNER_ACCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/error.h"

namespace acqfs::owner_access {

// The journal's name in the work directory.
constexpr const char* kJournalName = "acqfs-modes";

// Turns widening on for the upper layer `upper_root` and the work area
// `work_root` (directory descriptors the caller keeps open until Disable).
Status Enable(int upper_root, int work_root);
void Disable();
bool Enabled();

// After an operation on the object `target` (a descriptor, O_PATH or not)
// failed with EACCES: when widening is on and `target` qualifies (see
// above) and its mode lacks some of the owner bits `need` (S_IRUSR,
// S_IWUSR, S_IXUSR), adds them, runs `retry` and puts the mode back.
// Returns whether `retry` ran; the caller keeps its refusal when not.
bool Retry(int target, mode_t need, const std::function<void()>& retry);

// The same for the object a /proc/self/fd path names (XattrPath), opened
// O_PATH (following its last component only when `follow`).
bool RetryAt(const std::string& path, bool follow, mode_t need,
             const std::function<void()>& retry);

// The seqlock: odd while a mode is widened.
uint64_t Seq();
// Did a widening run, or is one running, since Seq() returned `before`?
bool Raced(uint64_t before);
// Waits until no widening runs.
void Settled();

// Restores the mode a journal in `work_root` names, left by a daemon that
// died while the mode was widened, then removes the journal. A record that
// does not parse (cut short by a crash as it was written, before the mode
// was widened) restores nothing. Only an object of the upper layer
// `upper_root` whose mode still shows exactly the widened bits is changed.
Status Repair(int upper_root, int work_root, const std::string& shown);

}  // namespace acqfs::owner_access

#endif  // ACQFS_COMMON_OWNER_ACCESS_H_
