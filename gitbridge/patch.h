// The blocks of a patch in git's extended unified format ("diff --git"),
// as `acqfs diff` prints them: the header lines (new/deleted file mode,
// old/new mode, index with abbreviated blob ids), then either "Binary
// files ... differ" or the ---/+++ lines and libgit2's hunks
// (git_patch_from_buffers) with its "\ No newline at end of file" markers.
// The caller reads the two sides and says how their names are printed
// (quoted as it quotes paths); docs of the format: cli/cmd_diff.cc.
// Thread-safety: a PatchRenderer belongs to one thread (libgit2's last
// error is per thread). Its callers need not include <git2.h>.
#ifndef ACQFS_GITBRIDGE_PATCH_H_
#define ACQFS_GITBRIDGE_PATCH_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

#include "common/error.h"

namespace acqfs {
class GitLibrary;
}  // namespace acqfs

namespace acqfs::gitbridge {

// Larger files are binary, as with git's core.bigFileThreshold; a reader
// of a side stops there (PatchSide::too_big).
constexpr size_t kPatchMaxTextSize = 512u << 20;

// What a/P or b/P holds.
struct PatchSide {
  bool exists = false;
  mode_t mode = 0;       // st_mode: a regular file or a symlink
  std::string data;      // the content, or the link's target ("" too_big)
  bool too_big = false;  // larger than kPatchMaxTextSize
};

// How a block names its path.
struct PatchPath {
  std::string path;    // relative, unquoted (given to libgit2)
  std::string a_name;  // "a/P" as printed (quoted when it needs it)
  std::string b_name;  // "b/P" as printed
};

// git's mode of an st_mode: 0120000 for a symlink, else 0100755 when the
// owner may execute it, else 0100644.
unsigned GitFileMode(mode_t mode);

class PatchRenderer {
 public:
  PatchRenderer();  // holds libgit2 initialised for its life
  ~PatchRenderer();
  PatchRenderer(const PatchRenderer&) = delete;
  PatchRenderer& operator=(const PatchRenderer&) = delete;

  // The block from `old_side` to `new_side` (either may be missing, not
  // both); "" when they hold the same data and git mode. Errors name the
  // libgit2 step and the path.
  Result<std::string> Block(const PatchPath& p, const PatchSide& old_side,
                            const PatchSide& new_side) const;
  // A block that changes only the git mode (old mode/new mode lines); ""
  // when the git modes are equal.
  std::string ModeBlock(const PatchPath& p, mode_t old_mode,
                        mode_t new_mode) const;

 private:
  std::unique_ptr<GitLibrary> git_;
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_PATCH_H_
