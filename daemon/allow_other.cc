#include "daemon/allow_other.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/handle.h"

namespace acqfs::cli {
namespace {

// fusermount3 reads fuse.conf with fgets into a 256-byte buffer: a chunk
// is at most 255 bytes and ends after a newline.
constexpr size_t kChunk = 255;
// fuse.conf is a few lines; a larger file is not one.
constexpr size_t kMaxFuseConf = 1 << 20;

bool IsCSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
         c == '\r';
}

// fusermount3's strip_line and parse_line, for the one setting acqfs needs.
bool SaysUserAllowOther(std::string line) {
  if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
  size_t b = 0, e = line.size();
  while (b < e && IsCSpace(line[b])) b++;
  while (e > b && IsCSpace(line[e - 1])) e--;
  return line.compare(b, e - b, "user_allow_other") == 0;
}

}  // namespace

bool FuseConfAllowsOther(const std::string& text) {
  bool allows = false;
  bool at_line_start = true;  // fusermount3's `isnewline`
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    size_t len = nl == std::string::npos ? text.size() - pos : nl - pos + 1;
    if (len > kChunk) len = kChunk;
    // What C sees of the chunk: up to its first NUL byte.
    std::string chunk = text.substr(pos, len);
    chunk.resize(std::strlen(chunk.c_str()));
    pos += len;
    const bool ends_line = !chunk.empty() && chunk.back() == '\n';
    if (at_line_start) {
      if (ends_line)
        allows = allows || SaysUserAllowOther(chunk);
      else
        at_line_start = false;  // too long, or the end without a newline
    } else if (ends_line) {
      at_line_start = true;  // the rest of a long line: skipped
    }
  }
  return allows;
}

Result<bool> UserAllowOther(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) {
    if (errno == ENOENT) return false;
    return Error::Errno("open", path);
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::Errno("read", path);
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxFuseConf)
      return Error::Of(EFBIG, "read (larger than 1 MiB)", path);
  }
  return FuseConfAllowsOther(text);
}

Result<AllowOtherRequest> AllowOtherRequest::FromFlags(bool allow_other,
                                                       bool no_allow_other) {
  AllowOtherRequest r;
  if (allow_other) ACQFS_TRY(r.Ask(true, "--allow-other"));
  if (no_allow_other) ACQFS_TRY(r.Ask(false, "--no-allow-other"));
  return r;
}

Status AllowOtherRequest::Ask(bool allow, const std::string& spelling) {
  if (allow_ && *allow_ != allow)
    return Error::Of(EINVAL,
                     "contradicts " + spelling_ + ": give one or the other",
                     spelling);
  allow_ = allow;
  spelling_ = spelling;
  return Ok();
}

Status AllowOtherRequest::TakeOption(const std::string& option, bool* taken) {
  *taken = option == "allow_other" || option == "noallow_other";
  if (!*taken) return Ok();
  return Ask(option == "allow_other", "-o " + option);
}

Result<bool> AllowOtherRequest::Decide(uid_t euid,
                                       const std::string& fuse_conf) const {
  if (!allow_) return euid == 0;
  if (!*allow_ || euid == 0) return *allow_;
  auto allowed = UserAllowOther(fuse_conf);
  if (!allowed)
    return Error::Of(allowed.err(),
                     allowed.error().op + "; " + spelling_ +
                         " as an ordinary user needs the line "
                         "`user_allow_other` in it",
                     fuse_conf);
  if (!*allowed)
    return Error::Of(EPERM,
                     spelling_ +
                         " as an ordinary user needs the line "
                         "`user_allow_other` in it, as fusermount3 "
                         "requires; add it as root, or mount without " +
                         spelling_,
                     fuse_conf);
  return true;
}

}  // namespace acqfs::cli
