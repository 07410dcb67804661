#include "container/engine.h"

namespace acqfs::test {

std::vector<std::string> ContainerEngine::RunLine(
    const ContainerRun& run) const {
  std::vector<std::string> args = {
      "run",       "--rm",
      "--name",    run.name,
      "--ulimit",  "nofile=1024:1024",
      "--ulimit",  "nproc=1024:1024",
      "--network", "none",
      "--mount",   "type=bind,source=" + run.workspace + ",target=/workspace",
      "--workdir", "/workspace"};
  if (!run.user.empty()) args.insert(args.end(), {"--user", run.user});
  if (!run.userns.empty()) args.insert(args.end(), {"--userns", run.userns});
  args.insert(args.end(), {kTestImage, "sh", "-euc", run.script});
  return Command(args);
}

}  // namespace acqfs::test
