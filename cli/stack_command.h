// What the stack commands (checkpoint, checkpoints, rewind, fork, squash;
// cmd_<name>.cc) share: finding the sandbox, asking its daemon, and holding
// a sandbox no daemon serves quiet while the command changes its stack
// (docs/stack.md). A mounted sandbox's stack is changed by its daemon,
// through its control socket (docs/control.md); one not mounted, by the
// command itself, holding the sandbox's lock.
// Thread-safety: plain functions, for the command's one thread.
#ifndef ACQFS_CLI_STACK_COMMAND_H_
#define ACQFS_CLI_STACK_COMMAND_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/sandbox.h"
#include "common/error.h"
#include "common/handle.h"
#include "fs/layer.h"
#include "stack/manifest.h"
#include "stack/stack_ops.h"

namespace acqfs::cli {

// A time in nanoseconds since the epoch as ISO 8601 UTC.
std::string Iso(int64_t ns);

// The sandbox `arg` names, found and loaded; exit code in *rc on failure.
std::optional<Sandbox> FindSandbox(const std::string& what,
                                   const std::string& state_dir,
                                   const std::string& arg, int* rc);

// Is the sandbox's daemon alive (then it owns the stack)?
Result<bool> DaemonAlive(const Sandbox& s);

// The sandbox's lock is held by a process that is not its daemon (another
// command: a squash, a fork, a mount starting): EBUSY naming it.
Error LockBusy(const Sandbox& s);

// Asks the sandbox's daemon for `request`.
Result<nlohmann::json> AskDaemon(const Sandbox& s,
                                 const nlohmann::json& request);

// What a command that changes the stack of a sandbox no daemon serves
// holds until it ends: the sandbox's lock, and the claim on its upper and
// work directories (fs/layer.h), which keeps a daemon acqfs mount did not
// start (mount.fuse.acqfs) from serving them meanwhile.
struct Quiet {
  UniqueFd lock;
  std::optional<LayersClaim> claim;
};

// For a command that changes the stack of a sandbox no daemon serves: takes
// its lock and its layers' claim (into *q, held until the command ends),
// and makes its stack whole (Sandbox::PrepareStack, which also checks that
// its layers are its own).
Status HoldQuiet(Sandbox& s, Quiet* q);

// With the sandbox's lock held and its stack whole (HoldQuiet), no daemon:
// a checkpoint by this command.
Result<CheckpointPlan> CheckpointQuiet(Sandbox& s, const std::string& message,
                                       CheckpointKind kind);

// A checkpoint of the sandbox, by its daemon or by this command: the new
// checkpoint's number.
Result<uint32_t> MakeCheckpoint(Sandbox& s, const std::string& message,
                                CheckpointKind kind, double* ms);

// Does the directory `dir` hold nothing (false when it cannot be read)?
bool UpperEmpty(const std::string& dir);

// "acqfs: rewind NAME: at checkpoint AT", and how to undo it when `undo`.
void PrintRewound(const std::string& name, uint32_t at, uint32_t undo);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_STACK_COMMAND_H_
