// acqfs apply: a sandbox's work as uncommitted edits in the host's working
// tree, for a user who reviews an agent's work as a plain diff rather than
// a branch (docs/git-bridge.md, "acqfs apply").
//
// What is applied: the difference between the base commit's tree and the
// tree an export would publish as the working-tree commit now (the agent's
// commits and its uncommitted work), path by path (PATHs limit it). Each
// path is a 3-way merge against the base: the host's file as it is now
// ("ours"), the sandbox's ("theirs"), the base's version (the ancestor):
//   - the host's file is the base's: the sandbox's version is written (or
//     the file removed);
//   - the host's file is the sandbox's already: nothing to do;
//   - both changed it: git's line merge (libgit2 git_merge_file); lines
//     both changed, a change against a removal, a directory or a symlink in
//     the way, a submodule: a conflict.
// All or nothing: when any path conflicts nothing is written and the
// conflicts are listed (as --check lists them). Otherwise every file is
// written (built beside its place and renamed over it: a reader sees the
// old file or the new one) and the index gets the applied paths, as `git
// apply --3way` leaves them (staged). The host's refs are never touched.
// Refused, writing nothing (EBUSY or EINVAL, naming what): the host in the
// middle of a merge, cherry-pick, revert or rebase, its index locked; a
// PATH outside the checkout; a host file it would touch holding a conflict
// marker. Paths are opened beneath the checkout, never through a symlink.
// Thread-safety: as libgit2 (one call per thread).
#ifndef ACQFS_GITBRIDGE_APPLY_H_
#define ACQFS_GITBRIDGE_APPLY_H_

#include <string>
#include <vector>

#include "common/error.h"
#include "gitbridge/export.h"

namespace acqfs::gitbridge {

struct ApplyOptions {
  // Relative to the checkout's top, or absolute inside it; empty: all.
  std::vector<std::string> paths;
  bool check = false;  // only say what would happen
};

struct ApplyEntry {
  std::string path;
  bool remove = false;   // the sandbox removed it
  bool merged = false;   // the host had changed it too: merged by lines
  bool nothing = false;  // the host has the sandbox's version already
  std::string conflict;  // why it cannot be applied ("" when it can)
};

struct ApplyResult {
  std::vector<ApplyEntry> entries;
  bool written = false;
  bool conflicts() const {
    for (const auto& e : entries)
      if (!e.conflict.empty()) return true;
    return false;
  }
};

Result<ApplyResult> Apply(const ExportConfig& config,
                          const ApplyOptions& options);

// `path` (relative to the checkout `lower`'s top, or absolute) as a
// relative path without "." or ".." components; EINVAL when it leaves the
// checkout or lies in its .git.
Result<std::string> CheckoutRelative(const std::string& lower,
                                     const std::string& path);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_APPLY_H_
