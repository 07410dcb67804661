// A sandbox's layer stack on disk (docs/stack.md): the manifest that
// orders it (<state>/<name>/stack.json), the layer store that holds every
// layer directory (<state>/.layers/<id>/), the store lock, the pure
// transformations of a manifest (checkpoint, rewind, fork, squash), garbage
// collection of layers no manifest references, the migration of a sandbox
// made before stacks existed, and the size statistics of a frozen layer.
//
// Lookup order of a stack: upper, frozen.back() ... frozen.front(), host.
// Every layer is a directory in kernel-overlayfs upper format.
//
// Locks: a manifest is changed only by the holder of its sandbox's lock
// (cli/sandbox.h; not taken here). Anyone who creates a layer, or writes a
// manifest that references layers read from another manifest (a fork),
// holds the StoreLock from before it creates or reads them until the
// manifest is committed; garbage collection holds it throughout.
//
// Thread-safety: the transformations are pure functions of values; the
// disk functions keep no state of their own (LayerStore only remembers the
// state dir) and may run on any thread, the locks above doing the
// exclusion between processes and threads alike (flock on a descriptor of
// one's own).
#ifndef ACQFS_CLI_STACK_H_
#define ACQFS_CLI_STACK_H_

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

namespace acqfs::cli {

inline constexpr int kStackVersion = 1;
// At most this many frozen layers in a stack (and in a checkpoint): the
// engine numbers the lower layers in a 32-bit mask, the host being one
// (fs/layer.h, kMaxLowerLayers).
inline constexpr size_t kMaxFrozen = 31;
inline constexpr char kLayerStoreDir[] = ".layers";
inline constexpr char kStackFile[] = "stack.json";

// ---------------------------------------------------------------- refs

// The sandbox-name rule (cli/state.h's ValidSandboxName is this): letters,
// digits, '.', '_', '-'; 1..64 characters; not ".", ".." or ".layers" (the
// store).
bool ValidSandboxNameRule(std::string_view name);

// A layer reference: a path relative to the state dir, either
// ".layers/<16 lowercase hex>" (a store layer) or "<name>/upper" (the
// upper of a legacy sandbox; <name> a valid sandbox name, not ".layers").
bool ValidLayerRef(std::string_view ref);
// A ref of the form "<name>/upper".
bool IsLegacyRef(std::string_view ref);
// 16 lowercase hex digits.
bool ValidLayerId(std::string_view id);
// A new random id from getrandom(2).
Result<std::string> NewLayerId();
// ".layers/<id>".
std::string StoreRef(std::string_view id);

// ---------------------------------------------------------------- manifest

enum class CheckpointKind { kCheckpoint, kAutoRewind, kFork };
// "checkpoint", "auto-rewind", "fork".
std::string_view KindName(CheckpointKind kind);
std::optional<CheckpointKind> KindFromName(std::string_view name);

struct Checkpoint {
  uint32_t number = 0;  // >= 1, unique in a sandbox, never reused
  std::string message;  // may be empty
  int64_t time_ns = 0;  // unix time, nanoseconds
  // The full frozen stack whose tree this checkpoint is, bottom first.
  std::vector<std::string> layers;
  CheckpointKind kind = CheckpointKind::kCheckpoint;
  bool operator==(const Checkpoint&) const = default;
};

struct StackManifest {
  std::string upper;                // the live upper layer
  std::vector<std::string> frozen;  // bottom first
  uint32_t base = 0;         // the checkpoint the stack was made from; 0: host
  uint32_t next_number = 1;  // the next checkpoint's number
  std::vector<Checkpoint> checkpoints;  // in the order they were taken
  // A legacy migration in progress: the upper is still at (or was just
  // moved from) this "<name>/upper" ref.
  std::optional<std::string> moved_from;

  bool operator==(const StackManifest&) const = default;
  // nullptr when there is no checkpoint `number`.
  const Checkpoint* Find(uint32_t number) const;
  // Every ref this manifest keeps alive (upper, frozen, every checkpoint's
  // layers, moved_from), each once, sorted.
  std::vector<std::string> Referenced() const;
};

// JSON text of a manifest ("version": 1), and back with the validation
// described in ReadStack. `shown` names the text in errors.
std::string StackToJson(const StackManifest& m);
Result<StackManifest> ParseStack(std::string_view text,
                                 const std::string& shown);
// Reads and validates a manifest. Every defect is EINVAL with op
// "parse sandbox stack (FIELD)" (FIELD e.g. "json", "version", "upper",
// "frozen", "base", "next_number", "checkpoints[2].number", "moved_from",
// or an unknown key's name) and path = `path`: malformed JSON, a wrong
// version, missing, mistyped or unknown fields, malformed refs, refs
// repeated where they must be distinct, the upper among frozen layers,
// duplicated checkpoint numbers, numbers >= next_number, more than
// kMaxFrozen layers, a base that is not 0 with no frozen layers or a
// checkpoint whose layers are exactly `frozen`.
Result<StackManifest> ReadStack(const std::string& path);
// Writes it with WriteFileAtomically, mode 0600.
Status WriteStack(const std::string& path, const StackManifest& m);

// "<state>/<name>/stack.json".
std::string StackPath(const std::string& state, const std::string& name);

struct LoadedStack {
  StackManifest manifest;
  // No stack.json: the implicit manifest of a legacy sandbox
  // ({upper: "<name>/upper"}, nothing frozen).
  bool legacy = false;
  // A migration was interrupted before the upper was moved and the caller
  // did not allow repair: the upper is at *manifest.moved_from (read it
  // there; write nothing).
  bool upper_at_moved_from = false;
  // The ref where the upper is now.
  const std::string& UpperRef() const {
    return upper_at_moved_from ? *manifest.moved_from : manifest.upper;
  }
};

// The stack of sandbox `name`: stack.json when present (with `may_repair`,
// an interrupted migration is finished first: FinishMigration; the caller
// must then hold the sandbox's lock), else the implicit legacy manifest
// when <state>/<name>/upper exists, else ENOENT naming stack.json.
Result<LoadedStack> LoadStack(const std::string& state, const std::string& name,
                              bool may_repair);

// The rule "a layer has one owner" (docs/stack.md), checked before a
// command writes a sandbox's stack or mounts it: the manifest `m` of
// sandbox `name` in `state` names, as its live upper, no layer that any
// other sandbox's manifest names (upper, frozen layer, checkpoint layer or
// moved_from); it names, anywhere, no other sandbox's live upper (forks
// share frozen layers, never a live one); and a legacy ref in it is its own
// ("<name>/upper"). The other sandboxes are every <state>/<other>/ with a
// stack.json or a legacy upper; one whose manifest cannot be read is
// skipped (it cannot be mounted or changed either). EBUSY naming `name`'s
// stack.json and the other sandbox.
Status CheckLayerOwners(const std::string& state, const std::string& name,
                        const StackManifest& m);

// Finishes an interrupted legacy migration of `*m` (m->moved_from set):
// moves the dir at moved_from to the upper's place when the upper is
// missing, then rewrites stack.json without moved_from (and clears it in
// *m). The caller holds the sandbox's lock. EEXIST when both dirs exist,
// ENOENT when neither does.
Status FinishMigration(const std::string& state, const std::string& name,
                       StackManifest* m);

// Moves a legacy sandbox's upper into the store: writes stack.json with a
// new store upper and moved_from "<name>/upper", renames the dir, fsyncs
// both directories, rewrites stack.json without moved_from. A crash at any
// instant leaves a sandbox LoadStack(may_repair=true) makes whole. The
// caller holds the sandbox's lock and the StoreLock. EEXIST when the
// sandbox has a stack.json already. *m receives the new manifest.
Status MigrateLegacy(const std::string& state, const std::string& name,
                     StackManifest* m);

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

// ---------------------------------------------------------------- transforms
// Pure functions: no disk access. The new refs they take must be valid and
// referenced nowhere in the manifest yet (EINVAL); a manifest in the middle
// of a migration (moved_from set) is refused (EINVAL: load it with repair
// first). Errors have op naming the operation and the checkpoint; path "".

struct CheckpointResult {
  StackManifest manifest;
  uint32_t number = 0;  // the new checkpoint's
};
// Freezes the upper: frozen += upper; a new checkpoint (next_number) with
// layers = the new frozen; base = it; upper = `new_upper`. EMLINK when the
// stack holds kMaxFrozen frozen layers already (squash first); EOVERFLOW
// when the numbers are exhausted.
Result<CheckpointResult> TakeCheckpoint(const StackManifest& m,
                                        const std::string& new_upper,
                                        const std::string& message,
                                        int64_t time_ns, CheckpointKind kind);

// frozen = checkpoint `number`'s layers; base = number; upper = `new_upper`
// (the old upper is dropped). ENOENT when there is no such checkpoint.
Result<StackManifest> Rewind(const StackManifest& m, uint32_t number,
                             const std::string& new_upper);

// Rewind that can be undone: when `upper_nonempty`, the current upper is
// first frozen as an "auto-rewind" checkpoint with the message "before
// rewind to N" (its number in *undo_number; 0 when none was taken), then
// the stack rewinds to `number` with `new_upper` as its upper.
Result<StackManifest> RewindWithUndo(const StackManifest& m, uint32_t number,
                                     bool upper_nonempty,
                                     const std::string& new_upper,
                                     int64_t time_ns,
                                     uint32_t* undo_number = nullptr);

// The manifest of a new sandbox forked from `m` at checkpoint `at` (0: at
// m's current frozen stack, i.e. m.base; the live upper is not included):
// the checkpoints of m whose layers are a prefix of (or equal to) the fork
// point's layers (same numbers, messages, times, kinds), frozen = the fork
// point's layers, base = the fork point, next_number = m.next_number,
// upper = `new_upper`. ENOENT when there is no checkpoint `at`.
Result<StackManifest> Fork(const StackManifest& m, uint32_t at,
                           const std::string& new_upper);

struct ForkResult {
  StackManifest parent;  // m with its upper frozen as a "fork" checkpoint
  StackManifest child;   // the new sandbox's manifest
  uint32_t number = 0;   // the fork checkpoint's number
};
// Forks m's current state, live upper included: freezes m's upper as a
// "fork" checkpoint (m gets `parent_new_upper`), then forks at it (the new
// sandbox gets `child_new_upper`). EMLINK as TakeCheckpoint.
Result<ForkResult> ForkCurrent(const StackManifest& m,
                               const std::string& parent_new_upper,
                               const std::string& child_new_upper,
                               const std::string& message, int64_t time_ns);

struct SquashPlan {
  size_t keep = 0;                 // top frozen layers kept as they are
  std::vector<std::string> merge;  // the layers to merge, bottom first
  std::string nothing_to_do;       // why not, when `merge` is empty
};
// With n frozen layers: when n <= keep + 1, nothing to do (`merge` empty,
// `nothing_to_do` says why); else the bottom n - keep layers are to be
// merged into one new layer (the caller builds it; lower layers first, the
// upper ones' whiteouts and opaque dirs applied).
SquashPlan PlanSquash(const StackManifest& m, size_t keep);
// The manifest with the plan's layers replaced by `merged`: frozen =
// [merged] + the kept layers. Checkpoints whose layers are a strict prefix
// of the merged range are dropped (merged away); one whose layers are
// exactly the merged range gets [merged]; those whose layers start with the
// whole merged range get it replaced by [merged]; all others (other
// branches) keep their layers untouched. EINVAL when the plan is not m's
// or is empty.
Result<StackManifest> ApplySquash(const StackManifest& m,
                                  const SquashPlan& plan,
                                  const std::string& merged);

// The one commit of a squash, for the command and for a daemon: the
// manifest with the plan applied (ApplySquash, checked before anything is
// written), the built layer `built` adopted into `store` under `id`, then
// `install(next, layer_path)` makes it current (it writes the manifest; a
// daemon swaps its layers first). When `install` fails the adopted layer is
// removed. Returns the new manifest. Caller holds the StoreLock.
Result<StackManifest> CommitSquash(
    const LayerStore& store, const StackManifest& m, const SquashPlan& plan,
    const std::string& built, std::string_view id,
    const std::function<Status(const StackManifest&, const std::string&)>&
        install);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_STACK_H_
