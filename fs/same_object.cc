// SameObject (see same_object.h). Every object is opened or read relative to
// its parent directory's descriptor, never following a symlink; the sys
// helpers get an empty `shown`, and a failure is given the object's absolute
// path (Named) only then.
#include "fs/same_object.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/sys.h"

namespace acqfs {
namespace {

constexpr size_t kChunk = 256 * 1024;  // bytes compared per read
const std::string kNoName;

// `e` naming `rel` in `layer`, unless it says the object is gone: then
// *vanished is set and the error is dropped (nullopt).
std::optional<Error> Failure(Error e, const Layer& layer,
                             const std::string& rel, bool* vanished) {
  if (e.err == ENOENT) {
    *vanished = true;
    return std::nullopt;
  }
  e.path = layer.Shown(rel);
  return e;
}

// Reads up to `n` bytes, fewer only at the end of the file.
Result<size_t> ReadFull(int fd, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("read", "");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

// The xattr names of an object without the format's markers, sorted.
Result<std::vector<std::string>> UserXattrs(const std::string& xpath) {
  auto names = sys::ListXattrs(xpath, kNoName);
  if (!names) return names.error();
  std::erase_if(*names, [](const std::string& k) {
    return LayerFormat::IsOverlayXattr(k);
  });
  std::sort(names->begin(), names->end());
  return names;
}

}  // namespace

Result<ObjectDiff> ObjectComparer::Compare(int upper_dir, int lower_dir,
                                           const std::string& name,
                                           const std::string& rel,
                                           const struct stat& up,
                                           const struct stat& lo, unsigned what,
                                           unsigned layer) {
  own_ = &layers_.At(layer == kUpperLayer || layer == 0 ? layers_.upper_number()
                                                        : layer);
  ObjectDiff d;
  if ((up.st_mode & S_IFMT) != (lo.st_mode & S_IFMT)) {
    d.type = true;
    return d;
  }
  d.perm = (up.st_mode & 07777) != (lo.st_mode & 07777);
  d.exec =
      S_ISREG(up.st_mode) && (up.st_mode & S_IXUSR) != (lo.st_mode & S_IXUSR);
  d.owner = up.st_uid != lo.st_uid || up.st_gid != lo.st_gid;
  if (what & kContent) {
    auto same =
        SameContent(upper_dir, lower_dir, name, rel, up, lo, &d.vanished);
    if (!same) return same.error();
    d.content = !*same;
    if (d.vanished) return d;
  }
  if (what & kXattrs) {
    auto same = SameXattrs(upper_dir, lower_dir, name, rel, &d.vanished);
    if (!same) return same.error();
    d.xattrs = !*same;
  }
  return d;
}

// Same type on both sides: the bytes of a regular file, the target of a
// symlink, the device number of a device.
Result<bool> ObjectComparer::SameContent(int upper_dir, int lower_dir,
                                         const std::string& name,
                                         const std::string& rel,
                                         const struct stat& up,
                                         const struct stat& lo,
                                         bool* vanished) {
  if (S_ISREG(up.st_mode)) {
    if (up.st_size != lo.st_size) return false;
    if (up.st_size == 0) return true;
    return SameBytes(upper_dir, lower_dir, name, rel, vanished);
  }
  if (S_ISLNK(up.st_mode)) {
    if (up.st_size != lo.st_size) return false;
    auto a = sys::ReadLinkAt(upper_dir, name, kNoName);
    if (!a) {
      if (auto e = Failure(a.error(), *own_, rel, vanished)) return *e;
      return true;
    }
    auto b = sys::ReadLinkAt(lower_dir, name, kNoName);
    if (!b) {
      if (auto e = Failure(b.error(), layers_.lower, rel, vanished)) return *e;
      return true;
    }
    return *a == *b;
  }
  if (S_ISCHR(up.st_mode) || S_ISBLK(up.st_mode))
    return up.st_rdev == lo.st_rdev;
  return true;  // directories, fifos and sockets hold no content
}

// Two regular files of equal size, chunk by chunk, up to the first
// difference.
Result<bool> ObjectComparer::SameBytes(int upper_dir, int lower_dir,
                                       const std::string& name,
                                       const std::string& rel, bool* vanished) {
  const int flags = O_RDONLY | O_NOFOLLOW;
  auto ufd = sys::OpenBeneath(upper_dir, name, flags, 0, kNoName);
  if (!ufd) {
    if (auto e = Failure(ufd.error(), *own_, rel, vanished)) return *e;
    return true;
  }
  // Reading the host's files leaves their atimes alone where we may.
  auto lfd = sys::OpenBeneath(lower_dir, name, flags | O_NOATIME, 0, kNoName);
  if (!lfd && lfd.err() == EPERM)
    lfd = sys::OpenBeneath(lower_dir, name, flags, 0, kNoName);
  if (!lfd) {
    if (auto e = Failure(lfd.error(), layers_.lower, rel, vanished)) return *e;
    return true;
  }
  if (upper_buf_.empty()) {
    upper_buf_.resize(kChunk);
    lower_buf_.resize(kChunk);
  }
  for (;;) {
    auto a = ReadFull(ufd->get(), upper_buf_.data(), kChunk);
    if (!a) return Error::Of(a.err(), "read", own_->Shown(rel));
    auto b = ReadFull(lfd->get(), lower_buf_.data(), kChunk);
    if (!b) return Error::Of(b.err(), "read", layers_.lower.Shown(rel));
    if (*a != *b) return false;  // one changed size while we read
    if (std::memcmp(upper_buf_.data(), lower_buf_.data(), *a) != 0)
      return false;
    if (*a < kChunk) return true;
  }
}

// The same extended attributes with the same values, the format's markers
// left out.
Result<bool> ObjectComparer::SameXattrs(int upper_dir, int lower_dir,
                                        const std::string& name,
                                        const std::string& rel,
                                        bool* vanished) {
  const std::string upath = sys::XattrPath(upper_dir, name);
  const std::string lpath = sys::XattrPath(lower_dir, name);
  auto un = UserXattrs(upath);
  if (!un) {
    if (auto e = Failure(un.error(), *own_, rel, vanished)) return *e;
    return true;
  }
  auto ln = UserXattrs(lpath);
  if (!ln) {
    if (auto e = Failure(ln.error(), layers_.lower, rel, vanished)) return *e;
    return true;
  }
  if (*un != *ln) return false;
  for (const std::string& key : *un) {
    auto a = sys::GetXattr(upath, key, kNoName);
    if (!a && a.err() == ENODATA) return false;  // removed meanwhile
    if (!a) {
      if (auto e = Failure(a.error(), *own_, rel, vanished)) return *e;
      return true;
    }
    auto b = sys::GetXattr(lpath, key, kNoName);
    if (!b && b.err() == ENODATA) return false;  // removed meanwhile
    if (!b) {
      if (auto e = Failure(b.error(), layers_.lower, rel, vanished)) return *e;
      return true;
    }
    if (*a != *b) return false;
  }
  return true;
}

}  // namespace acqfs
