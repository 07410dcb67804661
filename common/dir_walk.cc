#include "common/dir_walk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace acqfs {
namespace {

int OpenDirAt(int parent, const std::string& name) {
  return sys::OpenRelievingPressure([&] {
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = ::openat(parent, name.c_str(), flags | O_NOATIME);
    if (fd < 0 && errno == EPERM) fd = ::openat(parent, name.c_str(), flags);
    return fd;
  });
}

}  // namespace

int DirStack::OpenAt(int parent, const std::string& name) const {
  if (mode_ == kReadable) return OpenDirAt(parent, name);
  return sys::OpenRelievingPressure([&] {
    return ::openat(parent, name.c_str(),
                    O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  });
}

Status DirStack::Push(const std::string& name, bool make_enterable) {
  if (name.empty() || name == "." || name == "..")
    return Error::Of(EINVAL, "open directory (not a name)", ShownChild(name));
  const int parent = top();
  int fd = OpenAt(parent, name);
  if (fd < 0 && errno == EACCES && make_enterable &&
      ::fchmodat(parent, name.c_str(), 0700, 0) == 0)
    fd = OpenAt(parent, name);
  if (fd < 0) return Error::Errno("open directory", ShownChild(name));
  Level level;
  level.name = name;
  level.shown_end = shown_.size();
  level.fd.reset(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return Error::Errno("fstat", ShownChild(name));
  if (make_enterable && (st.st_mode & 0700) != 0700 &&
      ::fchmod(fd, (st.st_mode & 07777) | 0700) != 0)
    return Error::Errno("chmod for removal", ShownChild(name));
  level.dev = st.st_dev;
  level.ino = st.st_ino;
  levels_.push_back(std::move(level));
  shown_ += "/";
  shown_ += name;
  // Keep the deepest `max_open_` open: close the shallowest open one.
  if (open() > max_open_) levels_[first_open_++].fd.reset();
  return Ok();
}

Status DirStack::Pop() {
  if (levels_.empty()) return Ok();
  const size_t n = levels_.size();
  if (n >= 2 && first_open_ == n - 1) {
    // The parent was closed (going deeper): reopen it through "..".
    Level& parent = levels_[n - 2];
    int fd = OpenAt(levels_.back().fd.get(), "..");
    if (fd < 0) return Error::Errno("open ..", Shown());
    UniqueFd owned(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) return Error::Errno("fstat ..", Shown());
    if (st.st_dev != parent.dev || st.st_ino != parent.ino)
      return Error::Of(ESTALE, "walk (a directory moved during the walk)",
                       Shown());
    parent.fd = std::move(owned);
    first_open_ = n - 2;
  }
  shown_.resize(levels_.back().shown_end);
  levels_.pop_back();
  first_open_ = std::min(first_open_, levels_.size());
  return Ok();
}

Status DirStack::GoTo(std::string_view rel) {
  std::vector<std::string_view> parts;
  for (size_t start = 0; start < rel.size();) {
    size_t slash = rel.find('/', start);
    if (slash == std::string_view::npos) slash = rel.size();
    parts.push_back(rel.substr(start, slash - start));
    start = slash + 1;
  }
  size_t keep = 0;
  while (keep < parts.size() && keep < levels_.size() &&
         levels_[keep].name == parts[keep])
    ++keep;
  while (levels_.size() > keep) ACQFS_TRY(Pop());
  for (size_t i = keep; i < parts.size(); ++i)
    ACQFS_TRY(Push(std::string(parts[i])));
  return Ok();
}

Status WalkTree(int dirfd, const std::string& name, const std::string& shown,
                const TreeVisitor& visit, size_t max_open) {
  DirStack st(dirfd, shown, max_open);
  // pending[i]: the subdirectories still to visit at the i-th level walked,
  // last first.
  std::vector<std::vector<std::string>> pending;
  auto read_top = [&]() -> Status {
    auto ents = sys::ReadDir(st.top(), st.Shown());
    if (!ents) return ents.error();
    std::vector<std::string> dirs;
    for (auto& e : *ents) {
      auto into = visit.entry(st.top(), e, st.Shown());
      if (!into) return into.error();
      if (*into) dirs.push_back(std::move(e.name));
    }
    std::reverse(dirs.begin(), dirs.end());
    pending.push_back(std::move(dirs));
    return Ok();
  };
  if (!name.empty()) ACQFS_TRY(st.Push(name, visit.make_enterable));
  ACQFS_TRY(read_top());
  for (;;) {
    std::vector<std::string>& todo = pending.back();
    if (!todo.empty()) {
      std::string child = std::move(todo.back());
      todo.pop_back();
      ACQFS_TRY(st.Push(child, visit.make_enterable));
      ACQFS_TRY(read_top());
      continue;
    }
    pending.pop_back();
    if (st.depth() == 0) return Ok();  // the walk's root (name "")
    std::string done = st.name(st.depth() - 1);
    ACQFS_TRY(st.Pop());
    if (visit.leave) ACQFS_TRY(visit.leave(st.top(), done, st.Shown()));
    if (pending.empty()) return Ok();  // left `name` itself
  }
}

}  // namespace acqfs
