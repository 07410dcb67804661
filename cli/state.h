// Sandbox state on disk: where the state directory is, the layout of one
// sandbox's folder, and its metadata file (meta.json).
//   <state>/<name>/upper      the upper layer
//   <state>/<name>/work       the overlay work directory
//   <state>/<name>/meta.json  lower, mountpoint, xattr namespace
//   <state>/<name>/daemon.pid, daemon.log, lock
//   <state>/<name>/bridge.git the git bridge (for a lower that is a checkout)
// Thread-safety: plain functions and values.
#ifndef ACQFS_CLI_STATE_H_
#define ACQFS_CLI_STATE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"

namespace acqfs::cli {

// --state-dir, else $ACQFS_STATE_DIR, else $XDG_STATE_HOME/acqfs, else
// ~/.local/state/acqfs.
std::string ResolveStateDir(const std::string& flag);

// Letters, digits, '.', '_', '-'; 1..64 characters; not "." or "..".
bool ValidSandboxName(const std::string& name);

struct SandboxPaths {
  explicit SandboxPaths(const std::string& state_dir, const std::string& name);
  std::string name, dir, upper, work, meta, pid, log, lock, bridge;
};

struct SandboxMeta {
  std::string name;
  std::string lower;            // absolute
  std::string mountpoint;       // absolute, last one used
  std::string xattr_namespace;  // "trusted" or "user"
  int64_t last_export = 0;      // unix seconds of the last export, 0: never
};

Result<SandboxMeta> ReadMeta(const std::string& path);
// Writes atomically and durably (temp file, fsync, rename).
Status WriteMeta(const std::string& path, const SandboxMeta& meta);

// mkdir -p with mode 0700 for the directories it creates.
Status MakeDirs(const std::string& path);

// realpath(3) as a Result.
Result<std::string> RealPath(const std::string& path);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_STATE_H_
