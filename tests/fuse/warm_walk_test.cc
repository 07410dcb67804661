// The warm walk's own parts, without a mount: the walk over a directory
// tree (what it lists, what it skips, its bounds) and the mountinfo check
// its supervisor makes. The walk through a real mount, unmounts during it
// and a daemon killed during it are in tests/integration/warm_walk_test.cc.
#include "fuse/warm_walk.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fuse.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

namespace acqfs {
namespace {

class WarmWalkTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/acqfs-warm-XXXXXX";
    ASSERT_NE(::mkdtemp(t), nullptr);
    dir_ = t;
  }
  void TearDown() override {
    if (root_ >= 0) ::close(root_);
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void Dir(const std::string& rel) {
    ASSERT_EQ(::mkdir((dir_ + "/" + rel).c_str(), 0755), 0) << rel;
  }
  void File(const std::string& rel) {
    int fd = ::open((dir_ + "/" + rel).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << rel;
    ::close(fd);
  }
  int Root() {
    root_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
    return root_;
  }
  std::string dir_;
  int root_ = -1;
};

TEST_F(WarmWalkTree, ListsEveryDirectoryOnceAndCountsEveryEntry) {
  Dir("a");
  Dir("a/b");
  Dir("a/b/c");
  Dir("z");
  for (int i = 0; i < 300; i++) File("z/f" + std::to_string(i));
  File("a/b/c/deep");
  File("top");
  WarmWalkResult r = warm_walk_internal::Walk(Root(), 1000000, 60);
  EXPECT_EQ(r.ended, "done");
  EXPECT_EQ(r.dirs, 5u);               // ., a, a/b, a/b/c, z
  EXPECT_EQ(r.entries, 3u + 300 + 3);  // a z top; z's; b c deep
}

TEST_F(WarmWalkTree, SkipsGitDirectoriesAndDoesNotFollowSymlinks) {
  Dir(".git");
  Dir(".git/objects");
  for (int i = 0; i < 50; i++) File(".git/objects/o" + std::to_string(i));
  Dir("sub");
  Dir("sub/.git");
  File("sub/.git/HEAD");
  Dir("real");
  File("real/x");
  ASSERT_EQ(::symlink("real", (dir_ + "/link").c_str()), 0);
  ASSERT_EQ(::symlink("/", (dir_ + "/root-link").c_str()), 0);
  WarmWalkResult r = warm_walk_internal::Walk(Root(), 1000000, 60);
  EXPECT_EQ(r.ended, "done");
  // ., sub, real: neither .git nor what a symlink leads to.
  EXPECT_EQ(r.dirs, 3u);
  // .git sub real link root-link; .git (in sub); x.
  EXPECT_EQ(r.entries, 7u);
}

TEST_F(WarmWalkTree, StopsAtItsEntryBound) {
  for (int d = 0; d < 20; d++) {
    Dir("d" + std::to_string(d));
    for (int i = 0; i < 10; i++)
      File("d" + std::to_string(d) + "/f" + std::to_string(i));
  }
  WarmWalkResult r = warm_walk_internal::Walk(Root(), 50, 60);
  EXPECT_EQ(r.ended, "entry limit");
  // It checks the bound between directories: at most one directory over.
  EXPECT_GE(r.entries, 50u);
  EXPECT_LE(r.entries, 50u + 20);
  EXPECT_LT(r.dirs, 21u);
}

TEST_F(WarmWalkTree, ThreadsSideBySideListEveryDirectoryExactlyOnce) {
  // A tree wide and deep enough that the threads take turns: every count
  // is the single-threaded walk's.
  int files = 0;
  for (int a = 0; a < 12; a++) {
    const std::string da = "a" + std::to_string(a);
    Dir(da);
    for (int b = 0; b < 6; b++) {
      const std::string db = da + "/b" + std::to_string(b);
      Dir(db);
      for (int i = 0; i < a % 4; i++, files++)
        File(db + "/f" + std::to_string(i));
    }
  }
  const uint64_t dirs = 1 + 12 + 12 * 6, entries = 12 + 12 * 6 + files;
  for (unsigned threads : {1u, 2u, 4u, 16u, 64u}) {
    WarmWalkResult r = warm_walk_internal::Walk(Root(), 1000000, 60, threads);
    EXPECT_EQ(r.ended, "done") << threads;
    EXPECT_EQ(r.threads, threads);
    EXPECT_EQ(r.dirs, dirs) << threads;
    EXPECT_EQ(r.entries, entries) << threads;
  }
}

// While the agent writes, the walk starts no listing; once the writes
// pause it goes on, and it lists everything either way.
TEST_F(WarmWalkTree, GivesWayToAWritingAgentAndGoesOnWhenItStops) {
  for (int d = 0; d < 100; d++) {
    Dir("d" + std::to_string(d));
    for (int i = 0; i < 5; i++)
      File("d" + std::to_string(d) + "/f" + std::to_string(i));
  }
  const uint64_t entries = 100 + 100 * 5;
  std::atomic<int64_t> last_write{warm_walk_internal::MonotonicMs()};
  std::atomic<bool> writing{true};
  std::atomic<int> listed_while_writing{0};
  // Each listing takes 2 ms, as through a busy mount.
  auto slow = [&] {
    if (writing.load()) listed_while_writing++;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  std::thread agent([&] {
    for (int i = 0; i < 60; i++) {  // 300 ms of writes
      last_write.store(warm_walk_internal::MonotonicMs());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    writing.store(false);
  });
  WarmWalkResult r =
      warm_walk_internal::Walk(Root(), 1000000, 60, 16, &last_write, slow);
  agent.join();
  EXPECT_EQ(listed_while_writing.load(), 0);
  EXPECT_EQ(r.ended, "done");
  EXPECT_EQ(r.entries, entries);
  EXPECT_EQ(r.threads, 16u);
  EXPECT_GE(r.seconds, 0.3);
  EXPECT_GT(r.peak, 1u);  // once the writes paused, side by side again
  EXPECT_LE(r.peak, 16u);

  // Writes that ended longer ago than the window hold nobody back.
  last_write.store(warm_walk_internal::MonotonicMs() - kWriterWindowMs - 1);
  r = warm_walk_internal::Walk(Root(), 1000000, 60, 16, &last_write, slow);
  EXPECT_EQ(r.ended, "done");
  EXPECT_EQ(r.entries, entries);
  EXPECT_LT(r.seconds, 10.0);
}

TEST(WarmWalkWrites, EveryRequestThatChangesSomethingAndNoOtherCounts) {
  for (uint32_t op : {FUSE_SETATTR, FUSE_SYMLINK, FUSE_MKNOD, FUSE_MKDIR,
                      FUSE_UNLINK, FUSE_RMDIR, FUSE_RENAME, FUSE_RENAME2,
                      FUSE_LINK, FUSE_WRITE, FUSE_SETXATTR, FUSE_REMOVEXATTR,
                      FUSE_CREATE, FUSE_FALLOCATE, FUSE_COPY_FILE_RANGE})
    EXPECT_TRUE(ChangesTheFileSystem(op)) << op;
  for (uint32_t op :
       {FUSE_LOOKUP,   FUSE_GETATTR,      FUSE_READLINK,   FUSE_OPEN,
        FUSE_READ,     FUSE_STATFS,       FUSE_RELEASE,    FUSE_FSYNC,
        FUSE_GETXATTR, FUSE_LISTXATTR,    FUSE_FLUSH,      FUSE_OPENDIR,
        FUSE_READDIR,  FUSE_READDIRPLUS,  FUSE_RELEASEDIR, FUSE_ACCESS,
        FUSE_FORGET,   FUSE_BATCH_FORGET, FUSE_INTERRUPT,  FUSE_INIT,
        FUSE_LSEEK,    FUSE_IOCTL,        FUSE_POLL})
    EXPECT_FALSE(ChangesTheFileSystem(op)) << op;
}

TEST_F(WarmWalkTree, ThreadsStopAtTheEntryBoundEachAtMostOneDirectoryOver) {
  for (int d = 0; d < 40; d++) {
    Dir("d" + std::to_string(d));
    for (int i = 0; i < 10; i++)
      File("d" + std::to_string(d) + "/f" + std::to_string(i));
  }
  WarmWalkResult r = warm_walk_internal::Walk(Root(), 50, 60, 4);
  EXPECT_EQ(r.ended, "entry limit");
  EXPECT_GE(r.entries, 50u);
  EXPECT_LE(r.entries, 50u + 4 * 10);
  EXPECT_LT(r.dirs, 41u);
}

TEST_F(WarmWalkTree, StopsAtItsTimeBound) {
  Dir("a");
  for (unsigned threads : {1u, 3u}) {
    WarmWalkResult r = warm_walk_internal::Walk(Root(), 1000000, -1, threads);
    EXPECT_EQ(r.ended, "time limit");
    EXPECT_EQ(r.dirs, 0u);
  }
}

TEST_F(WarmWalkTree, ADirectoryRemovedBeforeItsTurnIsPassedOver) {
  // Not a race: a root that is not a directory lists nothing, and a
  // descriptor of a removed directory lists nothing (ENOENT).
  Dir("gone");
  int fd = ::open((dir_ + "/gone").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::rmdir((dir_ + "/gone").c_str()), 0);
  WarmWalkResult r = warm_walk_internal::Walk(fd, 1000000, 60);
  ::close(fd);
  EXPECT_EQ(r.ended, "done");
  EXPECT_EQ(r.entries, 0u);
}

TEST(WarmWalkMountinfo, FindsTheDeviceInItsThirdField) {
  const std::string info =
      "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "97 22 0:45 / /tmp/m rw,nosuid,nodev shared:50 - fuse.acqfs acqfs "
      "rw,user_id=0,group_id=0\n";
  EXPECT_TRUE(warm_walk_internal::Mounted(info, makedev(0, 45)));
  EXPECT_TRUE(warm_walk_internal::Mounted(info, makedev(8, 1)));
  EXPECT_FALSE(warm_walk_internal::Mounted(info, makedev(0, 4)));
  EXPECT_FALSE(warm_walk_internal::Mounted(info, makedev(45, 0)));
  EXPECT_FALSE(warm_walk_internal::Mounted("", makedev(0, 45)));
  EXPECT_FALSE(warm_walk_internal::Mounted("97 22\n", makedev(0, 45)));
}

}  // namespace
}  // namespace acqfs
