// Finding the sandbox a command's argument names (cli/sandbox.h,
// Sandbox::Find), on state directories made here, with nothing mounted: a name
// first, else the mountpoint sandboxes recorded, compared canonically; one
// sandbox that recorded it is found, several are refused by name. (Which of
// several is mounted there now is tested with real mounts in
// tests/integration/lifecycle_test.cc.)
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "cli/cli_util.h"
#include "cli/sandbox.h"
#include "harness/layer_tree.h"
#include "state/liveness.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

class FindSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = t_.root() + "/state";
    ASSERT_EQ(::mkdir(state_.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((t_.root() + "/w").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((t_.root() + "/v").c_str(), 0755), 0);
    // The canonical form of the tree's root (/tmp may be a symlink).
    auto real = RealPath(t_.root());
    ASSERT_TRUE(real.ok());
    root_ = *real;
  }
  // A sandbox `name` whose metadata records `mountpoint`.
  void Make(const std::string& name, const std::string& mountpoint) {
    SandboxPaths p(state_, name);
    ASSERT_EQ(::mkdir(p.dir.c_str(), 0700), 0);
    SandboxMeta m;
    m.name = name;
    m.lower = root_ + "/lower";
    m.mountpoint = mountpoint;
    m.xattr_namespace = "user";
    Status s = WriteMeta(p.meta, m);
    ASSERT_TRUE(s.ok()) << s.error().Message();
  }

  acqfs::test::TempTree t_;
  std::string state_, root_;
};

TEST_F(FindSandboxTest, TheOneSandboxThatRecordedTheMountpoint) {
  Make("a", root_ + "/w");
  Make("b", root_ + "/v");
  auto f = Sandbox::Find(state_, root_ + "/w");
  ASSERT_TRUE(f.ok()) << f.error().op;
  EXPECT_EQ(f->name(), "a");
  EXPECT_FALSE(f->by_name());
  EXPECT_FALSE(f->mounted_at());  // nothing is mounted
  // Spelled otherwise: a trailing slash, "." and "..", a symlink, relative.
  ASSERT_EQ(::symlink("w", (root_ + "/link").c_str()), 0);
  for (const std::string& spelling :
       {root_ + "/w/", root_ + "/w/.", root_ + "/v/../w", root_ + "/link",
        t_.root() + "/w"}) {
    auto g = Sandbox::Find(state_, spelling);
    ASSERT_TRUE(g.ok()) << spelling << ": " << g.error().op;
    EXPECT_EQ(g->name(), "a") << spelling;
  }
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(root_.c_str()), 0);
  auto rel = Sandbox::Find(state_, "./w");
  ASSERT_EQ(::chdir(cwd), 0);
  ASSERT_TRUE(rel.ok()) << rel.error().op;
  EXPECT_EQ(rel->name(), "a");
}

TEST_F(FindSandboxTest, ANameComesFirst) {
  Make("w", root_ + "/v");
  Make("other", root_ + "/w");
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(root_.c_str()), 0);
  auto f = Sandbox::Find(state_, "w");  // also the relative path ./w
  ASSERT_EQ(::chdir(cwd), 0);
  ASSERT_TRUE(f.ok()) << f.error().op;
  EXPECT_EQ(f->name(), "w");
  EXPECT_TRUE(f->by_name());
  EXPECT_EQ(f->meta().mountpoint, root_ + "/v");
}

TEST_F(FindSandboxTest, SeveralUnmountedSandboxesAreRefusedByName) {
  Make("zeta", root_ + "/w");
  Make("alpha", root_ + "/w");
  Make("mid", root_ + "/w");
  Make("elsewhere", root_ + "/v");
  auto f = Sandbox::Find(state_, root_ + "/w");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.err(), ENOTUNIQ);
  EXPECT_EQ(f.error().path, root_ + "/w");
  EXPECT_NE(f.error().op.find("alpha, mid and zeta"), std::string::npos)
      << f.error().op;
  EXPECT_NE(f.error().op.find("give the name"), std::string::npos)
      << f.error().op;
  EXPECT_EQ(f.error().op.find("elsewhere"), std::string::npos) << f.error().op;
  // By name each one is found.
  auto named = Sandbox::Find(state_, "mid");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->name(), "mid");
}

TEST_F(FindSandboxTest, NothingMatches) {
  Make("a", root_ + "/w");
  auto f = Sandbox::Find(state_, root_ + "/v");
  EXPECT_EQ(f.err(), ENOENT);
  EXPECT_EQ(Sandbox::Find(state_, "nosuch").err(), ENOENT);
  EXPECT_EQ(Sandbox::Find(state_ + "/missing", root_ + "/w").err(), ENOENT);
}

TEST_F(FindSandboxTest, RmFindsOnlyNames) {
  Make("a", root_ + "/w");
  EXPECT_TRUE(Sandbox::FindByName(state_, "a").ok());
  EXPECT_EQ(Sandbox::FindByName(state_, root_ + "/w").err(), ENOENT);
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(root_.c_str()), 0);
  auto rel = Sandbox::FindByName(state_, "w");  // a path, not a name
  ASSERT_EQ(::chdir(cwd), 0);
  EXPECT_EQ(rel.err(), ENOENT);
}

TEST_F(FindSandboxTest, UnreadableMetadataOfANameIsReported) {
  SandboxPaths p(state_, "broken");
  ASSERT_EQ(::mkdir(p.dir.c_str(), 0700), 0);
  acqfs::test::MakeFile(p.meta, "not json");
  auto f = Sandbox::Find(state_, "broken");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.err(), EINVAL);
  EXPECT_EQ(f.error().path, "broken");
  EXPECT_NE(f.error().op.find(p.meta), std::string::npos) << f.error().op;
}

TEST(MountpointPath, CanonicalWithoutLookingIntoTheLastComponent) {
  acqfs::test::TempTree t;
  auto real = RealPath(t.root());
  ASSERT_TRUE(real.ok());
  const std::string root = *real;
  ASSERT_EQ(::mkdir((root + "/d").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(root.c_str(), (root + "/abs").c_str()), 0);
  ASSERT_EQ(::symlink("abs/d", (root + "/chain").c_str()), 0);
  ASSERT_EQ(::symlink("loop", (root + "/loop").c_str()), 0);
  EXPECT_EQ(MountpointPath(root + "/d"), root + "/d");
  EXPECT_EQ(MountpointPath(root + "/d//"), root + "/d");
  EXPECT_EQ(MountpointPath(root + "/abs/d"), root + "/d");
  EXPECT_EQ(MountpointPath(root + "/chain"), root + "/d");
  EXPECT_EQ(MountpointPath(root + "/chain/.."), root);
  EXPECT_EQ(MountpointPath(root + "/missing"), root + "/missing");
  EXPECT_EQ(MountpointPath(root + "/loop"), root + "/loop");
  EXPECT_EQ(MountpointPath("/"), "/");
}

}  // namespace
}  // namespace acqfs::cli
