// A sandbox's layer stack on disk (docs/stack.md), part 2 of 3: the layer
// store that holds every layer directory (<state>/.layers/<id>/), the store
// lock, garbage collection of layers no manifest references, the size
// statistics of a frozen layer, and the folders of sandboxes in the making
// (forks, removals).
//
// Locks: see stack/manifest.h. Thread-safety: LayerStore only remembers the
// state dir and may be used on any thread, the locks doing the exclusion
// between processes and threads alike (flock on a descriptor of one's own).
#ifndef ACQFS_STACK_STORE_H_
#define ACQFS_STACK_STORE_H_

#include <sys/stat.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "stack/manifest.h"

namespace acqfs::cli {

// ---------------------------------------------------------------- store

// The store lock: flock(LOCK_EX) on <state>/.layers/lock (the store dir is
// made, 0700, when missing). Released when the object dies.
class StoreLock {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{5000};
  // Waits up to `timeout` for the lock; ETIMEDOUT naming the lock file
  // when another holder keeps it longer.
  static Result<StoreLock> Take(
      const std::string& state,
      std::chrono::milliseconds timeout = kDefaultTimeout);
  StoreLock(StoreLock&&) = default;
  StoreLock& operator=(StoreLock&&) = default;

 private:
  explicit StoreLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

struct LayerStats {
  // Non-directory entries (files, symlinks, devices, fifos, sockets,
  // whiteouts) plus directories carrying an opaque xattr
  // (trusted.overlay.opaque or user.overlay.opaque, any value). The layer's
  // root is not counted.
  uint64_t paths = 0;
  // Sum of st_blocks * 512 of every entry below the root.
  uint64_t bytes = 0;
  bool operator==(const LayerStats&) const = default;
};

struct GcReport {
  size_t manifests = 0;    // stack.json files read
  size_t layers_kept = 0;  // store layers some manifest references
  size_t layers_removed = 0;
  size_t sidecars_removed = 0;  // .stats files of layers that are gone
  size_t temps_removed = 0;     // temporary files a crash left in the store
  // Folders of the state dir a fork or an rm left when it died (see
  // "Sandbox folders in the making" below).
  size_t folders_removed = 0;
  uint64_t bytes_freed = 0;          // st_blocks * 512 of what was removed
  std::vector<std::string> removed;  // refs of the layers removed, sorted
};

class LayerStore {
 public:
  explicit LayerStore(std::string state) : state_(std::move(state)) {}

  const std::string& state() const { return state_; }
  // "<state>/.layers".
  std::string Dir() const;
  // The absolute path of a ref.
  std::string Path(std::string_view ref) const;
  // Makes the store dir (0700) when missing.
  Status Ensure() const;

  // Makes a new empty layer ".layers/<new id>" and returns its ref. Mode
  // 0755, or with `like`: its permission bits, its atime and mtime, and
  // (when running as root) its owner. The new dir and its entry in the
  // store are durable (fsync) when this returns. Caller holds the
  // StoreLock.
  Result<std::string> Create(const struct stat* like = nullptr) const;

  // A layer built outside the store (a squash's merged layer, built in the
  // sandbox's own folder, where no garbage collection looks), then adopted:
  //   auto id = store.StartBuild(folder, like, sweep);  // empty, shaped
  //   ... fill LayerStore::BuildPath(folder, *id) ...
  //   CommitSquash(store, ..., BuildPath(folder, *id), *id, ...);
  // The folder's "squash.<id>": "squash." is not a layer id's character set,
  // so it never collides with a sandbox's files.
  static constexpr char kBuildPrefix[] = "squash.";
  static std::string BuildPath(const std::string& folder, std::string_view id);
  // Makes an empty layer root BuildPath(folder, <new id>), shaped as Create
  // shapes one after `like`, and returns the id. With `sweep`, first
  // removes every "squash.*" an interrupted build left in `folder` (the
  // caller must know that no other build is under way there).
  Result<std::string> StartBuild(const std::string& folder,
                                 const struct stat& like, bool sweep) const;
  // Moves the built layer `built` (BuildPath(folder, id)) into the store as
  // ".layers/<id>" (never replacing one) and makes the move durable; returns
  // its ref. EINVAL when `built` is not named for `id`. Caller holds the
  // StoreLock.
  Result<std::string> Adopt(const std::string& built,
                            std::string_view id) const;

  // Removes a store layer and its stats sidecar (a missing layer is no
  // error). Copes with whiteouts, read-only dirs and trees of any depth.
  // EINVAL for a ref that is not a store ref.
  Status Remove(std::string_view ref) const;

  // The stats of a frozen layer, cached in ".layers/<id>.stats" (written
  // atomically; a frozen layer never changes). A legacy ref is measured and
  // not cached. A cache that cannot be written is no error (the stats are
  // returned all the same).
  Result<LayerStats> StatsOf(std::string_view ref) const;

  // Removes the folders of forks and removals that died (see "Sandbox
  // folders in the making" below), then every store layer (and sidecar,
  // and leftover temporary file) that no <state>/<name>/stack.json (nor the
  // stack.json of a fork at work) references, under the StoreLock (taken
  // here). A manifest that cannot be read or parsed makes it refuse
  // before removing any layer, with that manifest's error. `lock_timeout`:
  // as StoreLock::Take.
  Result<GcReport> CollectGarbage(std::chrono::milliseconds lock_timeout =
                                      StoreLock::kDefaultTimeout) const;

 private:
  std::string state_;
};

// Shorthand for LayerStore(state).CollectGarbage().
Result<GcReport> CollectGarbage(const std::string& state);

// ---------------------------------------------------------------- folders
// Sandbox folders in the making (docs/stack.md, "Commit points"). A command
// that makes or removes a whole sandbox folder works on a folder whose name
// no sandbox can have ('+' is not in the sandbox-name rule):
//   <state>/.fork+<name>   a fork being built; its commit is the rename to
//                          <name> (RENAME_NOREPLACE)
//   <state>/.trash+<id>    a sandbox that `acqfs rm` removes; its commit was
//                          the rename from <name>
// While the command runs it holds an flock on the folder's directory (a
// fork takes it, under the StoreLock, when it makes the folder). A folder
// of either kind whose flock is free is debris: CollectGarbage removes it
// (before it reads the manifests, so the layers only it named go in the
// same pass), and a fork to the same name replaces it. CollectGarbage reads
// the stack.json of a fork folder whose flock is held (the fork's new upper
// is named nowhere else yet) and ignores a held trash folder.
inline constexpr char kForkFolderPrefix[] = ".fork+";
inline constexpr char kTrashFolderPrefix[] = ".trash+";
// ".fork+<name>".
std::string ForkFolderName(std::string_view sandbox);
bool IsForkFolderName(std::string_view name);
bool IsTrashFolderName(std::string_view name);

// A folder of the state dir whose directory this process holds flock'ed
// (LOCK_EX), as long as `dir` is open: the flock follows the directory
// through renames.
struct HeldFolder {
  UniqueFd dir;
  std::string name;  // its name in the state dir now
};

// Makes <state>/.fork+<sandbox> (0700) and takes its flock, under the
// StoreLock (taken here). A leftover one whose flock is free is removed
// first. EBUSY naming it when another process holds it (a fork to the same
// name is running).
Result<HeldFolder> ReserveForkFolder(const std::string& state,
                                     const std::string& sandbox);

// A fork's commit point: renames the held fork folder to `sandbox`
// (renameat2 RENAME_NOREPLACE) under the StoreLock (taken here: a garbage
// collection sees the folder under one name or the other, never neither),
// then fsyncs the state dir. EEXIST when <state>/<sandbox> exists (made
// meanwhile by another command): nothing is renamed. `folder->name` becomes
// `sandbox`.
Status CommitForkFolder(const std::string& state, HeldFolder* folder,
                        const std::string& sandbox);

// `acqfs rm`'s commit point: takes the flock of the folder <state>/<name>
// (EBUSY when another process holds it), renames it to a new
// .trash+<random id> (RENAME_NOREPLACE) and fsyncs the state dir. From then
// on the sandbox does not exist, and the trash is removed by the caller
// (RemoveHeldFolder), else by the next CollectGarbage.
Result<HeldFolder> MoveToTrash(const std::string& state,
                               const std::string& name);

// Removes the held folder's tree (and the folder), keeping its flock until
// it is gone. A folder already gone is no error.
Status RemoveHeldFolder(const std::string& state, const HeldFolder& folder);

}  // namespace acqfs::cli

#endif  // ACQFS_STACK_STORE_H_
