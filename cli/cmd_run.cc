// acqfs run: runs COMMAND inside bubblewrap (bwrap) with a sandbox's mount
// as /workspace, then exports the sandbox and unmounts what it mounted.
//
// The sandbox: an existing, mounted sandbox is reused as it runs (policy
// options, when given, must equal the recorded policy); an existing one that
// is not mounted (or stale) is mounted again over its recorded lower; an
// unknown name is created over --repo (default: the current directory's git
// top level). Mounting, unmounting and exporting are done by running this
// same program as `acqfs mount`, `acqfs umount --no-export` and `acqfs
// export`, so their refusals and reports are the ones a person sees; their
// stdout goes to stderr, so that the command's stdout stays its own.
//
// The box (docs/sandboxes.md, "acqfs run"): /usr and /etc read-only, /bin,
// /sbin, /lib* as the host has them (symlinks into /usr, or read-only
// binds), fresh /proc, /dev and /tmp, the mount read-write at /workspace
// (the working directory), every namespace unshared (the network too unless
// --network=host), no capabilities (as root, bwrap would keep them in its
// user namespace, enough to remount /usr read-write), a session of its own
// (no controlling terminal, so no TIOCSTI injection into the caller's), and
// --die-with-parent. The host checkout's real path and the state directory
// are not bound; where one lies below a bound directory, a tmpfs covers it.
//
// Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are blocked here and read
// from a signalfd together with SIGCHLD. bwrap runs in a process group of
// its own, so a terminal's signals reach only this process; the first one
// taken while the command runs is passed to the sandbox's process group (the
// command and what it started; bwrap's --info-fd names the group's leader),
// a second one kills bwrap and the sandbox with SIGKILL. This process is the
// child subreaper while bwrap runs, so the sandbox's pid 1, and with it
// every process of the sandbox, is reaped before the mount is unmounted.
// Then: no export (it was interrupted), unmount if run mounted, exit 128+N.
// SIGTSTP is taken and dropped while run runs: stopping run would not stop
// the sandbox.
//
// Exit status: the command's (bwrap's, which is the command's, or 128+N if
// it was killed by signal N); 128+N after signal N; 1 for a refusal before
// anything is mounted; the export's failure code (2, 3) or 2 for a failed
// unmount when the command itself succeeded.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/policy_args.h"
#include "cli/sandbox.h"
#include "common/handle.h"
#include "common/sys.h"
#include "daemon/allow_other.h"
#include "gitbridge/export.h"
#include "state/liveness.h"
#include "state/process.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

// Passed on to the command; SIGTSTP and SIGCHLD are only taken.
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr char kWorkspace[] = "/workspace";
// The top-level directories bound like /usr's parts when the host has them.
constexpr const char* kUsrParts[] = {"bin",   "sbin",  "lib",
                                     "lib64", "lib32", "libx32"};

// How run's children start: stdin, stdout and stderr as given, in a
// process group of their own, with the signals run takes at their default
// action.
SpawnOptions ChildOptions(const SignalWatch& signals) {
  SpawnOptions o;
  o.new_group = true;
  o.reset_signals = signals.ChildDefaults();
  return o;
}

// Reads bwrap's --info-fd, a JSON object whose "child-pid" is the sandbox's
// first process (its pid 1, the leader of its session and process group),
// as this process's pid namespace numbers it.
class SandboxInfo {
 public:
  explicit SandboxInfo(UniqueFd fd) : fd_(std::move(fd)) {}
  int fd() const { return fd_.get(); }
  pid_t pid() const { return pid_; }
  // Reads what is there; false once the object is complete or the pipe
  // closed (then the descriptor is closed too).
  bool OnReadable() {
    char buf[1024];
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n > 0) {
      text_.append(buf, static_cast<size_t>(n));
      if (!Parse()) return true;
    } else {
      if (n < 0)
        Fail(0, "run: read bwrap's --info-fd", "pipe", std::strerror(errno));
      Parse();
    }
    fd_.reset();
    return false;
  }

 private:
  bool Parse() {
    auto j = nlohmann::json::parse(text_, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    auto it = j.find("child-pid");
    if (it != j.end() && it->is_number_integer())
      pid_ = static_cast<pid_t>(it->get<long long>());
    return true;
  }

  UniqueFd fd_;
  std::string text_;
  pid_t pid_ = 0;
};

// A host directory bound into the box, for the covering of hidden paths.
struct Bound {
  std::string host;    // canonical
  std::string inside;  // where it appears
};

class Runner {
 public:
  explicit Runner(const RunArgs& a) : a_(a) {}
  int Run();

 private:
  int CheckArgs();
  int InspectHost();
  int ResolveSandbox();
  int CheckReuse();
  int ResolveLower(std::string* lower);
  int PlanCovers();
  int PrepareMountpoint();
  int Mount();
  int RunCommand();
  int Export();
  int Unmount();
  int Helper(const std::vector<std::string>& args);
  std::vector<std::string> BwrapArgs(int info_fd) const;
  void Forward(int sig);

  const RunArgs& a_;
  SignalWatch signals_{
      {std::begin(kForwardedSignals), std::end(kForwardedSignals)}, {SIGTSTP}};
  std::string self_;         // this program
  std::string bwrap_;        // bwrap, found in PATH
  std::string state_;        // the state directory, as given (absolute)
  std::string state_canon_;  // ... and canonical
  Sandbox sandbox_{"", ""};  // the sandbox (its metadata once it exists)
  std::optional<PolicyRecord> policy_;  // the policy options, when given
  std::string lower_;                   // canonical
  std::string mountpoint_;  // where the sandbox is (or will be) mounted
  bool reuse_ = false;      // it was mounted already: leave it mounted
  bool mounted_ = false;    // run mounted it: unmount it at the end
  bool made_mountpoint_ = false;
  std::vector<std::pair<std::string, std::string>> usr_links_;  // to, at
  std::vector<Bound> bound_;         // read-only binds of host directories
  std::string resolv_conf_;          // its target, bound with --network=host
  std::vector<std::string> covers_;  // paths in the box covered by a tmpfs
  pid_t bwrap_pid_ = 0;
  pid_t sandbox_pid_ = 0;  // the sandbox's pid 1 (from --info-fd)
  int forwarded_ = 0;
};

int Runner::Run() {
  if (int rc = CheckArgs()) return rc;
  if (int rc = InspectHost()) return rc;
  if (Status s = signals_.Start(); !s)
    return Fail(kExitFailed, "run: block signals", s.error());
  if (int rc = ResolveSandbox()) return rc;
  if (int rc = PlanCovers()) return rc;
  (void)signals_.Take();
  if (int sig = signals_.first(); sig != 0) {
    Fail(0, "run", "`" + ShellLine(a_.command) + "`",
         "interrupted by " + SignalName(sig) +
             " before it started; nothing was mounted");
    return 128 + sig;
  }
  if (!reuse_) {
    if (int rc = PrepareMountpoint()) return rc;
    if (int rc = Mount()) return rc;
  }
  const bool interrupted_early = signals_.first() != 0;
  const int code = interrupted_early ? 0 : RunCommand();
  const int interrupted = signals_.first();  // the export is not interrupted
  int export_rc = 0;
  if (interrupted == 0 && !a_.no_export && gitbridge::IsGitCheckout(lower_))
    export_rc = Export();
  const bool unmounting = mounted_;
  const int unmount_rc = unmounting ? Unmount() : 0;
  if (interrupted != 0) {
    std::string what =
        interrupted_early
            ? "interrupted by " + SignalName(interrupted) + " before it started"
            : "interrupted by " + SignalName(interrupted);
    std::string where =
        unmounting ? (unmount_rc == 0 ? "unmounted the sandbox"
                                      : "could not unmount the sandbox")
                   : "the sandbox stays mounted at " + mountpoint_;
    Fail(0, "run", "`" + ShellLine(a_.command) + "`",
         what + "; " + where + "; not exported (`acqfs export " + a_.name +
             "` publishes its work)");
    return 128 + interrupted;
  }
  if (code != 0) return code;
  if (export_rc != 0) return export_rc;
  return unmount_rc;
}

// Refusals that need nothing but the arguments and PATH.
int Runner::CheckArgs() {
  if (a_.command.empty())
    return Fail(kExitBadInput, "run", "COMMAND", "missing (give it after --)");
  if (a_.network != "none" && a_.network != "host")
    return Fail(kExitBadInput, "run: --network", a_.network,
                "must be none or host");
  if (!ValidSandboxName(a_.name))
    return Fail(kExitBadInput, "run: sandbox name", "'" + a_.name + "'",
                "use 1-64 letters, digits, '.', '_' or '-' (not . or ..)");
  // The policy options are checked here, before anything is made, by the
  // same code `acqfs mount` runs on them again.
  if (a_.policy.given()) {
    auto rec = ResolvePolicy(a_.policy);
    if (!rec) return Fail(kExitBadInput, "run", rec.error());
    policy_ = *rec;
  }
  // What `acqfs mount` would refuse about who may use the mount (a
  // contradiction, --allow-other without user_allow_other) is refused here,
  // before anything is made; the -o words are checked by the mount.
  auto allow_other =
      AllowOtherRequest::FromFlags(a_.allow_other, a_.no_allow_other);
  if (!allow_other)
    return Fail(kExitBadInput, "run", allow_other.error().path,
                allow_other.error().op);
  if (auto allow = allow_other->Decide(::geteuid()); !allow)
    return Fail(kExitBadInput, "run", allow.error());
  auto bwrap = FindInPath("bwrap");
  if (!bwrap) {
    const char* path = std::getenv("PATH");
    return Fail(kExitBadInput, "run", "bwrap",
                std::string("not found in PATH (") + (path ? path : "") +
                    "); install it with `apt-get install bubblewrap`");
  }
  bwrap_ = *bwrap;
  auto self = SelfExe();
  if (!self) return Fail(kExitFailed, "run", self.error());
  self_ = *self;
  return 0;
}

// How the host lays out /bin, /lib, ... (symlinks into /usr on a merged-/usr
// system such as Debian 12, else directories) and /etc/resolv.conf.
int Runner::InspectHost() {
  for (const char* top : {"/usr", "/etc"}) {
    auto real = RealPath(top);
    if (!real) return Fail(kExitFailed, "run: host directory", real.error());
    bound_.push_back({*real, top});
  }
  for (const char* part : kUsrParts) {
    const std::string path = std::string("/") + part;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return Fail(kExitFailed, "run: host directory", path,
                  std::string(std::strerror(errno)) + " (lstat)");
    }
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
      if (n < 0)
        return Fail(kExitFailed, "run: host directory", path,
                    std::string(std::strerror(errno)) + " (readlink)");
      usr_links_.push_back({std::string(buf, static_cast<size_t>(n)), path});
    } else if (S_ISDIR(st.st_mode)) {
      bound_.push_back({path, path});
    }
  }
  // With the host's network, a resolv.conf that links out of /etc (to
  // systemd-resolved's in /run, say) keeps working: its target is bound.
  struct stat st;
  if (a_.network == "host" && ::lstat("/etc/resolv.conf", &st) == 0 &&
      S_ISLNK(st.st_mode)) {
    auto target = RealPath("/etc/resolv.conf");
    if (target && !Within(*target, bound_[0].host) &&
        !Within(*target, bound_[1].host))
      resolv_conf_ = *target;
  }
  return 0;
}

// Reuse, remount or create: reads the sandbox's state; nothing is written.
int Runner::ResolveSandbox() {
  state_ = Absolute(ResolveStateDir(a_.state_dir));
  state_canon_ = CanonicalPath(state_);
  sandbox_ = Sandbox(state_, a_.name);
  if (!sandbox_.HasMeta()) return ResolveLower(&lower_);
  if (Status s = sandbox_.Load(); !s)
    return Fail(kExitBadInput, "run: sandbox metadata", s.error());
  const SandboxMeta& meta = sandbox_.meta();
  auto live = sandbox_.Probe();
  if (!live) return Fail(kExitFailed, "run: sandbox state", live.error());
  if (live->state == MountState::kMounted) {
    reuse_ = true;
    lower_ = meta.lower;
    mountpoint_ = meta.mountpoint;
    return CheckReuse();
  }
  // Not mounted, or stale: `acqfs mount` mounts it again (and refuses a
  // --repo that is not its lower).
  if (a_.repo.empty()) {
    lower_ = meta.lower;
    return 0;
  }
  return ResolveLower(&lower_);
}

// A running mount is used as it is: what would change it is refused.
int Runner::CheckReuse() {
  const SandboxMeta& meta = sandbox_.meta();
  const std::string where = "is already mounted at " + mountpoint_;
  if (!a_.repo.empty()) {
    std::string lower;
    if (int rc = ResolveLower(&lower)) return rc;
    if (lower != meta.lower)
      return Fail(
          kExitBadInput, "run: sandbox", a_.name,
          "exists over a different lower directory (" + meta.lower + ")");
  }
  if (!a_.mountpoint.empty() && CanonicalPath(a_.mountpoint) != mountpoint_)
    return Fail(kExitBadInput, "run: sandbox", a_.name,
                where +
                    "; drop --mountpoint to use that mount, or unmount it "
                    "first");
  if (a_.allow_other || a_.no_allow_other || !a_.options.empty())
    return Fail(kExitBadInput, "run: sandbox", a_.name,
                where +
                    "; --allow-other, --no-allow-other and -o apply only "
                    "when run mounts it (drop them, or unmount it first)");
  if (policy_) {
    if (!(*policy_ == meta.policy))
      return Fail(kExitBadInput, "run: sandbox", a_.name,
                  "was created with the policy \"" + meta.policy.Summary() +
                      "\"; a running sandbox cannot change it (run without "
                      "policy options, or `acqfs rm` it and create it anew)");
  }
  return 0;
}

// --repo (its git top level when it is in a checkout, else itself), or the
// current directory's git top level.
int Runner::ResolveLower(std::string* lower) {
  std::string dir = a_.repo;
  if (dir.empty()) {
    char cwd[4096];
    if (!::getcwd(cwd, sizeof cwd))
      return Fail(kExitBadInput, "run: repository", "the current directory",
                  std::string(std::strerror(errno)) + " (getcwd)");
    dir = cwd;
  }
  dir = Absolute(dir);
  if (!IsDir(dir))
    return Fail(kExitBadInput, "run: repository", dir, "not a directory");
  auto out = MakePipe("git rev-parse");
  if (!out) return Fail(kExitFailed, "run", out.error());
  SpawnOptions io = ChildOptions(signals_);
  io.stdin_fd = SpawnOptions::kDevNull;
  io.stdout_fd = out->write.get();
  io.stderr_fd = SpawnOptions::kDevNull;
  auto git = FindInPath("git");
  std::string top;
  bool found_top = false;
  if (git) {
    auto pid = Spawn(*git,
                     {"git", "-c", "safe.directory=*", "-C", dir, "rev-parse",
                      "--show-toplevel"},
                     io);
    out->write.reset();
    if (!pid) return Fail(kExitFailed, "run: git", pid.error());
    auto text = sys::ReadAll(out->read.get(), 1 << 20, "git's output");
    if (!text)
      return Fail(kExitFailed, "run: read git's output", dir,
                  std::strerror(text.err()));
    top = std::move(*text);
    auto st = WaitWatching(signals_, *pid, "git", nullptr);
    if (!st) return Fail(kExitFailed, "run: git", st.error());
    found_top = st->success();
  }
  while (!top.empty() && top.back() == '\n') top.pop_back();
  if (found_top && !top.empty())
    dir = top;
  else if (a_.repo.empty())
    return Fail(kExitBadInput, "run: repository", dir,
                "not in a git checkout; give the directory with --repo DIR");
  auto real = RealPath(dir);
  if (!real) return Fail(kExitBadInput, "run: repository", real.error());
  *lower = *real;
  return 0;
}

// The host checkout and the state directory must not be reachable in the
// box: each one below a bound directory gets a tmpfs over it; one that
// contains a bound directory is refused.
int Runner::PlanCovers() {
  std::vector<Bound> binds = bound_;
  binds.push_back({lower_, kWorkspace});  // the merged view mirrors the lower
  const std::pair<std::string, std::string> hidden[] = {
      {"lower directory", lower_}, {"state directory", state_canon_}};
  for (const auto& [label, path] : hidden) {
    for (const Bound& b : binds) {
      const bool workspace = b.inside == kWorkspace;
      if (Within(b.host, path)) {
        if (workspace) continue;  // the lower itself, or one inside the state
        return Fail(kExitBadInput, "run: " + label, path,
                    "contains " + b.host +
                        ", which the sandbox binds read-only; it would be "
                        "visible inside");
      }
      if (Within(path, b.host))
        covers_.push_back(b.inside +
                          path.substr(b.host == "/" ? 0 : b.host.size()));
    }
  }
  return 0;
}

// --mountpoint, else ${XDG_RUNTIME_DIR:-/tmp}/acqfs-<uid>/<name>, made with
// mode 0700 (a parent that someone else could use is refused).
int Runner::PrepareMountpoint() {
  if (!a_.mountpoint.empty()) {
    mountpoint_ = Absolute(a_.mountpoint);
    return 0;
  }
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string dir = std::string(runtime && *runtime ? runtime : "/tmp") +
                          "/acqfs-" + std::to_string(::geteuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Fail(kExitFailed, "run: mountpoint directory", dir,
                std::string(std::strerror(errno)) + " (mkdir)");
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0)
    return Fail(kExitFailed, "run: mountpoint directory", dir,
                std::string(std::strerror(errno)) + " (lstat)");
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0)
    return Fail(kExitBadInput, "run: mountpoint directory", dir,
                "is not a directory of yours with mode 0700; remove it, or "
                "give --mountpoint");
  mountpoint_ = dir + "/" + a_.name;
  if (::mkdir(mountpoint_.c_str(), 0700) == 0)
    made_mountpoint_ = true;
  else if (errno != EEXIST)  // also a stale mount of this sandbox
    return Fail(kExitFailed, "run: mountpoint", mountpoint_,
                std::string(std::strerror(errno)) + " (mkdir)");
  return 0;
}

// `acqfs mount`; on success the sandbox's metadata names the mount.
int Runner::Mount() {
  std::vector<std::string> args = {
      "mount", lower_, mountpoint_, "--name", a_.name, "--state-dir", state_};
  // The mount is for the command run starts, in a namespace run makes after
  // it; a Podman namespace does not matter to it.
  args.push_back("--ignore-podman-namespace");
  if (a_.allow_other) args.push_back("--allow-other");
  if (a_.no_allow_other) args.push_back("--no-allow-other");
  for (const auto& o : a_.options) args.push_back("-o" + o);
  const PolicyArgs& p = a_.policy;
  for (const auto& g : p.hide) args.push_back("--hide=" + g);
  for (const auto& g : p.read_only) args.push_back("--read-only=" + g);
  if (p.hide_secrets) args.push_back("--hide-secrets");
  if (p.quota) args.push_back("--quota=" + *p.quota);
  if (p.policy_file) args.push_back("--policy=" + Absolute(*p.policy_file));
  int rc = Helper(args);
  if (rc != 0) {
    if (made_mountpoint_ && ::rmdir(mountpoint_.c_str()) != 0)
      Fail(0, "run: remove the mountpoint", mountpoint_,
           std::string(std::strerror(errno)) + " (rmdir)");
    return rc;
  }
  mounted_ = true;
  if (Status s = sandbox_.Load(); !s) {
    Fail(kExitFailed, "run: sandbox metadata", s.error());
    Unmount();
    return kExitFailed;
  }
  mountpoint_ = sandbox_.meta().mountpoint;
  return 0;
}

std::vector<std::string> Runner::BwrapArgs(int info_fd) const {
  std::vector<std::string> v = {"bwrap", "--unshare-all"};
  if (a_.network == "host") v.push_back("--share-net");
  for (const char* w : {"--die-with-parent", "--new-session", "--cap-drop",
                        "ALL", "--ro-bind", "/usr", "/usr"})
    v.push_back(w);
  for (const auto& [to, at] : usr_links_)
    v.insert(v.end(), {"--symlink", to, at});
  for (const Bound& b : bound_)
    if (b.inside != "/usr") v.insert(v.end(), {"--ro-bind", b.host, b.inside});
  if (!resolv_conf_.empty())
    v.insert(v.end(), {"--ro-bind-try", resolv_conf_, resolv_conf_});
  for (const char* w :
       {"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind"})
    v.push_back(w);
  v.push_back(mountpoint_);
  v.push_back(kWorkspace);
  for (const auto& c : covers_) v.insert(v.end(), {"--tmpfs", c});
  v.insert(v.end(),
           {"--chdir", kWorkspace, "--setenv", "HOME", "/tmp", "--unsetenv",
            "TMPDIR", "--info-fd", std::to_string(info_fd), "--"});
  v.insert(v.end(), a_.command.begin(), a_.command.end());
  return v;
}

// The first signal goes to the sandbox's process group (its pid 1 ignores
// it; the command and what it started get it), or to bwrap while the
// sandbox has no group yet; a later one kills everything.
void Runner::Forward(int sig) {
  const std::string bwrap =
      "bwrap (process " + std::to_string(bwrap_pid_) + ")";
  if (++forwarded_ == 1) {
    if (sandbox_pid_ > 0 && ::kill(-sandbox_pid_, sig) == 0) return;
    if (Status s = SendSignal(bwrap_pid_, sig, bwrap); !s)
      Fail(0, "run: pass on " + SignalName(sig), bwrap, std::strerror(s.err()));
    return;
  }
  if (Status s = SendSignal(bwrap_pid_, SIGKILL, bwrap); !s)
    Fail(0, "run: kill", bwrap, std::strerror(s.err()));
  const std::string group =
      "the sandbox (group " + std::to_string(sandbox_pid_) + ")";
  if (sandbox_pid_ > 0) {
    if (Status s = SendSignal(-sandbox_pid_, SIGKILL, group); !s)
      Fail(0, "run: kill", group, std::strerror(s.err()));
  }
}

// Runs bwrap and waits for it and for the sandbox's pid 1; the command's
// exit status.
int Runner::RunCommand() {
  auto info_pipe = MakePipe("bwrap --info-fd", /*nonblocking_read=*/true);
  if (!info_pipe) return Fail(kExitFailed, "run", info_pipe.error());
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
    return Fail(kExitFailed, "run: prctl", "PR_SET_CHILD_SUBREAPER",
                std::strerror(errno));
  SpawnOptions io = ChildOptions(signals_);  // stdin, stdout, stderr pass
  io.keep_fds = {info_pipe->write.get()};
  auto pid = Spawn(bwrap_, BwrapArgs(info_pipe->write.get()), io);
  info_pipe->write.reset();
  int code = 0;
  if (!pid) {
    code = Fail(kExitFailed, "run: start bwrap", pid.error());
  } else {
    bwrap_pid_ = *pid;
    SandboxInfo info(std::move(info_pipe->read));
    auto on_signal = [this, &info](int sig) {
      if (sandbox_pid_ == 0) sandbox_pid_ = info.pid();
      Forward(sig);
    };
    auto st = WaitWatching(signals_, bwrap_pid_, "bwrap", on_signal, info.fd(),
                           [this, &info] {
                             bool more = info.OnReadable();
                             sandbox_pid_ = info.pid();
                             return more;
                           });
    code = st ? st->ShellCode(kExitFailed)
              : Fail(kExitFailed, "run: wait for bwrap", st.error());
    // bwrap may end before its pid 1 has finished ending the sandbox; that
    // process is this one's child now (subreaper). When it is reaped, every
    // process of the sandbox is gone and the mount is no longer in use.
    if (info.pid() > 0) {
      sandbox_pid_ = info.pid();
      auto reaped =
          WaitWatching(signals_, sandbox_pid_, "the sandbox", on_signal);
      if (!reaped && reaped.err() != ECHILD)
        Fail(0, "run: wait for the sandbox", reaped.error());
    }
  }
  if (::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) != 0)
    Fail(0, "run: prctl", "PR_SET_CHILD_SUBREAPER", std::strerror(errno));
  return code;
}

// Flushes the mount (so that data the kernel still caches, as with -o
// writeback, reaches the upper layer), then `acqfs export`.
int Runner::Export() {
  UniqueFd dir(::open(mountpoint_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir || ::syncfs(dir.get()) != 0)
    return Fail(
        kExitFailed, "run: flush the mount before the export", mountpoint_,
        std::string(std::strerror(errno)) + (dir ? " (syncfs)" : " (open)"));
  return Helper({"export", a_.name, "--state-dir", state_});
}

// `acqfs umount --no-export`, then the mountpoint run made goes.
int Runner::Unmount() {
  int rc = Helper({"umount", a_.name, "--state-dir", state_, "--no-export"});
  if (rc != 0) return rc;
  mounted_ = false;
  if (made_mountpoint_ && ::rmdir(mountpoint_.c_str()) != 0)
    return Fail(kExitFailed, "run: remove the mountpoint", mountpoint_,
                std::string(std::strerror(errno)) + " (rmdir)");
  return 0;
}

// Runs this program with `args`: stdin /dev/null, stdout to stderr, from
// "/", in a process group of its own (a Ctrl-C does not cut it short).
// Its exit status (2 when it was killed).
int Runner::Helper(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {self_};
  argv.insert(argv.end(), args.begin(), args.end());
  SpawnOptions io = ChildOptions(signals_);
  io.stdin_fd = SpawnOptions::kDevNull;
  io.stdout_fd = STDERR_FILENO;
  io.cwd = "/";
  const std::string what = "run: acqfs " + args[0];
  auto pid = Spawn(self_, argv, io);
  if (!pid) return Fail(kExitFailed, what, pid.error());
  auto st = WaitWatching(signals_, *pid, "acqfs " + args[0], nullptr);
  if (!st) return Fail(kExitFailed, what, st.error());
  if (st->exited()) return st->code();
  return Fail(kExitFailed, what, ShellLine(argv),
              "was killed by " + SignalName(st->signal()));
}

}  // namespace

int RunRun(const RunArgs& a) {
  Runner runner(a);
  return runner.Run();
}

}  // namespace acqfs::cli
