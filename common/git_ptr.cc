#include "common/git_ptr.h"

namespace acqfs {

Error GitError(int rc, const std::string& op, const std::string& path) {
  const git_error* e = git_error_last();
  std::string what = op;
  if (e && e->message) what += " (" + std::string(e->message) + ")";
  return Error::Of(rc == GIT_ENOTFOUND ? ENOENT : EIO, what, path);
}

std::string OidHex(const git_oid& id) {
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof buf, &id);
  return buf;
}

}  // namespace acqfs
