#include "common/git_ptr.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

namespace acqfs {

void GitLibrary::KeepForProcess() {
  static std::once_flag once;
  std::call_once(once, [] { git_libgit2_init(); });
}

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

GitOpenFailure ClassifyGitOpenFailure(int rc) {
  const git_error* e = git_error_last();
  const bool not_there =
      rc == GIT_ENOTFOUND && e && e->klass == GIT_ERROR_REPOSITORY &&
      e->message &&
      std::strncmp(e->message, "could not find repository", 25) == 0;
  return not_there ? GitOpenFailure::kNoRepository : GitOpenFailure::kRefused;
}

namespace {

// The uid git trusts besides the effective one: SUDO_UID, for root only
// (git's ensure_valid_ownership; libgit2 1.5.1 as Debian ships it does the
// same).
std::optional<uid_t> SudoUid() {
  if (::geteuid() != 0) return std::nullopt;
  const char* v = std::getenv("SUDO_UID");
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  unsigned long n = std::strtoul(v, &end, 10);
  if (errno != 0 || *end != '\0' || n > static_cast<uid_t>(-2))
    return std::nullopt;
  return static_cast<uid_t>(n);
}

}  // namespace

Error GitOpenError(int rc, const std::string& op, const std::string& path) {
  const git_error* e = git_error_last();
  const bool ownership =
      rc == GIT_EOWNER ||
      (e && e->message &&
       (std::strstr(e->message, "safe.directory") ||
        std::strstr(e->message, "not owned by current user")));
  Error base = GitError(rc, op, path);
  if (!ownership) return base;
  const uid_t me = ::geteuid();
  const std::optional<uid_t> sudo = SudoUid();
  for (const std::string& p : {path, path + "/.git"}) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (st.st_uid == me || (sudo && st.st_uid == *sudo)) continue;
    const std::string owner = std::to_string(st.st_uid);
    return Error::Of(
        EPERM,
        op + ": " + p + " is owned by uid " + owner +
            ", and this acqfs runs as uid " + std::to_string(me) +
            ": git and libgit2 refuse a repository another user owns, "
            "\"dubious ownership\"; run acqfs as uid " +
            owner +
            " (or through sudo from that user), or trust the checkout with "
            "`git config --global --add safe.directory " +
            path + "`",
        path);
  }
  return base;
}

std::string OidHex(const git_oid& id) {
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof buf, &id);
  return buf;
}

}  // namespace acqfs
