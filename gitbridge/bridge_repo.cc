#include "gitbridge/bridge_repo.h"

namespace acqfs::gitbridge {}  // namespace acqfs::gitbridge
