#include "fs/quota.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <utility>
#include <vector>

#include "common/dir_walk.h"
#include "common/handle.h"
#include "common/sys.h"

namespace acqfs {

Result<uint64_t> Quota::Measure(int upper_fd, const std::string& shown) {
  uint64_t total = 0;
  std::set<std::pair<dev_t, ino_t>> seen;  // multiply-linked inodes
  // A bounded number of descriptors however wide or deep the layer is.
  TreeVisitor visit;
  visit.entry = [&](int dir, const sys::DirEntry& e,
                    const std::string& where) -> Result<bool> {
    auto st = sys::StatAt(dir, e.name, where);
    if (!st) return st.error();
    if (S_ISDIR(st->st_mode)) return true;
    if (S_ISREG(st->st_mode) || S_ISLNK(st->st_mode)) {
      if (st->st_nlink > 1 && !seen.insert({st->st_dev, st->st_ino}).second)
        return false;
      total += static_cast<uint64_t>(st->st_size);
    }
    return false;
  };
  ACQFS_TRY(WalkTree(upper_fd, "", shown, visit));
  return total;
}

Status Quota::Reserve(uint64_t bytes, const std::string& shown) {
  uint64_t cur = used_.load();
  for (;;) {
    if (bytes > limit_ || cur > limit_ - bytes)
      return Error::Of(EDQUOT, "write (the sandbox's quota is full)", shown);
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

std::mutex& Quota::StripeFor(const void* key) {
  auto h = reinterpret_cast<uintptr_t>(key);
  return stripes_[(h >> 4) % stripes_.size()];
}

Result<int64_t> Quota::Charged(const void* key, int fd, off_t end,
                               const std::function<int64_t()>& op,
                               const std::string& shown) {
  std::lock_guard<std::mutex> l(StripeFor(key));
  struct stat before;
  if (::fstat(fd, &before) != 0) return Error::Errno("fstat", shown);
  uint64_t want =
      end > before.st_size ? static_cast<uint64_t>(end - before.st_size) : 0;
  ACQFS_TRY(Reserve(want, shown));
  int64_t r = op();
  struct stat after;
  if (::fstat(fd, &after) != 0) {
    // Keep the reservation: the count errs on the full side.
    return r;
  }
  int64_t grew = static_cast<int64_t>(after.st_size) -
                 static_cast<int64_t>(before.st_size);
  if (grew < 0) {
    Release(want + static_cast<uint64_t>(-grew));
  } else if (static_cast<uint64_t>(grew) < want) {
    Release(want - static_cast<uint64_t>(grew));
  } else if (static_cast<uint64_t>(grew) > want) {
    Force(static_cast<uint64_t>(grew) - want);
  }
  return r;
}

}  // namespace acqfs
