#include "state/process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/sys.h"
#include "state/paths.h"

extern char** environ;

namespace acqfs::cli {
namespace {

// posix_spawn's two attribute objects, owned; Prepare() fills them from
// SpawnOptions.
class SpawnSetup {
 public:
  SpawnSetup() {
    actions_rc_ = ::posix_spawn_file_actions_init(&actions_);
    attr_rc_ = ::posix_spawnattr_init(&attr_);
  }
  ~SpawnSetup() {
    if (actions_rc_ == 0) ::posix_spawn_file_actions_destroy(&actions_);
    if (attr_rc_ == 0) ::posix_spawnattr_destroy(&attr_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;

  // Ok, or the first step that failed.
  Status Prepare(const SpawnOptions& o, const std::string& program) {
    if (actions_rc_ != 0)
      return Error::Of(actions_rc_, "posix_spawn_file_actions_init", program);
    if (attr_rc_ != 0)
      return Error::Of(attr_rc_, "posix_spawnattr_init", program);
    const int fds[3] = {o.stdin_fd, o.stdout_fd, o.stderr_fd};
    const std::string* paths[3] = {nullptr, &o.stdout_path, &o.stderr_path};
    for (int target = 0; target < 3; target++) {
      if (paths[target] && !paths[target]->empty()) {
        ACQFS_TRY(Step(::posix_spawn_file_actions_addopen(
                           &actions_, target, paths[target]->c_str(),
                           O_WRONLY | O_CREAT | O_TRUNC, 0600),
                       "posix_spawn (open " + *paths[target] + ")", program));
      } else if (fds[target] == SpawnOptions::kDevNull) {
        ACQFS_TRY(Step(::posix_spawn_file_actions_addopen(
                           &actions_, target, "/dev/null",
                           target == 0 ? O_RDONLY : O_WRONLY, 0),
                       "posix_spawn (open /dev/null)", program));
      } else if (fds[target] >= 0) {
        ACQFS_TRY(Step(
            ::posix_spawn_file_actions_adddup2(&actions_, fds[target], target),
            "posix_spawn (dup2)", program));
      }
    }
    // dup2 onto itself clears FD_CLOEXEC (glibc 2.29 and later, POSIX 2024).
    for (int fd : o.keep_fds)
      ACQFS_TRY(Step(::posix_spawn_file_actions_adddup2(&actions_, fd, fd),
                     "posix_spawn (keep descriptor " + std::to_string(fd) + ")",
                     program));
    if (!o.cwd.empty())
      ACQFS_TRY(
          Step(::posix_spawn_file_actions_addchdir_np(&actions_, o.cwd.c_str()),
               "posix_spawn (chdir " + o.cwd + ")", program));
    short flags = 0;
    if (!o.reset_signals.empty()) {
      sigset_t none, dfl;
      sigemptyset(&none);
      sigemptyset(&dfl);
      for (int s : o.reset_signals) sigaddset(&dfl, s);
      ACQFS_TRY(Step(::posix_spawnattr_setsigmask(&attr_, &none),
                     "posix_spawnattr_setsigmask", program));
      ACQFS_TRY(Step(::posix_spawnattr_setsigdefault(&attr_, &dfl),
                     "posix_spawnattr_setsigdefault", program));
      flags |= POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    }
    if (o.new_group) {
      ACQFS_TRY(Step(::posix_spawnattr_setpgroup(&attr_, 0),
                     "posix_spawnattr_setpgroup", program));
      flags |= POSIX_SPAWN_SETPGROUP;
    }
    return Step(::posix_spawnattr_setflags(&attr_, flags),
                "posix_spawnattr_setflags", program);
  }
  const posix_spawn_file_actions_t* actions() const { return &actions_; }
  const posix_spawnattr_t* attr() const { return &attr_; }

 private:
  static Status Step(int rc, const std::string& op,
                     const std::string& program) {
    if (rc != 0) return Error::Of(rc, op, program);
    return Ok();
  }

  posix_spawn_file_actions_t actions_;
  posix_spawnattr_t attr_;
  int actions_rc_ = 0, attr_rc_ = 0;
};

std::vector<char*> CStrings(std::vector<std::string>& words) {
  std::vector<char*> v;
  for (auto& w : words) v.push_back(w.data());
  v.push_back(nullptr);
  return v;
}

// In a forked child: a session of its own, stdin/stdout/stderr on
// /dev/null.
Status Detach() {
  if (::setsid() < 0) return Error::Errno("setsid", "the daemon");
  UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null) return Error::Errno("open", "/dev/null");
  for (int target = 0; target < 3; target++)
    if (::dup2(null.get(), target) < 0)
      return Error::Errno("dup2 /dev/null onto " + std::to_string(target),
                          "the daemon");
  // Opened as 0, 1 or 2 (the caller had closed it): it is that one now.
  if (null.get() <= 2) (void)null.release();
  return Ok();
}

}  // namespace

Result<pid_t> Spawn(const std::string& program,
                    const std::vector<std::string>& argv,
                    const SpawnOptions& options) {
  SpawnSetup setup;
  ACQFS_TRY(setup.Prepare(options, program));
  std::vector<std::string> words = argv;
  std::vector<char*> cargv = CStrings(words);
  std::vector<std::string> env_words;
  std::vector<char*> cenv;
  char* const* envp = environ;
  if (options.env) {
    env_words = *options.env;
    cenv = CStrings(env_words);
    envp = cenv.data();
  }
  pid_t pid = 0;
  int rc = options.search_path
               ? ::posix_spawnp(&pid, program.c_str(), setup.actions(),
                                setup.attr(), cargv.data(), envp)
               : ::posix_spawn(&pid, program.c_str(), setup.actions(),
                               setup.attr(), cargv.data(), envp);
  if (rc != 0) return Error::Of(rc, "posix_spawn", program);
  return pid;
}

bool ExitStatus::exited() const { return WIFEXITED(raw_); }
int ExitStatus::code() const { return WEXITSTATUS(raw_); }
bool ExitStatus::signaled() const { return WIFSIGNALED(raw_); }
int ExitStatus::signal() const { return WTERMSIG(raw_); }

int ExitStatus::ShellCode(int otherwise) const {
  if (exited()) return code();
  if (signaled()) return 128 + signal();
  return otherwise;
}

std::string ExitStatus::Describe() const {
  if (exited()) return "exited with status " + std::to_string(code());
  if (signaled()) {
    const int sig = signal();
    return "was killed by signal " + std::to_string(sig) + " (" +
           ::strsignal(sig) + ")";
  }
  return "ended with wait status " + std::to_string(raw_);
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

Result<ExitStatus> Wait(pid_t pid, const std::string& who) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Error::Errno("waitpid", who);
  }
  return ExitStatus(status);
}

Status SendSignal(pid_t pid, int sig, const std::string& who) {
  if (::kill(pid, sig) != 0 && errno != ESRCH)
    return Error::Errno("kill " + SignalName(sig), who);
  return Ok();
}

SignalWatch::SignalWatch(std::vector<int> terminating, std::vector<int> dropped)
    : terminating_(std::move(terminating)), dropped_(std::move(dropped)) {}

SignalWatch::~SignalWatch() {
  if (!started_) return;
  (void)Take();  // consumed here, not delivered when unblocked
  ::sigaction(SIGCHLD, &old_chld_, nullptr);
  ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
}

Status SignalWatch::Start() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : terminating_) sigaddset(&set, s);
  for (int s : dropped_) sigaddset(&set, s);
  sigaddset(&set, SIGCHLD);
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_NOCLDSTOP;
  if (::sigaction(SIGCHLD, &sa, &old_chld_) != 0)
    return Error::Errno("sigaction", "SIGCHLD");
  if (::sigprocmask(SIG_BLOCK, &set, &old_mask_) != 0) {
    Error e = Error::Errno("sigprocmask", "SIG_BLOCK");
    ::sigaction(SIGCHLD, &old_chld_, nullptr);
    return e;
  }
  started_ = true;
  fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd_) return Error::Errno("signalfd", "");
  return Ok();
}

std::vector<int> SignalWatch::Take() {
  std::vector<int> taken;
  struct signalfd_siginfo si;
  while (fd_) {
    ssize_t n = ::read(fd_.get(), &si, sizeof si);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof si)) break;  // EAGAIN: none left
    int sig = static_cast<int>(si.ssi_signo);
    bool terminating = false;
    for (int s : terminating_) terminating = terminating || s == sig;
    if (!terminating) continue;  // SIGCHLD, a dropped one
    if (first_ == 0) first_ = sig;
    taken.push_back(sig);
  }
  return taken;
}

std::vector<int> SignalWatch::ChildDefaults() const {
  std::vector<int> v = terminating_;
  v.insert(v.end(), dropped_.begin(), dropped_.end());
  v.push_back(SIGCHLD);
  v.push_back(SIGPIPE);
  return v;
}

Result<ExitStatus> WaitWatching(SignalWatch& signals, pid_t pid,
                                const std::string& who,
                                const std::function<void(int)>& on_signal,
                                int fd,
                                const std::function<bool()>& on_readable) {
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return ExitStatus(status);
    if (r < 0 && errno != EINTR) return Error::Errno("waitpid", who);
    struct pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {fd, POLLIN, 0}};
    // The timeout only guards against a lost wakeup; SIGCHLD is in the set.
    int n = ::poll(fds, fd >= 0 ? 2 : 1, 1000);
    if (n < 0 && errno != EINTR) return Error::Errno("poll", who);
    if (n <= 0) continue;
    if (fds[0].revents != 0) {
      for (int sig : signals.Take())
        if (on_signal) on_signal(sig);
    }
    if (fd >= 0 && fds[1].revents != 0 && !on_readable()) fd = -1;
  }
}

Result<Pipe> MakePipe(const std::string& what, bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Error::Errno("pipe", what);
  Pipe p{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (nonblocking_read) {
    int flags = ::fcntl(p.read.get(), F_GETFL);
    if (flags < 0 || ::fcntl(p.read.get(), F_SETFL, flags | O_NONBLOCK) != 0)
      return Error::Errno("fcntl O_NONBLOCK", what);
  }
  return p;
}

Result<DetachedChild> StartDetached(
    const std::function<int(const Status& detached, int report_fd)>& body) {
  auto pipe = MakePipe("the daemon's readiness pipe");
  if (!pipe) return pipe.error();
  pid_t pid = ::fork();
  if (pid < 0) return Error::Errno("fork", "the daemon");
  if (pid == 0) {
    pipe->read.reset();
    Status detached = Detach();
    ::_exit(body(detached, pipe->write.release()));
  }
  pipe->write.reset();
  auto report =
      sys::ReadAll(pipe->read.get(), 1 << 20, "the daemon's readiness pipe");
  if (!report) return report.error();
  return DetachedChild{pid, std::move(*report)};
}

Status WriteFully(int fd, const std::string& text, const std::string& what) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::Errno("write", what);
    off += static_cast<size_t>(n);
  }
  return Ok();
}

Status RestoreDefaultSignals(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : signals) {
    sigaddset(&set, sig);
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(sig, &sa, nullptr) != 0)
      return Error::Errno("sigaction SIG_DFL", SignalName(sig));
  }
  if (::sigprocmask(SIG_UNBLOCK, &set, nullptr) != 0)
    return Error::Errno("sigprocmask", "SIG_UNBLOCK");
  return Ok();
}

Result<std::string> FindInPath(const std::string& name) {
  const char* env = std::getenv("PATH");
  const std::string path = env ? env : "/bin:/usr/bin";
  size_t from = 0;
  for (;;) {
    size_t colon = path.find(':', from);
    std::string dir = path.substr(
        from, colon == std::string::npos ? std::string::npos : colon - from);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return Absolute(candidate);
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  return Error::Of(ENOENT, "find in PATH", name);
}

Result<std::string> SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n < 0) return Error::Errno("readlink", "/proc/self/exe");
  if (n == 0) return Error::Of(ENOENT, "readlink", "/proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> EnvironmentWith(const std::string& name,
                                         const std::string& value) {
  const std::string prefix = name + "=";
  std::vector<std::string> env;
  for (char** e = environ; *e; e++)
    if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0)
      env.emplace_back(*e);
  env.push_back(prefix + value);
  return env;
}

std::string ShellQuote(const std::string& w) {
  static const char kPlain[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
      "@%+=:,./_-";
  if (!w.empty() && w.find_first_not_of(kPlain) == std::string::npos) return w;
  std::string out = "'";
  for (char c : w) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string ShellLine(const std::vector<std::string>& words) {
  std::string line;
  for (const auto& w : words) line += (line.empty() ? "" : " ") + ShellQuote(w);
  return line;
}

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // The command name may hold spaces and parentheses: it runs from the
  // first '(' to the last ')'.
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open ||
      close + 2 >= line.size())
    return std::nullopt;
  return ProcStat{line.substr(open + 1, close - open - 1), line[close + 2]};
}

}  // namespace acqfs::cli
