// Sandbox state on disk: where the state directory is, the layout of one
// sandbox's folder, and its metadata file (meta.json).
//   <state>/<name>/stack.json its layer stack: the upper and frozen layers,
//                             in <state>/.layers/ (stack/store.h)
//   <state>/<name>/upper      the upper layer of a legacy sandbox (before
//                             stacks; moved into the store by a mount)
//   <state>/<name>/work       the overlay work directory
//   <state>/<name>/control.sock  its daemon's control socket
//   <state>/<name>/meta.json  name, lower, mountpoint, xattr namespace,
//                             last_export, policy (PolicyRecord), base
//                             (gitbridge/git_base.h); the folder owner's
//   <state>/<name>/daemon.pid, daemon.log, lock
//   <state>/<name>/host.pending  host-side steps of a fork or rm to redo
//   <state>/<name>/sources    copy-up sources (fs/copy_up_source.h)
//   <state>/<name>/bridge.git the git bridge (for a lower that is a checkout)
// Thread-safety: plain functions and values.
#ifndef ACQFS_STATE_STATE_H_
#define ACQFS_STATE_STATE_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "fs/policy.h"
#include "gitbridge/git_base.h"

namespace acqfs::cli {

// --state-dir, else $ACQFS_STATE_DIR, else $XDG_STATE_HOME/acqfs, else
// ~/.local/state/acqfs.
std::string ResolveStateDir(const std::string& flag);

// Letters, digits, '.', '_', '-'; 1..64 characters; not ".", ".." or
// ".layers" (the layer store).
bool ValidSandboxName(const std::string& name);

struct SandboxPaths {
  explicit SandboxPaths(const std::string& state_dir, const std::string& name);
  std::string name, dir, upper, work, meta, pid, log, lock, bridge;
  // Copy-up sources (fs/copy_up_source.h): <dir>/sources.
  std::string sources;
  // The frozen layers' directories, bottom first, and the control socket's
  // folder and name. `upper` and `frozen` are the stack's (Sandbox::Load
  // reads <dir>/stack.json, docs/stack.md); a sandbox without one has its
  // upper at <dir>/upper (made before stacks: the legacy layout).
  std::vector<std::string> frozen;
  std::string stack;
  static constexpr const char* kControlSocket = "control.sock";
};

// A sandbox's policy as recorded in meta.json (docs/sandboxes.md): fixed when
// the sandbox is created, applied on every remount.
struct PolicyRecord {
  std::vector<std::string> hide;  // --hide-secrets' patterns included
  std::vector<std::string> read_only;
  uint64_t quota_bytes = 0;   // 0: none
  bool hide_secrets = false;  // recorded for display
  // The sandbox's .git is its own (GitBase::own_git): the host's copies of
  // its mutable files are hidden (Policy::OwnGitHides). Set by the first
  // mount, never by a flag, so a remount's comparison leaves it out.
  bool own_git = false;
  // The submodules' repositories copied with it (Policy::OwnModuleHides):
  // ".git/modules/<name>" paths, nested ones included.
  std::vector<std::string> own_git_modules;
  // The audit log (docs/audit.md): the paths whose opens for reading it
  // records (--audit-reads), and its bound (--audit-max; 0: the default).
  std::vector<std::string> audit_reads;
  uint64_t audit_max = 0;
  bool empty() const {
    return !restricts() && !own_git && audit_reads.empty() && audit_max == 0;
  }
  // A boundary of the user's: something hidden, read-only or a quota.
  bool restricts() const {
    return !hide.empty() || !read_only.empty() || quota_bytes != 0;
  }
  bool operator==(const PolicyRecord& o) const {
    return hide == o.hide && read_only == o.read_only &&
           quota_bytes == o.quota_bytes && hide_secrets == o.hide_secrets &&
           audit_reads == o.audit_reads && audit_max == o.audit_max;
  }
  // The Policy the layers enforce; EINVAL naming a pattern that no longer
  // parses (a hand-edited meta.json).
  Result<std::shared_ptr<const Policy>> Build() const;
  // One line for people: "hide .env, *.pem; read-only vendor/; quota 500 MiB".
  std::string Summary() const;
};

struct SandboxMeta {
  std::string name;
  std::string lower;            // absolute
  std::string mountpoint;       // absolute, last one used
  std::string xattr_namespace;  // "trusted" or "user"
  int64_t last_export = 0;      // unix seconds of the last export, 0: never
  PolicyRecord policy;
  // What the agent starts from, for a lower that is a git checkout
  // (gitbridge/git_base.h); a fork inherits its parent's.
  gitbridge::GitBase base;
};

// The base as JSON ({} when none), for meta.json and `--json` output.
nlohmann::json BaseJson(const gitbridge::GitBase& base);

Result<SandboxMeta> ReadMeta(const std::string& path);
// Writes atomically and durably, mode 0600 (common/atomic_file.h).
Status WriteMeta(const std::string& path, const SandboxMeta& meta);

// "512 B", "1.5 KiB", "500.0 MiB".
std::string FormatBytes(uint64_t n);

// mkdir -p with mode 0700 for the directories it creates.
Status MakeDirs(const std::string& path);

// Makes a sandbox's folder reachable by its owner only: clears the group
// and other permission bits (and set-id and sticky bits) of the directory
// `dir`, so that no other user of the host can reach its upper layer, where
// the sandbox may have made device nodes and set-id files.
Status SecureSandboxDir(const std::string& dir);

// realpath(3) as a Result.
Result<std::string> RealPath(const std::string& path);

}  // namespace acqfs::cli

#endif  // ACQFS_STATE_STATE_H_
