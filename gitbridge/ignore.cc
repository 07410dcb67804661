#include "gitbridge/ignore.h"

namespace acqfs::gitbridge {}  // namespace acqfs::gitbridge
