// Sandbox: one acqfs mount of a lower directory, for the length of a test.
//
// The constructor makes a TempDir holding a state directory and a mount
// point, runs `acqfs mount LOWER MNT --name NAME --state-dir STATE` (30 s
// limit) and checks that MNT is now a fuse.acqfs mount; any failure is
// reported (ADD_FAILURE, with the command's output and daemon.log) and
// mounted() tells the test whether to go on. The destructor always unmounts:
// `acqfs umount` first (a failure there is a test failure), then, if the
// mount or the daemon is still there, `fusermount3 -u -z`, umount2(MNT_DETACH)
// and SIGKILL to the pid in daemon.pid.
// Thread-safety: none; one owner.
#ifndef ACQFS_TESTS_HARNESS_SANDBOX_H_
#define ACQFS_TESTS_HARNESS_SANDBOX_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "harness/command.h"
#include "harness/temp_dir.h"

namespace acqfs::test {

struct SandboxOptions {
  std::string name = "sandbox";
  // Words put before every acqfs command line, e.g. a setpriv invocation to
  // run the daemon as another user.
  std::vector<std::string> command_prefix;
  // Owner of the sandbox's directories (-1: leave as created).
  uid_t owner_uid = static_cast<uid_t>(-1);
  gid_t owner_gid = static_cast<gid_t>(-1);
  std::string acqfs_bin;  // "" means AcqfsBinary()
  std::vector<std::string> extra_mount_args;
  // The FUSE transport the daemon must run on (fuse/uring_transport.h):
  // "dev" (`-o nouring` is added), "uring" (`-o uring` is added, and the
  // mount fails unless the daemon log says the ring took over) or "auto"
  // (whatever the kernel offers, unchecked). "": TestTransport().
  std::string transport;
  // An existing directory to mount on ("" makes "mnt" in the sandbox's
  // TempDir, owned by owner_uid:owner_gid).
  std::string mountpoint;
  // An existing state directory to use ("" makes one in the sandbox's
  // TempDir), e.g. on a small file system of the test's.
  std::string state_dir;
  // Words added to every `acqfs umount` (e.g. "--no-export").
  std::vector<std::string> extra_umount_args;
  // After mounting, wait (up to warm_walk_timeout_seconds) for the daemon
  // log's line that the warm walk ended, or that there is none. The walk
  // lists the whole mount right after it comes up, and what it lists the
  // kernel caches for the entry and attribute timeouts: a test that
  // changes the lower after mounting would otherwise race it, and may see
  // a state the host passed through (a file just created, still empty)
  // for as long as the timeout (architecture.md, "Host edits while
  // mounted"). Then also the line that the host watch is in place, or off
  // (a host change before it shows only after the timeout). Tests of the
  // walk itself, which race it on purpose, say false.
  bool wait_for_warm_walk = true;
  int warm_walk_timeout_seconds = 60;
  int mount_timeout_seconds = 30;
  int umount_timeout_seconds = 60;
};

// The transport the tests of this process run on: $ACQFS_TEST_TRANSPORT
// ("dev" or "uring"; CTest runs the mounted tests once with each, see
// tests/CMakeLists.txt), "dev" when unset.
std::string TestTransport();

// The upper layer of the sandbox `name` of the state directory `state`, as
// its stack.json names it (else the legacy <state>/<name>/upper).
std::string SandboxUpper(const std::string& state, const std::string& name);

class Sandbox {
 public:
  explicit Sandbox(std::string lower, SandboxOptions options = {});
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // True once `acqfs mount` succeeded and until Unmount().
  bool mounted() const { return mounted_; }
  // Why the mount failed ("" when it did not).
  const std::string& mount_failure() const { return mount_failure_; }

  // Runs `acqfs umount` (by mount point, or by name when `by_name`) and checks
  // that it exits 0, that the mount is gone and that the daemon exited. On
  // failure the mount is torn down forcibly anyway.
  ::testing::AssertionResult Unmount(bool by_name = false);
  // The test unmounted the sandbox by other means (umount(2),
  // fusermount3, a signal to the daemon): checks that the daemon exits
  // within `seconds` and that the mount is gone then, and leaves nothing for
  // the destructor's `acqfs umount`. Cleans up forcibly on failure.
  ::testing::AssertionResult UnmountedElsewhere(double seconds);
  // Mounts the same lower, state dir and name again after Unmount().
  ::testing::AssertionResult Remount();

  const std::string& lower() const { return lower_; }
  const std::string& mountpoint() const { return mountpoint_; }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& name() const { return options_.name; }
  std::string layer_dir() const { return state_dir_ + "/" + options_.name; }
  // The upper layer as the sandbox's stack.json names it now (it moves
  // with each checkpoint; docs/stack.md), else <layer_dir>/upper.
  std::string upper() const;
  // Its frozen layers' directories, bottom first.
  std::vector<std::string> frozen() const;
  std::string work() const { return layer_dir() + "/work"; }
  std::string pid_file() const { return layer_dir() + "/daemon.pid"; }
  std::string log_file() const { return layer_dir() + "/daemon.log"; }
  // The daemon's pid as read from daemon.pid after mounting (0 if unknown).
  pid_t daemon_pid() const { return daemon_pid_; }
  // daemon.log's content (or a note that it could not be read).
  std::string DaemonLog() const;
  // Waits up to `seconds` for daemon.log's line, written past byte
  // `log_offset`, that the warm walk ended or is off ("warm walk: ..."),
  // and returns that line. `what` "host watch": the line that the host
  // watch's first walk ended, or that there is no watch.
  ::testing::AssertionResult WaitForWarmWalk(
      double seconds, size_t log_offset = 0, std::string* line = nullptr,
      const char* what = "warm walk") const;

  // Paths of `rel` in the mount, the upper layer and the lower layer.
  std::string M(const std::string& rel) const {
    return mountpoint_ + "/" + rel;
  }
  std::string U(const std::string& rel) const { return upper() + "/" + rel; }
  std::string L(const std::string& rel) const { return lower_ + "/" + rel; }

 private:
  std::vector<std::string> AcqfsCommand(std::vector<std::string> args) const;
  void Mount();
  std::string CheckMounted() const;
  // Tears down whatever is left; returns what it had to do ("" if nothing).
  std::string ForceCleanup();

  const std::string lower_;
  const SandboxOptions options_;
  TempDir tmp_;
  std::string state_dir_;
  std::string mountpoint_;
  std::string mount_failure_;
  bool mounted_ = false;
  pid_t daemon_pid_ = 0;
};

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_SANDBOX_H_
