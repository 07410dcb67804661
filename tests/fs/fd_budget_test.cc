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

// The io_uring transport's workers: each keeps a directory cache and holds
// an io_uring and an eventfd, but requests are served by the ring's workers
// or by the /dev/fuse ones, not both, so the per-request shares count the
// larger set once.
TEST(FdBudget, RingWorkersShareTheRequestBudgetWithTheDevFuseWorkers) {
  auto dev = FdBudget::Plan(20000, 4);
  auto ring = FdBudget::Plan(20000, 4, 4);
  ASSERT_TRUE(dev.ok() && ring.ok());
  EXPECT_EQ(ring->bound(),
            dev->bound() + 4 * FdBudget::kDirCache + 4 * FdBudget::kPerRing);
  auto more = FdBudget::Plan(20000, 4, 16);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->serving(), 16u);
  EXPECT_EQ(more->bound(),
            FdBudget::kFixed +
                16 * (FdBudget::kPerRequest + FdBudget::kLeases) +
                20 * FdBudget::kDirCache + 16 * FdBudget::kPerRing + 512 + 256 +
                2 * 1024);
  EXPECT_NE(more->Describe().find("16 ring workers"), std::string::npos)
      << more->Describe();
  // A limit the ring's workers do not fit in is refused, naming the limit;
  // the daemon then plans without them (/dev/fuse alone).
  auto tight = FdBudget::Plan(64, 1, 64);
  ASSERT_FALSE(tight.ok());
  EXPECT_EQ(tight.err(), EMFILE);
  EXPECT_TRUE(FdBudget::Plan(64, 1).ok());
}

}  // namespace
}  // namespace acqfs
