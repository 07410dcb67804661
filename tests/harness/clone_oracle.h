// The clone-mode oracle (docs/git-bridge.md, "The base"): what an agent's
// work would give had the agent worked in a private clone made at the
// instant of the mount, as a clone-mode sandbox gives it. A test runs the
// same agent steps in the sandbox and in the clone, the same host steps in
// the sandbox's host and in a byte-for-byte copy of it, brings each agent's
// work back into its own host the same way, and compares.
//
//   CloneWorld::Make   copies the host (cp -a: its .git too) to <dir>/host
//                      and makes <dir>/clone: `git clone` of that copy on
//                      the host's branch, plus the host's uncommitted and
//                      untracked (not ignored) files and its index, so the
//                      clone starts where the sandbox does; a copy of the
//                      clone's files is kept as the start state.
//   Export             the clone's work as acqfs export publishes a
//                      sandbox's: its branches, and a working-tree commit
//                      on the clone's HEAD whose tree is HEAD's with every
//                      path the agent changed since the start laid over it
//                      (untracked ignored paths left out); fetched into
//                      the host copy under refs/remotes/clone/.
//   MergeInto          in a host: stash when dirty (untracked too), merge a
//                      ref, pop; what came of it (conflict, files, status).
// Git runs with GitEnv(home): fixed identities and dates, so the same steps
// make the same commits in both worlds.
// Thread-safety: none; one owner.
#ifndef ACQFS_TESTS_HARNESS_CLONE_ORACLE_H_
#define ACQFS_TESTS_HARNESS_CLONE_ORACLE_H_

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace acqfs::test {

// What a host holds after a merge.
struct MergeOutcome {
  bool conflict = false;  // the merge or the stash pop stopped
  std::string status;     // git status --porcelain
  std::map<std::string, std::string> files;  // path -> content ("->t": link)
  std::string Describe() const;
};

class CloneWorld {
 public:
  static ::testing::AssertionResult Make(const std::string& host,
                                         const std::string& dir,
                                         const std::string& home,
                                         CloneWorld* out);
  const std::string& host() const { return host_; }
  const std::string& clone() const { return clone_; }
  const std::string& base() const { return base_; }  // HEAD at the start

  ::testing::AssertionResult Export();

 private:
  std::string dir_, home_, host_, clone_, start_, base_;
};

// Runs a shell script (set -e) in `dir` with GitEnv(home); its output, or
// a failure naming both.
::testing::AssertionResult RunIn(const std::string& dir,
                                 const std::string& script,
                                 const std::string& home,
                                 std::string* out = nullptr);

// The merge of `ref` into the checkout `host` as a user of a sandbox does
// it: `git stash push -u` when it has uncommitted work, `git merge
// --no-edit ref`, `git stash pop`.
MergeOutcome MergeInto(const std::string& host, const std::string& ref,
                       const std::string& home);

// A shell function for the tests' scripts: `lines FILE PREFIX` writes
// PREFIX1 to PREFIX10, a line each (files whose lines a test then edits).
inline constexpr char kLinesFunction[] =
    "lines() { : > \"$1\"; for i in 1 2 3 4 5 6 7 8 9 10; do "
    "echo \"$2$i\" >> \"$1\"; done; }\n";

// The working tree's files below `dir` (not .git), by relative path.
std::map<std::string, std::string> TreeFiles(const std::string& dir);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_CLONE_ORACLE_H_
