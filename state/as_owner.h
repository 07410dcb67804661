// A root command on a state directory that another user owns acts on the
// file system as that user (docs/stack.md, "A root command on a user's
// state folder"). The owner may replace any name in their state folder,
// so a command run there as root (`sudo acqfs ...`, a rootful container's
// tooling) must neither read what the owner may not read (a meta.json
// naming root's repository as the host, a layer swapped for /etc) nor
// leave files the owner cannot use (a root-owned stack.json locked the
// owner out of their sandbox; a root squash left root-owned whiteouts).
// With the owner's file-system ids, the kernel answers every access as it
// would answer the owner, and everything created is the owner's.
//
// Thread-safety: the file-system ids are per thread (setfsuid(2)); take
// it on the command's main thread before any thread is started (threads
// inherit them), and drop it there. The supplementary groups are the
// process's (setgroups(3) sets them for every thread).
#ifndef ACQFS_STATE_AS_OWNER_H_
#define ACQFS_STATE_AS_OWNER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace acqfs::cli {

class AsOwner {
 public:
  // When this process's effective uid is 0 and `dir` is owned by another
  // uid: from now on this thread's fsuid and fsgid are the owner's uid and
  // gid, and the supplementary groups only that gid, until the object is
  // dropped. Otherwise (not root, a root-owned or missing `dir`) nothing
  // changes. Errors name the call and `dir`.
  static Result<AsOwner> Of(const std::string& dir);
  AsOwner() = default;
  AsOwner(AsOwner&& o) noexcept;
  AsOwner& operator=(AsOwner&& o) noexcept;
  AsOwner(const AsOwner&) = delete;
  AsOwner& operator=(const AsOwner&) = delete;
  // Back to root's ids and groups.
  ~AsOwner();
  void Drop();

  bool acting() const { return acting_; }
  // Drops the one acting now, if any (a command that goes on to mount:
  // `acqfs fork --mount`, whose daemon must have root's ids).
  static void DropActive();
  uid_t uid() const { return uid_; }

 private:
  bool acting_ = false;
  uid_t uid_ = 0;
  uid_t old_uid_ = 0;  // the file-system ids before
  gid_t old_gid_ = 0;
  std::vector<gid_t> groups_;  // root's, to restore
};

}  // namespace acqfs::cli

#endif  // ACQFS_STATE_AS_OWNER_H_
