#include "harness/command.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

extern char** environ;

namespace acqfs::test {
namespace {

using Clock = std::chrono::steady_clock;

// How long output is still read after the child exited, in case it left a
// process behind that holds the pipes.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(500);
constexpr int kPollMillis = 20;
constexpr size_t kDescribeTail = 6000;

// An owned pipe; both ends are O_CLOEXEC.
class Pipe {
 public:
  Pipe() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  bool ok() const { return fds_[0] >= 0; }
  int read_fd() const { return fds_[0]; }
  int write_fd() const { return fds_[1]; }
  void CloseRead() { Close(&fds_[0]); }
  void CloseWrite() { Close(&fds_[1]); }
  // Hands the read end to the caller, who must close it.
  [[nodiscard]] int ReleaseRead() { return std::exchange(fds_[0], -1); }

 private:
  static void Close(int* fd) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  int fds_[2];
};

// Everything the child needs, prepared before fork() so that the child only
// makes async-signal-safe calls.
struct ChildPlan {
  std::string program;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string cwd;
  int out_fd;
  int err_fd;
  int status_fd;  // receives errno if exec fails
};

std::string FindInPath(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* env_path = std::getenv("PATH");
  std::string path = env_path ? env_path : "/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return program;
}

std::vector<std::string> BuildEnvironment(const EnvAdditions& additions) {
  std::set<std::string> replaced;
  for (const auto& [name, value] : additions) replaced.insert(name);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    if (!replaced.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [name, value] : additions) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The steps of the child before exec, for failure reports.
enum ChildStep : int { kOpenDevNull, kDup2, kChdir, kExecve };

// What the child reports through the status pipe when it cannot exec.
struct ChildFailure {
  ChildStep step;
  int err;
};

[[noreturn]] void FailChild(int fd, ChildStep step) {
  ChildFailure f{step, errno};
  [[maybe_unused]] ssize_t n = ::write(fd, &f, sizeof(f));
  ::_exit(127);
}

std::string DescribeChildFailure(const ChildFailure& f, const ChildPlan& plan) {
  std::string what;
  switch (f.step) {
    case kOpenDevNull:
      what = "open /dev/null";
      break;
    case kDup2:
      what = "dup2";
      break;
    case kChdir:
      what = "chdir " + plan.cwd;
      break;
    case kExecve:
      what = "execve " + plan.program;
      break;
  }
  return what + ": " + std::strerror(f.err);
}

[[noreturn]] void ExecChild(const ChildPlan& plan) {
  ::setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull < 0) FailChild(plan.status_fd, kOpenDevNull);
  if (::dup2(devnull, 0) != 0 || ::dup2(plan.out_fd, 1) != 1 ||
      ::dup2(plan.err_fd, 2) != 2) {
    FailChild(plan.status_fd, kDup2);
  }
  if (!plan.cwd.empty() && ::chdir(plan.cwd.c_str()) != 0) {
    FailChild(plan.status_fd, kChdir);
  }
  // Marks every other inherited descriptor close-on-exec, the status pipe
  // included: a successful exec closes it and the parent reads EOF.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  ::execve(plan.program.c_str(), plan.argv.data(), plan.envp.data());
  FailChild(plan.status_fd, kExecve);
}

// Blocks until the child has exec'd (EOF: returns false) or reported why it
// could not.
bool ReadChildFailure(int fd, ChildFailure* failure) {
  ssize_t n;
  do {
    n = ::read(fd, failure, sizeof(*failure));
  } while (n < 0 && errno == EINTR);
  return n == sizeof(*failure);
}

void DecodeWaitStatus(int status, CommandResult* r) {
  if (WIFEXITED(status)) {
    r->exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r->term_signal = WTERMSIG(status);
  }
}

// Reads what is available on *fd into *sink; closes and sets *fd = -1 at EOF.
void ReadAvailable(int* fd, std::string* sink) {
  char buf[65536];
  ssize_t n = ::read(*fd, buf, sizeof(buf));
  if (n > 0) {
    sink->append(buf, static_cast<size_t>(n));
  } else if (n == 0 || errno != EINTR) {
    ::close(*fd);
    *fd = -1;
  }
}

void PollOnce(int* out_fd, int* err_fd, CommandResult* r) {
  pollfd fds[2];
  int n = 0;
  if (*out_fd >= 0) fds[n++] = {*out_fd, POLLIN, 0};
  if (*err_fd >= 0) fds[n++] = {*err_fd, POLLIN, 0};
  if (::poll(fds, n, kPollMillis) <= 0) return;
  for (int i = 0; i < n; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (fds[i].fd == *out_fd) {
      ReadAvailable(out_fd, &r->out);
    } else {
      ReadAvailable(err_fd, &r->err);
    }
  }
}

// Collects output until the child exited and the pipes closed, the deadline
// passed (group killed) or the pipes stayed open after the child exited.
void Supervise(pid_t pid, int out_fd, int err_fd, int timeout_seconds,
               CommandResult* r) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_seconds);
  bool exited = false;
  Clock::time_point exit_time;
  while (out_fd >= 0 || err_fd >= 0 || !exited) {
    const auto now = Clock::now();
    if (!exited && now >= deadline) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
      r->timed_out = true;
      exited = true;
      exit_time = now;
    }
    if (exited && now >= exit_time + kDrainAfterExit) {
      r->pipes_left_open = out_fd >= 0 || err_fd >= 0;
      break;
    }
    PollOnce(&out_fd, &err_fd, r);
    int status = 0;
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) {
      DecodeWaitStatus(status, r);
      exited = true;
      exit_time = Clock::now();
    }
  }
  if (out_fd >= 0) ::close(out_fd);
  if (err_fd >= 0) ::close(err_fd);
}

std::string Tail(const std::string& s) {
  if (s.size() <= kDescribeTail) return s;
  return "[... " + std::to_string(s.size() - kDescribeTail) + " bytes cut]" +
         s.substr(s.size() - kDescribeTail);
}

}  // namespace

std::string CommandResult::Describe() const {
  std::string d = "`" + command + "` ";
  if (!spawn_error.empty()) {
    d += "could not start: " + spawn_error;
  } else if (timed_out) {
    d += "timed out; its process group was killed";
  } else if (term_signal != 0) {
    d += "was killed by signal " + std::to_string(term_signal) + " (" +
         strsignal(term_signal) + ")";
  } else {
    d += "exited with status " + std::to_string(exit_code);
  }
  if (pipes_left_open) d += " (a leftover process kept its output open)";
  d += "\n--- stdout ---\n" + Tail(out) + "\n--- stderr ---\n" + Tail(err);
  return d;
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         int timeout_seconds, const std::string& cwd,
                         const EnvAdditions& env) {
  CommandResult r;
  r.command = ShellJoin(argv);
  if (argv.empty()) {
    r.spawn_error = "empty argv";
    return r;
  }
  Pipe out, err, status;
  if (!out.ok() || !err.ok() || !status.ok()) {
    r.spawn_error = std::string("pipe2: ") + std::strerror(errno);
    return r;
  }
  std::vector<std::string> args = argv;
  std::vector<std::string> env_strings = BuildEnvironment(env);
  ChildPlan plan{
      FindInPath(argv[0]), CStrings(args), CStrings(env_strings), cwd,
      out.write_fd(),      err.write_fd(), status.write_fd()};
  pid_t pid = ::fork();
  if (pid < 0) {
    r.spawn_error = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) ExecChild(plan);
  ::setpgid(pid, pid);  // also done in the child; whichever runs first wins
  out.CloseWrite();
  err.CloseWrite();
  status.CloseWrite();
  if (ChildFailure f; ReadChildFailure(status.read_fd(), &f)) {
    int ignored = 0;
    ::waitpid(pid, &ignored, 0);
    r.spawn_error = DescribeChildFailure(f, plan);
    return r;
  }
  Supervise(pid, out.ReleaseRead(), err.ReleaseRead(), timeout_seconds, &r);
  return r;
}

CommandResult RunShell(const std::string& script, int timeout_seconds,
                       const std::string& cwd, const EnvAdditions& env) {
  return RunCommand({"bash", "-c", "set -euo pipefail\n" + script},
                    timeout_seconds, cwd, env);
}

std::string Sh(const std::string& script, int timeout_seconds) {
  CommandResult r = RunCommand({"sh", "-c", script + " 2>&1"}, timeout_seconds);
  EXPECT_TRUE(r.ok()) << r.Describe();
  return r.out;
}

std::string ShellQuote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                          "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                          "0123456789-_./=:,+@%") == std::string::npos) {
    return s;
  }
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::string ShellJoin(const std::vector<std::string>& words) {
  std::string joined;
  for (const auto& w : words) {
    if (!joined.empty()) joined += ' ';
    joined += ShellQuote(w);
  }
  return joined;
}

}  // namespace acqfs::test
