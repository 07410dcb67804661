// acqfs diff (stub until implemented).
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace acqfs::cli {
int RunDiff(const DiffArgs&) {
  return Fail(kExitFailed, "diff", "acqfs", "not implemented yet");
}
}  // namespace acqfs::cli
