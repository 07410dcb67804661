// Podman for the container tests: a store of the test's own, the tiny local
// image (make-image.sh), and `podman run` of a shell script with a sandbox's
// mountpoint as /workspace.
//
// Every podman command line carries what these machines need (runc, the
// cgroupfs manager, the file events backend, limits within the hard limits;
// docs/sandboxes.md, "Podman") and a private --root and --runroot, so a test
// never touches the machine's own containers or images. The vfs storage
// driver keeps the store plain directories, which the TempDir that holds
// them removes. Each run names its container; the destructor removes every
// container of the store, whatever the outcome.
// Thread-safety: as ContainerEngine.
#ifndef ACQFS_TESTS_CONTAINER_PODMAN_H_
#define ACQFS_TESTS_CONTAINER_PODMAN_H_

#include <string>
#include <vector>

#include "container/engine.h"
#include "harness/command.h"
#include "harness/temp_dir.h"

namespace acqfs::test {

struct PodmanUser {
  // Words put before podman (e.g. setpriv to an ordinary user), and the
  // environment it needs then (HOME, XDG_RUNTIME_DIR).
  std::vector<std::string> prefix;
  EnvAdditions env;
  // Owner of the store's directories (-1: as created).
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
};

class Podman : public ContainerEngine {
 public:
  explicit Podman(PodmanUser user = {});
  ~Podman() override;
  Podman(const Podman&) = delete;
  Podman& operator=(const Podman&) = delete;

  const char* name() const override { return "podman"; }
  CommandResult MakeImage() override;
  // podman ARGS with this store's options.
  std::vector<std::string> Command(
      const std::vector<std::string>& args) const override;

 protected:
  EnvAdditions env() const override { return user_.env; }

 private:
  const PodmanUser user_;
  TempDir tmp_;
  std::string root_, runroot_, tmpdir_;
};

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_CONTAINER_PODMAN_H_
