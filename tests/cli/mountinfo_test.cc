// The mount table as mountinfo shows it (common/mountinfo.h), and rootless
// Podman's pause process with the question whether a mount made now would
// reach its namespace (cli/podman_namespace.h). The namespace tests make
// real namespaces: a child that unshares a user and mount namespace and
// names itself as Podman's pause process does, in a mount namespace of the
// test's own (nothing is mounted in the machine's).
#include "common/mountinfo.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cli/podman_namespace.h"
#include "harness/temp_dir.h"

namespace acqfs::cli {
namespace {

using acqfs::test::TempDir;

TEST(MountInfo, ParsesFieldsTagsAndEscapes) {
  const auto e = ParseMountInfoLine(
      "36 35 98:0 /mnt1 /mnt/my\\040dir rw,noatime master:1 shared:7 - "
      "ext3 /dev/root rw,errors=continue");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->id, 36);
  EXPECT_EQ(e->parent, 35);
  EXPECT_EQ(e->mountpoint, "/mnt/my dir");
  EXPECT_EQ(e->fstype, "ext3");
  EXPECT_EQ(major(e->dev), 98u);
  EXPECT_EQ(minor(e->dev), 0u);
  EXPECT_EQ(e->tags, (std::vector<std::string>{"master:1", "shared:7"}));
  EXPECT_EQ(e->source, "/dev/root");
  EXPECT_EQ(e->options, (std::vector<std::string>{"rw", "noatime"}));
  EXPECT_EQ(e->super_options,
            (std::vector<std::string>{"rw", "errors=continue"}));
  EXPECT_TRUE(e->HasOption("noatime"));
  EXPECT_FALSE(e->HasOption("ro"));
  EXPECT_TRUE(e->HasSuperOption("errors=continue"));
  const auto acqfs = ParseMountInfoLine(
      "70 27 0:52 / /tmp/m rw,nosuid,nodev,noatime - fuse.acqfs "
      "acqfs:a\\040b rw,user_id=0,allow_other");
  ASSERT_TRUE(acqfs.has_value());
  EXPECT_EQ(acqfs->source, "acqfs:a b");
  const auto plain =
      ParseMountInfoLine("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw");
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(plain->tags.empty());
  EXPECT_EQ(plain->mountpoint, "/");
}

TEST(MountInfo, MalformedLinesAreLeftOut) {
  for (const char* bad : {"", "27 1 254:0 / /", "27 1 254:0 / / rw shared:1",
                          "x 1 254:0 / / rw - ext4 /dev/vda rw",
                          "27 1 254 / / rw - ext4 a b", "27 1 254:0 / / rw - "})
    EXPECT_FALSE(ParseMountInfoLine(bad).has_value()) << bad;
  const auto table = ParseMountInfo(
      "garbage\n27 1 254:0 / / rw - ext4 /dev/vda rw\n\n"
      "28 27 0:25 / /tmp rw shared:3 - tmpfs tmpfs rw\n");
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[1].mountpoint, "/tmp");
}

TEST(MountInfo, TheCoveringMountIsTheNearestAncestorOnTop) {
  const auto table = ParseMountInfo(
      "1 0 8:1 / / rw - ext4 a rw\n"
      "2 1 0:2 / /tmp rw - tmpfs t rw\n"
      "3 1 0:3 / /tmpx rw - tmpfs t rw\n"
      "4 2 0:4 / /tmp rw - tmpfs t rw\n");
  ASSERT_NE(CoveringMount(table, "/tmp/a/b"), nullptr);
  EXPECT_EQ(CoveringMount(table, "/tmp/a/b")->id, 4);  // on top of 2
  EXPECT_EQ(CoveringMount(table, "/tmp")->id, 4);
  EXPECT_EQ(CoveringMount(table, "/tmpx/a")->id, 3);
  EXPECT_EQ(CoveringMount(table, "/tmpy")->id, 1);  // not /tmp's
  EXPECT_EQ(CoveringMount(table, "/")->id, 1);
  EXPECT_EQ(CoveringMount(ParseMountInfo("2 1 0:2 / /tmp rw - tmpfs t rw\n"),
                          "/home"),
            nullptr);
}

TEST(MountInfo, APropagatingMountNeedsAPeerGroupOnBothSides) {
  const auto ours = ParseMountInfo(
      "1 0 8:1 / / rw - ext4 a rw\n"
      "2 1 0:2 / /shared rw shared:5 - tmpfs t rw\n"
      "3 1 0:3 / /other rw shared:6 - tmpfs t rw\n");
  // A copy made in a new user namespace: the shared mounts became slaves.
  const auto slave = ParseMountInfo(
      "11 10 8:1 / / rw - ext4 a rw\n"
      "12 11 0:2 / /shared rw master:5 - tmpfs t rw\n"
      "13 11 0:3 / /other rw shared:9 - tmpfs t rw\n");
  EXPECT_TRUE(MountPropagates(ours, slave, "/shared/mnt"));
  EXPECT_TRUE(MountPropagates(ours, slave, "/shared"));
  EXPECT_FALSE(MountPropagates(ours, slave, "/mnt"));        // "/" is private
  EXPECT_FALSE(MountPropagates(ours, slave, "/other/mnt"));  // another group
  // A peer of the same group, in a namespace made without a new user one.
  const auto peer =
      ParseMountInfo("12 11 0:2 / /shared rw shared:5 - tmpfs t rw\n");
  EXPECT_TRUE(MountPropagates(ours, peer, "/shared/x"));
  // Something mounted over the place in their namespace hides it.
  const auto covered = ParseMountInfo(
      "12 11 0:2 / /shared rw master:5 - tmpfs t rw\n"
      "14 12 0:7 / /shared/mnt rw - tmpfs t rw\n");
  EXPECT_FALSE(MountPropagates(ours, covered, "/shared/mnt"));
  EXPECT_TRUE(MountPropagates(ours, covered, "/shared/else"));
  // A slave of ours does not send anything on.
  const auto ours_slave =
      ParseMountInfo("2 1 0:2 / /shared rw master:5 - tmpfs t rw\n");
  EXPECT_FALSE(MountPropagates(ours_slave, slave, "/shared/mnt"));
}

// A child made in a new user and mount namespace that names itself `name`
// (PR_SET_NAME, as podman's own pause process does), in the caller's
// namespace. The destructor kills and reaps it.
class FakePause {
 public:
  explicit FakePause(const char* name) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      char ok = ::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 &&
                        ::prctl(PR_SET_NAME, name, 0, 0, 0) == 0
                    ? 'y'
                    : 'n';
      (void)!::write(ready[1], &ok, 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char ok = 'n';
    if (pid_ > 0 && ::read(ready[0], &ok, 1) == 1 && ok == 'y') ok_ = true;
    ::close(ready[0]);
  }
  ~FakePause() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool ok() const { return ok_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool ok_ = false;
};

bool Has(const std::vector<PodmanPause>& found, pid_t pid) {
  for (const auto& p : found)
    if (p.pid == pid) return true;
  return false;
}

TEST(PodmanPause, FoundByNameOwnerAndNamespace) {
  FakePause pause("podman pause");
  ASSERT_TRUE(pause.ok()) << "unshare(CLONE_NEWUSER | CLONE_NEWNS)";
  const auto found = FindPodmanPauses(::getuid());
  EXPECT_TRUE(Has(found, pause.pid()));
  for (const auto& p : found) {
    if (p.pid == pause.pid()) {
      EXPECT_EQ(p.command, "podman pause");
    }
  }
  EXPECT_FALSE(Has(FindPodmanPauses(::getuid() + 4242), pause.pid()))
      << "another user's pause process";
}

TEST(PodmanPause, CatatonitWithoutMinusPIsNotPodmansPause) {
  // catatonit as a container's init (podman run --init) takes no -P.
  FakePause init("catatonit");
  ASSERT_TRUE(init.ok());
  EXPECT_FALSE(Has(FindPodmanPauses(::getuid()), init.pid()));
}

TEST(PodmanPause, AProcessInOurOwnNamespaceIsNotOne) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "podman pause", 0, 0, 0);
    for (;;) ::pause();
  }
  ASSERT_GT(pid, 0);
  bool found = false;
  for (int i = 0; i < 200 && !found; i++) {
    for (const auto& p : FindPodmanPauses(::getuid()))
      if (p.pid == pid) found = true;
    ::usleep(5000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(found);
}

// In a mount namespace of its own (so nothing is mounted in the machine's),
// with "/" private and a shared tmpfs at `shared`: a pause process made
// then misses a mount at `private_path` and receives one under `shared`.
// Run in a child; its exit status is 0 when all held, else the number of
// the check that failed.
int CheckPropagationInOwnNamespace(const std::string& shared,
                                   const std::string& private_path) {
  if (::unshare(CLONE_NEWNS) != 0) return 10;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return 11;
  if (::mount("acqfs-test", shared.c_str(), "tmpfs", 0, nullptr) != 0)
    return 12;
  if (::mount(nullptr, shared.c_str(), nullptr, MS_SHARED, nullptr) != 0)
    return 13;
  FakePause pause("podman pause");
  if (!pause.ok()) return 14;
  // (Other tests' fake pause processes may run at the same time.)
  if (!Has(PausesMissingMountAt(::getuid(), private_path), pause.pid()))
    return 1;
  if (Has(PausesMissingMountAt(::getuid(), shared + "/mnt"), pause.pid()))
    return 2;
  return 0;
}

TEST(PodmanPause, AMountReachesItsNamespaceOnlyUnderASharedMount) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root to mount (as CI has)";
  TempDir tmp;
  const std::string shared = tmp.MakeDir("shared");
  const std::string private_path = tmp.MakeDir("private");
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(CheckPropagationInOwnNamespace(shared, private_path));
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: a mount on the private / was taken to reach the namespace; "
         "2: one under the shared tmpfs was not; 10-14: setting up";
}

}  // namespace
}  // namespace acqfs::cli
