// MountTest: the fixture of the integration tests. Each test gets a fresh
// standard lower repo (MakeLowerRepo) in its own TempDir and a Sandbox that
// mounts it with acqfs; SetUp fails the test (never skips it) when the mount
// does not come up. TearDown prints the tail of daemon.log when the test
// failed, then unmounts and removes everything.
//
// Also here: helpers the tests share (renameat2, unix sockets, a kernel
// overlayfs mount of the same layers).
// Thread-safety: one fixture per test, on the test's thread.
#ifndef ACQFS_TESTS_INTEGRATION_MOUNT_FIXTURE_H_
#define ACQFS_TESTS_INTEGRATION_MOUNT_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/lower_repo.h"
#include "harness/sandbox.h"
#include "harness/snapshot.h"
#include "harness/temp_dir.h"

namespace acqfs::test {

class MountTest : public ::testing::Test {
 protected:
  // The sandbox's mount options; a fixture may override them.
  virtual SandboxOptions Options() const { return {}; }
  // Called with the lower (already a MakeLowerRepo tree) before mounting;
  // a fixture may add files there.
  virtual void PrepareLower(const std::string& lower) { (void)lower; }
  void SetUp() override;
  void TearDown() override;

  Sandbox& sandbox() { return *sandbox_; }
  TempDir& tmp() { return *tmp_; }
  const std::string& lower() const { return lower_; }
  // A HOME for tools run in the test (git).
  std::string home() const { return tmp_->Sub("home"); }

  // `rel` in the mount, the upper layer and the lower layer.
  std::string M(const std::string& rel) const { return sandbox_->M(rel); }
  std::string U(const std::string& rel) const { return sandbox_->U(rel); }
  std::string L(const std::string& rel) const { return sandbox_->L(rel); }

  // lstat of `rel` in the mount / the lower / the upper layer; a test
  // failure if it fails.
  struct stat StatM(const std::string& rel);
  struct stat StatL(const std::string& rel);
  struct stat StatU(const std::string& rel);

 private:
  std::unique_ptr<TempDir> tmp_;
  std::string lower_;
  std::unique_ptr<Sandbox> sandbox_;
};

// MountTest in both ways the daemon serves files, as its parameter:
// "no_open" (`-o no_open`: handle-less, the default where the daemon
// cannot pass opens through) and "handles" (`-o handles`, the default of a
// root daemon on a kernel with FUSE passthrough). A fixture adds
// its own options in ModeOptions(); instantiate it with
// ACQFS_IN_BOTH_FILE_MODES(Suite).
class BothFileModes : public MountTest,
                      public ::testing::WithParamInterface<std::string> {
 protected:
  virtual SandboxOptions ModeOptions() const { return {}; }
  SandboxOptions Options() const final;
};
std::string FileModeName(const ::testing::TestParamInfo<std::string>& info);
#define ACQFS_IN_BOTH_FILE_MODES(suite)                                   \
  INSTANTIATE_TEST_SUITE_P(                                               \
      Modes, suite, ::testing::Values(std::string("no_open"), "handles"), \
      ::acqfs::test::FileModeName)

// renameat2(2) through syscall(2), as glibc's wrapper may be missing.
int Renameat2(const std::string& from, const std::string& to, unsigned flags);

// A unix stream socket bound to `path` and listening; invalid on failure
// (errno set).
ScopedFd BindUnixSocket(const std::string& path);
// Connects to `path`, sends `message` to the listener `server` accepts, and
// checks it arrives.
::testing::AssertionResult UnixSocketRoundTrip(int server,
                                               const std::string& path,
                                               const std::string& message);

// True when `path` is a whiteout in an upper layer: a 0/0 character device.
::testing::AssertionResult IsWhiteout(const std::string& path);

// Mounts kernel overlayfs at `target` with lowerdir/upperdir/workdir and
// index=off,redirect_dir=off,metacopy=off (needs root).
CommandResult MountKernelOverlay(const std::string& lower,
                                 const std::string& upper,
                                 const std::string& work,
                                 const std::string& target);

// A workload touching every kind of operation acqfs implements, run in the
// mounted tree `root` (a MakeLowerRepo tree): writes, truncation, appends,
// unlinks (lower and upper), mkdir/rmdir, rm -rf and re-creation of a lower
// directory, renames (plain, over a file, lower directory, NOREPLACE,
// EXCHANGE), symlinks, hard links, chmod/chown/utimensat, xattrs, a fifo, a
// socket, fallocate, copy_file_range and a shared writable mmap. Stops at
// the first failing step and names it.
::testing::AssertionResult RunMixedWorkload(const std::string& root);

// A shell script that, run in a mount whose lower has docs/a.txt and
// docs/b.txt, keeps changing it for `seconds`: directories made, filled,
// renamed and removed, docs/a.txt appended to, docs/b.txt removed and made
// again (a whiteout in between), a symlink swapped (ln -sfn's rename). For
// readers of the layers racing an agent at work.
std::string ChurnScript(int seconds);

// Runs `command` again and again for `seconds` while ChurnScript runs in
// `mountpoint` (for a second longer). `check` sees each failed run.
struct ChurnRace {
  int runs = 0, ok = 0;
  CommandResult churn;  // the churn script's own result
};
ChurnRace RaceWithChurn(const std::string& mountpoint, int seconds,
                        const std::vector<std::string>& command,
                        const std::function<void(const CommandResult&)>& check);

// Runs `acqfs ARGS... --state-dir <s's state dir>`, with `timeout` seconds.
CommandResult AcqfsIn(const Sandbox& s, std::vector<std::string> args,
                      int timeout = 120);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_INTEGRATION_MOUNT_FIXTURE_H_
