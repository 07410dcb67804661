// Path helpers the sandbox model, the daemon and the commands share.
// Thread-safety: plain functions.
#ifndef ACQFS_STATE_PATHS_H_
#define ACQFS_STATE_PATHS_H_

#include <string>

namespace acqfs::cli {

// `p` made absolute against the working directory (unchanged when it is).
std::string Absolute(const std::string& p);
// Is `p` a directory (following symlinks)?
bool IsDir(const std::string& p);
// Is there anything at `p` (lstat)?
bool Exists(const std::string& p);
// Is `inner` equal to or below `outer`? Both canonical.
bool Within(const std::string& inner, const std::string& outer);

}  // namespace acqfs::cli

#endif  // ACQFS_STATE_PATHS_H_
