#include "fs/layer_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

#include "common/sys.h"

namespace acqfs {

XattrNamespace LayerFormat::DefaultNamespace(bool force_user) {
  if (force_user || ::geteuid() != 0) return XattrNamespace::kUser;
  return XattrNamespace::kTrusted;
}

std::string LayerFormat::Prefix() const {
  return ns_ == XattrNamespace::kTrusted ? "trusted.overlay." : "user.overlay.";
}

bool LayerFormat::IsPrivateXattr(std::string_view name) const {
  std::string p = Prefix();
  return name.substr(0, p.size()) == p;
}

std::string LayerFormat::MakeOpaqueValue(OpaqueMark m) {
  switch (m) {
    case OpaqueMark::kOpaque:
      return "y";
    case OpaqueMark::kMayHoldXattrWhiteouts:
      return "x";
    case OpaqueMark::kNone:
      break;
  }
  return "";
}

OpaqueMark LayerFormat::ParseOpaqueValue(std::string_view v) {
  if (v == "y") return OpaqueMark::kOpaque;
  if (v == "x") return OpaqueMark::kMayHoldXattrWhiteouts;
  return OpaqueMark::kNone;
}

std::string LayerFormat::MakeOriginValue(uint64_t ino) {
  return std::to_string(ino);
}

uint64_t LayerFormat::ParseOriginValue(std::string_view v) {
  if (v.empty() || v.size() > 20) return 0;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return 0;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

Result<uint64_t> LayerFormat::ReadOrigin(int dirfd, const std::string& name,
                                         const std::string& shown) const {
  auto v = sys::GetXattr(sys::XattrPath(dirfd, name), OriginKey(), shown);
  if (!v) {
    int e = v.err();
    if (e == ENODATA || e == ENOTSUP || e == EPERM) return uint64_t{0};
    return v.error();
  }
  return ParseOriginValue(*v);
}

Status LayerFormat::SetOrigin(int dirfd, const std::string& name, uint64_t ino,
                              const std::string& shown) const {
  Status s = sys::SetXattr(sys::XattrPath(dirfd, name), OriginKey(),
                           MakeOriginValue(ino), 0, shown);
  if (!s && (s.err() == EPERM || s.err() == ENOTSUP)) {
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
      return Ok();
  }
  return s;
}

Status LayerFormat::SetOriginFd(int fd, uint64_t ino,
                                const std::string& shown) const {
  return sys::FSetXattr(fd, OriginKey(), MakeOriginValue(ino), 0, shown);
}

Status LayerFormat::MakeWhiteout(int dirfd, const std::string& name,
                                 const std::string& shown) {
  if (::mknodat(dirfd, name.c_str(), kWhiteoutMode, makedev(0, 0)) != 0)
    return Error::Errno("mknod whiteout", shown);
  return Ok();
}

Result<OpaqueMark> LayerFormat::ReadOpaque(int dirfd, const std::string& name,
                                           const std::string& shown) const {
  auto v = sys::GetXattr(sys::XattrPath(dirfd, name), OpaqueKey(), shown);
  if (!v) {
    int e = v.err();
    if (e == ENODATA || e == ENOTSUP || e == EPERM) return OpaqueMark::kNone;
    return v.error();
  }
  return ParseOpaqueValue(*v);
}

Status LayerFormat::SetOpaque(int dirfd, const std::string& name,
                              const std::string& shown) const {
  return sys::SetXattr(sys::XattrPath(dirfd, name), OpaqueKey(),
                       MakeOpaqueValue(OpaqueMark::kOpaque), 0, shown);
}

Result<bool> LayerFormat::IsXattrWhiteout(int dirfd, const std::string& name,
                                          const std::string& shown) const {
  auto v = sys::GetXattr(sys::XattrPath(dirfd, name), WhiteoutKey(), shown);
  if (v) return true;
  if (v.err() == ENODATA || v.err() == ENOTSUP) return false;
  return v.error();
}

Result<bool> LayerFormat::IsWhiteoutEntry(int dirfd, const std::string& name,
                                          const struct stat& st,
                                          bool dir_holds_xattr_whiteouts,
                                          const std::string& shown) const {
  if (IsWhiteout(st)) return true;
  if (!dir_holds_xattr_whiteouts || !S_ISREG(st.st_mode) || st.st_size != 0)
    return false;
  return IsXattrWhiteout(dirfd, name, shown);
}

bool LayerFormat::IsOverlayXattr(std::string_view name) {
  return name.starts_with("trusted.overlay.") ||
         name.starts_with("user.overlay.");
}

}  // namespace acqfs
