// The acqfs subcommands, one Run* function each (cmd_<name>.cc). main.cc
// only parses the command line into these argument structs.
#ifndef ACQFS_CLI_COMMANDS_H_
#define ACQFS_CLI_COMMANDS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace acqfs::cli {

// The policy options of `mount` and `run` (docs/sandboxes.md, "Policy").
// An option given with an empty value is given (and then refused as it
// does not parse), never taken for "not given".
struct PolicyArgs {
  std::vector<std::string> hide, read_only;
  std::optional<std::string> quota;        // --quota SIZE, such as 500M
  std::optional<std::string> policy_file;  // --policy FILE (JSON)
  bool hide_secrets = false;
  std::vector<std::string> audit_reads;  // --audit-reads GLOB
  std::optional<std::string> audit_max;  // --audit-max SIZE
  bool given() const {
    return !hide.empty() || !read_only.empty() || quota || policy_file ||
           hide_secrets || !audit_reads.empty() || audit_max;
  }
};

struct MountArgs {
  std::string lower, mountpoint, name, state_dir, log_level = "info";
  std::vector<std::string> options;
  bool foreground = false;
  // --allow-other, --no-allow-other; neither: the default for who mounts
  // (daemon/allow_other.h)
  bool allow_other = false, no_allow_other = false;
  bool name_given = false;  // --name was on the command line (even as "")
  // --ignore-podman-namespace: mount even though a rootless Podman
  // namespace made earlier would not see it (cli/podman_namespace.h)
  bool ignore_podman_namespace = false;
  PolicyArgs policy;
};
int RunMount(const MountArgs& a);

// acqfs remount MOUNTPOINT -o OPTS: changes the VFS flags of a running
// acqfs mount (ro, rw, noexec, ...), as `mount -o remount,OPTS` does
// (fuse/vfs_options.h, Remount). Root only.
struct RemountArgs {
  std::string mountpoint;
  std::vector<std::string> options;
};
int RunRemount(const RemountArgs& a);

struct UmountArgs {
  std::string target, state_dir;
  bool no_export = false, json = false;
};
int RunUmount(const UmountArgs& a);

struct ExportArgs {
  std::string name, state_dir;
  bool json = false;
};
int RunExport(const ExportArgs& a);
// Exports a sandbox and prints the result (text or JSON); the exit code.
int ExportAndReport(const std::string& what, const std::string& name,
                    const std::string& state_dir, bool json);

struct ApplyArgs {
  std::string name, state_dir;
  std::vector<std::string> paths;
  bool check = false;
  bool json = false;
};
int RunApply(const ApplyArgs& a);

struct RmArgs {
  std::string name, state_dir;
  bool force = false;
};
int RunRm(const RmArgs& a);

struct LsArgs {
  std::string state_dir;
  bool json = false;
};
int RunLs(const LsArgs& a);

struct StatusArgs {
  std::string name, state_dir;
  bool json = false;
  bool null_terminated = false;  // -z: NUL after each entry, paths unquoted
  bool include_git_dir = false;  // --git-dir: also report .git at any depth
};
int RunStatus(const StatusArgs& a);

struct DiffArgs {
  std::string name, state_dir;
  std::vector<std::string> paths;  // restrict to these (relative to the root)
  bool include_git_dir = false;
};
int RunDiff(const DiffArgs& a);

// acqfs bench: times COMMAND in fresh acqfs sandboxes over a checkout and
// in fresh git clones of it (cmd_bench.cc).
// The layer stack (docs/stack.md, cli/cmd_checkpoint.cc ... cmd_gc.cc).
struct CheckpointArgs {
  std::string name, state_dir, message;
  bool json = false;
};
int RunCheckpoint(const CheckpointArgs& a);

struct CheckpointsArgs {
  std::string name, state_dir;
  bool json = false;
};
int RunCheckpoints(const CheckpointsArgs& a);

// acqfs log (cli/cmd_log.cc, docs/audit.md).
struct LogArgs {
  std::string name, state_dir;
  std::optional<uint32_t> since, until;  // checkpoint numbers
  std::vector<std::string> paths, ops;   // --path GLOB, --op OP
  std::vector<int> pids;                 // --pid PID
  bool refused = false, json = false, follow = false, summary = false;
};
int RunLog(const LogArgs& a);

struct RewindArgs {
  std::string name, state_dir;
  uint32_t checkpoint = 0;
};
int RunRewind(const RewindArgs& a);

struct ForkArgs {
  std::string name, new_name, mountpoint, state_dir;
  uint32_t at = 0;  // 0: the live state (checkpointed first)
};
int RunFork(const ForkArgs& a);

struct SquashArgs {
  std::string name, state_dir;
  size_t keep = 4;  // the newest frozen layers left as they are
};
int RunSquash(const SquashArgs& a);

struct GcArgs {
  std::string state_dir;
};
int RunGc(const GcArgs& a);

struct BenchArgs {
  std::string repo;       // "" = the current directory's git top level
  std::string state_dir;  // "" = a temporary one
  int runs = 3;
  bool json = false;
  std::vector<std::string> command;  // run with execvp, no shell
};
int RunBench(const BenchArgs& a);

// acqfs run: runs COMMAND inside bubblewrap with the sandbox NAME's mount as
// /workspace (mounting it first, or reusing its running mount), then exports
// the sandbox and unmounts what it mounted (cmd_run.cc, docs/sandboxes.md).
struct RunArgs {
  std::string name;
  std::string repo;        // "" = the current directory's git top level
  std::string state_dir;   // "" = the default (see ResolveStateDir)
  std::string mountpoint;  // "" = ${XDG_RUNTIME_DIR:-/tmp}/acqfs-<uid>/<name>
  std::string network = "none";      // none or host
  std::vector<std::string> options;  // -o, passed to the mount
  // --allow-other, --no-allow-other: passed to the mount run makes
  bool allow_other = false, no_allow_other = false;
  bool no_export = false;
  PolicyArgs policy;
  std::vector<std::string> command;  // run with execvp in the sandbox
};
int RunRun(const RunArgs& a);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_COMMANDS_H_
