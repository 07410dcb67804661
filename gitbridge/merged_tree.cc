#include "gitbridge/merged_tree.h"

namespace acqfs::gitbridge {}  // namespace acqfs::gitbridge
