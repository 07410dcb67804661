#include "daemon/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "common/handle.h"
#include "common/sys.h"
#include "daemon/control.h"
#include "daemon/log_sink.h"
#include "daemon/serve_control.h"
#include "state/liveness.h"
#include "state/paths.h"
#include "state/process.h"

namespace acqfs::cli {
namespace {

constexpr size_t kLogBytes = 8 << 20;  // per file; two files kept

void SetUpLogging(const DaemonOptions& o) {
  std::vector<spdlog::sink_ptr> sinks;
  if (!o.log_path.empty()) {
    // Beneath the sandbox's folder, no symlink followed (daemon/log_sink.h).
    if (auto sink = DirLogSink::Open(o.log_path, kLogBytes, 2))
      sinks.push_back(*sink);
    else
      std::fprintf(stderr, "acqfs: daemon log: %s\n",
                   sink.error().Message().c_str());
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

// A detached daemon's stderr is /dev/null: with `-o debug`, libfuse's
// request trace (which it prints to stderr) goes to fuse-debug.log beside
// the daemon log instead, so the requests can be counted.
void RequestTraceToFile(const DaemonOptions& o) {
  if (!o.config.debug || o.log_path.empty()) return;
  auto slash = o.log_path.rfind('/');
  const std::string path =
      (slash == std::string::npos ? std::string(".")
                                  : o.log_path.substr(0, slash)) +
      "/fuse-debug.log";
  UniqueFd fd(::open(path.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
                     0600));
  if (!fd || ::dup2(fd.get(), STDERR_FILENO) < 0)
    spdlog::warn("request trace: {}", Error::Errno("open", path).Message());
}

// Writes the pid file atomically (common/atomic_file.h): readers never see
// it half written. Once mounted, it also names the mount's device.
void WritePidFile(const std::string& path, const std::string& mountpoint) {
  if (path.empty()) return;
  DaemonRecord r;
  r.pid = ::getpid();
  if (!mountpoint.empty()) {
    // The mount the mountpoint leads to now is the one just made: statx
    // with AT_STATX_DONT_SYNC sends this daemon no request, which it could
    // not answer before its loop runs.
    auto mounts = AcqfsMountsAt(mountpoint);
    auto reached = MountReachedAt(mountpoint);
    for (const auto& m : mounts) {
      if (reached && m.id == reached->id && m.dev == reached->dev) {
        r.mount_dev = m.dev;
        r.mount_id = m.id;
      }
    }
    if (!r.mount_dev && !mounts.empty())
      r.mount_dev = mounts.back().dev;  // the topmost fuse.acqfs one: ours
  }
  // A record of this process and its mount, neither of which outlives the
  // machine: readers need a whole version, not one that survives a crash.
  if (Status s = WriteFileAtomically(path, FormatDaemonRecord(r), 0644,
                                     Durability::kWhileRunning);
      !s)
    spdlog::error("pid file: {}", s.error().Message());
}

// A daemon must end cleanly on SIGTERM and SIGINT (and, detached, SIGHUP):
// libfuse installs its handlers only over the default action, and a shell
// starts background jobs with SIGINT ignored, so both the dispositions and
// the mask inherited from the caller are reset first.
void ResetTerminationSignals(bool hangup) {
  std::vector<int> signals = {SIGTERM, SIGINT};
  if (hangup) signals.push_back(SIGHUP);
  if (Status s = RestoreDefaultSignals(signals); !s)
    spdlog::warn("reset signals: {}", s.error().Message());
}

// Serves the sandbox's control socket while the filesystem runs.
ControlStarter ControlOf(const DaemonOptions& o) {
  if (o.state_dir.empty() || o.sandbox.empty()) return nullptr;
  return [o](MountControl* mc) -> std::function<void()> {
    const std::string dir = o.state_dir + "/" + o.sandbox;
    auto srv = ControlServer::Start(
        dir, SandboxPaths::kControlSocket, [o, mc](const nlohmann::json& req) {
          return ServeControl(o.state_dir, o.sandbox, mc, req);
        });
    if (!srv) {
      spdlog::warn(
          "control socket: {} (checkpoints of this mount are "
          "refused)",
          srv.error().Message());
      return nullptr;
    }
    std::shared_ptr<ControlServer> server = std::move(*srv);
    return [server] {
      if (Status s = server->Stop(); !s)
        spdlog::warn("control socket: {}", s.error().Message());
    };
  };
}

// The detached daemon (StartDetached's child): reports "OK\n" or
// "ERR <errno> <message>" on `report_fd` once it has mounted or failed.
int RunChild(const DaemonOptions& o, const Status& detached, int report_fd) {
  UniqueFd report(report_fd);
  auto send = [&report](const Status& r) {
    if (!report) return;
    (void)WriteFully(
        report.get(),
        r ? std::string("OK\n")
          : "ERR " + std::to_string(r.err()) + " " + r.error().Message(),
        "the daemon's readiness pipe");
    report.reset();
  };
  if (!detached) {
    send(detached);
    return 1;
  }
  SetUpLogging(o);
  RequestTraceToFile(o);
  ResetTerminationSignals(/*hangup=*/true);
  WritePidFile(o.pid_path, "");
  Status s = RunFilesystem(
      o.config,
      [&](const Status& r) {
        if (r) WritePidFile(o.pid_path, o.config.mountpoint);
        send(r);
      },
      ControlOf(o));
  if (!s) spdlog::error("{}", s.error().Message());
  spdlog::shutdown();
  if (!o.pid_path.empty()) ::unlink(o.pid_path.c_str());
  return s ? 0 : 1;
}

}  // namespace

Status StartDaemon(const DaemonOptions& o) {
  if (o.foreground) {
    SetUpLogging(o);
    ResetTerminationSignals(/*hangup=*/false);
    WritePidFile(o.pid_path, "");
    Status s = RunFilesystem(
        o.config,
        [&](const Status& r) {
          if (r) WritePidFile(o.pid_path, o.config.mountpoint);
        },
        ControlOf(o));
    if (!o.pid_path.empty()) ::unlink(o.pid_path.c_str());
    // The same shape as a detached daemon's report: its whole message.
    if (!s) return Error::Of(s.err(), s.error().Message(), "");
    return s;
  }
  auto child = StartDetached([&o](const Status& detached, int report_fd) {
    return RunChild(o, detached, report_fd);
  });
  if (!child) return child.error();
  const std::string& msg = child->report;
  if (msg.rfind("OK", 0) == 0) return Ok();
  // Reaped so that it leaves no zombie; what it reported is the error.
  (void)Wait(child->pid, "the daemon");
  if (msg.rfind("ERR ", 0) == 0) {
    // "ERR <errno> <message>": the daemon's own error, errno kept (EBUSY:
    // another daemon serves these layers).
    char* end = nullptr;
    long err = std::strtol(msg.c_str() + 4, &end, 10);
    if (end && *end == ' ' && err > 0)
      return Error::Of(static_cast<int>(err), end + 1, "");
    return Error::Of(EIO, msg.substr(4), "");
  }
  return Error::Of(EIO, "the daemon ended before mounting; see its log",
                   o.log_path);
}

bool IsAcqfsMounted(const std::string& mountpoint) {
  return !AcqfsMountsAt(mountpoint).empty();
}

namespace {

// Runs fusermount3 with `args` and then the mountpoint; Ok when it exited
// 0.
Status RunFusermount(std::vector<const char*> args,
                     const std::string& mountpoint) {
  std::vector<std::string> argv = {"fusermount3"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(mountpoint);
  SpawnOptions options;
  options.search_path = true;
  auto pid = Spawn("fusermount3", argv, options);
  if (!pid) return Error::Of(pid.err(), "run fusermount3", mountpoint);
  auto status = Wait(*pid, "fusermount3");
  if (!status)
    return Error::Of(status.err(), "wait for fusermount3", mountpoint);
  if (!status->success()) {
    std::string what = "fusermount3";
    for (const char* a : args) what += std::string(" ") + a;
    return Error::Of(EBUSY, what, mountpoint);
  }
  return Ok();
}

// A process that has ended but was not reaped yet (its parent may be a
// container's init that never reaps) counts as gone.
bool Alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  auto st = ReadProcStat(pid);
  return st && st->state != 'Z';
}

// Polls `gone` every 10 ms until it says yes or `seconds` have passed.
template <class Gone>
bool PollUntil(double seconds, Gone gone) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (!gone()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

Status WaitForDaemon(const std::string& pid_path, const std::string& lock_path,
                     double seconds) {
  auto record = ReadDaemonRecord(pid_path);
  const std::string who =
      "wait for daemon" + (record ? " " + std::to_string(record->pid) : "");
  bool gone;
  if (Exists(lock_path)) {
    gone = PollUntil(seconds, [&] {
      auto held = LockHeld(lock_path);
      if (held) return !*held;
      return !record || !Alive(record->pid);  // the lock cannot be tested
    });
  } else {
    if (!record) return Ok();  // no daemon recorded
    gone = PollUntil(seconds, [&] { return !Alive(record->pid); });
  }
  if (!gone) return Error::Of(ETIMEDOUT, who, pid_path);
  // A daemon that ends cleanly removes its pid file; one that was killed
  // leaves it. Remove only the record read above, not a newer daemon's.
  auto now = ReadDaemonRecord(pid_path);
  if (now && record && now->pid == record->pid &&
      ::unlink(pid_path.c_str()) != 0 && errno != ENOENT)
    return Error::Errno("remove", pid_path);
  return Ok();
}

}  // namespace

namespace {

// Is `own` (that mount id with that device) still in the mount table?
bool StillMounted(const MountEntry& own) {
  for (const auto& m : MountsAt(own.mountpoint))
    if (m.id == own.id && m.dev == own.dev) return true;
  return false;
}

// After an unmount that reported success: `own` must be gone. If it is
// not, the unmount took a mount made on top of it in the instant between
// the proof and the unmount; say so rather than claim success.
Status CheckGone(const MountEntry& own) {
  if (!StillMounted(own)) return Ok();
  return Error::Of(EIO,
                   "unmount: the sandbox's mount is still there: a mount made "
                   "on top of it meanwhile was unmounted instead",
                   own.mountpoint);
}

}  // namespace

Status Unmount(const MountEntry& own) {
  const std::string& path = own.mountpoint;
  ACQFS_TRY(CheckReaches(path, own));
  if (::geteuid() == 0) {
    if (::umount2(path.c_str(), UMOUNT_NOFOLLOW) != 0)
      return Error::Errno("umount", path);
  } else {
    ACQFS_TRY(RunFusermount({"-u", "-q"}, path));
  }
  return CheckGone(own);
}

Status UnmountAcqfsAt(const std::string& mountpoint) {
  auto reached = MountReachedAt(mountpoint);
  if (!reached) return reached.error();
  for (const auto& m : AcqfsMountsAt(mountpoint)) {
    if (m.id == reached->id && m.dev == reached->dev) return Unmount(m);
  }
  auto mounts = AcqfsMountsAt(mountpoint);
  if (mounts.empty())
    return Error::Of(EINVAL, "umount (no acqfs mount there)", mountpoint);
  return CheckReaches(mountpoint, mounts.back());  // says what covers it
}

Status DetachStaleMount(const MountEntry& own) {
  const std::string& path = own.mountpoint;
  if (!StillMounted(own)) return Ok();  // gone already
  ACQFS_TRY(CheckReaches(path, own));
  if (::geteuid() == 0) {
    if (::umount2(path.c_str(), UMOUNT_NOFOLLOW) != 0) {
      Error e = Error::Errno("umount", path);
      if (e.err != EBUSY) return StillMounted(own) ? Status(e) : Ok();
      // Still in use (a process's working directory): detach it, once the
      // path is shown again to lead to it.
      ACQFS_TRY(CheckReaches(path, own));
      if (::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
        Error lazy = Error::Errno("umount -l", path);
        return StillMounted(own) ? Status(lazy) : Ok();
      }
    }
    return CheckGone(own);
  }
  Status s = RunFusermount({"-u", "-q"}, path);
  if (!s && StillMounted(own)) {
    ACQFS_TRY(CheckReaches(path, own));
    s = RunFusermount({"-u", "-q", "-z"}, path);
  }
  if (!s) return StillMounted(own) ? s : Ok();
  return CheckGone(own);
}

Status WaitForDaemonExit(const SandboxPaths& paths, double seconds) {
  return WaitForDaemon(paths.pid, paths.lock, seconds);
}

Status WaitForDaemonExit(const std::string& pid_path, double seconds) {
  auto slash = pid_path.rfind('/');
  std::string dir =
      slash == std::string::npos ? "." : pid_path.substr(0, slash);
  return WaitForDaemon(pid_path, dir + "/lock", seconds);
}

}  // namespace acqfs::cli
