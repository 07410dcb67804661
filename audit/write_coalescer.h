// WriteCoalescer: the writes to one file, gathered into one kWrite record
// of the audit log (issue 36) instead of one record per FUSE write.
//
// A file (a node id) has at most one pending record. Its first write makes
// it from the record the caller gives (caller, path, layer, time); every
// write adds its bytes to Record::size (the sum of the writes' sizes, not
// of the bytes covered) and its byte range to Record::ranges, kept sorted
// and merged: ranges that overlap or touch become one ([0,10) + [10,20) is
// [0,20)). A write of zero bytes adds no range (it still starts a pending
// record). A range's end is clamped at UINT64_MAX.
//
// Bounds: a pending record holds at most `max_ranges` ranges (when a write
// brings it to that many, Add returns it and the file's next write starts a
// new one), and at most `max_files` files have a pending record (a write to
// one more file makes Add, or AddUnseen, return the oldest pending record,
// the one whose first write came first). So memory is bounded by
// max_files * max_ranges ranges plus the records' strings.
//
// The daemon takes a file's pending record when the file's last handle is
// released, it is flushed or synced, or before its rename or unlink is
// recorded (Take); in the handle-less mode, which sees no release, every
// few seconds (TakeOlderThan); and at unmount (TakeAll).
//
// Thread-safety: every member function may be called from any thread; one
// mutex guards all pending records.
#ifndef ACQFS_AUDIT_WRITE_COALESCER_H_
#define ACQFS_AUDIT_WRITE_COALESCER_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "audit/record.h"

namespace acqfs::audit {

class WriteCoalescer {
 public:
  // `max_ranges` and `max_files` are at least 1.
  explicit WriteCoalescer(size_t max_ranges = 256, size_t max_files = 65536);
  WriteCoalescer(const WriteCoalescer&) = delete;
  WriteCoalescer& operator=(const WriteCoalescer&) = delete;

  // A write of `size` bytes at `offset` to the file `node`. When nothing is
  // pending for `node`, `first` (the caller, path, layer and time of this
  // write; its op is made kWrite, its ranges and size replaced) starts its
  // pending record. Returns the records to write now: the pending record
  // of `node` when this write brought it to max_ranges ranges, and the
  // oldest pending record of another file when `node` was not pending and
  // max_files files were.
  std::vector<Record> Add(uint64_t node, uint64_t offset, uint64_t size,
                          const Record& first);

  // Add, for a file that has a pending record: adds the write and returns
  // true, with the records to write now in *out (as Add returns them).
  // False, adding nothing, when `node` has none: the caller then makes the
  // first write's record and calls Add. This saves making a `first` for
  // every write, without the race of Has() followed by Add (the record
  // taken in between, Add starting a new one from an empty `first`).
  bool AddIfPending(uint64_t node, uint64_t offset, uint64_t size,
                    std::vector<Record>* out);
  // Does `node` have a pending record? (Only a hint: another thread may
  // take or start it right after; see AddIfPending.)
  bool Has(uint64_t node) const;

  // A write the daemon did not see the data of (FUSE passthrough): marks
  // the pending record of `node` (made from `first` when none is)
  // ranges_known = false, keeping the ranges it has. Returns, as Add does,
  // the oldest pending record of another file when a new one pushed it
  // out.
  [[nodiscard]] std::vector<Record> AddUnseen(uint64_t node,
                                              const Record& first);

  // The pending record of `node`, if any, which is no longer pending.
  std::optional<Record> Take(uint64_t node);
  // The pending records whose first write (Record::time_ns) is before
  // `before_ns`, oldest first.
  std::vector<Record> TakeOlderThan(int64_t before_ns);
  // Every pending record, oldest first.
  std::vector<Record> TakeAll();

  // Files with a pending record.
  size_t pending() const;

 private:
  struct Pending {
    Record record;
    std::list<uint64_t>::iterator age;  // its place in order_
  };

  // The pending record of `node`, made from `first` when there is none (the
  // oldest other one then moved to *out when max_files are pending).
  // Called with mu_ held.
  std::unordered_map<uint64_t, Pending>::iterator Start(
      uint64_t node, const Record& first, std::vector<Record>* out);
  // Adds a write to the pending record `it`; moves it to *out when it
  // reached max_ranges_. Called with mu_ held.
  void AddTo(std::unordered_map<uint64_t, Pending>::iterator it,
             uint64_t offset, uint64_t size, std::vector<Record>* out);
  // Removes `it` from pending_ and order_, returning its record. Called
  // with mu_ held.
  Record Remove(std::unordered_map<uint64_t, Pending>::iterator it);

  const size_t max_ranges_;
  const size_t max_files_;

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Pending> pending_;  // guarded by mu_
  // The nodes of pending_, oldest first write first. Guarded by mu_.
  std::list<uint64_t> order_;
};

// Adds [offset, offset + size) (its end clamped at UINT64_MAX) to `ranges`,
// sorted half-open ranges that neither overlap nor touch, keeping them so.
// An empty range adds nothing. Exposed for tests.
void AddRange(std::vector<std::pair<uint64_t, uint64_t>>* ranges,
              uint64_t offset, uint64_t size);

}  // namespace acqfs::audit

#endif  // ACQFS_AUDIT_WRITE_COALESCER_H_
