#include "fs/quota.h"

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "common/dir_walk.h"
#include "common/sys.h"
#include "fs/boundary_note.h"

namespace acqfs {
namespace {

// The bytes of the blocks [offset, offset + length) touches, saturating.
uint64_t SpannedBytes(off_t offset, off_t length, uint64_t block) {
  if (length <= 0 || offset < 0) return 0;
  const uint64_t off = static_cast<uint64_t>(offset);
  const uint64_t len = static_cast<uint64_t>(length);
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (len > kMax - off - block) return kMax;
  const uint64_t first = off / block;
  const uint64_t last = (off + len + block - 1) / block;
  return (last - first) * block;
}

// The bytes of the blocks of [offset, offset + length) that no extent of
// the file open as `fd` covers yet (FIEMAP: written, preallocated and
// delayed-allocation extents all count as covered), so what writing the
// whole span can still allocate.
Result<uint64_t> UncoveredBytes(int fd, off_t offset, off_t length,
                                uint64_t block, const std::string& shown) {
  const uint64_t start = static_cast<uint64_t>(offset) / block * block;
  const uint64_t end = start + SpannedBytes(offset, length, block);
  constexpr unsigned kExtents = 32;
  // struct fiemap and the extents it returns, which follow it.
  std::vector<uint64_t> buf(
      (sizeof(struct fiemap) + kExtents * sizeof(struct fiemap_extent)) /
          sizeof(uint64_t) +
      1);
  auto* map = reinterpret_cast<struct fiemap*>(buf.data());
  uint64_t covered = 0;
  uint64_t pos = start;
  while (pos < end) {
    std::fill(buf.begin(), buf.end(), 0);
    map->fm_start = pos;
    map->fm_length = end - pos;
    map->fm_extent_count = kExtents;
    if (::ioctl(fd, FS_IOC_FIEMAP, map) != 0)
      return Error::Errno("ioctl FS_IOC_FIEMAP (the quota's overwrite check)",
                          shown);
    const unsigned n = map->fm_mapped_extents;
    if (n == 0) break;
    bool last = false;
    for (unsigned i = 0; i < n; i++) {
      const struct fiemap_extent& e = map->fm_extents[i];
      uint64_t lo = std::max<uint64_t>(e.fe_logical, pos);
      uint64_t hi = std::min<uint64_t>(e.fe_logical + e.fe_length, end);
      if (hi > lo) covered += hi - lo;
      pos = std::max<uint64_t>(pos, e.fe_logical + e.fe_length);
      if (e.fe_flags & FIEMAP_EXTENT_LAST) last = true;
    }
    if (last || n < kExtents) break;
  }
  const uint64_t span = end - start;
  return covered >= span ? 0 : span - covered;
}

}  // namespace

Result<uint64_t> Quota::Measure(int dir_fd, const std::string& shown) {
  auto top = sys::Fstat(dir_fd, shown);
  if (!top) return top.error();
  uint64_t total = Bytes(*top);
  std::set<std::pair<dev_t, ino_t>> seen;  // multiply-linked inodes
  // A bounded number of descriptors however wide or deep the layer is.
  TreeVisitor visit;
  visit.entry = [&](int dir, const sys::DirEntry& e,
                    const std::string& dir_shown) -> Result<bool> {
    auto st = sys::StatAt(dir, e.name, "");
    if (!st)
      return Error::Of(st.err(), st.error().op, dir_shown + "/" + e.name);
    const bool is_dir = S_ISDIR(st->st_mode);
    if (!is_dir && st->st_nlink > 1 &&
        !seen.insert({st->st_dev, st->st_ino}).second)
      return false;
    total += Bytes(*st);
    return is_dir;
  };
  ACQFS_TRY(WalkTree(dir_fd, "", shown, visit));
  return total;
}

Result<uint64_t> Quota::SoleBytes(int dirfd, const std::string& name,
                                  const std::string& shown) {
  struct stat st;
  bool found = false;
  ACQFS_TRY(sys::StatAtIfExists(dirfd, name, &st, &found, shown));
  if (!found) return uint64_t{0};
  if (!S_ISDIR(st.st_mode)) return st.st_nlink > 1 ? 0 : Bytes(st);
  uint64_t total = Bytes(st);
  TreeVisitor visit;
  visit.entry = [&](int dir, const sys::DirEntry& e,
                    const std::string& dir_shown) -> Result<bool> {
    auto s = sys::StatAt(dir, e.name, "");
    if (!s) return Error::Of(s.err(), s.error().op, dir_shown + "/" + e.name);
    const bool is_dir = S_ISDIR(s->st_mode);
    if (is_dir || s->st_nlink <= 1) total += Bytes(*s);
    return is_dir;
  };
  ACQFS_TRY(WalkTree(dirfd, name, shown, visit));
  return total;
}

Status Quota::Reserve(uint64_t bytes, const std::string& shown) {
  uint64_t cur = used_.load();
  for (;;) {
    if (bytes > limit_ || cur > limit_ - bytes) {
      NoteBoundary(kRefusedQuota, shown);
      return Error::Of(EDQUOT, "write (the sandbox's quota is full)", shown);
    }
    if (used_.compare_exchange_weak(cur, cur + bytes)) return Ok();
  }
}

void Quota::Release(uint64_t bytes) {
  uint64_t cur = used_.load();
  for (;;) {
    uint64_t next = cur > bytes ? cur - bytes : 0;
    if (used_.compare_exchange_weak(cur, next)) return;
  }
}

void Quota::Settle(uint64_t reserved, int64_t actual) {
  if (actual < 0) {
    Release(reserved + static_cast<uint64_t>(-actual));
  } else if (static_cast<uint64_t>(actual) < reserved) {
    Release(reserved - static_cast<uint64_t>(actual));
  } else {
    Force(static_cast<uint64_t>(actual) - reserved);
  }
}

std::mutex& Quota::StripeFor(const void* key) {
  auto h = reinterpret_cast<uintptr_t>(key);
  return stripes_[(h >> 4) % stripes_.size()];
}

void Quota::CatchUpLocked(uint64_t* record, uint64_t now) {
  if (*record != kUnseen)
    Settle(0, static_cast<int64_t>(now) - static_cast<int64_t>(*record));
  *record = now;
}

void Quota::Seen(uint64_t* record, uint64_t bytes) {
  std::lock_guard<std::mutex> l(StripeFor(record));
  *record = bytes;
}

void Quota::CatchUp(uint64_t* record, uint64_t now) {
  std::lock_guard<std::mutex> l(StripeFor(record));
  CatchUpLocked(record, now);
}

void Quota::Hold(uint64_t* record, uint64_t now) {
  std::lock_guard<std::mutex> l(StripeFor(record));
  if (*record == kUnseen) *record = now;
}

void Quota::Freed(uint64_t* record, uint64_t now) {
  std::lock_guard<std::mutex> l(StripeFor(record));
  Release(*record != kUnseen ? *record : now);
  *record = 0;
}

Result<int64_t> Quota::Charged(uint64_t* record, int fd, Charge charge,
                               const std::function<int64_t()>& op,
                               const std::string& shown) {
  static std::mutex no_record;  // objects without a record: one lock
  std::lock_guard<std::mutex> l(record ? StripeFor(record) : no_record);
  struct stat before;
  if (::fstat(fd, &before) != 0) return Error::Errno("fstat", shown);
  if (record) CatchUpLocked(record, Bytes(before));
  uint64_t want = 0;
  if (charge.kind == Charge::kAdmit) {
    ACQFS_TRY(Admit(shown));
  } else if (charge.kind == Charge::kSpan) {
    const uint64_t block = before.st_blksize > 0 ? before.st_blksize : 4096;
    want = SpannedBytes(charge.offset, charge.length, block);
    if (Status s = Reserve(want, shown); !s) {
      // An overwrite allocates nothing: only the span's holes need room.
      auto holes =
          UncoveredBytes(fd, charge.offset, charge.length, block, shown);
      if (!holes || *holes >= want) return s.error();
      want = *holes;
      ACQFS_TRY(Reserve(want, shown));
    }
  }
  int64_t r = op();
  struct stat after;
  if (::fstat(fd, &after) != 0) {
    // Keep the reservation, and see the file afresh next time: the count
    // errs on the full side.
    if (record) *record = kUnseen;
    return r;
  }
  Settle(want, static_cast<int64_t>(Bytes(after)) -
                   static_cast<int64_t>(Bytes(before)));
  if (record) *record = Bytes(after);
  return r;
}

// ---------------------------------------------------------------- Change

Status Quota::Change::Reserve(uint64_t bytes, const std::string& shown) {
  if (!q_) return Ok();
  ACQFS_TRY(q_->Reserve(bytes, shown));
  reserved_ += bytes;
  return Ok();
}

Status Quota::Change::Watch(int dirfd, const std::string& shown) {
  if (!q_) return Ok();
  auto st = sys::Fstat(dirfd, shown);
  if (!st) return st.error();
  for (const Watched& w : dirs_)
    if (w.dev == st->st_dev && w.ino == st->st_ino) return Ok();
  dirs_.push_back(Watched{dirfd, st->st_dev, st->st_ino, Bytes(*st)});
  return Ok();
}

uint64_t Quota::Change::Entry(int dirfd, const std::string& name,
                              const std::string& shown) {
  if (!q_) return 0;
  auto b = SoleBytes(dirfd, name, shown);
  if (b) return *b;
  unsure_ = true;
  return 0;
}

uint64_t Quota::Change::AddEntry(int dirfd, const std::string& name,
                                 const std::string& shown) {
  uint64_t b = Entry(dirfd, name, shown);
  Add(b);
  return b;
}

uint64_t Quota::Change::SubEntry(int dirfd, const std::string& name,
                                 const std::string& shown) {
  uint64_t b = Entry(dirfd, name, shown);
  Sub(b);
  return b;
}

uint64_t Quota::Change::AddNew(int dirfd, const std::string& name,
                               const std::string& shown) {
  if (!q_) return 0;
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    unsure_ = true;
    return 0;
  }
  const uint64_t b = !S_ISDIR(st.st_mode) && st.st_nlink > 1 ? 0 : Bytes(st);
  Add(b);
  return b;
}

void Quota::Change::Settle() {
  if (!q_) return;
  int64_t actual = delta_;
  for (const Watched& w : dirs_) {
    struct stat st;
    if (::fstat(w.fd, &st) != 0) {
      unsure_ = true;
      continue;
    }
    actual += static_cast<int64_t>(Bytes(st)) - static_cast<int64_t>(w.before);
  }
  if (unsure_ && actual < static_cast<int64_t>(reserved_))
    actual = static_cast<int64_t>(reserved_);
  q_->Settle(reserved_, actual);
  reserved_ = 0;
  delta_ = 0;
  unsure_ = false;
  dirs_.clear();
}

}  // namespace acqfs
