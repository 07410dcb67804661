// Tests of HostWatch (fs/host_watch.h): which host changes it reports, with
// which directory and name, in directories made or moved in after the
// start, and never below a skipped top-level name.
#include "fs/host_watch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::MakeDir;
using acqfs::test::MakeFile;

class HostWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeFile(t_.L("a.txt"), "a\n");
    MakeFile(t_.L("d/f"), "f\n");
    MakeFile(t_.L(".git/HEAD"), "ref: refs/heads/main\n");
    root_.reset(::open(t_.lower().c_str(), O_RDONLY | O_DIRECTORY));
    ASSERT_TRUE(root_.is_valid());
    auto w = HostWatch::Start(root_.get(), t_.lower(),
                              [this](const HostChange& c) {
                                std::lock_guard<std::mutex> l(mu_);
                                seen_.push_back(c);
                                cv_.notify_all();
                              },
                              {".git"});
    ASSERT_TRUE(w) << w.error().Message();
    watch_ = std::move(*w);
    for (int i = 0; i < 500 && !watch_->walked(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_TRUE(watch_->walked());
  }

  // Waits (up to 5 s) for a change of `kind` at `dir`/`name`.
  bool Saw(HostChange::Kind kind, const std::string& dir,
           const std::string& name) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(5), [&] {
      for (const auto& c : seen_)
        if (c.kind == kind && c.dir == dir && c.name == name) return true;
      return false;
    });
  }
  bool SawAnythingIn(const std::string& dir) {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& c : seen_)
      if (c.dir == dir || c.dir.rfind(dir + "/", 0) == 0) return true;
    return false;
  }

  acqfs::test::TempTree t_;
  UniqueFd root_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<HostChange> seen_;
  std::unique_ptr<HostWatch> watch_;
};

TEST_F(HostWatchTest, ReportsEachKindOfChangeWhereItHappens) {
  EXPECT_EQ(watch_->watched(), 2u);  // the root and d, not .git
  // A file replaced by a rename over it (sed -i, an editor, git).
  MakeFile(t_.L("a.txt.new"), "a, again\n");
  ASSERT_EQ(::rename(t_.L("a.txt.new").c_str(), t_.L("a.txt").c_str()), 0);
  EXPECT_TRUE(Saw(HostChange::kEntry, "", "a.txt"));
  // Written in place, and chmod-ed.
  MakeFile(t_.L("d/f"), "f, longer now\n");
  EXPECT_TRUE(Saw(HostChange::kContent, "d", "f"));
  ASSERT_EQ(::chmod(t_.L("d/f").c_str(), 0600), 0);
  EXPECT_TRUE(Saw(HostChange::kAttrs, "d", "f"));
  // Removed.
  ASSERT_EQ(::unlink(t_.L("d/f").c_str()), 0);
  EXPECT_TRUE(Saw(HostChange::kEntry, "d", "f"));
}

TEST_F(HostWatchTest, DirectoriesMadeOrMovedInAreWatchedMovedAwayAreNot) {
  MakeDir(t_.L("n"));
  EXPECT_TRUE(Saw(HostChange::kEntry, "", "n"));
  for (int i = 0; i < 500 && watch_->watched() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  MakeFile(t_.L("n/inside"), "x\n");
  EXPECT_TRUE(Saw(HostChange::kEntry, "n", "inside"));
  // d moved to m: changes below it are reported under its new name.
  ASSERT_EQ(::rename(t_.L("d").c_str(), t_.L("m").c_str()), 0);
  EXPECT_TRUE(Saw(HostChange::kEntry, "", "d"));
  EXPECT_TRUE(Saw(HostChange::kEntry, "", "m"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  MakeFile(t_.L("m/g"), "g\n");
  EXPECT_TRUE(Saw(HostChange::kEntry, "m", "g"));
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& c : seen_) EXPECT_NE(c.dir, "d") << c.name;
  }
}

TEST_F(HostWatchTest, NothingBelowASkippedNameIsWatched) {
  MakeFile(t_.L(".git/index.lock"), "x");
  ASSERT_EQ(
      ::rename(t_.L(".git/index.lock").c_str(), t_.L(".git/index").c_str()), 0);
  MakeFile(t_.L("after"), "x\n");  // a change after them, to wait for
  EXPECT_TRUE(Saw(HostChange::kEntry, "", "after"));
  EXPECT_FALSE(SawAnythingIn(".git"));
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& c : seen_) EXPECT_NE(c.name, ".git");
}

}  // namespace
}  // namespace acqfs
