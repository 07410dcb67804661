// The base of a sandbox over a git checkout: what its agent starts from,
// recorded at the sandbox's first mount (docs/git-bridge.md, "The base").
//   - the host's HEAD (its commit and branch) and every branch's tip;
//   - the host's .git but its object stores, copied into the upper layer
//     (FreezeGitDir), so that the sandbox's HEAD, branches, index, reflogs
//     and config are its own from then on: the policy's own-git rule
//     (fs/policy.h) hides the host's copies, whatever the host writes
//     there later, and `.git/objects` stays shared (append-only);
//   - the host's index, copied by the daemon in the background through a
//     descriptor opened at the mount (git replaces its index by renaming a
//     new file over it, so the inode opened stays the one of the mount).
// The host's files outside .git are not part of it: the sandbox sees them
// live (docs/architecture.md, "Host edits while mounted").
// Thread-safety: plain functions; the libgit2 ones as libgit2 (one
// repository per thread).
#ifndef ACQFS_GITBRIDGE_GIT_BASE_H_
#define ACQFS_GITBRIDGE_GIT_BASE_H_

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "fs/layer.h"

namespace acqfs::gitbridge {

// Which inode a path named, and as what: two equal identities of a file
// git replaces by rename (its index) mean it was not written in between.
struct FileIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
  static FileIdentity Of(const struct stat& st);
};

struct GitBase {
  enum class State {
    kNone,       // not recorded (a sandbox of a plain directory, or new)
    kRecording,  // the first mount began it and has not finished
    kRecorded,
  };
  State state = State::kNone;
  int64_t time_ns = 0;  // when it was recorded (the first mount)
  std::string head;     // HEAD's commit (hex); "" when unborn
  std::string branch;   // the branch HEAD named; "" when detached
  std::map<std::string, std::string> branches;  // name (no refs/heads/) -> hex
  // The sandbox's .git is its own (its mutable files were copied into the
  // upper). False for a sandbox whose layers held a .git of their own
  // before bases existed: its git follows the host's, as it always did.
  bool own_git = false;
  // The host's index at the base, and where its copy stands: "none" (the
  // host had none), "pending" (the daemon copies it), "copied", "rebuilt"
  // (the copy was lost and the host's index had changed: rebuilt from
  // HEAD's tree, so staged changes of the base are gone).
  FileIdentity index;
  std::string index_state;
  // What the copy of the index names beyond HEAD's tree (staged blobs, a
  // conflict's stages), copied into the upper's .git/objects once the copy
  // is in place (gitbridge/index_objects.h): how many, and which could not
  // be ("<hex> (why)").
  uint64_t index_objects = 0;
  std::vector<std::string> index_objects_not_kept;
  bool recorded() const { return state == State::kRecorded; }
};

// Does any of the sandbox's own layers (upper, frozen) hold `.git` at its
// root (a whiteout included)?
Result<bool> OwnLayersHaveGit(const Layers& layers);

// Copies the host's .git into the upper layer as `.git`: every entry but
// `objects`, `lfs`, `modules` (shared: append-only stores), `index` (the
// daemon's copy) and lock files (`*.lock`, `gc.pid`: a git command of the
// host's that was running, not the sandbox's), with owners, modes, times
// and xattrs as a copy-up gives them. Built in the work directory `work`
// and published by one rename: a crash leaves either no upper .git or the
// whole copy (and junk in `work`, which the next call removes). EEXIST when
// the upper already has a .git. `layers.sync_copy_up` should be false: the
// copy is made durable in one pass of fsyncs before it is published.
Status FreezeGitDir(const Layers& layers, const std::string& work,
                    const std::string& sandbox);

// The host's index, opened for the copy (nullopt when the host has none;
// never a symlink), with its identity.
Result<std::optional<UniqueFd>> OpenHostIndex(const std::string& lower,
                                              FileIdentity* id);

// Fills base->head, branch and branches from the sandbox's own .git (or
// the submodule repository `gitdir` in it) as `layers` (whose policy has
// the own-git rule) show it.
Status ReadBaseRefs(const Layers& layers, GitBase* base,
                    const std::string& gitdir = ".git");
// The objects the sandbox's own .git names by a ref (every ref below
// refs/: tags, remote-tracking refs, notes, the stash) or by an entry of
// the stash's reflog, other than base->head and base->branches' tips
// (which KeepBase and KeepBranches keep), as distinct hex ids: what
// KeepTips (gitbridge/remote.h) keeps on the host.
Result<std::vector<std::string>> ReadBaseTips(
    const Layers& layers, const GitBase& base,
    const std::string& gitdir = ".git");

// The submodules' repositories the sandbox's copy of .git holds (FreezeGitDir
// copies them as it copies .git: all but their object stores), as paths
// from the layer root (".git/modules/lib/x", nested ones included), sorted.
Result<std::vector<std::string>> ListOwnModules(const Layers& layers);

// Keeps a submodule's base on the host as the base of .git is kept: its
// HEAD, branches and every other object its refs and stash name, by refs
// of the sandbox's in the submodule's repository on the host (KeepBase,
// KeepBranches, KeepTips of gitbridge/remote.h), read from its copy at
// `gitdir` in `layers`. A submodule the host no longer has is skipped.
Status KeepModuleBase(const Layers& layers, const std::string& lower,
                      const std::string& gitdir, const std::string& sandbox);
// The same from the host's .git as it is now (a sandbox whose git is not
// its own).
Status ReadHostRefs(const std::string& lower, GitBase* base);

// Writes `.git/index` into the upper layer: an index of `head`'s tree (the
// empty index when `head` is ""), as `git read-tree HEAD` would make it,
// for a base whose own copy of the host's index was lost. Replaces any.
// Built in the work directory `work` (libgit2 writes it by path there, never
// in the sandbox's layer) and renamed into place.
Status RebuildIndex(const Layers& layers, const std::string& lower,
                    const std::string& head, const std::string& work);

// The current time as the file system writes it into ctime.
int64_t NowNs();

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_GIT_BASE_H_
