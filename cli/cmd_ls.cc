// acqfs ls (stub until implemented).
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace acqfs::cli {
int RunLs(const LsArgs&) {
  return Fail(kExitFailed, "ls", "acqfs", "not implemented yet");
}
}  // namespace acqfs::cli
