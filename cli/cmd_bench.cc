// acqfs bench: what does the overlay cost a command? Runs COMMAND N times
// in a fresh acqfs sandbox over the checkout and N times in a fresh
// `git clone --no-hardlinks` of it, alternating (sandbox run 1, clone run 1,
// sandbox run 2, ...), and reports the wall-clock time of each run, the
// medians, their ratio, and the time it took to make each workspace.
//
// COMMAND is run with execvp(3) of the words after `--` (no shell; write
// `-- sh -c '...'` for shell syntax), with the workspace's root as its
// working directory (and $PWD), stdin on /dev/null, stdout discarded and
// stderr kept in a file so that a failure can show its end. Only the
// command is timed (steady clock, from spawning it to reaping it).
//
// Everything it makes lives in a new directory $TMPDIR/acqfs-bench-XXXXXX
// (mountpoints, clones, the children's output, and the state directory
// unless --state-dir names one). Each sandbox is made, unmounted (without
// export) and removed with the acqfs code paths a person uses, by running
// this same program as `acqfs mount`, `acqfs umount --no-export` and
// `acqfs rm --force`, which also removes its `sandbox-<name>` remote from the
// host checkout. Each clone is removed after its run. Nothing is left in any
// outcome: a failing command, a failed mount, or SIGINT/SIGTERM/SIGHUP.
//
// Signals: termination signals are blocked in this process and waited for
// together with the children. Every child runs in a process group of its
// own, so a Ctrl-C reaches only this process, which passes it on to the
// command (or clone) being timed, lets the acqfs helpers finish, cleans up
// and exits 2; a second signal kills the command's process group.
// Exit codes: 0 done; 1 bad input (not a git checkout, ...); 2 a workspace
// could not be made or removed, COMMAND failed, or an interruption.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/sandbox.h"
#include "common/sys.h"
#include "daemon/daemon.h"
#include "gitbridge/remote.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"
#include "state/liveness.h"
#include "state/process.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTermSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr size_t kTailBytes = 4096;  // of a failed child's stderr
constexpr size_t kTailLines = 10;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// How a child ended.
struct Outcome {
  pid_t pid = 0;                     // also its process group
  int spawn_err = 0;                 // errno of posix_spawnp, 0 when it started
  std::optional<ExitStatus> status;  // nullopt when it could not be waited for
  double seconds = 0;                // from spawning to reaping

  bool ok() const { return spawn_err == 0 && status && status->success(); }
  // "exited with status 3", "was killed by signal 9 (Killed)", ...
  std::string Describe() const {
    if (spawn_err != 0)
      return std::string("could not be started: ") + std::strerror(spawn_err);
    if (!status) return "could not be waited for";
    return status->Describe();
  }
};

// Runs `argv` (found in PATH) in `cwd` with $PWD set to it, stdin from
// /dev/null, stdout and stderr to the files `out` and `err`, in a process
// group of its own, and waits for it. With `forward`, a termination signal
// is passed on to its process group (the second and later ones as
// SIGKILL); otherwise it is only recorded in `signals`.
Outcome Spawn(SignalWatch& signals, const std::vector<std::string>& argv,
              const std::string& cwd, const std::string& out,
              const std::string& err, bool forward) {
  SpawnOptions o;
  o.search_path = true;
  o.new_group = true;
  o.cwd = cwd;
  o.env = EnvironmentWith("PWD", cwd);
  o.stdin_fd = SpawnOptions::kDevNull;
  o.stdout_path = out;
  o.stderr_path = err;
  o.reset_signals = signals.ChildDefaults();
  Outcome outcome;
  auto t0 = Clock::now();
  auto pid = Spawn(argv[0], argv, o);
  if (!pid) {
    outcome.spawn_err = pid.err();
    return outcome;
  }
  outcome.pid = *pid;
  int forwarded = 0;
  auto on_signal = [&](int sig) {
    if (forward)
      (void)SendSignal(-outcome.pid, ++forwarded > 1 ? SIGKILL : sig,
                       "process group " + std::to_string(outcome.pid));
  };
  auto status = WaitWatching(signals, outcome.pid, argv[0], on_signal);
  if (status) outcome.status = *status;
  outcome.seconds = Since(t0);
  return outcome;
}

// The last kTailLines lines of the file (at most kTailBytes).
std::vector<std::string> Tail(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::streamoff size = in.tellg();
  std::streamoff from = std::max<std::streamoff>(0, size - kTailBytes);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  if (from > 0 && !lines.empty()) lines.erase(lines.begin());  // partial
  if (lines.size() > kTailLines)
    lines.erase(lines.begin(), lines.end() - kTailLines);
  return lines;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Seconds(double s) {
  char buf[32];
  if (s < 1)
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1000);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// The times of one kind of workspace.
struct Series {
  std::vector<double> runs;   // COMMAND, seconds
  std::vector<double> setup;  // making the workspace, seconds
};

nlohmann::json ToJson(const Series& s) {
  return {{"seconds", s.runs},
          {"median_seconds", Median(s.runs)},
          {"setup_seconds", s.setup},
          {"setup_median_seconds", Median(s.setup)}};
}

// One `acqfs bench` invocation: its workspaces, its results, its cleanup.
class Bench {
 public:
  Bench(const BenchArgs& a, SignalWatch& signals)
      : a_(a), signals_(signals), progress_("bench") {}
  ~Bench() { RemoveWorkdir(); }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  int Run();

 private:
  static constexpr int kInterrupted = -1;

  int Prepare();
  int FindRepo();
  int PrepareStateDir();
  void CheckCheckoutClean();
  int RunSandbox(int run);
  int RunClone(int run);
  int TimeCommand(int run, const std::string& where, const std::string& tag,
                  const std::string& cwd, Series* series);
  bool RemoveSandbox(const std::string& name, const std::string& mnt,
                     bool mounted);
  void RemoveWorkdir();
  int Leftovers() const;
  std::string Log(const std::string& what) const {
    return workdir_ + "/logs/" + what;
  }
  Outcome Helper(const std::vector<std::string>& args, const std::string& log);
  int HelperFailed(const std::string& what, const std::string& subject,
                   const Outcome& o, const std::string& log);
  void Phase(int run, const std::string& what) {
    progress_.Update("run " + std::to_string(run + 1) + "/" +
                     std::to_string(a_.runs) + ": " + what);
  }
  void Print() const;
  // Takes the signals that arrived meanwhile: was bench interrupted?
  bool Interrupted() {
    (void)signals_.Take();
    return signals_.first() != 0;
  }

  const BenchArgs& a_;
  SignalWatch& signals_;
  Progress progress_;
  std::string self_;        // this program
  std::string repo_;        // the checkout's top level
  std::string workdir_;     // $TMPDIR/acqfs-bench-XXXXXX, canonical
  std::string state_;       // the state directory of the sandboxes
  bool had_store_ = false;  // state_ held a layer store (.layers) already
  std::vector<std::string> made_dirs_;  // --state-dir and parents it made
  bool mount_left_ = false;             // a mount could not be removed
  int checkout_clean_ = -1;             // 1 clean, 0 not, -1 unknown
  std::vector<std::string> leftovers_;  // "path: why", cleanup failures
  Series acqfs_, clone_;
};

int Bench::Run() {
  int rc = Prepare();
  for (int i = 0; rc == 0 && i < a_.runs; i++) {
    rc = RunSandbox(i);
    if (rc == 0) rc = RunClone(i);
  }
  progress_.Update("cleaning up");
  RemoveWorkdir();
  progress_.Finish();
  const bool interrupted = rc == kInterrupted || Interrupted();
  const int left = Leftovers();
  if (interrupted)
    return Fail(kExitFailed, "bench", "`" + ShellLine(a_.command) + "`",
                std::string("interrupted by SIG") +
                    sigabbrev_np(signals_.first()) +
                    (left ? "; see above for what is left"
                          : "; removed everything it made"));
  if (rc != 0) return rc;
  if (left != 0) return left;
  if (checkout_clean_ == 0)
    std::fprintf(stderr,
                 "acqfs: bench: %s: note: the checkout has uncommitted, "
                 "untracked or ignored files; the sandboxes showed them, the "
                 "clones (HEAD only) did not\n",
                 repo_.c_str());
  Print();
  return 0;
}

int Bench::Prepare() {
  auto self = SelfExe();
  if (!self) return Fail(kExitFailed, "bench", self.error());
  self_ = *self;
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/acqfs-bench-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return Fail(kExitFailed, "bench: temporary directory", tmpl,
                std::strerror(errno));
  auto real = RealPath(tmpl);
  workdir_ = real ? *real : tmpl;
  if (::mkdir(Log("").c_str(), 0700) != 0)
    return Fail(kExitFailed, "bench: temporary directory", Log(""),
                std::strerror(errno));
  if (int rc = FindRepo()) return rc;
  if (int rc = PrepareStateDir()) return rc;
  progress_.Update("checking the checkout");
  CheckCheckoutClean();
  return Interrupted() ? kInterrupted : 0;
}

// The checkout: --repo's (or the current directory's) git top level.
int Bench::FindRepo() {
  char cwd[4096];
  std::string dir = !a_.repo.empty()            ? Absolute(a_.repo)
                    : ::getcwd(cwd, sizeof cwd) ? std::string(cwd)
                                                : std::string(".");
  if (!IsDir(dir))
    return Fail(kExitBadInput, "bench: repository", dir, "not a directory");
  Outcome o = Spawn(signals_, {"git", "rev-parse", "--show-toplevel"}, dir,
                    Log("toplevel.out"), Log("toplevel.err"), false);
  std::string top = ReadText(Log("toplevel.out"));
  while (!top.empty() && top.back() == '\n') top.pop_back();
  if (!o.ok() || top.empty()) {
    std::vector<std::string> tail = Tail(Log("toplevel.err"));
    return Fail(kExitBadInput, "bench: repository", dir,
                "not in a git checkout (`git rev-parse --show-toplevel` " +
                    o.Describe() + (tail.empty() ? "" : ": " + tail.back()) +
                    "); use --repo DIR");
  }
  auto real = RealPath(top);
  repo_ = real ? *real : top;
  return 0;
}

// --state-dir (made if missing, with its parents, and then removed at the
// end), else <workdir>/state.
int Bench::PrepareStateDir() {
  if (a_.state_dir.empty()) {
    state_ = workdir_ + "/state";
  } else {
    state_ = Absolute(a_.state_dir);
    for (std::string d = state_; d.size() > 1 && !Exists(d);
         d = d.substr(0, d.find_last_of('/')))
      made_dirs_.push_back(d);
  }
  if (Status s = MakeDirs(state_); !s)
    return Fail(kExitFailed, "bench: state directory", s.error());
  had_store_ = Exists(state_ + "/" + kLayerStoreDir);
  return 0;
}

// A sandbox shows the checkout as it is; a clone holds only its HEAD. Finds
// out whether they differ (uncommitted, untracked or ignored files); Run()
// says so at the end. --no-optional-locks: git status must not refresh the
// host's index.
void Bench::CheckCheckoutClean() {
  Outcome o = Spawn(
      signals_,
      {"git", "--no-optional-locks", "status", "--porcelain", "--ignored"},
      repo_, Log("status.out"), Log("status.err"), false);
  if (!o.ok()) return;
  checkout_clean_ = ReadText(Log("status.out")).empty() ? 1 : 0;
}

// Runs this program with `args` (an acqfs subcommand) from the workdir,
// its output in the log `log`; never interrupted.
Outcome Bench::Helper(const std::vector<std::string>& args,
                      const std::string& log) {
  std::vector<std::string> argv = {self_};
  argv.insert(argv.end(), args.begin(), args.end());
  return Spawn(signals_, argv, workdir_, Log(log + ".out"), Log(log + ".err"),
               false);
}

int Bench::HelperFailed(const std::string& what, const std::string& subject,
                        const Outcome& o, const std::string& log) {
  progress_.Finish();  // the message must not share the progress line
  Fail(kExitFailed, "bench: " + what, subject, o.Describe());
  for (const auto& l : Tail(Log(log + ".err")))
    std::fprintf(stderr, "  %s\n", l.c_str());
  return kExitFailed;
}

int Bench::RunSandbox(int run) {
  const std::string n = std::to_string(run);
  const std::string name = "bench-" + std::to_string(::getpid()) + "-" + n;
  const std::string mnt = workdir_ + "/mnt-" + n;
  // Never touch a sandbox this run did not make.
  if (Sandbox(state_, name).HasFolder())
    return Fail(kExitBadInput, "bench: sandbox", name,
                "exists already in " + state_);
  if (::mkdir(mnt.c_str(), 0755) != 0)
    return Fail(kExitFailed, "bench: mountpoint", mnt, std::strerror(errno));
  Phase(run, "mounting the acqfs sandbox");
  Outcome m =
      Helper({"mount", repo_, mnt, "--name", name, "--state-dir", state_},
             "mount-" + n);
  int rc = 0;
  if (!m.ok())
    rc = HelperFailed("acqfs mount", mnt, m, "mount-" + n);
  else
    acqfs_.setup.push_back(m.seconds);
  if (rc == 0 && Interrupted()) rc = kInterrupted;
  if (rc == 0) {
    Phase(run, "running in the acqfs sandbox");
    rc = TimeCommand(run, "the acqfs sandbox", "sandbox-" + n, mnt, &acqfs_);
  }
  Phase(run, "removing the acqfs sandbox");
  if (!RemoveSandbox(name, mnt, m.ok()) && rc == 0) rc = kExitFailed;
  return rc;
}

int Bench::RunClone(int run) {
  const std::string n = std::to_string(run);
  const std::string clone = workdir_ + "/clone-" + n;
  Phase(run, "cloning");
  Outcome c = Spawn(
      signals_,
      {"git", "clone", "--no-hardlinks", "--quiet", "--", repo_, clone},
      workdir_, Log("clone-" + n + ".out"), Log("clone-" + n + ".err"), true);
  int rc = 0;
  if (Interrupted())
    rc = kInterrupted;
  else if (!c.ok())
    rc = HelperFailed("git clone", repo_, c, "clone-" + n);
  else
    clone_.setup.push_back(c.seconds);
  if (rc == 0) {
    Phase(run, "running in the clone");
    rc = TimeCommand(run, "the clone", "clone-" + n, clone, &clone_);
  }
  Phase(run, "removing the clone");
  if (Status s = sys::RemoveTree(AT_FDCWD, clone, clone); !s)
    leftovers_.push_back(clone + ": " + s.error().Message());
  return rc;
}

// Runs COMMAND in `cwd` and records its time in `series`. Processes it
// leaves behind in its process group are killed, so that none keeps the
// workspace busy.
int Bench::TimeCommand(int run, const std::string& where,
                       const std::string& tag, const std::string& cwd,
                       Series* series) {
  const std::string err = Log("command-" + tag + ".err");
  Outcome o = Spawn(signals_, a_.command, cwd, "/dev/null", err, true);
  if (o.spawn_err == 0)
    (void)SendSignal(-o.pid, SIGKILL,
                     "process group " + std::to_string(o.pid));  // leftovers
  if (Interrupted()) return kInterrupted;
  if (o.ok()) {
    series->runs.push_back(o.seconds);
    return 0;
  }
  progress_.Finish();
  Fail(kExitFailed, "bench: run " + std::to_string(run + 1) + " in " + where,
       "`" + ShellLine(a_.command) + "`", o.Describe());
  std::vector<std::string> tail = Tail(err);
  if (!tail.empty()) std::fprintf(stderr, "  the end of its stderr:\n");
  for (const auto& l : tail) std::fprintf(stderr, "    %s\n", l.c_str());
  return kExitFailed;
}

// Unmounts without export and removes the sandbox with its remote, by the
// acqfs commands; when `mounted` (so the sandbox and its remote are this
// run's), finishes directly what they left. Records what is left; true
// when the commands succeeded and nothing is left.
bool Bench::RemoveSandbox(const std::string& name, const std::string& mnt,
                          bool mounted) {
  const Sandbox sandbox(state_, name);
  const SandboxPaths& paths = sandbox.paths();
  const std::string log = "teardown-" + name;
  bool ok = true;
  if (IsAcqfsMounted(mnt)) {
    Outcome u = Helper({"umount", mnt, "--no-export", "--state-dir", state_},
                       log + "-umount");
    if (!u.ok()) {
      HelperFailed("acqfs umount", mnt, u, log + "-umount");
      ok = false;
    }
  }
  if (sandbox.HasFolder()) {
    Outcome rm =
        Helper({"rm", name, "--state-dir", state_, "--force"}, log + "-rm");
    if (!rm.ok()) {
      HelperFailed("acqfs rm", name, rm, log + "-rm");
      ok = false;
    }
  }
  const size_t before = leftovers_.size();
  if (IsAcqfsMounted(mnt)) {
    leftovers_.push_back(mnt + ": still mounted");
    mount_left_ = true;
    return false;
  }
  if (mounted) {
    if (auto s = gitbridge::UnregisterRemote(repo_, name, paths.bridge); !s)
      leftovers_.push_back(repo_ + ": remote " + gitbridge::RemoteName(name) +
                           ": " + s.error().Message());
    if (Status s = sys::RemoveTree(AT_FDCWD, paths.dir, paths.dir); !s)
      leftovers_.push_back(paths.dir + ": " + s.error().Message());
  }
  if (::rmdir(mnt.c_str()) != 0 && errno != ENOENT)
    leftovers_.push_back(mnt + ": " + std::strerror(errno));
  return ok && leftovers_.size() == before;
}

// Removes the workdir (and an own --state-dir), unless a mount is left in
// it: then nothing below it is touched.
void Bench::RemoveWorkdir() {
  if (workdir_.empty()) return;
  if (mount_left_) {
    leftovers_.push_back(workdir_ + ": kept, it holds a mount");
    workdir_.clear();
    return;
  }
  if (!had_store_ && !state_.empty()) {
    // The layer store its sandboxes made, empty once `acqfs rm` collected
    // their layers: but for its lock file.
    const std::string store = state_ + "/" + kLayerStoreDir;
    (void)::unlink((store + "/lock").c_str());
    if (::rmdir(store.c_str()) != 0 && errno != ENOENT)
      leftovers_.push_back(store + ": " + std::strerror(errno));
  }
  for (const auto& d : made_dirs_)  // deepest first
    if (::rmdir(d.c_str()) != 0)
      leftovers_.push_back(d + ": " + std::strerror(errno));
  if (Status s = sys::RemoveTree(AT_FDCWD, workdir_, workdir_); !s)
    leftovers_.push_back(workdir_ + ": " + s.error().Message());
  workdir_.clear();
}

// Reports what cleanup left behind; kExitFailed when anything.
int Bench::Leftovers() const {
  for (const auto& l : leftovers_) {
    size_t colon = l.find(": ");
    Fail(kExitFailed, "bench: clean up", l.substr(0, colon),
         colon == std::string::npos ? "not removed" : l.substr(colon + 2));
  }
  return leftovers_.empty() ? 0 : kExitFailed;
}

void Bench::Print() const {
  const double ratio = Median(acqfs_.runs) / Median(clone_.runs);
  if (a_.json) {
    nlohmann::json j = {{"repo", repo_},           {"command", a_.command},
                        {"runs", a_.runs},         {"acqfs", ToJson(acqfs_)},
                        {"clone", ToJson(clone_)}, {"ratio", ratio}};
    j["checkout_clean"] = checkout_clean_ < 0
                              ? nlohmann::json(nullptr)
                              : nlohmann::json(checkout_clean_ == 1);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("acqfs bench: `%s` in %s, %d run%s each\n",
              ShellLine(a_.command).c_str(), repo_.c_str(), a_.runs,
              a_.runs == 1 ? "" : "s");
  std::printf("%-8s %12s %12s\n", "run", "acqfs", "clone");
  for (int i = 0; i < a_.runs; i++)
    std::printf("%-8d %12s %12s\n", i + 1, Seconds(acqfs_.runs[i]).c_str(),
                Seconds(clone_.runs[i]).c_str());
  std::printf("%-8s %12s %12s   acqfs/clone %.2f\n", "median",
              Seconds(Median(acqfs_.runs)).c_str(),
              Seconds(Median(clone_.runs)).c_str(), ratio);
  std::printf("workspace setup (median): acqfs mount %s, git clone %s\n",
              Seconds(Median(acqfs_.setup)).c_str(),
              Seconds(Median(clone_.setup)).c_str());
}

}  // namespace

int RunBench(const BenchArgs& a) {
  if (a.command.empty())
    return Fail(kExitBadInput, "bench", "COMMAND",
                "missing (give it after --)");
  if (a.runs < 1)
    return Fail(kExitBadInput, "bench: --runs", std::to_string(a.runs),
                "must be at least 1");
  // First: the progress thread inherits the mask.
  SignalWatch signals({std::begin(kTermSignals), std::end(kTermSignals)});
  if (Status s = signals.Start(); !s)
    return Fail(kExitFailed, "bench: block signals", s.error());
  Bench bench(a, signals);
  return bench.Run();
}

}  // namespace acqfs::cli
