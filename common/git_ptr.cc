#include "common/git_ptr.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace acqfs {

Error GitError(int rc, const std::string& op, const std::string& path) {
  const git_error* e = git_error_last();
  std::string what = op;
  if (e && e->message) what += " (" + std::string(e->message) + ")";
  return Error::Of(rc == GIT_ENOTFOUND ? ENOENT : EIO, what, path);
}

int GitOpenRepository(git_repository** out, const std::string& path,
                      unsigned flags) {
  int rc = 0;
  for (int attempt = 0;; ++attempt) {
    *out = nullptr;
    rc = git_repository_open_ext(out, path.c_str(), flags, nullptr);
    if (rc >= 0 || attempt >= 50) return rc;
    const git_error* e = git_error_last();
    const bool replaced_under_it =
        e && e->klass == GIT_ERROR_FILESYSTEM && e->message &&
        std::strncmp(e->message, "could not read (expected", 24) == 0;
    if (!replaced_under_it) return rc;
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + attempt / 10));
  }
}

std::string OidHex(const git_oid& id) {
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof buf, &id);
  return buf;
}

}  // namespace acqfs
