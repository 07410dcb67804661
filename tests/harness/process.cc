#include "harness/process.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

namespace acqfs::test {
namespace {

// The state letter from a /proc/.../stat file ('R', 'S', 'Z', ...), or 0.
char StateIn(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  return stat[close + 2];
}

std::vector<std::string> ReadCmdline(const std::string& pid_dir) {
  std::ifstream in(pid_dir + "/cmdline");
  std::vector<std::string> args;
  for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
  return args;
}

}  // namespace

bool IsProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // Any of its threads: a killed process's leader is a zombie while its
  // other threads still finish their exit (closing its descriptors, which
  // releases its locks), which can take tens of milliseconds (an inotify
  // instance waits for an SRCU grace period when it goes).
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(task.c_str()), ::closedir);
  if (!dir) return false;
  while (struct dirent* e = ::readdir(dir.get())) {
    if (e->d_name[0] == '.') continue;
    char state = StateIn(task + "/" + e->d_name + "/stat");
    if (state != 0 && state != 'Z' && state != 'X') return true;
  }
  return false;
}

bool WaitForProcessExit(pid_t pid, double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (IsProcessAlive(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::vector<std::string> ProcessArgs(pid_t pid) {
  return ReadCmdline("/proc/" + std::to_string(pid));
}

bool KillIfAlive(pid_t pid, const std::string& expected) {
  if (!IsProcessAlive(pid)) return true;
  std::vector<std::string> args = ProcessArgs(pid);
  if (args.empty() || args[0].find(expected) == std::string::npos) {
    return !IsProcessAlive(pid);
  }
  ::kill(pid, SIGKILL);
  return WaitForProcessExit(pid, 10);
}

pid_t ReadPidFile(const std::string& path) {
  std::ifstream in(path);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return 0;
  return static_cast<pid_t>(pid);
}

std::vector<pid_t> PidsWithArgument(const std::string& arg) {
  std::vector<pid_t> pids;
  std::unique_ptr<DIR, int (*)(DIR*)> proc(::opendir("/proc"), &::closedir);
  if (!proc) return pids;
  while (dirent* e = ::readdir(proc.get())) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    pid_t pid = static_cast<pid_t>(std::stol(e->d_name));
    for (const auto& a : ReadCmdline(std::string("/proc/") + e->d_name)) {
      if (a == arg && IsProcessAlive(pid)) {
        pids.push_back(pid);
        break;
      }
    }
  }
  // A forked child has its parent's argv (a daemon's warm walk,
  // fuse/warm_walk.h): it is part of the process that matched, not another.
  std::vector<pid_t> own;
  for (pid_t pid : pids) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    pid_t parent = 0;
    if (close != std::string::npos) {
      std::istringstream rest(line.substr(close + 2));
      std::string state;
      rest >> state >> parent;
    }
    if (std::find(pids.begin(), pids.end(), parent) == pids.end())
      own.push_back(pid);
  }
  return own;
}

bool WaitForChild(pid_t pid, int* status, double seconds) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, status, 0);
  return false;
}

bool ProcessRunning(const std::vector<std::string>& argv) {
  std::unique_ptr<DIR, int (*)(DIR*)> proc(::opendir("/proc"), &::closedir);
  if (!proc) return false;
  while (dirent* e = ::readdir(proc.get())) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    pid_t pid = static_cast<pid_t>(std::stol(e->d_name));
    if (ProcessArgs(pid) == argv && IsProcessAlive(pid)) return true;
  }
  return false;
}

long CountFds(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (!d) return -1;
  long n = 0;
  while (struct dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') n++;
  ::closedir(d);
  return n;
}

long StatusKib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size() + 1, field + ":") != 0) continue;
    std::istringstream rest(line.substr(field.size() + 1));
    long kib = -1;
    rest >> kib;
    return kib;
  }
  return -1;
}

}  // namespace acqfs::test
