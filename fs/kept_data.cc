#include "fs/kept_data.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer.h"

namespace acqfs {
namespace {

std::string ProcPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

}  // namespace

bool KeptStore::TakeBudget(bool reserve) {
  const size_t limit = reserve ? 2 * budget_ : budget_;
  size_t cur = fds_.load();
  while (cur < limit) {
    if (fds_.compare_exchange_weak(cur, cur + 1)) return true;
  }
  return false;
}

namespace {
// Out of room to keep data in acqfs-tmp (a full disk or quota).
bool NoRoom(const Error& e) { return e.err == ENOSPC || e.err == EDQUOT; }
}  // namespace

Result<UniqueFd> KeptStore::OpenPath(int dirfd, const std::string& name,
                                     const std::string& shown) const {
  int fd = sys::OpenRelievingPressure([&] {
    return ::openat(dirfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  });
  if (fd < 0)
    return Error::Errno("open (keep the data of an unlinked file)", shown);
  return UniqueFd(fd);
}

Result<KeptData> KeptStore::KeepAndRemove(int dirfd, const std::string& name,
                                          const std::string& shown) {
  auto k = KeepAndRemove(dirfd, name, shown, false);
  // With no room to keep it in acqfs-tmp, the data is kept by a descriptor of
  // the reserve: an unlink must work on a full disk (it is how space is freed).
  if (!k && NoRoom(k.error())) k = KeepAndRemove(dirfd, name, shown, true);
  return k;
}

Result<KeptData> KeptStore::KeepAndRemove(int dirfd, const std::string& name,
                                          const std::string& shown,
                                          bool reserve) {
  KeptData k;
  if (TakeBudget(reserve)) {
    auto fd = OpenPath(dirfd, name, shown);
    if (fd && ::unlinkat(dirfd, name.c_str(), 0) != 0)
      fd = Error::Errno("unlink", shown);
    if (!fd) {
      GiveBudget();
      return fd.error();
    }
    k.where_ = KeptData::Where::kDescriptor;
    k.fd_ = std::move(*fd);
    return k;
  }
  if (reserve)
    return Error::Of(ENOSPC,
                     "keep the data of an unlinked file (no room in acqfs-tmp, "
                     "and the descriptor reserve is spent)",
                     shown);
  // One rename removes the name as unlink would and keeps the data.
  std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
  ACQFS_TRY(sys::Renameat2(dirfd, name, layers_->tmp.get(), tmp,
                           RENAME_NOREPLACE, shown));
  k.where_ = KeptData::Where::kTmpName;
  k.name_ = std::move(tmp);
  return k;
}

Result<KeptData> KeptStore::Keep(int dirfd, const std::string& name,
                                 const std::string& shown) {
  auto fd = OpenPath(dirfd, name, shown);
  if (!fd) return fd.error();
  KeptData k;
  if (TakeBudget(false)) {
    k.where_ = KeptData::Where::kDescriptor;
    k.fd_ = std::move(*fd);
    return k;
  }
  // A hard link through the descriptor's /proc entry: linkat with
  // AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH.
  std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
  if (::linkat(AT_FDCWD, ProcPath(fd->get()).c_str(), layers_->tmp.get(),
               tmp.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    Error e = Error::Errno("link (keep the data of an unlinked file)", shown);
    if (!NoRoom(e) || !TakeBudget(true)) return e;
    k.where_ = KeptData::Where::kDescriptor;  // the reserve, as above
    k.fd_ = std::move(*fd);
    return k;
  }
  k.where_ = KeptData::Where::kTmpName;
  k.name_ = std::move(tmp);
  return k;
}

KeptData KeptStore::AdoptTmpName(std::string name) {
  KeptData k;
  k.where_ = KeptData::Where::kTmpName;
  k.name_ = std::move(name);
  return k;
}

KeptData KeptStore::KeepLower(std::string rel, unsigned layer) {
  KeptData k;
  k.where_ = KeptData::Where::kLower;
  k.layer_ = static_cast<uint8_t>(layer);
  if (TakeBudget(false)) {
    // The inode itself, so the data survives the host deleting or replacing
    // the file meanwhile (as an open file's would).
    auto fd = layers_->LowerLayer(layer).Open(rel, O_PATH | O_NOFOLLOW);
    if (fd)
      k.fd_ = std::move(*fd);
    else
      GiveBudget();
  }
  k.name_ = std::move(rel);
  return k;
}

Status KeptStore::MakeChangeable(KeptData* k) {
  if (!k->in_lower()) return Ok();
  std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
  Status s = Error::Of(EINVAL, "copy", k->name_);
  if (k->fd_)
    s = CopyLowerFdTo(*layers_, k->fd_.get(), layers_->tmp.get(), tmp,
                      layers_->LowerLayer(k->layer_).Shown(k->name_));
  if (!s && s.err() == EINVAL)  // no descriptor, or not a regular file
    s = CopyLowerTo(*layers_, k->name_, layers_->tmp.get(), tmp,
                    LowerSource{k->layer_, 0});
  ACQFS_TRY(s);
  if (k->fd_) {
    k->fd_.reset();
    GiveBudget();
  }
  k->where_ = KeptData::Where::kTmpName;
  k->name_ = std::move(tmp);
  return Ok();
}

Result<UniqueFd> KeptStore::Open(const KeptData& k, int flags) const {
  const int mode = flags & O_ACCMODE;
  switch (k.where_) {
    case KeptData::Where::kDescriptor: {
      // Reopened through the descriptor's /proc entry, a magic link that
      // O_NOFOLLOW would refuse (it is not a symlink of the sandbox's).
      std::string proc = ProcPath(k.fd_.get());
      int fd = sys::OpenRelievingPressure([&] {
        return ::open(proc.c_str(), (flags & ~O_NOFOLLOW) | O_CLOEXEC);
      });
      if (fd < 0) return Error::Errno("open (unlinked file)", "(unlinked)");
      return UniqueFd(fd);
    }
    case KeptData::Where::kTmpName: {
      int fd = sys::OpenRelievingPressure([&] {
        return ::openat(layers_->tmp.get(), k.name_.c_str(),
                        flags | O_NOFOLLOW | O_CLOEXEC);
      });
      if (fd < 0)
        return Error::Errno("open (unlinked file)",
                            layers_->tmp_path + "/" + k.name_);
      return UniqueFd(fd);
    }
    case KeptData::Where::kLower: {
      if (!(flags & O_PATH) && (mode != O_RDONLY || (flags & O_TRUNC)))
        return Error::Of(EROFS, "write to a kept lower file", k.name_);
      if (!k.fd_) {
        if (flags & O_PATH)
          return layers_->LowerLayer(k.layer_).Open(k.name_,
                                                    O_PATH | O_NOFOLLOW);
        return layers_->LowerLayer(k.layer_).OpenForReading(k.name_);
      }
      std::string proc = ProcPath(k.fd_.get());
      const int base = (flags & O_PATH) ? O_PATH : O_RDONLY;
      int fd = sys::OpenRelievingPressure([&] {
        int f = ::open(proc.c_str(), base | O_CLOEXEC | O_NOATIME);
        if (f < 0 && errno == EPERM) f = ::open(proc.c_str(), base | O_CLOEXEC);
        return f;
      });
      if (fd < 0) return Error::Errno("open (unlinked file)", k.name_);
      return UniqueFd(fd);
    }
    case KeptData::Where::kNowhere:
      break;
  }
  return Error::Of(ENOENT, "open", "(unlinked)");
}

Result<struct stat> KeptStore::Stat(const KeptData& k) const {
  switch (k.where_) {
    case KeptData::Where::kDescriptor:
      return sys::Fstat(k.fd_.get(), "(unlinked)");
    case KeptData::Where::kTmpName:
      return sys::StatAt(layers_->tmp.get(), k.name_, layers_->tmp_path);
    case KeptData::Where::kLower:
      if (k.fd_) return sys::Fstat(k.fd_.get(), k.name_);
      return layers_->LowerLayer(k.layer_).Stat(k.name_);
    case KeptData::Where::kNowhere:
      break;
  }
  return Error::Of(ENOENT, "stat", "(unlinked)");
}

std::optional<uint64_t> KeptStore::FreedByRelease(const KeptData& k) const {
  if (k.empty() || k.in_lower()) return std::nullopt;
  auto st = Stat(k);
  if (!st) return std::nullopt;
  // A kept name in acqfs-tmp is one link of its own.
  nlink_t own = k.where_ == KeptData::Where::kTmpName ? 1 : 0;
  if (S_ISDIR(st->st_mode) || st->st_nlink > own) return std::nullopt;
  return static_cast<uint64_t>(st->st_blocks) * 512;
}

void KeptStore::Release(KeptData k) {
  if (k.empty() || (k.in_lower() && !k.fd_)) return;
  std::lock_guard<std::mutex> l(mu_);
  if (k.fd_) {
    doomed_fds_.push_back(std::move(k.fd_));  // still counted until Reap
  } else {
    doomed_names_.push_back(std::move(k.name_));
  }
  doomed_ = true;
}

void KeptStore::Reap() {
  if (!doomed_.load(std::memory_order_acquire)) return;
  std::vector<UniqueFd> fds;
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> l(mu_);
    fds.swap(doomed_fds_);
    names.swap(doomed_names_);
    doomed_ = false;
  }
  size_t closed = fds.size();
  fds.clear();  // closes them
  fds_.fetch_sub(closed);
  // Should an unlink fail, the next mount empties acqfs-tmp anyway.
  for (const auto& n : names)
    (void)::unlinkat(layers_->tmp.get(), n.c_str(), 0);
}

}  // namespace acqfs
