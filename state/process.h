// Child processes for the CLI: starting a program (posix_spawn) with its
// descriptors, working directory, environment, process group and signal
// state set up; waiting for it while termination signals are taken from a
// signalfd (so they can be passed on to it); decoding its wait status;
// forking the daemon into a session of its own with a readiness pipe;
// finding a program on PATH; and quoting words as a POSIX shell reads them,
// for messages that show a command.
//
// Every failed system call becomes an Error whose op names the call and
// whose path names the program (or the descriptor's purpose).
// Thread-safety: SignalWatch changes the calling thread's signal mask; make
// it before any other thread starts, so that they all inherit the mask.
// Spawn and Wait are plain functions; StartDetached forks (single-threaded
// callers only).
#ifndef ACQFS_STATE_PROCESS_H_
#define ACQFS_STATE_PROCESS_H_

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/handle.h"

namespace acqfs::cli {

// What /proc/PID/stat says of a process this pid namespace sees: its
// command name and its state letter ('R', 'S', 'Z', ...); nullopt when
// there is no such process.
struct ProcStat {
  std::string comm;
  char state = 0;
};
std::optional<ProcStat> ReadProcStat(pid_t pid);

// How Spawn sets up the child.
struct SpawnOptions {
  // For stdin_fd, stdout_fd and stderr_fd: keep this process's descriptor,
  // or open /dev/null; any other value is a descriptor of this process that
  // is dup2'ed onto 0, 1 or 2.
  static constexpr int kInherit = -1;
  static constexpr int kDevNull = -2;
  int stdin_fd = kInherit;
  int stdout_fd = kInherit;
  int stderr_fd = kInherit;
  // When set, the child's stdout or stderr is this file, created (mode
  // 0600) or truncated; it takes the place of stdout_fd/stderr_fd.
  std::string stdout_path, stderr_path;
  // Descriptors of this process the child keeps, at the same number
  // (FD_CLOEXEC cleared in the child only); all others marked FD_CLOEXEC
  // are closed by exec as usual.
  std::vector<int> keep_fds;
  std::string cwd;  // "" = this process's
  // The child's environment ("NAME=value" strings); nullopt = this
  // process's.
  std::optional<std::vector<std::string>> env;
  bool search_path = false;  // look `program` up in $PATH (posix_spawnp)
  bool new_group = false;    // a process group of its own (pgid = pid)
  // Signals the child starts with at their default action, and its signal
  // mask cleared, when `reset_signals` is not empty (for a caller that
  // blocks or handles them; see SignalWatch).
  std::vector<int> reset_signals;
};

// Starts `program` (a path, or a name to look up with search_path) with
// `argv` (argv[0] included). Its pid; the error names "posix_spawn" (or
// the set-up step that failed) and the program.
Result<pid_t> Spawn(const std::string& program,
                    const std::vector<std::string>& argv,
                    const SpawnOptions& options);

// A wait status, decoded.
class ExitStatus {
 public:
  explicit ExitStatus(int raw) : raw_(raw) {}
  int raw() const { return raw_; }
  bool exited() const;
  int code() const;  // the exit status, when exited()
  bool signaled() const;
  int signal() const;  // the signal that killed it, when signaled()
  bool success() const { return exited() && code() == 0; }
  // As a shell reports it: the exit status, or 128+N after signal N;
  // `otherwise` for anything else (a stopped child).
  int ShellCode(int otherwise) const;
  // "exited with status 3", "was killed by signal 9 (Killed)".
  std::string Describe() const;

 private:
  int raw_;
};

// "SIGTERM" (or "signal N" for one without a name).
std::string SignalName(int sig);

// Waits for the child `pid` (EINTR retried). The error names "waitpid"
// and `who`; ECHILD when `pid` is not a child of this process.
Result<ExitStatus> Wait(pid_t pid, const std::string& who);

// Sends `sig` to `pid` (a process; -pgid for a process group). A process
// that is gone already (ESRCH) is no error. The error names "kill" (with
// the signal) and `who`.
Status SendSignal(pid_t pid, int sig, const std::string& who);

// Termination signals, blocked for the object's life (from Start() on) and
// read from a signalfd together with SIGCHLD, so that a wait sees a child's
// end and a signal alike. `dropped` signals are taken and discarded (run
// takes SIGTSTP so that stopping it does not stop it). While it is started,
// SIGCHLD has a handler that does nothing, so a SIGCHLD ignored by the
// caller's parent is not discarded (nor children auto-reaped).
class SignalWatch {
 public:
  explicit SignalWatch(std::vector<int> terminating,
                       std::vector<int> dropped = {});
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  Status Start();
  int fd() const { return fd_.get(); }
  // The first termination signal taken, or 0.
  int first() const { return first_; }
  // The termination signals that arrived since the last call, in order,
  // without waiting.
  std::vector<int> Take();
  // Every signal a child should start with at its default action:
  // terminating, dropped, SIGCHLD and SIGPIPE.
  std::vector<int> ChildDefaults() const;

 private:
  std::vector<int> terminating_, dropped_;
  UniqueFd fd_;
  sigset_t old_mask_;
  struct sigaction old_chld_ {};
  bool started_ = false;
  int first_ = 0;
};

// Waits for the child `pid` while taking signals from `signals` (started):
// `on_signal` (when set) gets each termination signal, and `on_readable` is
// called when `fd` (when >= 0) can be read, until it returns false. The
// error names "waitpid" or "poll" and `who`; ECHILD when `pid` is not (or
// no longer) a child of this process.
Result<ExitStatus> WaitWatching(SignalWatch& signals, pid_t pid,
                                const std::string& who,
                                const std::function<void(int)>& on_signal,
                                int fd = -1,
                                const std::function<bool()>& on_readable = {});

// A pipe, both ends O_CLOEXEC; the read end O_NONBLOCK when asked. The
// error names "pipe" (or "fcntl O_NONBLOCK") and `what`.
struct Pipe {
  UniqueFd read, write;
};
Result<Pipe> MakePipe(const std::string& what, bool nonblocking_read = false);

// Forks a child that detaches: a session of its own (setsid) and stdin,
// stdout and stderr on /dev/null. It runs `body` with how that went and
// the write end of a readiness pipe (the body's to close, or left to the
// child's exit), then _exits with what `body` returns. The parent reads the
// pipe until the child closes it and returns the child's pid and what it
// wrote. Descriptors of the caller stay open in the child (the sandbox
// lock is inherited so).
struct DetachedChild {
  pid_t pid = 0;
  std::string report;  // what the child wrote before it closed the pipe
};
Result<DetachedChild> StartDetached(
    const std::function<int(const Status& detached, int report_fd)>& body);

// Writes all of `text` to `fd` (a pipe: EINTR and short writes retried).
Status WriteFully(int fd, const std::string& text, const std::string& what);

// Sets `signals` back to their default action and unblocks them in the
// calling thread; the error names the first call that failed.
Status RestoreDefaultSignals(const std::vector<int>& signals);

// The first executable regular file `name` in $PATH's directories (an
// empty entry is "."), as execvp(3) would find it, made absolute; ENOENT
// naming "find in PATH" and the name when there is none.
Result<std::string> FindInPath(const std::string& name);

// This program's own path (/proc/self/exe).
Result<std::string> SelfExe();

// This process's environment with `name` set to `value` (replacing it).
std::vector<std::string> EnvironmentWith(const std::string& name,
                                         const std::string& value);

// A word as a POSIX shell reads it: unchanged when it holds only
// letters, digits and @%+=:,./_- (and is not empty), else in single quotes
// ('\'' for a quote in it).
std::string ShellQuote(const std::string& word);
// The words quoted and joined by spaces.
std::string ShellLine(const std::vector<std::string>& words);

}  // namespace acqfs::cli

#endif  // ACQFS_STATE_PROCESS_H_
