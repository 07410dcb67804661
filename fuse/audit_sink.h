// The audit log as the FUSE adapter feeds it (issue 36; docs/audit.md).
//
// Each request that changes the sandbox gives one record once it is
// answered: created, removed, renamed, linked, truncated, chmod/chown/
// utimes, xattrs set or removed; with its result (0, or the errno the
// caller got) and, for a refusal, the boundary that refused it (the note
// the Overlay left, fs/boundary_note.h). A LOOKUP is recorded only when a
// hidden path refused it; an open for reading only of a path matching
// --audit-reads. Writes are coalesced per file (audit/write_coalescer.h):
// one record from the first write after an open to its last RELEASE (or
// an fsync, a rename or an unlink of it); in the handle-less mode, which
// has no RELEASE, a file's record is written once its first write is two
// seconds old. A file opened for writing through FUSE passthrough is
// written by the kernel itself: its record says so (ranges unknown).
//
// What never reaches the daemon is not in the log: what the kernel
// refuses itself (EACCES under default_permissions, a name its dentry
// cache knows to exist or not to), and repeated lookups of a hidden name
// within the negative-entry timeout.
//
// Thread-safety: every member may be called from any worker thread; the
// writer, the caller cache and the coalescer lock themselves.
#ifndef ACQFS_FUSE_AUDIT_SINK_H_
#define ACQFS_FUSE_AUDIT_SINK_H_

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "audit/caller_cache.h"
#include "audit/log_file.h"
#include "audit/record.h"
#include "audit/write_coalescer.h"
#include "fs/policy.h"

namespace acqfs {

class Overlay;
struct Node;

class AuditSink {
 public:
  struct Options {
    std::vector<PathGlob> read_globs;  // --audit-reads
  };
  AuditSink(std::unique_ptr<audit::Writer> writer, Overlay* overlay,
            Options options);
  // Writes every pending write record, then the queue.
  ~AuditSink();
  AuditSink(const AuditSink&) = delete;
  AuditSink& operator=(const AuditSink&) = delete;

  // The daemon started serving the sandbox (a kMount record).
  void Mounted();
  // A record of `op` by the caller of `req`, now, in the current upper.
  audit::Record Make(fuse_req_t req, audit::Op op);
  // Records the outcome `err` (0 or an errno) of a changing request, with
  // the boundary that refused it, if one did.
  void Changed(audit::Record r, int err);
  // A LOOKUP of `rel` answered `err`: recorded when a boundary refused it.
  void LookedUp(fuse_req_t req, const std::string& rel, int err);
  // An open for reading of `node` (`rel`): recorded when --audit-reads
  // matches.
  void OpenedForReading(fuse_req_t req, const std::string& rel, int err);
  bool WantsReads() const { return !options_.read_globs.empty(); }
  // A WRITE of `size` bytes at `off` to `node`, answered `err`; `rel`
  // gives its path, asked only when the file has no pending record.
  void Wrote(fuse_req_t req, const Node* node,
             const std::function<std::string()>& rel, uint64_t off,
             uint64_t size, int err);
  // An open for writing the kernel serves itself (passthrough).
  void OpenedForWritingUnseen(fuse_req_t req, const Node* node,
                              const std::string& rel);
  // The last release, an fsync, or a rename or unlink of `node`: its
  // pending write record goes out first.
  void EndOfWrites(const Node* node);
  // Every pending write record goes out, and the queue reaches the disk
  // (a checkpoint, the unmount, `acqfs log`'s flush).
  Status Flush();
  // Set at INIT: the handle-less mode (no RELEASE ends a file's writes).
  void SetHandleLess(bool on) { handle_less_.store(on); }
  // Has any record been lost since the mount?
  bool Incomplete() const { return writer_->Incomplete(); }
  audit::WriterStats Stats() const { return writer_->GetStats(); }

 private:
  // The handle-less mode's deadline: records of writes older than this.
  void TakeOldWrites(int64_t now_ns);
  std::string LayerId();

  std::unique_ptr<audit::Writer> writer_;
  Overlay* overlay_;
  const Options options_;
  audit::CallerCache callers_;
  audit::WriteCoalescer writes_;
  std::atomic<int64_t> next_sweep_ns_{0};  // when TakeOldWrites runs next
  std::atomic<bool> handle_less_{false};
};

}  // namespace acqfs

#endif  // ACQFS_FUSE_AUDIT_SINK_H_
