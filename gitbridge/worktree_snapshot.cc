#include "gitbridge/worktree_snapshot.h"

namespace acqfs::gitbridge {}  // namespace acqfs::gitbridge
