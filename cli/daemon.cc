#include "cli/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "common/handle.h"

extern char** environ;

namespace acqfs::cli {
namespace {

constexpr size_t kLogBytes = 8 << 20;  // per file; two files kept

void SetUpLogging(const DaemonOptions& o) {
  std::vector<spdlog::sink_ptr> sinks;
  if (!o.log_path.empty()) {
    sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
        o.log_path, kLogBytes, 2));
  }
  if (o.foreground || o.log_path.empty())
    sinks.push_back(
        std::make_shared<spdlog::sinks::ansicolor_stderr_sink_mt>());
  auto logger =
      std::make_shared<spdlog::logger>("acqfs", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::from_str(o.log_level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void WritePidFile(const std::string& path) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::trunc);
  out << ::getpid() << "\n";
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += n;
  }
}

[[noreturn]] void RunChild(const DaemonOptions& o, int report_fd) {
  ::setsid();
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
  }
  SetUpLogging(o);
  WritePidFile(o.pid_path);
  Status s = RunFilesystem(o.config, [&](const Status& r) {
    WriteAll(report_fd, r ? std::string("OK\n") : "ERR " + r.error().Message());
    ::close(report_fd);
    report_fd = -1;
  });
  if (!s) spdlog::error("{}", s.error().Message());
  spdlog::shutdown();
  if (!o.pid_path.empty()) ::unlink(o.pid_path.c_str());
  ::_exit(s ? 0 : 1);
}

}  // namespace

Status StartDaemon(const DaemonOptions& o) {
  if (o.foreground) {
    SetUpLogging(o);
    WritePidFile(o.pid_path);
    Status s = RunFilesystem(o.config, [](const Status&) {});
    if (!o.pid_path.empty()) ::unlink(o.pid_path.c_str());
    return s;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Error::Errno("pipe", "");
  UniqueFd rd(fds[0]), wr(fds[1]);
  pid_t pid = ::fork();
  if (pid < 0) return Error::Errno("fork", "");
  if (pid == 0) {
    rd.reset();
    RunChild(o, wr.release());
  }
  wr.reset();
  std::string msg;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    msg.append(buf, n);
  }
  if (msg.rfind("OK", 0) == 0) return Ok();
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (msg.rfind("ERR ", 0) == 0) return Error::Of(EIO, msg.substr(4), "");
  return Error::Of(EIO, "the daemon ended before mounting; see its log",
                   o.log_path);
}

bool IsAcqfsMounted(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent maj:min root mountpoint opts ... - fstype source superopts
    std::istringstream ss(line);
    std::string id, parent, dev, root, mp;
    ss >> id >> parent >> dev >> root >> mp;
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream rest(line.substr(dash + 3));
    std::string fstype;
    rest >> fstype;
    if (mp == mountpoint && fstype == "fuse.acqfs") return true;
  }
  return false;
}

Status Unmount(const std::string& mountpoint) {
  if (::geteuid() == 0) {
    if (::umount2(mountpoint.c_str(), UMOUNT_NOFOLLOW) != 0)
      return Error::Errno("umount", mountpoint);
    return Ok();
  }
  const char* argv[] = {"fusermount3", "-u", "-q", mountpoint.c_str(), nullptr};
  pid_t pid;
  if (::posix_spawnp(&pid, "fusermount3", nullptr, nullptr,
                     const_cast<char* const*>(argv), environ) != 0)
    return Error::Errno("run fusermount3", mountpoint);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Error::Of(EBUSY, "fusermount3 -u", mountpoint);
  return Ok();
}

namespace {
// A process that has ended but was not reaped yet (its parent may be a
// container's init that never reaps) counts as gone.
bool Alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ||
         line[close + 2] != 'Z';
}
}  // namespace

Status WaitForDaemonExit(const std::string& pid_path, double seconds) {
  std::ifstream in(pid_path);
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0) return Ok();  // no daemon recorded
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (Alive(pid)) {
    if (std::chrono::steady_clock::now() > deadline)
      return Error::Of(ETIMEDOUT, "wait for daemon " + std::to_string(pid),
                       pid_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::unlink(pid_path.c_str());
  return Ok();
}

}  // namespace acqfs::cli
