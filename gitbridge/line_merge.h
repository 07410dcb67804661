// git's line merge of three versions of one file (libgit2's git_merge_file,
// the merge `git merge-file` makes), shared by `acqfs apply` (the host's
// file, the sandbox's, the base's) and the export (a host edit the sandbox
// wrote over, fs/copy_up_source.h).
// Thread-safety: as libgit2 (its last error is per thread).
#ifndef ACQFS_GITBRIDGE_LINE_MERGE_H_
#define ACQFS_GITBRIDGE_LINE_MERGE_H_

#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace acqfs::gitbridge {

// The merge of `ours` and `theirs`, both descended from `ancestor`; nullopt
// when their changes conflict (touch the same lines, or a binary file both
// changed). `path` names the file in errors.
Result<std::optional<std::string>> MergeFileLines(std::string_view ancestor,
                                                  std::string_view ours,
                                                  std::string_view theirs,
                                                  const std::string& path);

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_LINE_MERGE_H_
