#include "gitbridge/host_repo.h"

namespace acqfs::gitbridge {}  // namespace acqfs::gitbridge
