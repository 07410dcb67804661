// acqfs status (stub until implemented).
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace acqfs::cli {
int RunStatus(const StatusArgs&) {
  return Fail(kExitFailed, "status", "acqfs", "not implemented yet");
}
}  // namespace acqfs::cli
