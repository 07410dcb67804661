#include "container/podman.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#ifndef ACQFS_MAKE_IMAGE_SCRIPT
#error "ACQFS_MAKE_IMAGE_SCRIPT must be defined by the build"
#endif

namespace acqfs::test {

Podman::Podman(PodmanUser user) : user_(std::move(user)) {
  if (tmp_.path().empty()) return;  // TempDir reported the failure
  ::chmod(tmp_.path().c_str(), 0755);
  root_ = tmp_.MakeDir("storage", 0700, user_.uid, user_.gid);
  runroot_ = tmp_.MakeDir("run", 0700, user_.uid, user_.gid);
  tmpdir_ = tmp_.MakeDir("tmp", 0700, user_.uid, user_.gid);
}

Podman::~Podman() {
  if (root_.empty()) return;
  // Whatever a failed or timed-out run left: stop and remove it, so the
  // TempDir can go (its own removal unmounts anything still mounted).
  CommandResult rm = RunCommand(
      Command({"rm", "--all", "--force", "--time", "0"}), 120, "", user_.env);
  if (!rm.ok()) ADD_FAILURE() << "removing the containers: " << rm.Describe();
}

std::vector<std::string> Podman::Command(
    const std::vector<std::string>& args) const {
  std::vector<std::string> argv = user_.prefix;
  argv.insert(argv.end(), {"env", "TMPDIR=" + tmpdir_, "podman", "--root",
                           root_, "--runroot", runroot_, "--storage-driver",
                           "vfs", "--runtime", "runc", "--cgroup-manager",
                           "cgroupfs", "--events-backend", "file"});
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

CommandResult Podman::MakeImage() {
  std::vector<std::string> argv = user_.prefix;
  argv.insert(argv.end(),
              {"env", "TMPDIR=" + tmpdir_, "bash", ACQFS_MAKE_IMAGE_SCRIPT,
               kTestImage, "--root", root_, "--runroot", runroot_,
               "--storage-driver", "vfs", "--runtime", "runc",
               "--cgroup-manager", "cgroupfs", "--events-backend", "file"});
  return RunCommand(argv, 300, "", user_.env);
}

}  // namespace acqfs::test
