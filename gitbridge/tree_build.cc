#include "gitbridge/tree_build.h"

namespace acqfs::gitbridge {}  // namespace acqfs::gitbridge
