#include "state/as_owner.h"

#include <grp.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace acqfs::cli {
namespace {
// The object acting now (at most one: commands take one at their start),
// for DropActive. Touched only by the command's main thread.
AsOwner* active = nullptr;
}  // namespace

void AsOwner::DropActive() {
  if (active) active->Drop();
}

Result<AsOwner> AsOwner::Of(const std::string& dir) {
  AsOwner a;
  if (::geteuid() != 0) return a;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return a;
    return Error::Errno("stat", dir);
  }
  if (st.st_uid == 0) return a;
  const int n = ::getgroups(0, nullptr);
  if (n < 0) return Error::Errno("getgroups", dir);
  a.groups_.resize(static_cast<size_t>(n));
  if (n > 0 && ::getgroups(n, a.groups_.data()) != n)
    return Error::Errno("getgroups", dir);
  const gid_t gid = st.st_gid;
  if (::setgroups(1, &gid) != 0)
    return Error::Errno("setgroups (act as the owner of)", dir);
  a.acting_ = true;  // from here the destructor restores
  a.uid_ = st.st_uid;
  // setfsuid/setfsgid report no error: the id is read back.
  a.old_gid_ = static_cast<gid_t>(::setfsgid(st.st_gid));
  a.old_uid_ = static_cast<uid_t>(::setfsuid(st.st_uid));
  if (static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != st.st_gid ||
      static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != st.st_uid)
    return Error::Of(EPERM, "setfsuid (act as the owner of)", dir);
  active = &a;
  return a;
}

AsOwner::AsOwner(AsOwner&& o) noexcept
    : acting_(std::exchange(o.acting_, false)),
      uid_(o.uid_),
      old_uid_(o.old_uid_),
      old_gid_(o.old_gid_),
      groups_(std::move(o.groups_)) {
  if (acting_) active = this;
}

AsOwner& AsOwner::operator=(AsOwner&& o) noexcept {
  if (this != &o) {
    Drop();
    acting_ = std::exchange(o.acting_, false);
    uid_ = o.uid_;
    old_uid_ = o.old_uid_;
    old_gid_ = o.old_gid_;
    groups_ = std::move(o.groups_);
    if (acting_) active = this;
  }
  return *this;
}

AsOwner::~AsOwner() { Drop(); }

void AsOwner::Drop() {
  if (!acting_) return;
  acting_ = false;
  if (active == this) active = nullptr;
  ::setfsuid(old_uid_);
  ::setfsgid(old_gid_);
  // Root may always set its groups back; nothing to report from here.
  (void)::setgroups(groups_.size(), groups_.data());
}

}  // namespace acqfs::cli
