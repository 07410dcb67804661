#include "fs/live_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer_format.h"

namespace acqfs {

Result<LiveFileRecord> LiveFileRecord::Open(int work_fd,
                                            const std::string& work_path) {
  const std::string shown = work_path + "/" + kLiveFileRecordName;
  UniqueFd fd(::openat(work_fd, kLiveFileRecordName,
                       O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return Error::Errno("open", shown);
  // Whatever an earlier daemon left was fenced when the layers were
  // claimed (FenceLiveFiles): every slot is free.
  if (::ftruncate(fd.get(), 0) != 0) return Error::Errno("truncate", shown);
  return LiveFileRecord(std::move(fd), shown);
}

Result<uint32_t> LiveFileRecord::Add(uint64_t ino) {
  std::lock_guard<std::mutex> l(mu_);
  uint32_t slot = 0;
  while (slot < used_.size() && used_[slot]) ++slot;
  const off_t at = static_cast<off_t>(slot) * 8;
  if (::pwrite(fd_.get(), &ino, sizeof ino, at) != sizeof ino)
    return Error::Errno("write", shown_);
  if (slot == used_.size())
    used_.push_back(true);
  else
    used_[slot] = true;
  return slot;
}

void LiveFileRecord::Remove(uint32_t slot) {
  std::lock_guard<std::mutex> l(mu_);
  if (slot >= used_.size() || !used_[slot]) return;
  const uint64_t zero = 0;
  // A slot that cannot be cleared stays listed: the next claim copies a
  // file for nothing, which is harmless.
  if (::pwrite(fd_.get(), &zero, sizeof zero, static_cast<off_t>(slot) * 8) ==
      sizeof zero)
    used_[slot] = false;
}

Status ReplicateFile(int src, int dirfd, const std::string& tmp,
                     const std::string& shown) {
  auto st = sys::Fstat(src, shown);
  if (!st) return st.error();
  UniqueFd out(::openat(dirfd, tmp.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0600));
  if (!out) return Error::Errno("create", shown);
  auto fail = [&](Status s) {
    (void)::unlinkat(dirfd, tmp.c_str(), 0);
    return s;
  };
  if (Status s = CopyData(src, out.get(), shown); !s) return fail(s);
  auto keys = sys::ListXattrs("/proc/self/fd/" + std::to_string(src), shown,
                              /*follow=*/true);
  if (!keys) return fail(keys.error());
  for (const auto& k : *keys) {
    auto v = sys::FGetXattr(src, k, shown);
    if (!v) {
      if (v.error().err == ENODATA) continue;
      return fail(v.error());
    }
    if (Status s = sys::FSetXattr(out.get(), k, *v, 0, shown); !s)
      return fail(s);
  }
  if (::fchown(out.get(), st->st_uid, st->st_gid) != 0)
    return fail(Error::Errno("chown", shown));
  if (::fchmod(out.get(), st->st_mode & 07777) != 0)
    return fail(Error::Errno("chmod", shown));
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (::futimens(out.get(), ts) != 0)
    return fail(Error::Errno("utimens", shown));
  return Ok();
}

Status LinkOver(int src_dirfd, const std::string& src_name, int dst_dirfd,
                const std::string& dst_name, const std::string& shown) {
  const std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
  if (::linkat(src_dirfd, src_name.c_str(), dst_dirfd, tmp.c_str(), 0) != 0)
    return Error::Errno("link", shown);
  Status s = sys::Renameat2(dst_dirfd, tmp, dst_dirfd, dst_name, 0, shown);
  if (!s) (void)::unlinkat(dst_dirfd, tmp.c_str(), 0);
  return s;
}

namespace {

struct Fence {
  const std::set<uint64_t>& inos;
  // Where the copy of each inode met so far is: (directory, name), for
  // its other names to link to.
  std::map<uint64_t, std::pair<UniqueFd, std::string>> copies;
  size_t fenced = 0;

  Status Walk(int dirfd, const std::string& shown) {
    auto entries = sys::ReadDir(dirfd, shown);
    if (!entries) return entries.error();
    for (const auto& e : *entries) {
      const std::string path = shown + "/" + e.name;
      if (e.type == DT_DIR) {
        auto sub = sys::OpenBeneath(
            dirfd, e.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0,
            path);
        if (!sub) return sub.error();
        ACQFS_TRY(Walk(sub->get(), path));
        continue;
      }
      if ((e.type != DT_REG && e.type != DT_UNKNOWN) || !inos.count(e.ino))
        continue;
      ACQFS_TRY(Replace(dirfd, e.name, path));
    }
    return Ok();
  }

  // `dirfd`/`name`, an inode a writer may hold, becomes a copy of it.
  Status Replace(int dirfd, const std::string& name, const std::string& shown) {
    UniqueFd f(
        ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!f) return Error::Errno("open", shown);
    auto st = sys::Fstat(f.get(), shown);
    if (!st) return st.error();
    if (!S_ISREG(st->st_mode) || !inos.count(st->st_ino)) return Ok();
    ++fenced;
    // Another name of an inode already copied: it names the copy too.
    if (auto copy = copies.find(st->st_ino); copy != copies.end())
      return LinkOver(copy->second.first.get(), copy->second.second, dirfd,
                      name, shown);
    // The copy takes the name; the writer's inode is left with `tmp`,
    // which goes.
    const std::string tmp = sys::TempName(LayerFormat::kTempPrefix);
    ACQFS_TRY(ReplicateFile(f.get(), dirfd, tmp, shown));
    Status s = sys::Renameat2(dirfd, tmp, dirfd, name, RENAME_EXCHANGE, shown);
    if (!s) {
      (void)::unlinkat(dirfd, tmp.c_str(), 0);
      return s;
    }
    if (::unlinkat(dirfd, tmp.c_str(), 0) != 0)
      return Error::Errno("unlink", shown);
    UniqueFd d(::fcntl(dirfd, F_DUPFD_CLOEXEC, 0));
    if (!d) return Error::Errno("dup", shown);
    copies.emplace(st->st_ino, std::make_pair(std::move(d), name));
    return Ok();
  }
};

}  // namespace

Status FenceLiveFiles(int upper_fd, const std::string& upper_path, int work_fd,
                      const std::string& work_path, size_t* fenced) {
  if (fenced) *fenced = 0;
  const std::string shown = work_path + "/" + kLiveFileRecordName;
  UniqueFd fd(
      ::openat(work_fd, kLiveFileRecordName, O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return Ok();
    return Error::Errno("open", shown);
  }
  std::set<uint64_t> inos;
  uint64_t slot;
  off_t at = 0;
  for (;; at += sizeof slot) {
    ssize_t n = ::pread(fd.get(), &slot, sizeof slot, at);
    if (n < 0) return Error::Errno("read", shown);
    if (n < static_cast<ssize_t>(sizeof slot)) break;
    if (slot != 0) inos.insert(slot);
  }
  if (!inos.empty()) {
    Fence f{inos, {}, 0};
    UniqueFd root(::openat(upper_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return Error::Errno("open", upper_path);
    ACQFS_TRY(f.Walk(root.get(), upper_path));
    if (fenced) *fenced = f.fenced;
  }
  // Emptied only once every listed file is fenced: a failure leaves the
  // record for the next claim. (An empty record, the usual case, is left
  // as it is: no write at every claim.)
  if (at > 0 && ::ftruncate(fd.get(), 0) != 0)
    return Error::Errno("truncate", shown);
  return Ok();
}

}  // namespace acqfs
