#include "gitbridge/delta_scan.h"

namespace acqfs::gitbridge {}  // namespace acqfs::gitbridge
