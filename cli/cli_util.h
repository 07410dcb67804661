// Helpers the acqfs subcommands share: messages and exit codes, paths, and
// quoting paths as git does. (A sandbox itself: cli/sandbox.h.)
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

#include "common/error.h"
#include "state/paths.h"
#include "state/state.h"

namespace acqfs::cli {

constexpr int kExitBadInput = 1;
constexpr int kExitFailed = 2;
constexpr int kExitRefused = 3;

int Fail(int code, const std::string& what, const std::string& subject,
         const std::string& reason);
int Fail(int code, const std::string& what, const Error& e);

// A path as git prints it: unchanged, or C-quoted ("a\tb", "\377") when it
// holds a control character, DEL, '"', '\' or bytes that are not UTF-8.
std::string QuotePath(const std::string& path);
// Is `s` valid UTF-8?
bool IsUtf8(const std::string& s);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_CLI_UTIL_H_
