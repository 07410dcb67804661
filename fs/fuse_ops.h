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

#include <memory>

#include "fs/overlay.h"

namespace acqfs {

class NodeFiles;
struct NodeFilesDeleter {
  void operator()(NodeFiles* f) const;
};

// The state every callback reaches through fuse_req_userdata().
struct FuseContext {
  Overlay* overlay = nullptr;
  double timeout = 60.0;
  bool writeback_cache = true;
  bool debug = false;
  // Asked for: answer OPEN with ENOSYS, so the kernel sends no OPEN or
  // RELEASE for files and reads and writes arrive without a handle.
  bool no_open = false;
  // Set up by INIT when the kernel offers that mode: the descriptors the
  // handle-less requests use, a bounded cache per node.
  std::unique_ptr<NodeFiles, NodeFilesDeleter> files;
};

// The operations table (static storage; fill in once).
const struct fuse_lowlevel_ops* FuseOperations();

}  // namespace acqfs

#endif  // ACQFS_FS_FUSE_OPS_H_
