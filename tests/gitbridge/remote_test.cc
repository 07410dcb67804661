// The sandbox-<name> remote on the host (gitbridge/remote): what it writes
// to .git/config, and that registering and removing remotes of one
// checkout from many processes or threads at once all succeed, wait for a
// config.lock that git holds, and never leave a lock file behind.
#include "gitbridge/remote.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "harness/git_env.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::Git;
using ::acqfs::test::MakeFile;
using ::acqfs::test::ReadFile;
using ::acqfs::test::RunCommand;
using ::acqfs::test::Sh;
using ::acqfs::test::ShellQuote;
using ::acqfs::test::TempDir;
using Clock = std::chrono::steady_clock;

class Remote : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    host_ = root_ + "/host";
    Sh("git init -q -b main " + ShellQuote(host_));
    MakeFile(host_ + "/a.txt", "a\n");
    Git(host_, "add a.txt");
    Git(host_, "commit -q -m base");
    config_ = host_ + "/.git/config";
    original_ = ReadFile(config_);
  }

  std::string Bridge(const std::string& name) const {
    return root_ + "/state/" + name + "/bridge.git";
  }
  // `git config --get-all KEY` in the host ("" when unset).
  std::string GetAll(const std::string& key) {
    return RunCommand({"git", "-C", host_, "config", "--get-all", key}, 60).out;
  }

  TempDir tmp_;
  std::string root_, host_, config_, original_;
};

TEST_F(Remote, RegisterWritesTheRemoteAndRemovalRestoresTheConfig) {
  ASSERT_TRUE(RegisterRemote(host_, "a", Bridge("a")));
  EXPECT_EQ(GetAll("remote.sandbox-a.url"), Bridge("a") + "\n");
  std::string specs;
  for (const auto& s : RemoteFetchSpecs("a")) specs += s + "\n";
  EXPECT_EQ(GetAll("remote.sandbox-a.fetch"), specs);
  // Registering again changes nothing.
  const std::string once = ReadFile(config_);
  ASSERT_TRUE(RegisterRemote(host_, "a", Bridge("a")));
  EXPECT_EQ(ReadFile(config_), once);
  auto left = UnregisterRemote(host_, "a", Bridge("a"));
  ASSERT_TRUE(left) << left.error().Message();
  EXPECT_EQ(*left, "");
  EXPECT_EQ(ReadFile(config_), original_);
  EXPECT_FALSE(fs::exists(config_ + ".lock"));
}

TEST_F(Remote, ARemoteMissingRefspecsIsCompleted) {
  Git(host_, "config remote.sandbox-a.url " + ShellQuote(Bridge("a")));
  Git(host_, "config --add remote.sandbox-a.fetch " +
                 ShellQuote(RemoteFetchSpecs("a")[0]));
  ASSERT_TRUE(RegisterRemote(host_, "a", Bridge("a")));
  std::string specs;
  for (const auto& s : RemoteFetchSpecs("a")) specs += s + "\n";
  EXPECT_EQ(GetAll("remote.sandbox-a.fetch"), specs);
}

TEST_F(Remote, RemovalTakesTheWholeSectionAndUpstreamsOfBranches) {
  ASSERT_TRUE(RegisterRemote(host_, "a", Bridge("a")));
  Git(host_, "config remote.sandbox-a.tagopt --no-tags");
  Git(host_, "config branch.main.remote sandbox-a");
  Git(host_, "config branch.main.merge refs/heads/main");
  Git(host_, "update-ref refs/remotes/sandbox-a/main HEAD");
  Git(host_, "update-ref refs/sandboxes/a/heads/main HEAD");
  auto left = UnregisterRemote(host_, "a", Bridge("a"));
  ASSERT_TRUE(left) << left.error().Message();
  EXPECT_EQ(GetAll("remote.sandbox-a.tagopt"), "");
  EXPECT_EQ(GetAll("branch.main.remote"), "");
  EXPECT_EQ(GetAll("branch.main.merge"), "");
  EXPECT_EQ(ReadFile(config_).find("sandbox-a"), std::string::npos)
      << ReadFile(config_);
  EXPECT_EQ(Git(host_, "for-each-ref '--format=%(refname)' refs/remotes"), "");
  // The copies that survive the remote stay.
  EXPECT_EQ(Git(host_, "for-each-ref '--format=%(refname)' refs/sandboxes"),
            "refs/sandboxes/a/heads/main");
}

TEST_F(Remote, RemovalLeavesSomeoneElsesRemoteOfThatName) {
  ASSERT_TRUE(RegisterRemote(host_, "a", Bridge("a")));
  const std::string other = root_ + "/other/a/bridge.git";
  auto left = UnregisterRemote(host_, "a", other);
  ASSERT_TRUE(left) << left.error().Message();
  EXPECT_EQ(*left, Bridge("a"));
  EXPECT_EQ(GetAll("remote.sandbox-a.url"), Bridge("a") + "\n");
  Status again = RegisterRemote(host_, "a", other);
  EXPECT_FALSE(again);
  EXPECT_EQ(again.err(), EEXIST);
}

// Many sandboxes of one checkout start and end at once: every registration
// and removal succeeds, none is lost, and the config ends as it began.
// Loops for a few seconds so that a fixed race stays fixed.
TEST_F(Remote, ParallelRegistrationsAndRemovalsAllSucceed) {
  constexpr int kThreads = 16;
  const auto until = Clock::now() + std::chrono::seconds(4);
  std::atomic<int> rounds{0};
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; i++) {
    threads.emplace_back([&, i] {
      const std::string name = "p" + std::to_string(i);
      while (Clock::now() < until && failures[i].empty()) {
        if (Status s = RegisterRemote(host_, name, Bridge(name)); !s) {
          failures[i] = "register: " + s.error().Message();
          break;
        }
        auto left = UnregisterRemote(host_, name, Bridge(name));
        if (!left) {
          failures[i] = "remove: " + left.error().Message();
          break;
        }
        if (!left->empty()) failures[i] = "remove left " + *left;
        rounds++;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; i++)
    EXPECT_EQ(failures[i], "") << "thread " << i;
  EXPECT_GE(rounds.load(), kThreads);
  EXPECT_EQ(ReadFile(config_), original_);
  EXPECT_FALSE(fs::exists(config_ + ".lock"));
}

// All registered at once, then all removed at once: each one's remote is
// complete in between.
TEST_F(Remote, ParallelRegistrationsAreAllComplete) {
  constexpr int kThreads = 16;
  std::vector<std::string> failures(kThreads);
  auto run = [&](bool add) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; i++) {
      threads.emplace_back([&, i, add] {
        const std::string name = "q" + std::to_string(i);
        if (add) {
          if (Status s = RegisterRemote(host_, name, Bridge(name)); !s)
            failures[i] = s.error().Message();
        } else if (auto left = UnregisterRemote(host_, name, Bridge(name));
                   !left) {
          failures[i] = left.error().Message();
        }
      });
    }
    for (auto& t : threads) t.join();
  };
  run(true);
  for (int i = 0; i < kThreads; i++) {
    EXPECT_EQ(failures[i], "") << i;
    const std::string name = "q" + std::to_string(i);
    EXPECT_EQ(GetAll("remote.sandbox-" + name + ".url"), Bridge(name) + "\n");
    std::string specs;
    for (const auto& s : RemoteFetchSpecs(name)) specs += s + "\n";
    EXPECT_EQ(GetAll("remote.sandbox-" + name + ".fetch"), specs);
  }
  run(false);
  for (int i = 0; i < kThreads; i++) EXPECT_EQ(failures[i], "") << i;
  EXPECT_EQ(ReadFile(config_), original_);
}

// A git command holding .git/config.lock for a moment: acqfs waits for it,
// as git waits for its own locks, instead of failing.
TEST_F(Remote, WaitsForAConfigLockGitHolds) {
  MakeFile(config_ + ".lock", "");
  std::thread git([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    fs::remove(config_ + ".lock");
  });
  const auto start = Clock::now();
  Status s = RegisterRemote(host_, "w", Bridge("w"));
  git.join();
  ASSERT_TRUE(s) << s.error().Message();
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(350));
  EXPECT_EQ(GetAll("remote.sandbox-w.url"), Bridge("w") + "\n");
  MakeFile(config_ + ".lock", "");
  std::thread git2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    fs::remove(config_ + ".lock");
  });
  auto left = UnregisterRemote(host_, "w", Bridge("w"));
  git2.join();
  ASSERT_TRUE(left) << left.error().Message();
  EXPECT_EQ(ReadFile(config_), original_);
}

// A config.lock that stays (a git command that crashed): a bounded wait,
// then an error that names the lock file and what to do; the lock file is
// not acqfs's and stays, and the config is unchanged.
TEST_F(Remote, AConfigLockThatStaysIsReportedAfterABoundedWait) {
  MakeFile(config_ + ".lock", "");
  const auto start = Clock::now();
  Status s = RegisterRemote(host_, "s", Bridge("s"));
  const auto took = Clock::now() - start;
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().Message().find("config.lock"), std::string::npos)
      << s.error().Message();
  EXPECT_NE(s.error().Message().find("remove it if no git command"),
            std::string::npos)
      << s.error().Message();
  EXPECT_LT(took, std::chrono::seconds(30));
  EXPECT_TRUE(fs::exists(config_ + ".lock"));
  EXPECT_EQ(ReadFile(config_), original_);
}

// A keep ref's lock file an acqfs killed mid-write left (issue 32, the
// kill points of fork and rm): only acqfs writes refs/acqfs-*, always under
// its host lock, so one older than a write takes is removed by the next
// acqfs command, whose ref write then works (it failed until a person
// deleted the file). A fresh one (a write in progress) stays.
TEST_F(Remote, AStaleLockOfAnAcqfsRefIsRemovedAFreshOneStays) {
  const std::string head =
      Sh("git -C " + ShellQuote(host_) + " rev-parse HEAD");
  const std::string id = head.substr(0, 40);
  const std::string lock = host_ + "/.git/refs/acqfs-base/k.lock";
  fs::create_directories(host_ + "/.git/refs/acqfs-base");
  MakeFile(lock, "");
  Status fresh = KeepBase(host_, "k", id);
  EXPECT_FALSE(fresh) << "a write in progress holds the ref";
  EXPECT_TRUE(fs::exists(lock));
  // As a kill a minute ago leaves it.
  ASSERT_EQ(Sh("touch -d '-60 seconds' " + ShellQuote(lock) + " && echo ok"),
            "ok\n");
  Status stale = KeepBase(host_, "k", id);
  ASSERT_TRUE(stale) << stale.error().Message();
  EXPECT_FALSE(fs::exists(lock));
  EXPECT_EQ(
      Sh("git -C " + ShellQuote(host_) + " rev-parse " + BaseRefName("k")),
      head);
  // git's own config.lock is never taken for acqfs's.
  MakeFile(config_ + ".lock", "");
  ASSERT_EQ(Sh("touch -d '-60 seconds' " + ShellQuote(config_ + ".lock") +
               " && echo ok"),
            "ok\n");
  EXPECT_FALSE(RegisterRemote(host_, "k", Bridge("k")));
  EXPECT_TRUE(fs::exists(config_ + ".lock"));
}

}  // namespace
}  // namespace acqfs::gitbridge
