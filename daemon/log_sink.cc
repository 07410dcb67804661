#include "daemon/log_sink.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <utility>

namespace acqfs::cli {

Result<std::shared_ptr<DirLogSink>> DirLogSink::Open(const std::string& path,
                                                     size_t max_bytes,
                                                     size_t max_files) {
  const size_t slash = path.rfind('/');
  const std::string dir_path =
      slash == std::string::npos ? "." : path.substr(0, slash ? slash : 1);
  const std::string name =
      slash == std::string::npos ? path : path.substr(slash + 1);
  UniqueFd dir(::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return Error::Errno("open log directory", dir_path);
  std::shared_ptr<DirLogSink> sink(
      new DirLogSink(std::move(dir), dir_path, name, max_bytes, max_files));
  ACQFS_TRY(sink->OpenFile());
  return sink;
}

DirLogSink::DirLogSink(UniqueFd dir, std::string dir_path, std::string name,
                       size_t max_bytes, size_t max_files)
    : dir_(std::move(dir)),
      dir_path_(std::move(dir_path)),
      name_(std::move(name)),
      max_bytes_(max_bytes),
      max_files_(max_files) {}

Status DirLogSink::OpenFile() {
  const std::string shown = dir_path_ + "/" + name_;
  for (int attempt = 0;; ++attempt) {
    int fd = ::openat(dir_.get(), name_.c_str(),
                      O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
                          O_NOCTTY | O_CLOEXEC,
                      0600);
    struct stat st;
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      file_ = UniqueFd(fd);
      size_ = static_cast<size_t>(st.st_size);
      // A root daemon in another user's folder: the log is the owner's.
      struct stat d;
      if (::geteuid() == 0 && st.st_uid == 0 && ::fstat(dir_.get(), &d) == 0 &&
          d.st_uid != 0)
        (void)::fchown(file_.get(), d.st_uid, d.st_gid);
      return Ok();
    }
    const int err = fd >= 0 ? EINVAL : errno;
    if (fd >= 0) ::close(fd);
    // A symlink (ELOOP), a fifo or device (opened, not regular): not a log
    // to write through. Removed once, and made anew.
    if (attempt > 0 || (err != ELOOP && err != EINVAL))
      return Error::Of(err, "open log file", shown);
    if (::unlinkat(dir_.get(), name_.c_str(), 0) != 0 && errno != ENOENT)
      return Error::Errno("remove what is not a log file", shown);
  }
}

std::string DirLogSink::Rotated(size_t i) const {
  const size_t dot = name_.rfind('.');
  if (dot == std::string::npos || dot == 0)
    return name_ + "." + std::to_string(i);
  return name_.substr(0, dot) + "." + std::to_string(i) + name_.substr(dot);
}

void DirLogSink::Rotate() {
  // Renames move names only: a symlink among them is moved, never followed.
  for (size_t i = max_files_; i > 1; --i)
    (void)::renameat(dir_.get(), Rotated(i - 1).c_str(), dir_.get(),
                     Rotated(i).c_str());
  if (max_files_ > 0)
    (void)::renameat(dir_.get(), name_.c_str(), dir_.get(), Rotated(1).c_str());
  else
    (void)::unlinkat(dir_.get(), name_.c_str(), 0);
  file_.reset();
  (void)OpenFile();  // without a file, lines are dropped until the next try
}

void DirLogSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t line;
  formatter_->format(msg, line);
  if (file_ && size_ + line.size() > max_bytes_ && size_ > 0) Rotate();
  if (!file_ && !OpenFile()) return;
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(file_.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk: the line is lost, the daemon goes on
    p += n;
    left -= static_cast<size_t>(n);
  }
  size_ += line.size();
}

}  // namespace acqfs::cli
