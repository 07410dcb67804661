// A sandbox's layer stack on disk (docs/stack.md), part 1 of 3: the refs
// that name layers, and the manifest that orders them
// (<state>/<name>/stack.json): its JSON, its validation, reading, writing
// and loading it (with the migration of a sandbox made before stacks
// existed), and the check that a stack's layers are its own.
// (The layer store and its lock: stack/store.h. The pure transformations
// of a manifest: stack/transform.h.)
//
// Lookup order of a stack: upper, frozen.back() ... frozen.front(), host.
// Every layer is a directory in kernel-overlayfs upper format.
//
// Locks: a manifest is changed only by the holder of its sandbox's lock
// (cli/sandbox.h; not taken here). Anyone who creates a layer, or writes a
// manifest that references layers read from another manifest (a fork),
// holds the StoreLock (stack/store.h) from before it creates or reads them
// until the manifest is committed; garbage collection holds it throughout.
//
// Thread-safety: plain functions of values and of the disk, with no state
// of their own.
#ifndef ACQFS_STACK_MANIFEST_H_
#define ACQFS_STACK_MANIFEST_H_

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
// A store layer's id: 16 lowercase hex digits.
inline constexpr size_t kLayerIdLen = 16;

// ---------------------------------------------------------------- refs

// The sandbox-name rule (state/state.h's ValidSandboxName is this): letters,
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

}  // namespace acqfs::cli

#endif  // ACQFS_STACK_MANIFEST_H_
