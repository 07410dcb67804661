// GitNames: the one set of name rules for everything the bridge publishes,
// as git itself applies them on the host (docs/git-bridge.md, "Safety of
// the crossing"):
//   - tree entries: what `git fsck` reports (hasDotgit, gitmodulesSymlink,
//     gitmodulesBlob, gitattributesSymlink, gitattributesBlob, and the
//     gitignoreSymlink and mailmapSymlink notes it keeps quiet by default),
//     which covers what core.protectHFS and core.protectNTFS make git refuse
//     to check out or add: ".git" in every HFS+ spelling (ignorable code
//     points, any case) and NTFS spelling (trailing dots and spaces, ":"
//     stream suffixes, the short name "git~1", a "\" as a separator), and
//     .gitmodules, .gitattributes, .gitignore and .mailmap in their HFS+ and
//     NTFS spellings, 8.3 short names included ("GITMOD~1", "gi7eba~1"), as
//     symlinks (and the first two as anything but a file); plus "", ".",
//     "..", "/" and NUL in a name, and modes git does not know;
//   - raw tree objects: the above for every entry, plus entry modes written
//     as git writes them (no zero padding), git's entry order, and no name
//     twice;
//   - branch names: what `git check-ref-format --branch` refuses.
// Used by BridgeRepo::CopyReachable (branches), ApplyTreeEdits, the upper
// layer's scan and the host's working state (the working-tree commit).
// Thread-safety: pure functions.
#ifndef ACQFS_GITBRIDGE_GIT_NAMES_H_
#define ACQFS_GITBRIDGE_GIT_NAMES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace acqfs::gitbridge {

// Git's entry modes (octal, as in a tree object).
constexpr uint32_t kModeTree = 040000;
constexpr uint32_t kModeBlob = 0100644;
constexpr uint32_t kModeExecutable = 0100755;
constexpr uint32_t kModeLink = 0120000;
constexpr uint32_t kModeGitlink = 0160000;

// Why git would refuse an entry `name` of `mode` (a tree entry's raw mode)
// in a tree, naming the fsck message; "" when git accepts it.
std::string UnsafeTreeEntry(std::string_view name, uint32_t mode);

// UnsafeTreeEntry as a Status: EPERM "refused tree entry '<name>' (<why>)"
// at `where`.
Status CheckTreeEntry(std::string_view name, uint32_t mode,
                      const std::string& where);

// A path left out of a published tree, and why.
struct SkippedPath {
  std::string path;    // the first component of it git refuses, with its
                       // parents ("a/.GIT" for "a/.GIT/config")
  std::string reason;  // UnsafeTreeEntry's answer for that component
};

// The first component of `path` (components '/'-separated) that
// UnsafeTreeEntry refuses, each parent taken as a directory and the last
// component as `mode`; nullopt when git accepts the whole path.
std::optional<SkippedPath> UnsafeTreePath(std::string_view path, uint32_t mode);

// Checks the raw content of a tree object as `git fsck` does: every entry
// (UnsafeTreeEntry), modes without leading zeros, entries in git's order
// (a tree sorts as if its name ended in '/'), no name twice. EPERM naming
// the entry at `where` ("<commit>:<path>"), EIO when the object cannot be
// parsed as a tree.
Status CheckRawTree(const char* data, size_t size, const std::string& where);

// Why `git check-ref-format --branch` refuses `name` (a branch name, the
// part after refs/heads/); "" when it accepts it.
std::string BadBranchName(std::string_view name);

// `name` with control bytes shown as \xNN, for messages.
std::string PrintableName(std::string_view name);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_GIT_NAMES_H_
