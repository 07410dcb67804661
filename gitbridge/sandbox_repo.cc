#include "gitbridge/sandbox_repo.h"

namespace acqfs::gitbridge {}  // namespace acqfs::gitbridge
