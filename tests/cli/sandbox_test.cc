// The Sandbox type (cli/sandbox.h) without a mount: its paths, its
// metadata saved and loaded, its lock (taken, refused while held, seen by
// LockHeld and Probe), its layers opened with its policy, its export
// settings, and the clean-up of a daemon.pid left behind. (Finding a
// sandbox by name or mountpoint: find_sandbox_test.cc; with real mounts:
// tests/integration/lifecycle_test.cc.)
#include "cli/sandbox.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "harness/layer_tree.h"
#include "state/liveness.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto real = RealPath(t_.root());
    ASSERT_TRUE(real.ok());
    root_ = *real;
    state_ = root_ + "/state";
    acqfs::test::MakeDir(state_, 0700);  // lower/ is the TempTree's
  }
  // A sandbox folder with its upper layer and metadata.
  Sandbox Make(const std::string& name) {
    Sandbox s(state_, name);
    acqfs::test::MakeDir(s.paths().dir, 0700);
    acqfs::test::MakeDir(s.paths().upper);
    acqfs::test::MakeDir(s.paths().work);
    s.meta().name = name;
    s.meta().lower = root_ + "/lower";
    s.meta().mountpoint = root_ + "/mnt";
    s.meta().xattr_namespace = "user";
    Status saved = s.Save();
    EXPECT_TRUE(saved.ok()) << saved.error().Message();
    return s;
  }

  acqfs::test::TempTree t_;
  std::string root_, state_;
};

TEST_F(SandboxTest, PathsOfANameThatDoesNotExistYet) {
  Sandbox s(state_, "box");
  EXPECT_EQ(s.name(), "box");
  EXPECT_EQ(s.state_dir(), state_);
  EXPECT_EQ(s.paths().dir, state_ + "/box");
  EXPECT_EQ(s.paths().upper, state_ + "/box/upper");
  EXPECT_EQ(s.paths().work, state_ + "/box/work");
  EXPECT_EQ(s.paths().meta, state_ + "/box/meta.json");
  EXPECT_EQ(s.paths().lock, state_ + "/box/lock");
  EXPECT_EQ(s.paths().bridge, state_ + "/box/bridge.git");
  EXPECT_FALSE(s.HasFolder());
  EXPECT_FALSE(s.HasMeta());
  Status loaded = s.Load();
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.err(), ENOENT);
  EXPECT_EQ(loaded.error().path, s.paths().meta);
  EXPECT_EQ(Sandbox::Find(state_, "box").err(), ENOENT);
}

TEST_F(SandboxTest, MetadataIsSavedAndFoundAgain) {
  Sandbox s = Make("box");
  s.meta().last_export = 1234;
  s.meta().policy.hide = {"*.pem"};
  ASSERT_TRUE(s.Save().ok());
  EXPECT_TRUE(s.HasFolder());
  EXPECT_TRUE(s.HasMeta());
  struct stat st;
  ASSERT_EQ(::stat(s.paths().meta.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto found = Sandbox::Find(state_, "box");
  ASSERT_TRUE(found.ok()) << found.error().op;
  EXPECT_TRUE(found->by_name());
  EXPECT_EQ(found->meta().lower, root_ + "/lower");
  EXPECT_EQ(found->meta().last_export, 1234);
  EXPECT_EQ(found->meta().policy.hide, std::vector<std::string>{"*.pem"});
  auto by_name = Sandbox::FindByName(state_, "box");
  ASSERT_TRUE(by_name.ok());
  EXPECT_EQ(by_name->paths().upper, s.paths().upper);
}

// The sandbox's folder is its owner's, and root reads it too (issue 32):
// a meta.json that is a symlink (to a directory it aborted acqfs with an
// uncaught std::ios_failure; to a file of root's it was read), or that
// holds a field of the wrong type (nlohmann threw), is an error naming it,
// never a crash; so is a lock file that is a symlink.
TEST_F(SandboxTest, HostileMetadataAndLockAreErrorsNotCrashes) {
  Sandbox s = Make("box");
  const std::string meta = s.paths().meta;
  const std::string kept = root_ + "/meta.kept";
  ASSERT_EQ(::rename(meta.c_str(), kept.c_str()), 0);
  for (const std::string& target : {root_ + "/lower", kept}) {
    ASSERT_EQ(::symlink(target.c_str(), meta.c_str()), 0);
    auto r = ReadMeta(meta);
    ASSERT_FALSE(r.ok()) << target;
    EXPECT_EQ(r.error().path, meta);
    ASSERT_EQ(::unlink(meta.c_str()), 0);
  }
  for (const char* bad : {R"({"name": 5})", R"({"lower": ["x"]})",
                          R"({"base": {"index_id": 7}})", "[1, 2]"}) {
    acqfs::test::MakeFile(meta, bad);
    auto r = ReadMeta(meta);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.err(), EINVAL) << bad;
    EXPECT_EQ(r.error().path, meta) << bad;
  }
  ASSERT_EQ(::symlink((root_ + "/elsewhere").c_str(), s.paths().lock.c_str()),
            0);
  EXPECT_FALSE(s.Lock(/*create=*/true).ok());
  struct stat st;
  EXPECT_NE(::lstat((root_ + "/elsewhere").c_str(), &st), 0)
      << "the lock's symlink was followed";
}

TEST_F(SandboxTest, TheLockIsTakenOnceAndSeenByLockHeldAndProbe) {
  Sandbox s = Make("box");
  auto missing = s.Lock(/*create=*/false);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.err(), ENOENT);
  EXPECT_EQ(missing.error().op, "open");
  EXPECT_EQ(missing.error().path, s.paths().lock);
  auto held = s.LockHeld();
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(*held);
  {
    auto lock = s.Lock(/*create=*/true);
    ASSERT_TRUE(lock.ok()) << lock.error().Message();
    auto again = s.Lock(/*create=*/false);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.err(), EWOULDBLOCK);
    EXPECT_EQ(again.error().path, s.paths().lock);
    held = s.LockHeld();
    ASSERT_TRUE(held.ok());
    EXPECT_TRUE(*held);
    auto live = s.Probe();
    ASSERT_TRUE(live.ok());
    EXPECT_TRUE(live->daemon_alive);
    EXPECT_EQ(live->state, MountState::kNotMounted);  // nothing mounted
    EXPECT_FALSE(live->mount);
  }
  held = s.LockHeld();
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(*held);  // released with its descriptor
  auto live = s.Probe();
  ASSERT_TRUE(live.ok());
  EXPECT_FALSE(live->daemon_alive);
  EXPECT_TRUE(s.Lock(/*create=*/false).ok());
}

TEST_F(SandboxTest, LayersAndExportSettingsCarryItsPaths) {
  Sandbox s = Make("box");
  acqfs::test::MakeFile(root_ + "/lower/a.pem", "secret");
  acqfs::test::MakeFile(root_ + "/lower/b.txt", "text");
  s.meta().policy.hide = {"*.pem"};
  auto layers = s.OpenLayers();
  ASSERT_TRUE(layers.ok()) << layers.error().Message();
  ASSERT_TRUE(layers->policy);
  EXPECT_TRUE(layers->HidesLower("a.pem", false));
  EXPECT_FALSE(layers->HidesLower("b.txt", false));
  auto built = s.ExportConfig();
  ASSERT_TRUE(built.ok()) << built.error().Message();
  const gitbridge::ExportConfig& c = *built;
  EXPECT_EQ(c.sandbox, "box");
  EXPECT_EQ(c.lower, root_ + "/lower");
  EXPECT_EQ(c.upper, s.paths().upper);
  EXPECT_EQ(c.bridge, s.paths().bridge);
  EXPECT_EQ(c.xattr_namespace, XattrNamespace::kUser);
  ASSERT_TRUE(c.policy);
  EXPECT_FALSE(s.IsGit());  // the lower is no checkout
  // A policy that no longer parses is an error, not a silent "none".
  s.meta().policy.hide = {"["};
  s.meta().policy.read_only = {"a/[b"};
  EXPECT_FALSE(s.OpenLayers().ok());
  auto refused = s.ExportConfig();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().path, s.paths().meta);
}

TEST_F(SandboxTest, CleanUpStaleRemovesTheDaemonRecordLeftBehind) {
  Sandbox s = Make("box");
  acqfs::test::MakeFile(s.paths().pid, "999999\n");
  EXPECT_EQ(s.CleanUpStale("mount"), 0);
  EXPECT_FALSE(acqfs::test::Exists(s.paths().pid));
  EXPECT_EQ(s.CleanUpStale("mount"), 0);  // nothing left is no error
}

}  // namespace
}  // namespace acqfs::cli
