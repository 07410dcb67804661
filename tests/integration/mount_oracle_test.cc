// Whole-system checks: the host's lower tree is never modified, kernel
// overlayfs mounting the same upper+work shows exactly what acqfs showed,
// and the mount.fuse.acqfs helper mounts overlay-style options.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

using HostLayer = MountTest;
using KernelOracle = MountTest;

// Builds and commits inside the mount: many small writes, renames over
// .git/index, lock files, object directories.
::testing::AssertionResult GitAndBuildWorkload(const std::string& root,
                                               const std::string& home) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"status", "--porcelain"},
           {"add", "-A"},
           {"commit", "-q", "-m", "in mount"},
           {"checkout", "-q", "-b", "oracle"}}) {
    CommandResult r = RunGit(root, args, home);
    if (!r.ok()) return ::testing::AssertionFailure() << r.Describe();
  }
  CommandResult make = RunCommand({"make", "-C", root + "/hello"}, 120);
  if (!make.ok()) return ::testing::AssertionFailure() << make.Describe();
  return ::testing::AssertionSuccess();
}

// Unmounts the sandbox, mounts kernel overlayfs on the same layers and
// compares its view with `fuse_view`.
void ExpectKernelAgrees(Sandbox& sandbox, TempDir& tmp,
                        const TreeSnapshot& fuse_view,
                        const SnapshotOptions& options) {
  ASSERT_TRUE(fuse_view.errors.empty()) << DiffSnapshots(fuse_view, fuse_view);
  ASSERT_TRUE(sandbox.Unmount());
  const std::string target = tmp.MakeDir("kernel-view");
  MountGuard guard(target);
  CommandResult r = MountKernelOverlay(sandbox.lower(), sandbox.upper(),
                                       sandbox.work(), target);
  ASSERT_TRUE(r.ok()) << "kernel overlayfs refused acqfs's layers: "
                      << r.Describe();
  TreeSnapshot kernel_view = Snapshot(target, options);
  kernel_view.root = "kernel overlayfs " + target;
  EXPECT_TRUE(SnapshotsEqual(fuse_view, kernel_view, 40));
}

TEST_F(HostLayer, LowerTreeIsUntouchedByAWorkload) {
  const SnapshotOptions options = SnapshotOptions::Everything();  // no atime
  const TreeSnapshot before = Snapshot(lower(), options);
  ASSERT_TRUE(before.errors.empty()) << DiffSnapshots(before, before);
  ASSERT_TRUE(GitAndBuildWorkload(sandbox().mountpoint(), home()));
  ASSERT_TRUE(RunMixedWorkload(sandbox().mountpoint()));
  EXPECT_TRUE(SnapshotsEqual(before, Snapshot(lower(), options)))
      << "the lower changed while mounted";
  ASSERT_TRUE(sandbox().Unmount());
  EXPECT_TRUE(SnapshotsEqual(before, Snapshot(lower(), options)))
      << "the lower changed after unmounting";
}

TEST_F(KernelOracle, MixedWorkloadMatchesKernelOverlayfs) {
  ASSERT_TRUE(RunMixedWorkload(sandbox().mountpoint()));
  const SnapshotOptions options = SnapshotOptions::MergedView();
  TreeSnapshot fuse_view = Snapshot(sandbox().mountpoint(), options);
  fuse_view.root = "acqfs " + sandbox().mountpoint();
  ExpectKernelAgrees(sandbox(), tmp(), fuse_view, options);
  // The upper layer uses the kernel's format for what the workload did.
  EXPECT_TRUE(IsWhiteout(U(lower::kEmptyFile)));
  EXPECT_TRUE(IsWhiteout(U("scripts")));
  std::string opaque;
  EXPECT_TRUE(GetXattr(U("docs"), "trusted.overlay.opaque", &opaque));
  EXPECT_EQ(opaque, "y");
}

TEST_F(KernelOracle, GitAndBuildMatchKernelOverlayfs) {
  ASSERT_TRUE(GitAndBuildWorkload(sandbox().mountpoint(), home()));
  const SnapshotOptions options = SnapshotOptions::MergedView();
  TreeSnapshot fuse_view = Snapshot(sandbox().mountpoint(), options);
  fuse_view.root = "acqfs " + sandbox().mountpoint();
  ExpectKernelAgrees(sandbox(), tmp(), fuse_view, options);
}

TEST_F(KernelOracle, FileTimesMatchKernelOverlayfs) {
  ASSERT_TRUE(RunMixedWorkload(sandbox().mountpoint()));
  SnapshotOptions options = SnapshotOptions::MergedView();
  options.mtime = true;
  options.dir_times = false;  // merged directories' times may legitimately vary
  TreeSnapshot fuse_view = Snapshot(sandbox().mountpoint(), options);
  fuse_view.root = "acqfs " + sandbox().mountpoint();
  ExpectKernelAgrees(sandbox(), tmp(), fuse_view, options);
}

// Layers prepared by hand in the kernel's format, mounted with the helper.
class MountHelper : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "needs root (as CI has); never skipped";
    lower_ = tmp_.Sub("lower");
    upper_ = tmp_.MakeDir("upper");
    work_ = tmp_.MakeDir("work");
    mnt_ = tmp_.MakeDir("mnt");
    ASSERT_TRUE(MakeLowerRepo(lower_));
    ASSERT_TRUE(WriteFile(upper_ + "/upper-only.txt", "from upper\n"));
    tmp_.MakeDir("upper/docs");
    ASSERT_SYS_OK(::mknod((upper_ + "/docs/a.txt").c_str(), S_IFCHR | 0600,
                          makedev(0, 0)));
    tmp_.MakeDir("upper/src");
    ASSERT_SYS_OK(::setxattr((upper_ + "/src").c_str(),
                             "trusted.overlay.opaque", "y", 1, 0));
    ASSERT_TRUE(WriteFile(upper_ + "/src/inside.txt", "opaque\n"));
  }

  std::string Options() const {
    return "lowerdir=" + lower_ + ",upperdir=" + upper_ + ",workdir=" + work_;
  }

  TempDir tmp_;
  std::string lower_, upper_, work_, mnt_;
};

TEST_F(MountHelper, MountsOverlayStyleOptionsAndMergesLayers) {
  MountGuard guard(mnt_);
  CommandResult r =
      RunCommand({MountHelperBinary(), "acqfs", mnt_, "-o", Options()}, 30);
  ASSERT_TRUE(r.ok()) << r.Describe();
  auto m = FindMount(mnt_);
  ASSERT_TRUE(m.has_value()) << "helper exited 0 but nothing is mounted";
  EXPECT_EQ(m->fs_type, "fuse.acqfs");
  const std::vector<pid_t> daemons = PidsWithArgument(mnt_);

  EXPECT_EQ(ContentOf(mnt_ + "/upper-only.txt"), "from upper\n");
  EXPECT_EQ(LstatErrno(mnt_ + "/docs/a.txt"), ENOENT) << "whiteout ignored";
  EXPECT_EQ(ContentOf(mnt_ + "/docs/b.txt"), lower::kFileBContent);
  std::vector<std::string> names;
  ASSERT_TRUE(ListDir(mnt_ + "/src", &names));
  EXPECT_EQ(names, std::vector<std::string>{"inside.txt"}) << "opaque ignored";
  const SnapshotOptions options = SnapshotOptions::MergedView();
  TreeSnapshot fuse_view = Snapshot(mnt_, options);

  CommandResult u = RunCommand({"fusermount3", "-u", mnt_}, 30);
  ASSERT_TRUE(u.ok()) << u.Describe();
  EXPECT_FALSE(FindMount(mnt_).has_value());
  for (pid_t pid : daemons) {
    EXPECT_TRUE(WaitForProcessExit(pid, 10)) << "daemon " << pid << " lingers";
    KillIfAlive(pid, "acqfs");
  }
  MountGuard kernel_guard(mnt_);
  CommandResult k = MountKernelOverlay(lower_, upper_, work_, mnt_);
  ASSERT_TRUE(k.ok()) << k.Describe();
  EXPECT_TRUE(SnapshotsEqual(fuse_view, Snapshot(mnt_, options)));
}

}  // namespace
}  // namespace acqfs::test
