// The size cap on a sandbox's upper layer (docs/sandboxes.md, "Quota").
//
// What counts is what the upper layer holds on disk: the allocated blocks
// (st_blocks) of every inode of the upper layer and of work/acqfs-tmp, each
// inode once, and of the nameless files the daemon keeps for processes that
// hold them (fs/kept_data.h). So data, preallocation, directories, symlinks
// and xattr blocks all count, and a sparse file's holes do not.
//
// The count is measured once at mount (Measure) and then moved by every
// change, by what the change really allocated or freed, as fstat sees it
// before and after:
//   - a data call (write, fallocate, truncate, copy_file_range) runs through
//     Charged, which reserves the blocks the call may allocate first
//     (EDQUOT, and the call does not run, when they would pass the limit),
//     then settles to the file's st_blocks afterwards;
//   - a change of the namespace (copy-up, create, rename, unlink, ...) is a
//     Change: it reserves what it knows it will write, measures the
//     directories it touches before and after, and adds what it made or
//     subtracts what it freed;
//   - a regular file's blocks are given back when its last name and its last
//     holder are gone (Freed), not before.
// A regular file's record (Node::charged) is what the count holds for it:
// its st_blocks when the daemon last saw it. Growth the file system makes on
// its own between two calls (ext4 allocates extent-tree blocks when it
// writes dirty data back) is charged at the next sight of the file
// (CatchUp), so what a removal gives back is exactly what was charged.
//
// Thread-safety: all methods may be called concurrently. A file's calls and
// its record are serialised by a stripe lock chosen by the record's address
// (a leaf lock, held across the call it charges: no other lock is taken
// while it is held). A Change belongs to one thread.
#ifndef ACQFS_FS_QUOTA_H_
#define ACQFS_FS_QUOTA_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/handle.h"

namespace acqfs {

class Quota {
 public:
  // A record that has not seen its file yet.
  static constexpr uint64_t kUnseen = ~uint64_t{0};

  Quota(uint64_t limit, uint64_t used) : limit_(limit), used_(used) {}
  Quota(const Quota&) = delete;
  Quota& operator=(const Quota&) = delete;

  // What an inode holds on disk.
  static uint64_t Bytes(const struct stat& st) {
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }
  // What the directory `dir_fd` and everything below it hold on disk (the
  // definition above; du(1) counts the same). Fails, naming the path, on any
  // entry it cannot stat: a quota is never enforced on a guess.
  static Result<uint64_t> Measure(int dir_fd, const std::string& shown);
  // What `name` in `dirfd` holds alone: for a directory, its blocks and
  // those of everything below it, counting a non-directory only when no
  // other name links it. So it is what removing `name` frees, and what
  // making it (a copy, a link) added. 0 when `name` does not exist.
  static Result<uint64_t> SoleBytes(int dirfd, const std::string& name,
                                    const std::string& shown);

  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_.load(); }

  // Takes `bytes`; EDQUOT naming `shown` when used + bytes > limit. With 0,
  // it only says whether the quota is passed already (Admit).
  Status Reserve(uint64_t bytes, const std::string& shown);
  Status Admit(const std::string& shown) { return Reserve(0, shown); }
  // Takes `bytes` whatever the limit (growth that already happened).
  void Force(uint64_t bytes) { used_.fetch_add(bytes); }
  void Release(uint64_t bytes);
  // Turns a reservation of `reserved` into the change `actual` that was
  // measured afterwards.
  void Settle(uint64_t reserved, int64_t actual);

  // What a data call may allocate, for its reservation.
  struct Charge {
    enum Kind : uint8_t {
      kSettled,  // allocates nothing up front (truncate, punching a hole):
                 // never refused, settled to what it did
      kAdmit,    // grows by what cannot be known beforehand (an xattr):
                 // refused once the quota is passed, settled after
      kSpan,     // may allocate every block of [offset, offset + length)
    };
    Kind kind = kSettled;
    off_t offset = 0;
    off_t length = 0;
    static Charge Settled() { return {}; }
    static Charge Admitted() { return {kAdmit, 0, 0}; }
    static Charge Span(off_t offset, off_t length) {
      return {kSpan, offset, length};
    }
  };

  // Runs `op` on the object open as `fd` (any kind of descriptor, O_PATH
  // included): reserves what `charge` says (EDQUOT, and `op` does not run,
  // when that would pass the limit; a span whose blocks are already
  // allocated, an overwrite or a write into preallocated space, needs only
  // its holes), runs `op`, and settles to the change of the object's
  // st_blocks. `record` is the file's record (see above; null for an object
  // that is not a regular file), also the key of the stripe lock. `op`
  // returns a negative errno-style value on failure, as the system calls do.
  Result<int64_t> Charged(uint64_t* record, int fd, Charge charge,
                          const std::function<int64_t()>& op,
                          const std::string& shown);

  // The file of `record` was just made or copied by the daemon, and the
  // count holds `bytes` for it.
  void Seen(uint64_t* record, uint64_t bytes);
  // The file of `record` holds `now`: charges (or gives back) what it grew
  // unseen since the record saw it last.
  void CatchUp(uint64_t* record, uint64_t now);
  // The last name of the file of `record` is gone, `now` as stat saw it
  // before, but a holder may keep the data: what the count holds for it
  // stays (Freed gives it back).
  void Hold(uint64_t* record, uint64_t now);
  // The last name and the last holder of the file of `record` are gone (or
  // go now), which frees what it holds, `now` as stat sees it just before:
  // gives back what the count holds for it.
  void Freed(uint64_t* record, uint64_t now);

  class Change;

 private:
  std::mutex& StripeFor(const void* key);
  void CatchUpLocked(uint64_t* record, uint64_t now);

  const uint64_t limit_;
  std::atomic<uint64_t> used_;
  std::array<std::mutex, 64> stripes_;
};

// One change of the upper layer's namespace, as the quota sees it: what it
// reserved, the directories it touches (measured when watched and again when
// the change settles, so a directory that grew a block counts), and what it
// made or freed. Settles when it goes out of scope. With a null quota every
// method does nothing. A Change whose measurement fails after the change
// was made keeps its reservation: the count errs on the full side.
// Thread-safety: one thread; the caller holds the overlay's tree lock
// exclusive, so no other change of the namespace runs meanwhile.
class Quota::Change {
 public:
  explicit Change(Quota* q) : q_(q) {}
  ~Change() { Settle(); }
  Change(const Change&) = delete;
  Change& operator=(const Change&) = delete;

  bool active() const { return q_ != nullptr; }
  // Reserves `bytes` (0: admits only while the quota is not passed).
  Status Reserve(uint64_t bytes, const std::string& shown);
  // Measures the directory open as `dirfd` now and when the change settles.
  // The descriptor is borrowed: it must stay open until then (declare the
  // Change after it). A directory watched twice counts once.
  Status Watch(int dirfd, const std::string& shown);
  void Add(uint64_t bytes) { delta_ += static_cast<int64_t>(bytes); }
  void Sub(uint64_t bytes) { delta_ -= static_cast<int64_t>(bytes); }
  // Adds / subtracts SoleBytes of `name` in `dirfd`; returns it.
  uint64_t AddEntry(int dirfd, const std::string& name,
                    const std::string& shown);
  // The same for an object just made, with nothing below it (one stat).
  uint64_t AddNew(int dirfd, const std::string& name, const std::string& shown);
  uint64_t SubEntry(int dirfd, const std::string& name,
                    const std::string& shown);
  // Settles now (done by the destructor otherwise); the change is empty
  // afterwards.
  void Settle();

 private:
  // SoleBytes of `name` in `dirfd` (0, and the change unsure, when the
  // measurement fails).
  uint64_t Entry(int dirfd, const std::string& name, const std::string& shown);

  struct Watched {
    int fd;  // borrowed
    dev_t dev;
    ino_t ino;
    uint64_t before;
  };
  Quota* q_;
  uint64_t reserved_ = 0;
  int64_t delta_ = 0;
  bool unsure_ = false;  // a measurement failed: keep the reservation
  std::vector<Watched> dirs_;
};

}  // namespace acqfs

#endif  // ACQFS_FS_QUOTA_H_
