#include "fs/layer_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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

}  // namespace acqfs
