// Helpers the acqfs subcommands share: messages and exit codes, paths, and
// finding a sandbox in the state directory.
// Every error printed has the form "acqfs: <what failed>: <path or name>:
// <reason>"; exit codes (docs/cli.md):
//   0  success
//   1  bad input: usage, a wrong path or name, a refused request
//   2  the operation itself failed (mount, unmount, export, removal)
//   3  export finished but left some of the sandbox's work out: refused
//      branches, working-tree paths whose names git refuses
// Thread-safety: plain functions.
#ifndef ACQFS_CLI_CLI_UTIL_H_
#define ACQFS_CLI_CLI_UTIL_H_

#include <string>

#include "cli/state.h"
#include "common/error.h"
#include "fs/layer.h"
#include "gitbridge/export.h"

namespace acqfs::cli {

constexpr int kExitBadInput = 1;
constexpr int kExitFailed = 2;
constexpr int kExitRefused = 3;

int Fail(int code, const std::string& what, const std::string& subject,
         const std::string& reason);
int Fail(int code, const std::string& what, const Error& e);

std::string Absolute(const std::string& p);
bool IsDir(const std::string& p);
bool Exists(const std::string& p);
// Is `inner` equal to or below `outer`? Both canonical.
bool Within(const std::string& inner, const std::string& outer);

// A sandbox that a command's argument names, and how it named it.
struct FoundSandbox {
  SandboxPaths paths{"", ""};
  SandboxMeta meta;
  bool by_name = false;     // the argument is the sandbox's name
  bool mounted_at = false;  // a mountpoint where the sandbox's own mount
                            // (live or stale) is now
};

// Finds the sandbox `arg` names in the state directory `state`
// (docs/cli.md, "Naming a sandbox"):
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
// metadata cannot be read. The error's path is `arg` and its op the reason
// to print (FailFind). Never sends a request to a FUSE daemon, so a hung or
// dead mount does not stop it.
Result<FoundSandbox> FindSandbox(const std::string& state,
                                 const std::string& arg);
// Only by name (for `acqfs rm`, which takes no mountpoint).
Result<FoundSandbox> FindSandboxByName(const std::string& state,
                                       const std::string& name);
// Prints FindSandbox's failure as "acqfs: <what>: <arg>: <reason>" and
// returns the exit code (1).
int FailFind(const std::string& what, const std::string& arg, const Error& e);

// The bridge export settings of a sandbox.
gitbridge::ExportConfig ExportConfigFor(const SandboxPaths& paths,
                                        const SandboxMeta& meta);

// With the sandbox's lock held: detaches the mount its dead daemon left (if
// the mountpoint still holds that mount), saying so on stderr as
// "acqfs: <command>: <mountpoint>: cleaned up a stale mount of sandbox
// <name>", and removes the stale daemon.pid. 0, or Fail()'s exit code.
int CleanUpStaleSandbox(const std::string& command, const SandboxPaths& paths,
                        const SandboxMeta& meta);

// A path as git prints it: unchanged, or C-quoted ("a\tb", "\377") when it
// holds a control character, DEL, '"', '\' or bytes that are not UTF-8.
std::string QuotePath(const std::string& path);
// Is `s` valid UTF-8?
bool IsUtf8(const std::string& s);
// The sandbox's layers, opened for reading only (mounted or not).
Result<Layers> OpenSandboxLayers(const SandboxPaths& paths,
                                 const SandboxMeta& meta);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_CLI_UTIL_H_
