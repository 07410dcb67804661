// Who may use a sandbox's mount: only the user whose daemon serves it, or
// every user of the host (FUSE's allow_other). Either way the kernel checks
// each file's mode bits against the caller (acqfs always mounts with
// default_permissions), as the kernel overlayfs does.
//
// The choice is made per mount, never recorded: the --allow-other and
// --no-allow-other options (or -o allow_other / -o noallow_other) of that
// mount command, else a default that follows who mounts. A daemon running as
// root mounts with allow_other, so that a container's users, `acqfs run`
// under another uid or a test suite that drops privileges can work in the
// sandbox; an ordinary user's daemon mounts for its own user only.
//
// An ordinary user may ask for allow_other only when /etc/fuse.conf holds
// the line `user_allow_other`: fusermount3, which makes an unprivileged
// user's FUSE mounts, refuses the option otherwise. acqfs reads the file
// itself, the way fusermount3 does, so that the request is refused before
// anything is created, with a message naming the file.
// Thread-safety: plain functions and values.
#ifndef ACQFS_DAEMON_ALLOW_OTHER_H_
#define ACQFS_DAEMON_ALLOW_OTHER_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "common/error.h"

namespace acqfs::cli {

// Where fusermount3 reads its configuration.
inline constexpr char kFuseConf[] = "/etc/fuse.conf";

// Does the content of a fuse.conf let ordinary users mount with allow_other?
// As fusermount3 (libfuse 3.14, util/fusermount.c, read_conf) reads it: line
// by line; everything from a '#' on is a comment; blanks around the rest are
// dropped; a line that is then exactly `user_allow_other` says yes. A line
// longer than fusermount3's buffer (254 characters before its newline) and
// a last line without a newline are ignored, as fusermount3 ignores them.
bool FuseConfAllowsOther(const std::string& text);

// Reads the fuse.conf at `path`: false when there is none (fusermount3's
// default); an error naming the file when it cannot be read.
Result<bool> UserAllowOther(const std::string& path = kFuseConf);

// The allow_other request of one mount command, from its options.
class AllowOtherRequest {
 public:
  // The request of the flags --allow-other and --no-allow-other; EINVAL
  // naming both when both are given.
  static Result<AllowOtherRequest> FromFlags(bool allow_other,
                                             bool no_allow_other);

  // Records `allow` as asked for by `spelling` ("--allow-other", "-o
  // noallow_other", ...). EINVAL naming both when an earlier option asked
  // for the opposite.
  Status Ask(bool allow, const std::string& spelling);
  // For one word of a -o list: when it is allow_other or noallow_other,
  // records it (Ask) and sets *taken; otherwise leaves *taken false.
  Status TakeOption(const std::string& option, bool* taken);

  // Nothing asked: the default applies.
  bool is_default() const { return !allow_.has_value(); }

  // Whether a daemon with effective uid `euid` mounts with allow_other:
  // what was asked, else yes for root and no for anyone else. An ordinary
  // user's request for it is refused (EPERM, naming `fuse_conf`) unless
  // that file allows it (FuseConfAllowsOther).
  Result<bool> Decide(uid_t euid,
                      const std::string& fuse_conf = kFuseConf) const;

 private:
  std::optional<bool> allow_;
  std::string spelling_;  // the option that asked
};

}  // namespace acqfs::cli

#endif  // ACQFS_DAEMON_ALLOW_OTHER_H_
