#include "fuse/setid.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "common/handle.h"
#include "common/sys.h"

namespace acqfs {

bool CallerPrivilege::InGroup(gid_t gid) const {
  return gid == fsgid ||
         std::find(groups.begin(), groups.end(), gid) != groups.end();
}

Result<CallerPrivilege> ParseProcStatus(const std::string& text,
                                        bool same_user_ns) {
  CallerPrivilege p;
  bool have_gid = false, have_caps = false;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    auto field = [&](const char* key) -> const char* {
      size_t n = std::char_traits<char>::length(key);
      return line.compare(0, n, key) == 0 ? line.c_str() + n : nullptr;
    };
    if (const char* v = field("Gid:")) {
      // real, effective, saved, file system
      std::istringstream in(v);
      unsigned long ids[4];
      for (unsigned long& id : ids)
        if (!(in >> id)) return Error::Of(EINVAL, "parse Gid:", line);
      p.fsgid = static_cast<gid_t>(ids[3]);
      have_gid = true;
    } else if (const char* v = field("Groups:")) {
      std::istringstream in(v);
      unsigned long g;
      while (in >> g) p.groups.push_back(static_cast<gid_t>(g));
    } else if (const char* v = field("CapEff:")) {
      char* end = nullptr;
      errno = 0;
      unsigned long long caps = std::strtoull(v, &end, 16);
      if (errno != 0 || end == v)
        return Error::Of(EINVAL, "parse CapEff:", line);
      p.cap_fsetid = same_user_ns && (caps >> CAP_FSETID) & 1;
      have_caps = true;
    }
  }
  if (!have_gid || !have_caps)
    return Error::Of(EINVAL, "parse /proc status (no Gid: or CapEff:)", "");
  return p;
}

namespace {

Result<ino_t> UserNamespaceOf(const std::string& proc) {
  struct stat st;
  std::string path = proc + "/ns/user";
  if (::stat(path.c_str(), &st) != 0) return Error::Errno("stat", path);
  return st.st_ino;
}

}  // namespace

Result<CallerPrivilege> ReadCallerPrivilege(pid_t pid) {
  if (pid <= 0)
    return Error::Of(ESRCH, "read the caller's privileges (no pid)", "");
  std::string proc = "/proc/" + std::to_string(pid);
  std::string path = proc + "/status";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::Errno("open", path);
  UniqueFd owned(fd);
  auto text = sys::ReadAll(fd, 1 << 16, path);
  if (!text) return text.error();
  auto theirs = UserNamespaceOf(proc);
  if (!theirs) return theirs.error();
  auto ours = UserNamespaceOf("/proc/self");
  if (!ours) return ours.error();
  auto p = ParseProcStatus(*text, *theirs == *ours);
  if (!p) {
    Error e = p.error();
    e.path = path;
    return e;
  }
  return p;
}

mode_t SetIdBitsToClear(
    mode_t mode, gid_t gid, SetIdChange change,
    const std::function<Result<CallerPrivilege>()>& caller) {
  if (S_ISDIR(mode)) return 0;
  if (change == SetIdChange::kUnprivilegedWrite && !S_ISREG(mode)) return 0;
  mode_t clear = mode & S_ISUID;
  if ((mode & S_ISGID) && (mode & S_IXGRP)) clear |= S_ISGID;
  // Without group execute, set-group-id marks mandatory locking: only a
  // caller outside the file's group without CAP_FSETID drops it (a writer
  // here is one without it).
  if ((mode & S_ISGID) && !(mode & S_IXGRP)) {
    auto c = caller();
    bool keeps = c && (c->InGroup(gid) ||
                       (change == SetIdChange::kChown && c->cap_fsetid));
    if (!keeps) clear |= S_ISGID;
  }
  return clear;
}

}  // namespace acqfs
