// acqfs checkpoint: freezes a sandbox's upper as a checkpoint (docs/stack.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/sandbox.h"
#include "cli/stack_command.h"
#include "stack/manifest.h"

namespace acqfs::cli {

int RunCheckpoint(const CheckpointArgs& a) {
  int rc = 0;
  auto s = FindSandbox("checkpoint", a.state_dir, a.name, &rc);
  if (!s) return rc;
  double ms = 0;
  auto n = MakeCheckpoint(*s, a.message, CheckpointKind::kCheckpoint, &ms);
  if (!n)
    return Fail(n.err() == EBUSY ? kExitBadInput : kExitFailed,
                "checkpoint " + s->name(), n.error());
  if (a.json) {
    nlohmann::json j{{"sandbox", s->name()}, {"checkpoint", *n}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("acqfs: checkpoint %s: checkpoint %u\n", s->name().c_str(), *n);
  }
  return 0;
}

}  // namespace acqfs::cli
