// acqfs gc: removes the layers no sandbox's stack names, and the folders
// of forks and removals that died (docs/stack.md).
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
#include "stack/manifest.h"
#include "stack/store.h"
#include "state/state.h"

namespace acqfs::cli {

int RunGc(const GcArgs& a) {
  const std::string state = Absolute(ResolveStateDir(a.state_dir));
  auto r = CollectGarbage(state);
  if (!r) return Fail(kExitFailed, "gc", r.error());
  std::printf("acqfs: gc: removed %zu layers (%s), kept %zu", r->layers_removed,
              FormatBytes(r->bytes_freed).c_str(), r->layers_kept);
  if (r->folders_removed)
    std::printf("; removed %zu folders a dead fork or rm left",
                r->folders_removed);
  std::printf("\n");
  return 0;
}

}  // namespace acqfs::cli
