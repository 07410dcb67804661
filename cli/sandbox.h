// One sandbox of a state directory, as every command gets it: found by the
// name or mountpoint an argument gives (Find), or named by a command that
// may create it (the constructor); then its paths (SandboxPaths: the
// folder, upper, work, lock, pid file, bridge; the lower is in the
// metadata), its metadata (meta.json), its layers, its liveness (is its
// daemon alive, is its own mount at its mountpoint) and its lock.
// Thread-safety: a value type; no method is synchronised.
#ifndef ACQFS_CLI_SANDBOX_H_
#define ACQFS_CLI_SANDBOX_H_

#include <optional>
#include <string>

#include "common/error.h"
#include "common/handle.h"
#include "fs/layer.h"
#include "gitbridge/export.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"
#include "state/liveness.h"
#include "state/state.h"

namespace acqfs::cli {

class Sandbox {
 public:
  // The sandbox `name` in the state directory `state` (absolute), whether
  // or not it exists; its metadata is empty until Load().
  Sandbox(const std::string& state, const std::string& name);

  // Finds the sandbox `arg` names in the state directory `state`
  // (docs/cli.md, "Naming a sandbox"), its metadata loaded:
  //   1. a sandbox name: <state>/<arg>/meta.json exists;
  //   2. else a path (MountpointPath), compared with the mountpoint each
  //      sandbox recorded last (meta.json):
  //      a. the sandbox whose own mount is at that path now (proven as
  //         ProbeSandbox proves it: the device and mount id daemon.pid
  //         records, in /proc/self/mountinfo); when several are (mounts
  //         stacked by hand), the one the path leads to;
  //      b. else the one sandbox that recorded the path;
  //      c. several that recorded it, none mounted there: refused
  //         (ENOTUNIQ), naming them, so that the user gives the name.
  // ENOENT when nothing matches; another errno when the named sandbox's
  // metadata cannot be read. The error's path is `arg` and its op the
  // reason to print (FailFind). Never sends a request to a FUSE daemon, so
  // a hung or dead mount does not stop it.
  static Result<Sandbox> Find(const std::string& state, const std::string& arg);
  // Only by name (for `acqfs rm`, which takes no mountpoint).
  static Result<Sandbox> FindByName(const std::string& state,
                                    const std::string& name);

  const std::string& name() const { return paths_.name; }
  const std::string& state_dir() const { return state_; }
  const SandboxPaths& paths() const { return paths_; }
  const SandboxMeta& meta() const { return meta_; }
  SandboxMeta& meta() { return meta_; }
  // How Find found it: by its name; at a mountpoint where its own mount
  // (live or stale) is now.
  bool by_name() const { return by_name_; }
  bool mounted_at() const { return mounted_at_; }

  // Its folder exists; its metadata file exists.
  bool HasFolder() const;
  bool HasMeta() const;
  // Reads meta.json into meta(), and its stack (LoadStack, no repair) into
  // stack() and paths().upper/frozen. A sandbox with neither stack.json nor
  // a legacy upper has an empty stack (has_stack() false).
  Status Load();
  // Its layer stack (stack/manifest.h), as Load read it.
  bool has_stack() const { return has_stack_; }
  // Why its stack.json could not be read (Load keeps going, so that `acqfs
  // rm --force` and `acqfs ls` still reach a sandbox whose stack.json was
  // damaged by hand); Ok when it could, or when it has none.
  Status StackOk() const {
    if (stack_error_) return *stack_error_;
    return Ok();
  }
  const StackManifest& stack() const { return stack_.manifest; }
  bool legacy() const { return stack_.legacy; }
  // With its lock held and no daemon serving it: makes its stack whole — a
  // new sandbox gets a new upper in the store whose root takes `like`'s
  // mode, owner and times, a legacy one its upper moved into the store, an
  // interrupted migration is finished — and reloads it.
  Status PrepareStack(const struct stat& like);
  // With its lock (and the store lock) held: writes `m` as its stack,
  // atomically, and reloads paths().upper/frozen from it.
  Status SaveStack(const StackManifest& m);
  // The store of the layers (<state>/.layers).
  LayerStore store() const { return LayerStore(state_); }
  // Writes meta() to meta.json, atomically and durably.
  Status Save() const;

  // Its layers, opened for reading only (mounted or not), with its policy.
  Result<Layers> OpenLayers() const;
  // The bridge export settings (gitbridge/export.h). A recorded policy
  // that cannot be built (a meta.json damaged or edited by hand) is an
  // error naming meta.json, never a config without it: whatever publishes
  // or applies the sandbox's work would let the paths it hides out.
  Result<gitbridge::ExportConfig> ExportConfig() const;
  // Is its lower a git checkout?
  bool IsGit() const;

  // Its liveness (liveness.h, ProbeSandbox); fails only when its lock
  // cannot be tested.
  Result<SandboxLiveness> Probe() const;
  // Does a process (its daemon, a command) hold its lock?
  Result<bool> LockHeld() const;
  // Takes its lock without waiting and returns the descriptor that holds
  // it (a daemon started afterwards inherits it). `create`: make the lock
  // file when missing. EWOULDBLOCK when another open file holds it; the
  // error names "open" or "lock" and the lock file.
  Result<UniqueFd> Lock(bool create) const;

  // The host-side steps of a sandbox (the host's sandbox-<name> remote and
  // the refs that keep its base) that a command began and may not have
  // finished, while this marker file is in its folder (docs/stack.md,
  // "Sandbox folders in the making"): a fork writes the host after its
  // commit (a rename), and `acqfs rm` unregisters before its commit. The
  // next command that readies the sandbox's stack (PrepareStack) does them.
  static constexpr const char* kHostPending = "host.pending";
  // Its folder holds kHostPending.
  bool HostStepsPending() const;
  // Writes kHostPending (durably) in its folder.
  Status MarkHostStepsPending() const;
  // With its lock held: its host-side steps, all idempotent — registers the
  // host's remote for its bridge, keeps its base, its branches' tips and its
  // copy's other tips (and its submodules' bases) on the host — then removes
  // kHostPending. Only the marker's removal for a lower that is not a git
  // checkout.
  Status FinishHostSteps();
  // Makes its bridge repository (gitbridge/bridge_repo.h), reading the
  // host's objects, without registering the host's remote: for a fork
  // built under another folder name, which the remote must not name.
  Status MakeBridge() const;

  // With its lock held: detaches the mount its dead daemon left (if the
  // mountpoint still holds that mount), saying so on stderr as "acqfs:
  // <command>: <mountpoint>: cleaned up a stale mount of sandbox <name>",
  // and removes the stale daemon.pid. 0, or Fail()'s exit code.
  int CleanUpStale(const std::string& command) const;

 private:
  std::string state_;
  SandboxPaths paths_;
  SandboxMeta meta_;
  LoadedStack stack_;
  bool has_stack_ = false;
  std::optional<Error> stack_error_;
  // Sets paths_.upper/frozen from stack_.
  void UseStack();
  bool by_name_ = false;
  bool mounted_at_ = false;
};

// Prints Sandbox::Find's failure as "acqfs: <what>: <arg>: <reason>" and
// returns the exit code (1).
int FailFind(const std::string& what, const std::string& arg, const Error& e);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_SANDBOX_H_
