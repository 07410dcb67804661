// A container engine for the container tests (podman.h, docker.h): the tiny
// local image (make-image.sh) in a store of the test's own, and `run` of a
// shell script with a sandbox's mountpoint as /workspace.
// Thread-safety: Run() may be called from several threads at once (each
// call spawns its own client); construction and destruction on one thread.
#ifndef ACQFS_TESTS_CONTAINER_ENGINE_H_
#define ACQFS_TESTS_CONTAINER_ENGINE_H_

#include <string>
#include <vector>

#include "harness/command.h"

namespace acqfs::test {

inline constexpr char kTestImage[] = "localhost/acqfs-container-test:1";

struct ContainerRun {
  std::string name;       // the container's name (unique per run)
  std::string workspace;  // host directory bound at /workspace
  std::string user;       // --user, "" for the image's (root)
  std::string userns;     // --userns, "" for the engine's default
  std::string script;     // run by the image's busybox sh with -euc
  int timeout_seconds = 180;
};

class ContainerEngine {
 public:
  virtual ~ContainerEngine() = default;
  // "podman", "docker": for test names and messages.
  virtual const char* name() const = 0;
  // Builds kTestImage into this store with make-image.sh.
  virtual CommandResult MakeImage() = 0;
  CommandResult Run(const ContainerRun& run) const {
    return RunCommand(RunLine(run), run.timeout_seconds, "", env());
  }
  // The command line Run() runs (for a script that runs it elsewhere).
  std::vector<std::string> RunLine(const ContainerRun& run) const;
  // The engine's client with this store's options, then `args`.
  virtual std::vector<std::string> Command(
      const std::vector<std::string>& args) const = 0;

 protected:
  virtual EnvAdditions env() const { return {}; }
};

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_CONTAINER_ENGINE_H_
