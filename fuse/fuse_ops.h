// The FUSE low-level adapter: a table of noexcept callbacks that translate
// fuse_req_t requests into Overlay calls and Overlay results into replies.
// Node ids are Node addresses (the root is FUSE_ROOT_ID). File handles own
// nothing: data requests use the Overlay's file cache by node, in both file
// modes. Directory handles (-o handles) own their listings
// (fuse/dir_listings.h).
// Thread-safety: callbacks run on libfuse's worker threads; all shared state
// lives in the Overlay, which locks for itself.
#ifndef ACQFS_FUSE_FUSE_OPS_H_
#define ACQFS_FUSE_FUSE_OPS_H_

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "fs/overlay.h"
#include "fuse/dir_listings.h"
#include "fuse/page_dropper.h"
#include "fuse/warm_walk.h"

namespace acqfs {

class AuditSink;
class BackingTable;
class UringTransport;

// The state every callback reaches through fuse_req_userdata().
struct FuseContext {
  Overlay* overlay = nullptr;
  double timeout = 60.0;
  bool writeback_cache = true;
  bool debug = false;
  // Asked for: answer OPEN with ENOSYS, so the kernel sends no OPEN or
  // RELEASE for files and reads and writes arrive without a handle.
  bool no_open = false;
  // Neither -o no_open nor -o handles: handles when the kernel offers
  // passthrough and the mount may use it (`backing` set), else handle-less;
  // decided at INIT (OpInit).
  bool file_mode_auto = false;
  // Add FUSE_PARALLEL_DIROPS to the INIT reply (fuse/mount.cc).
  bool parallel_dirops = true;
  // Drops the pages of refused delayed writes (null: not running). Set
  // before the loop starts.
  PageDropper* page_dropper = nullptr;
  // The warm walk, told of every request that changes something so that
  // it gives way to a writing agent (fuse/warm_walk.h); null when it does
  // not run. Set before the loop starts, cleared after it ends.
  WarmWalk* warm = nullptr;
  // Set up by INIT when the kernel offers that mode: the listings the
  // handle-less READDIRs read from (no descriptors, a bounded number).
  std::unique_ptr<ListingCache> listings;
  // The INIT exchange as the session's I/O saw it (fuse/mount.cc): the
  // request's id and the flags the kernel offered, and the flags the reply
  // gained on its way out (what libfuse 3.14 cannot ask for itself). Once
  // `init_replied`, the kernel leaves set-id bits to the daemon when
  // `init_flags_added` holds FUSE_HANDLE_KILLPRIV(_V2) (fuse/setid.h).
  uint64_t init_unique = 0;
  uint32_t init_offered = 0;
  uint32_t init_offered2 = 0;  // flags2, when the kernel sent FUSE_INIT_EXT
  uint32_t init_flags_added = 0;
  // The io_uring transport waiting for INIT's outcome
  // (fuse/uring_transport.h), or null when the mount runs on /dev/fuse
  // alone. Set before the loop starts, cleared after it ends.
  UringTransport* uring = nullptr;
  // FUSE passthrough (fuse/passthrough.h): the mount's backing files, when
  // it may pass opens through (-o handles, no writeback cache, no quota,
  // not -o nopassthrough); enabled once the INIT reply asked for it. Set
  // before the loop starts, cleared after it ends.
  BackingTable* backing = nullptr;
  // The audit log (fuse/audit_sink.h), or null (-o noaudit). Set before
  // the loop starts, cleared after it ends.
  AuditSink* audit = nullptr;
  std::atomic<bool> init_replied{false};
};

// The name an open(O_TMPFILE) (FUSE_TMPFILE) reaches OpCreate with: "/",
// which no CREATE can carry (the VFS never passes a name with a slash).
inline constexpr char kTmpfileName[] = "/";

// Is the mount in the handle-less mode (no OPEN/RELEASE for files)?
inline bool HandleLess(const FuseContext* ctx) {
  return ctx->listings != nullptr;
}

// The operations table (static storage; fill in once).
const struct fuse_lowlevel_ops* FuseOperations();

}  // namespace acqfs

#endif  // ACQFS_FUSE_FUSE_OPS_H_
