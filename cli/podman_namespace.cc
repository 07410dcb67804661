#include "cli/podman_namespace.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/handle.h"
#include "common/mountinfo.h"

namespace acqfs::cli {
namespace {

// The whole of a small /proc file; nullopt when it cannot be read (the
// process has gone, or is not ours to read).
std::optional<std::string> ReadProcFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return text.str();
}

std::optional<std::string> ReadLink(const std::string& path) {
  char buf[256];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf));
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

// The real uid on the "Uid:" line of /proc/PID/status.
std::optional<uid_t> RealUid(const std::string& status) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    unsigned long uid = 0;
    if (fields >> uid) return static_cast<uid_t>(uid);
    return std::nullopt;
  }
  return std::nullopt;
}

// "catatonit -P" or "podman pause" when the process with this comm and
// NUL-separated command line is a pause process; "" when not.
std::string PauseCommand(std::string comm, const std::string& cmdline) {
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  if (comm == "podman pause") return comm;
  if (comm != "catatonit") return "";
  std::istringstream args(cmdline);
  std::string arg;
  bool first = true;
  while (std::getline(args, arg, '\0')) {
    if (!first && arg == "-P") return "catatonit -P";
    first = false;
  }
  return "";
}

}  // namespace

std::vector<PodmanPause> FindPodmanPauses(uid_t uid, const std::string& proc) {
  std::vector<PodmanPause> found;
  const auto own_ns = ReadLink(proc + "/self/ns/mnt");
  if (!own_ns) return found;
  UniqueDir dir(::opendir(proc.c_str()));
  if (!dir) return found;
  std::vector<pid_t> pids;
  while (struct dirent* d = ::readdir(dir.get())) {
    char* end = nullptr;
    const long pid = std::strtol(d->d_name, &end, 10);
    if (pid > 0 && end != d->d_name && *end == '\0')
      pids.push_back(static_cast<pid_t>(pid));
  }
  std::sort(pids.begin(), pids.end());
  for (pid_t pid : pids) {
    const std::string base = proc + "/" + std::to_string(pid);
    struct stat st;  // owned by the process's effective uid: a cheap filter
    if (::stat(base.c_str(), &st) != 0 || st.st_uid != uid) continue;
    const auto comm = ReadProcFile(base + "/comm");
    if (!comm || (comm->rfind("catatonit", 0) != 0 &&
                  comm->rfind("podman pause", 0) != 0))
      continue;
    const auto status = ReadProcFile(base + "/status");
    if (!status || RealUid(*status) != uid) continue;
    const std::string command =
        PauseCommand(*comm, ReadProcFile(base + "/cmdline").value_or(""));
    if (command.empty()) continue;
    const auto ns = ReadLink(base + "/ns/mnt");
    if (!ns || *ns == *own_ns) continue;
    found.push_back(PodmanPause{pid, command});
  }
  return found;
}

std::vector<PodmanPause> PausesMissingMountAt(uid_t uid,
                                              const std::string& path,
                                              const std::string& proc) {
  std::vector<PodmanPause> missing;
  const auto pauses = FindPodmanPauses(uid, proc);
  if (pauses.empty()) return missing;
  auto ours = ReadMountInfo(proc + "/self/mountinfo");
  for (const auto& p : pauses) {
    const std::string base = proc + "/" + std::to_string(p.pid);
    auto theirs = ReadMountInfo(base + "/mountinfo");
    if (!theirs) {
      if (::access(base.c_str(), F_OK) == 0) missing.push_back(p);
      continue;  // else it has ended
    }
    if (!ours || !MountPropagates(*ours, *theirs, path)) missing.push_back(p);
  }
  return missing;
}

}  // namespace acqfs::cli
