// Docker for the container tests: a daemon of the test's own (Debian 12's
// docker.io, dockerd 20.10), the tiny local image (make-image.sh) in it, and
// `docker run` of a shell script with a sandbox's mountpoint as /workspace.
//
// The constructor starts dockerd with its data root, exec root, pid file
// and socket in a TempDir, so the machine's own Docker (if any) is never
// touched: no bridge and no iptables rules (the containers run with
// --network none), the vfs storage driver (plain directories), the cgroupfs
// driver (these machines have hybrid cgroups), and a default open-files
// limit within the machine's hard limit. It waits until the daemon answers.
// The destructor removes every container and stops the daemon (SIGTERM;
// SIGKILL after 30 s, and the containerd it started); the daemon also gets
// SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG), so a
// crashed test program leaves no daemon behind.
// Thread-safety: as ContainerEngine.
#ifndef ACQFS_TESTS_CONTAINER_DOCKER_H_
#define ACQFS_TESTS_CONTAINER_DOCKER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "container/engine.h"
#include "harness/command.h"
#include "harness/temp_dir.h"

namespace acqfs::test {

class Docker : public ContainerEngine {
 public:
  Docker();
  ~Docker() override;
  Docker(const Docker&) = delete;
  Docker& operator=(const Docker&) = delete;

  // Why the daemon is not serving ("" when it is), with its log's end.
  const std::string& failure() const { return failure_; }

  const char* name() const override { return "docker"; }
  CommandResult MakeImage() override;
  // docker -H <the test's socket> ARGS.
  std::vector<std::string> Command(
      const std::vector<std::string>& args) const override;

 private:
  std::string LogTail() const;
  void Stop();

  TempDir tmp_;
  std::string client_;  // Debian's /usr/bin/docker, else docker on PATH
  std::string socket_, exec_root_, log_;
  pid_t pid_ = -1;
  std::string failure_;
};

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_CONTAINER_DOCKER_H_
