// FileCache: at most one descriptor per key, least recently used out beyond
// the capacity, and a lease that keeps an evicted descriptor open while a
// request still uses it; pinned entries in a class of their own.
#include "fs/file_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace acqfs {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

OpenFile DevNull(bool readable, bool writable, bool from_lower = false) {
  OpenFile f;
  f.fd.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
  f.readable = readable;
  f.writable = writable;
  f.from_lower = from_lower;
  return f;
}

OpenFile Pinned() {
  OpenFile f = DevNull(true, false, true);
  f.pinned = true;
  return f;
}

int key[8];  // distinct addresses to use as keys

TEST(FileCache, EvictsTheLeastRecentlyUsedBeyondItsCapacity) {
  FileCache c(2);
  int fd0 = c.Put(&key[0], DevNull(true, false)).get();
  int fd1 = c.Put(&key[1], DevNull(true, false)).get();
  ASSERT_TRUE(c.Find(&key[0], false, false));  // key 0 is now the recent one
  c.Put(&key[2], DevNull(true, false));
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.Find(&key[0], false, false));
  EXPECT_FALSE(c.Find(&key[1], false, false));
  EXPECT_TRUE(c.Find(&key[2], false, false));
  EXPECT_TRUE(IsOpen(fd0));
  EXPECT_FALSE(IsOpen(fd1)) << "an evicted, unused descriptor is closed";
}

TEST(FileCache, ALeaseKeepsAnEvictedDescriptorOpenUntilItIsDropped) {
  FileCache c(1);
  FileLease held = c.Put(&key[0], DevNull(true, true));
  int fd = held.get();
  c.Put(&key[1], DevNull(true, true));  // evicts key 0
  EXPECT_FALSE(c.Find(&key[0], false, false));
  EXPECT_TRUE(IsOpen(fd));
  held.reset();
  EXPECT_FALSE(IsOpen(fd));
}

TEST(FileCache, FindServesOnlyWhatTheDescriptorCanDo) {
  FileCache c(4);
  c.Put(&key[0], DevNull(true, false));
  EXPECT_TRUE(c.Find(&key[0], false, false));
  EXPECT_FALSE(c.Find(&key[0], true, false)) << "read-only cannot write";
  c.Put(&key[1], DevNull(false, true));
  EXPECT_FALSE(c.Find(&key[1], false, false)) << "write-only cannot read";
  EXPECT_TRUE(c.Find(&key[1], true, false));
  // A lower descriptor no longer serves reads once the file is upper.
  c.Put(&key[2], DevNull(true, false, /*from_lower=*/true));
  EXPECT_TRUE(c.Find(&key[2], false, /*in_upper=*/false));
  EXPECT_FALSE(c.Find(&key[2], false, /*in_upper=*/true));
}

TEST(FileCache, PutReplacesTheEntryOfAKey) {
  FileCache c(4);
  int old_fd = c.Put(&key[0], DevNull(true, false)).get();
  FileLease now = c.Put(&key[0], DevNull(true, true));
  EXPECT_EQ(c.size(), 1u);
  EXPECT_FALSE(IsOpen(old_fd));
  EXPECT_EQ(c.Find(&key[0], true, false).get(), now.get());
}

TEST(FileCache, TakeAndShrinkHandBackDescriptors) {
  FileCache c(8);
  for (int i = 0; i < 5; i++) c.Put(&key[i], DevNull(true, false));
  FileLease taken = c.Take(&key[4]);
  ASSERT_TRUE(taken);
  EXPECT_TRUE(IsOpen(taken.get())) << "Take leaves closing to the caller";
  EXPECT_FALSE(c.Take(&key[4]));
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(c.Shrink(1), 3u);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_TRUE(c.Find(&key[3], false, false)) << "the most recent stays";
}

// The host's mapped object-store files (OpenFile::pinned): ordinary
// traffic, however much, never evicts them; beyond their own capacity the
// least recently used pinned one goes; Shrink (descriptor pressure, a
// checkpoint) keeps them; Take (the node goes) and DropAll do not.
TEST(FileCache, PinnedEntriesOutliveOrdinaryTraffic) {
  FileCache c(2, 2);
  c.Put(&key[0], Pinned());
  c.Put(&key[1], Pinned());
  for (int round = 0; round < 3; ++round)
    for (int i = 2; i < 8; i++) c.Put(&key[i], DevNull(true, false));
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(c.pinned(), 2u);
  ASSERT_TRUE(c.Find(&key[0], false, false));
  ASSERT_TRUE(c.Find(&key[1], false, false));
  EXPECT_FALSE(c.Find(&key[2], false, false)) << "ordinary ones are LRU";

  EXPECT_EQ(c.Shrink(0), 2u);
  EXPECT_EQ(c.pinned(), 2u) << "Shrink keeps the pinned ones";

  c.Find(&key[0], false, false);  // key[1] is now the least recent
  c.Put(&key[2], Pinned());
  EXPECT_EQ(c.pinned(), 2u);
  EXPECT_TRUE(c.Find(&key[0], false, false));
  EXPECT_FALSE(c.Find(&key[1], false, false)) << "beyond its capacity";

  // Re-putting a pinned key as ordinary moves it between the classes.
  c.Put(&key[2], DevNull(true, false));
  EXPECT_EQ(c.pinned(), 1u);
  EXPECT_EQ(c.size(), 2u);

  FileLease taken = c.Take(&key[0]);
  ASSERT_TRUE(taken);
  EXPECT_EQ(c.pinned(), 0u);
  c.Put(&key[0], Pinned());
  EXPECT_EQ(c.DropAll(), 2u);
  EXPECT_EQ(c.size(), 0u);
}

// Without a pinned capacity nothing is pinned: the flag is ordinary.
TEST(FileCache, NoPinnedCapacityMeansOrdinaryEntries) {
  FileCache c(1);
  c.Put(&key[0], Pinned());
  c.Put(&key[1], DevNull(true, false));
  EXPECT_EQ(c.pinned(), 0u);
  EXPECT_FALSE(c.Find(&key[0], false, false));
}

}  // namespace
}  // namespace acqfs
