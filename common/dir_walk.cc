#include "common/dir_walk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

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

std::string DirStack::Shown() const {
  std::string s = shown_;
  for (const Level& l : levels_) s += "/" + l.name;
  return s;
}

Status DirStack::Push(const std::string& name, bool make_enterable) {
  const int parent = top();
  int fd = OpenDirAt(parent, name);
  if (fd < 0 && errno == EACCES && make_enterable &&
      ::fchmodat(parent, name.c_str(), 0700, 0) == 0)
    fd = OpenDirAt(parent, name);
  if (fd < 0) return Error::Errno("open directory", ShownChild(name));
  Level level;
  level.name = name;
  level.fd.reset(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return Error::Errno("fstat", ShownChild(name));
  if (make_enterable && (st.st_mode & 0700) != 0700 &&
      ::fchmod(fd, (st.st_mode & 07777) | 0700) != 0)
    return Error::Errno("chmod for removal", ShownChild(name));
  level.dev = st.st_dev;
  level.ino = st.st_ino;
  levels_.push_back(std::move(level));
  ++open_;
  // Keep the deepest `max_open_` open: close the shallowest open one.
  if (open_ > std::max<size_t>(max_open_, 1)) {
    for (Level& l : levels_) {
      if (l.fd) {
        l.fd.reset();
        --open_;
        break;
      }
    }
  }
  return Ok();
}

Status DirStack::Pop() {
  if (levels_.empty()) return Ok();
  if (levels_.size() >= 2) {
    Level& parent = levels_[levels_.size() - 2];
    if (!parent.fd) {
      int fd = OpenDirAt(levels_.back().fd.get(), "..");
      if (fd < 0) return Error::Errno("open ..", Shown());
      UniqueFd owned(fd);
      struct stat st;
      if (::fstat(fd, &st) != 0) return Error::Errno("fstat ..", Shown());
      if (st.st_dev != parent.dev || st.st_ino != parent.ino)
        return Error::Of(ESTALE, "walk (a directory moved during the walk)",
                         Shown());
      parent.fd = std::move(owned);
      ++open_;
    }
  }
  if (levels_.back().fd) --open_;
  levels_.pop_back();
  return Ok();
}

Status WalkTree(int dirfd, const std::string& name, const std::string& shown,
                const TreeVisitor& visit, size_t max_open) {
  DirStack st(dirfd, shown, max_open);
  // pending[i]: the subdirectories still to visit at the i-th level walked,
  // last first.
  std::vector<std::vector<std::string>> pending;
  std::vector<std::string> names;  // the name of each level entered
  auto read_top = [&]() -> Status {
    auto ents = sys::ReadDir(st.top(), st.Shown());
    if (!ents) return ents.error();
    std::vector<std::string> dirs;
    for (const auto& e : *ents) {
      auto into = visit.entry(st.top(), e, st.ShownChild(e.name));
      if (!into) return into.error();
      if (*into) dirs.push_back(e.name);
    }
    std::reverse(dirs.begin(), dirs.end());
    pending.push_back(std::move(dirs));
    return Ok();
  };
  if (!name.empty()) {
    ACQFS_TRY(st.Push(name, visit.make_enterable));
    names.push_back(name);
  }
  ACQFS_TRY(read_top());
  for (;;) {
    std::vector<std::string>& todo = pending.back();
    if (!todo.empty()) {
      std::string child = std::move(todo.back());
      todo.pop_back();
      ACQFS_TRY(st.Push(child, visit.make_enterable));
      names.push_back(std::move(child));
      ACQFS_TRY(read_top());
      continue;
    }
    pending.pop_back();
    if (st.depth() == 0) return Ok();  // the walk's root (name "")
    std::string done = std::move(names.back());
    names.pop_back();
    std::string shown_done = st.Shown();
    ACQFS_TRY(st.Pop());
    if (visit.leave) ACQFS_TRY(visit.leave(st.top(), done, shown_done));
    if (pending.empty()) return Ok();  // left `name` itself
  }
}

}  // namespace acqfs
