// MakeLowerRepo: the standard lower tree for integration tests, a dirty git
// checkout holding every file type acqfs has to pass through.
//
// Layout (paths relative to the repo; constants below name the ones tests use):
//   README.md            committed, then modified (uncommitted change)
//   scratch.txt          untracked
//   .gitignore           /build/ *.o *.log /large.bin /hello/hello
//   empty.txt            empty file
//   emptydir/            empty directory (invisible to git)
//   src/top.txt  src/lib/core.txt  src/lib/.hidden
//   src/lib/util/helper.txt  src/lib/util/deep/leaf.txt (4 levels)
//   docs/a.txt  docs/b.txt  docs/readonly.txt (0444)  docs/private.txt (0600)
//   links/to_file -> ../docs/a.txt
//   links/dangling -> ../missing/target
//   links/to_dir -> ../src/lib
//   hard/one.txt  hard/two.txt   one inode, two names
//   xattr/tagged.txt     with user.test = "lower-value"
//   owned/by_other.txt   owned by 1234:5678 (when run as root)
//   special/fifo         a named pipe
//   scripts/run.sh       0755, prints "script-ok"
//   hello/main.c  hello/Makefile   `make` builds hello/hello
//   large.bin            100 MiB, mostly holes, patterned blocks (ignored)
//   build/out.o  debug.log         ignored files
// Everything outside .git is back-dated by an hour and the index is refreshed
// afterwards, so the index's stat data matches the files and no entry is
// "racily clean": a later `git status` has no reason to rewrite the index.
// Thread-safety: stateless functions.
#ifndef ACQFS_TESTS_HARNESS_LOWER_REPO_H_
#define ACQFS_TESTS_HARNESS_LOWER_REPO_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/command.h"

namespace acqfs::test {

namespace lower {
inline constexpr char kReadme[] = "README.md";
inline constexpr char kReadmeContent[] = "# demo repository\nlocal edit\n";
inline constexpr char kUntracked[] = "scratch.txt";
inline constexpr char kEmptyFile[] = "empty.txt";
inline constexpr char kEmptyDir[] = "emptydir";
inline constexpr char kDeepFile[] = "src/lib/util/deep/leaf.txt";
inline constexpr char kDeepFileContent[] = "leaf\n";
inline constexpr char kLibDir[] = "src/lib";
inline constexpr char kFileA[] = "docs/a.txt";
inline constexpr char kFileAContent[] = "alpha\n";
inline constexpr char kFileB[] = "docs/b.txt";
inline constexpr char kFileBContent[] = "bravo\n";
inline constexpr char kDocsDir[] = "docs";
inline constexpr char kReadOnlyFile[] = "docs/readonly.txt";
inline constexpr char kPrivateFile[] = "docs/private.txt";
inline constexpr char kLinkToFile[] = "links/to_file";
inline constexpr char kLinkToFileTarget[] = "../docs/a.txt";
inline constexpr char kDanglingLink[] = "links/dangling";
inline constexpr char kDanglingLinkTarget[] = "../missing/target";
inline constexpr char kLinkToDir[] = "links/to_dir";
inline constexpr char kHardLinkA[] = "hard/one.txt";
inline constexpr char kHardLinkB[] = "hard/two.txt";
inline constexpr char kHardLinkContent[] = "linked\n";
inline constexpr char kXattrFile[] = "xattr/tagged.txt";
inline constexpr char kXattrName[] = "user.test";
inline constexpr char kXattrValue[] = "lower-value";
inline constexpr char kOwnedFile[] = "owned/by_other.txt";
inline constexpr uint32_t kOwnedUid = 1234;
inline constexpr uint32_t kOwnedGid = 5678;
inline constexpr char kFifo[] = "special/fifo";
inline constexpr char kScript[] = "scripts/run.sh";
inline constexpr char kScriptOutput[] = "script-ok\n";
inline constexpr char kHelloDir[] = "hello";
inline constexpr char kHelloOutput[] = "hello from acqfs\n";
inline constexpr char kLargeFile[] = "large.bin";
inline constexpr uint64_t kLargeFileSize = 100ull << 20;
// `git status --porcelain` of the fresh repo.
inline constexpr char kGitStatus[] = " M README.md\n?? scratch.txt\n";
}  // namespace lower

// Builds the tree above in `dir` (created; its parent must exist).
::testing::AssertionResult MakeLowerRepo(const std::string& dir);

// Environment for running git in tests: HOME=`home`, no system or global
// config, fixed author/committer dates.
EnvAdditions GitEnv(const std::string& home);

// Runs `git -c safe.directory=* ARGS` in `repo` with GitEnv(home).
CommandResult RunGit(const std::string& repo,
                     const std::vector<std::string>& args,
                     const std::string& home, int timeout_seconds = 60);

// Recursively lchown()s `dir` and everything below to uid:gid.
::testing::AssertionResult ChownTree(const std::string& dir, uid_t uid,
                                     gid_t gid);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_LOWER_REPO_H_
