#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/handle.h"
#include "common/sys.h"

namespace acqfs {
namespace {

// The directory part of `path` ("." for a bare name, "/" for "/name").
std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string NameOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Status SyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Error::Errno("open directory", dir);
  if (::fsync(fd.get()) != 0) return Error::Errno("fsync", dir);
  return Ok();
}

// Writes `content` to `fd` (the file `shown`) and, kDurable, makes it
// durable.
Status WriteAndSync(int fd, std::string_view content, const std::string& shown,
                    Durability durability = Durability::kDurable) {
  ACQFS_TRY(sys::PwriteAll(fd, content.data(), content.size(), 0, shown));
  if (::ftruncate(fd, static_cast<off_t>(content.size())) != 0)
    return Error::Errno("ftruncate", shown);
  if (durability == Durability::kDurable && ::fsync(fd) != 0)
    return Error::Errno("fsync", shown);
  return Ok();
}

}  // namespace

Status ReplaceWithTemp(int fd, const std::string& temp, const std::string& path,
                       std::string_view content) {
  ACQFS_TRY(WriteAndSync(fd, content, temp));
  if (::rename(temp.c_str(), path.c_str()) != 0)
    return Error::Errno("rename", path);
  return SyncDir(DirOf(path));
}

Status WriteFileAtomically(const std::string& path, std::string_view content,
                           mode_t mode, Durability durability,
                           FileOwner owner) {
  const std::string dir = DirOf(path);
  const std::string temp =
      (dir == "/" ? "" : dir) + "/" + sys::TempName("." + NameOf(path) + ".");
  UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                     mode & 07777));
  if (!fd) return Error::Errno("create", temp);
  Status s = Ok();
  if (owner == FileOwner::kDirectory && ::geteuid() == 0) {
    struct stat d;
    if (::stat(dir.c_str(), &d) != 0)
      s = Error::Errno("stat", dir);
    else if (::fchown(fd.get(), d.st_uid, d.st_gid) != 0)
      s = Error::Errno("chown", temp);
  }
  if (s && ::fchmod(fd.get(), mode & 07777) != 0)
    s = Error::Errno("chmod", temp);
  if (s) s = WriteAndSync(fd.get(), content, temp, durability);
  if (s && ::rename(temp.c_str(), path.c_str()) != 0)
    s = Error::Errno("rename", path);
  if (!s) {
    ::unlink(temp.c_str());  // best effort: the error above is the one told
    return s;
  }
  return durability == Durability::kDurable ? SyncDir(dir) : Ok();
}

}  // namespace acqfs
