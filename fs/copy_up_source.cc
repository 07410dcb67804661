#include "fs/copy_up_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/sys.h"

namespace acqfs {
namespace {

// The store file: a header line, the path, a newline, then the bytes.
//   "acqfs-source 1 <mode, octal> <path length>\n<path>\n<bytes>"
constexpr char kMagic[] = "acqfs-source 1 ";
constexpr size_t kKeyLength = 32;
constexpr size_t kMaxHeader = 64;

bool ValidKey(const std::string& k) {
  if (k.size() != kKeyLength) return false;
  for (char c : k)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Copies `n` bytes of `in` from offset 0 to `out` at `at`.
Status CopyRange(int in, int out, off_t at, uint64_t n,
                 const std::string& shown) {
  off_t from = 0, to = at;
  uint64_t left = n;
  while (left > 0) {
    ssize_t c = ::copy_file_range(in, &from, out, &to, left, 0);
    if (c < 0 && errno == EINTR) continue;
    if (c < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                  errno == EOPNOTSUPP))
      break;
    if (c < 0) return Error::Errno("copy_file_range (copy-up source)", shown);
    if (c == 0) return Error::Of(EAGAIN, "copy (copy-up source shrank)", shown);
    left -= static_cast<uint64_t>(c);
  }
  std::vector<char> buf(1 << 16);
  while (left > 0) {
    ssize_t r = ::pread(
        in, buf.data(),
        static_cast<size_t>(std::min<uint64_t>(left, buf.size())), from);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Error::Errno("read (copy-up source)", shown);
    if (r == 0) return Error::Of(EAGAIN, "copy (copy-up source shrank)", shown);
    ACQFS_TRY(
        sys::PwriteAll(out, buf.data(), static_cast<size_t>(r), to, shown));
    from += r;
    to += r;
    left -= static_cast<uint64_t>(r);
  }
  return Ok();
}

}  // namespace

Result<std::shared_ptr<const CopyUpSources>> CopyUpSources::Open(
    const std::string& dir, int64_t changed_since_ns, bool create) {
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Error::Errno("mkdir (copy-up sources)", dir);
  auto fd = sys::OpenDirPath(dir, O_RDONLY | O_NOFOLLOW);
  if (!fd) return fd.error();
  if (create) {
    // A daemon killed while it wrote a source left its temporary ("#key");
    // the daemon opening the store is its only writer.
    auto entries = sys::ReadDir(fd->get(), dir);
    if (!entries) return entries.error();
    for (const auto& e : *entries)
      if (e.name[0] == '#' && ::unlinkat(fd->get(), e.name.c_str(), 0) != 0 &&
          errno != ENOENT)
        return Error::Errno("remove an unfinished copy-up source",
                            dir + "/" + e.name);
  }
  return std::shared_ptr<const CopyUpSources>(
      new CopyUpSources(std::move(*fd), dir, create ? changed_since_ns : 0));
}

Result<std::optional<std::string>> CopyUpSources::Keep(int host_fd, int copy_fd,
                                                       const std::string& rel,
                                                       bool sync) const {
  using Out = std::optional<std::string>;
  if (since_ns_ == 0) return Out();
  const std::string shown = dir_ + " (source of " + rel + ")";
  // Read after the copy: a host write that raced with it shows here.
  auto host = sys::Fstat(host_fd, rel);
  if (!host) return host.error();
  if (!S_ISREG(host->st_mode) || sys::CtimeNs(*host) < since_ns_) return Out();
  auto copy = sys::Fstat(copy_fd, rel);
  if (!copy) return copy.error();
  const uint64_t size = static_cast<uint64_t>(copy->st_size);
  if (size > kMaxKept) return Out();
  // The copy is reopened for reading through its /proc entry (it may have
  // no name yet: an O_TMPFILE inode).
  const std::string proc = "/proc/self/fd/" + std::to_string(copy_fd);
  int in_fd = sys::OpenRelievingPressure(
      [&] { return ::open(proc.c_str(), O_RDONLY | O_CLOEXEC); });
  if (in_fd < 0)
    return Error::Errno("reopen a copy-up to keep its source", rel);
  UniqueFd in(in_fd);

  const std::string key = sys::TempName("") + sys::TempName("");
  const std::string tmp = "#" + key;
  int out_fd = sys::OpenRelievingPressure([&] {
    return ::openat(dirfd_.get(), tmp.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  });
  if (out_fd < 0) return Error::Errno("create", shown);
  UniqueFd out(out_fd);
  auto fail = [&](const Error& e) -> Result<Out> {
    (void)::unlinkat(dirfd_.get(), tmp.c_str(), 0);
    return e;
  };
  char head[kMaxHeader];
  int hn =
      std::snprintf(head, sizeof head, "%s%o %zu\n", kMagic,
                    static_cast<unsigned>(host->st_mode & 07777), rel.size());
  std::string header(head, static_cast<size_t>(hn));
  header += rel;
  header += '\n';
  if (Status s =
          sys::PwriteAll(out.get(), header.data(), header.size(), 0, shown);
      !s)
    return fail(s.error());
  if (Status s = CopyRange(in.get(), out.get(),
                           static_cast<off_t>(header.size()), size, shown);
      !s)
    return fail(s.error());
  if (sync && ::fsync(out.get()) != 0)
    return fail(Error::Errno("fsync", shown));
  if (Status s = sys::Renameat2(dirfd_.get(), tmp, dirfd_.get(), key,
                                RENAME_NOREPLACE, shown);
      !s)
    return fail(s.error());
  if (sync && ::fsync(dirfd_.get()) != 0) return Error::Errno("fsync", dir_);
  return Out(key);
}

Status CopyUpSources::Mark(const LayerFormat& format, int fd,
                           const std::string& key, const std::string& shown) {
  return sys::FSetXattr(fd, format.SourceKey(), key, 0, shown);
}

Result<CopyUpSources::Source> CopyUpSources::Read(
    const std::string& key) const {
  const std::string shown = dir_ + "/" + key;
  if (!ValidKey(key))
    return Error::Of(EINVAL, "copy-up source key (not 32 hex digits)", shown);
  auto fd =
      sys::OpenBeneath(dirfd_.get(), key, O_RDONLY | O_NOFOLLOW, 0, shown);
  if (!fd) return fd.error();
  auto st = sys::Fstat(fd->get(), shown);
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode))
    return Error::Of(EINVAL, "copy-up source (not a regular file)", shown);
  auto all = sys::ReadAll(fd->get(), kMaxKept + 2 * 4096 + kMaxHeader, shown);
  if (!all) return all.error();
  const std::string& s = *all;
  auto bad = [&] {
    return Error::Of(EINVAL, "copy-up source (malformed header)", shown);
  };
  const size_t magic = std::strlen(kMagic);
  size_t nl = s.find('\n');
  if (s.compare(0, magic, kMagic) != 0 || nl == std::string::npos ||
      nl > kMaxHeader)
    return bad();
  unsigned mode = 0;
  size_t len = 0;
  if (std::sscanf(s.c_str() + magic, "%o %zu", &mode, &len) != 2 ||
      mode > 07777 || len == 0 || len > s.size() - nl - 1 ||
      s[nl + 1 + len] != '\n')
    return bad();
  Source src;
  src.mode = static_cast<mode_t>(mode);
  src.path = s.substr(nl + 1, len);
  src.data = s.substr(nl + 1 + len + 1);
  return src;
}

Result<std::optional<std::string>> SourceKeyOf(const LayerFormat& format,
                                               int fd,
                                               const std::string& shown) {
  auto v = sys::FGetXattr(fd, format.SourceKey(), shown);
  if (!v) {
    int e = v.err();
    if (e == ENODATA || e == ENOTSUP || e == EPERM)
      return std::optional<std::string>();
    return v.error();
  }
  if (!ValidKey(*v)) return std::optional<std::string>();
  return std::optional<std::string>(*v);
}

Status CarrySourceKey(const LayerFormat& format, int src_fd, int dst_fd,
                      const std::string& shown) {
  auto key = SourceKeyOf(format, src_fd, shown);
  if (!key) return key.error();
  if (!*key) return Ok();
  return sys::FSetXattr(dst_fd, format.SourceKey(), **key, 0, shown);
}

}  // namespace acqfs
