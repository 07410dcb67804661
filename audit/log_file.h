// The audit log's files: <sandbox state dir>/audit/log (the current
// generation) and audit/log.1 (the one before), JSON lines of
// audit/record.h.
//
// Writer: the daemon queues records (Append never waits for the disk) and
// one thread appends them in batches: it is woken by a batch's first
// record and writes what gathered within 50 ms (at once when a quarter of
// the queue is full, or Flush waits), so a kill -9 takes at most those. Each
// file is opened beneath the sandbox's state directory with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), as the layers are: a symlink
// planted at audit/ or audit/log is refused (ELOOP), never followed.
//
// Crash safety: records are appended with write(2) to an O_APPEND file; a
// kill -9 can cut the last line short. Open cuts a last line that does not
// end in '\n' (it was never a whole record), so earlier records are never
// damaged and the next record starts on a line of its own. The reader skips
// and counts any line that does not decode.
//
// Bounds: the queue holds at most `queue_limit` records; a record that
// finds it full is counted, and once there is room again a kDropped record
// says how many were lost and between which times. When appending would
// take audit/log past max_bytes / 2, audit/log becomes audit/log.1
// (replacing the older one) and the new audit/log starts with a kRotated
// record naming how many records the replaced generation held and their
// times. The two files together stay under max_bytes.
//
// A failed write (ENOSPC, EIO, EDQUOT) loses the batch, not the sandbox:
// the records are counted as dropped (a kDropped record follows once a
// write succeeds), Incomplete() turns true, and the daemon log says so once.
//
// Thread-safety: Append, Flush, Incomplete and GetStats may be called from
// any thread; `mu_` (a leaf lock) guards the queue and the counts; only the
// writer thread touches the files after Open.
#ifndef ACQFS_AUDIT_LOG_FILE_H_
#define ACQFS_AUDIT_LOG_FILE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "audit/record.h"
#include "common/error.h"
#include "common/handle.h"

namespace acqfs::audit {

inline constexpr char kAuditDirName[] = "audit";
inline constexpr char kAuditLogName[] = "log";
inline constexpr char kAuditOldLogName[] = "log.1";
inline constexpr uint64_t kDefaultAuditMax = uint64_t{64} << 20;

struct WriterOptions {
  uint64_t max_bytes = kDefaultAuditMax;  // both generations together
  size_t queue_limit = 65536;             // records waiting for the disk
};

struct WriterStats {
  uint64_t appended = 0;  // records given to Append
  uint64_t written = 0;   // records on disk
  uint64_t dropped = 0;   // records lost (queue full, or a failed write)
};

class Writer {
 public:
  // Opens (making audit/ with mode 0700 and audit/log with 0600 if needed)
  // the log beneath the sandbox state directory `state_fd` (`shown` names
  // it in errors), cuts a torn last line, continues the sequence numbers
  // from the last record on disk, and starts the writer thread.
  static Result<std::unique_ptr<Writer>> Open(int state_fd,
                                              const std::string& shown,
                                              const WriterOptions& options);
  // Writes what is queued, then stops the thread.
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Queues `r`, giving it the next sequence number (and the time now, when
  // r.time_ns is 0). Never blocks on the disk.
  void Append(Record r);
  // Waits until every record queued before the call is written, or lost.
  // The error of the last failed write, if there was one since Open.
  Status Flush();
  // Has any record been lost since Open?
  bool Incomplete() const;
  WriterStats GetStats() const;

 private:
  // (the implementation's members)
  struct Impl;
  std::unique_ptr<Impl> impl_;
  explicit Writer(std::unique_ptr<Impl> impl);
};

struct ReadResult {
  std::vector<Record> records;  // audit/log.1's, then audit/log's, in order
  uint64_t damaged_lines = 0;   // lines that did not decode (skipped)
};

// Reads both generations beneath `state_fd` (a missing audit/ or file is an
// empty log). Symlinks are refused as in Writer::Open.
Result<ReadResult> ReadLog(int state_fd, const std::string& shown);

// For `acqfs log --follow`: the records appended since the last Poll (the
// first Poll returns none: call ReadLog first). Follows a rotation (the
// file it read became log.1) by reading the new audit/log from its start.
class Follower {
 public:
  static Result<Follower> Open(int state_fd, const std::string& shown);
  Result<std::vector<Record>> Poll();

 private:
  Follower() = default;
  int state_fd_ = -1;  // not owned
  std::string shown_;
  UniqueFd fd_;
  uint64_t ino_ = 0;
  uint64_t offset_ = 0;
  std::string partial_;  // a line not yet ended
};

// Copies both generations of the log beneath `from_state_fd` to beneath
// `to_state_fd` (a fork: the child starts with its parent's log up to this
// point), with no torn line. Nothing to copy is no error.
Status CopyLog(int from_state_fd, const std::string& from_shown,
               int to_state_fd, const std::string& to_shown);

}  // namespace acqfs::audit

#endif  // ACQFS_AUDIT_LOG_FILE_H_
