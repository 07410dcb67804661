// FdBudget::Plan: the daemon's descriptors have a bound below the open-files
// limit, whatever the limit, and a limit too low for the threads is refused
// with a message that says what to change.
#include "fs/fd_budget.h"

#include <gtest/gtest.h>

namespace acqfs {
namespace {

TEST(FdBudget, TheBoundStaysWellBelowTheLimit) {
  for (size_t limit : {64u, 100u, 256u, 1024u, 4096u, 20000u, 1u << 20}) {
    auto b = FdBudget::Plan(limit, 1);
    ASSERT_TRUE(b.ok()) << limit << ": " << b.error().Message();
    EXPECT_LT(b->bound(), limit) << b->Describe();
    EXPECT_GE(b->files, 4u) << b->Describe();
    EXPECT_LE(b->files, FdBudget::kMaxFiles);
    EXPECT_LE(b->kept, FdBudget::kMaxKept);
    EXPECT_LE(b->pinned, FdBudget::kMaxPinned);
  }
}

TEST(FdBudget, TheMachinesLimitGivesTheFullCaches) {
  auto b = FdBudget::Plan(20000, 4);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->files, FdBudget::kMaxFiles);
  EXPECT_EQ(b->kept, FdBudget::kMaxKept);
  EXPECT_EQ(b->pinned, FdBudget::kMaxPinned);
  EXPECT_EQ(b->dir_cache, FdBudget::kDirCache);
  EXPECT_EQ(b->bound(),
            FdBudget::kFixed + 4 * b->per_thread() + 512 + 256 + 2 * 1024);
  EXPECT_NE(b->Describe().find("bound " + std::to_string(b->bound())),
            std::string::npos);
}

TEST(FdBudget, ATightLimitDropsTheDirectoryCacheBeforeRefusing) {
  // 4 threads with the directory cache would need 24 + 4 x 18 + 8 = 104.
  auto b = FdBudget::Plan(90, 4);
  ASSERT_TRUE(b.ok()) << b.error().Message();
  EXPECT_EQ(b->dir_cache, 0u);
  EXPECT_LT(b->bound(), 90u);
}

TEST(FdBudget, ALimitTooLowForTheThreadsIsRefusedWithWhatToChange) {
  auto b = FdBudget::Plan(64, 4);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.err(), EMFILE);
  std::string m = b.error().Message();
  EXPECT_NE(m.find("open-files limit is 64"), std::string::npos) << m;
  EXPECT_NE(m.find("threads"), std::string::npos) << m;
}

}  // namespace
}  // namespace acqfs
