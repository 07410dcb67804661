// The FUSE low-level adapter: a table of noexcept callbacks that translate
// fuse_req_t requests into Overlay calls and Overlay results into replies.
// Node ids are Node addresses (the root is FUSE_ROOT_ID). File and directory
// handles own their descriptors and snapshots.
// Thread-safety: callbacks run on libfuse's worker threads; all shared state
// lives in the Overlay, which locks for itself.
#ifndef ACQFS_FS_FUSE_OPS_H_
#define ACQFS_FS_FUSE_OPS_H_

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "fs/overlay.h"

namespace acqfs {

// The state every callback reaches through fuse_req_userdata().
struct FuseContext {
  Overlay* overlay = nullptr;
  double timeout = 60.0;
  bool writeback_cache = true;
  bool debug = false;
};

// The operations table (static storage; fill in once).
const struct fuse_lowlevel_ops* FuseOperations();

}  // namespace acqfs

#endif  // ACQFS_FS_FUSE_OPS_H_
