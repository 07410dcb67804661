// GitLibrary (common/git_ptr.h): the first one in a process keeps libgit2
// initialised after it ends, so a command that opens repositories one after
// another parses libgit2's CA bundle once (docs/benchmarks.md, W1).
#include <git2.h>
#include <gtest/gtest.h>

#include "common/git_ptr.h"

namespace acqfs {
namespace {

TEST(GitLibrary, LibgitStaysInitialisedAfterTheLastHolderEnds) {
  { GitLibrary first; }
  { GitLibrary second; }
  // git_libgit2_init returns the count of inits now in effect: with the
  // library kept, this one is the second; without, it would start it anew.
  const int count = git_libgit2_init();
  EXPECT_EQ(count, 2);
  git_libgit2_shutdown();
}

}  // namespace
}  // namespace acqfs
