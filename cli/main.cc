// The `acqfs` command: parses, calls, prints. Errors print as
// "acqfs: <what failed>: <path or name>: <reason>" and exit with
//   1  bad input (usage, a path or name that is wrong, a refused request)
//   2  the operation itself failed (mount, unmount)
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

#include "cli/daemon.h"
#include "cli/state.h"
#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer_format.h"

namespace acqfs::cli {
namespace {

constexpr int kExitBadInput = 1;
constexpr int kExitFailed = 2;

int Fail(int code, const std::string& what, const std::string& subject,
         const std::string& reason) {
  std::fprintf(stderr, "acqfs: %s: %s: %s\n", what.c_str(), subject.c_str(),
               reason.c_str());
  return code;
}

int Fail(int code, const std::string& what, const Error& e) {
  if (e.path.empty()) return Fail(code, what, e.op, std::strerror(e.err));
  return Fail(code, what, e.path,
              std::string(std::strerror(e.err)) + " (" + e.op + ")");
}

std::string Absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char buf[4096];
  if (!::getcwd(buf, sizeof buf)) return p;
  return std::string(buf) + "/" + p;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

// Is `inner` equal to or below `outer`? Both canonical.
bool Within(const std::string& inner, const std::string& outer) {
  if (inner == outer) return true;
  std::string o = outer == "/" ? outer : outer + "/";
  return inner.rfind(o, 0) == 0;
}

// A new sandbox's merged root looks like the lower root: the kernel shows
// the upper root's attributes, so the upper root takes the lower's.
Status MatchRootAttrs(const std::string& lower, const std::string& upper) {
  struct stat st;
  if (::stat(lower.c_str(), &st) != 0) return Error::Errno("stat", lower);
  if (::geteuid() == 0 && ::chown(upper.c_str(), st.st_uid, st.st_gid) != 0)
    return Error::Errno("chown", upper);
  if (::chmod(upper.c_str(), st.st_mode & 07777) != 0)
    return Error::Errno("chmod", upper);
  struct timespec ts[2] = {st.st_atim, st.st_mtim};
  if (::utimensat(AT_FDCWD, upper.c_str(), ts, 0) != 0)
    return Error::Errno("utimensat", upper);
  return Ok();
}

struct MountArgs {
  std::string lower, mountpoint, name, state_dir, log_level = "info";
  std::vector<std::string> options;
  bool foreground = false, allow_other = false;
};

// Applies -o options acqfs understands to the mount config.
int ApplyOptions(const std::vector<std::string>& opts, MountConfig* c) {
  for (const auto& list : opts) {
    std::stringstream ss(list);
    std::string o;
    while (std::getline(ss, o, ',')) {
      if (o.empty()) continue;
      if (o == "userxattr")
        c->force_userxattr = true;
      else if (o == "allow_other")
        c->allow_other = true;
      else if (o == "writeback")
        c->writeback_cache = true;
      else if (o == "debug")
        c->debug = true;
      else if (o.rfind("timeout=", 0) == 0)
        c->timeout = std::atof(o.c_str() + 8);
      else if (o.rfind("threads=", 0) == 0)
        c->max_threads = std::atoi(o.c_str() + 8);
      else
        return Fail(kExitBadInput, "mount", "-o " + o, "unknown option");
    }
  }
  return 0;
}

int RunMount(const MountArgs& a) {
  auto lower = RealPath(a.lower);
  if (!lower)
    return Fail(kExitBadInput, "mount: lower directory", lower.error());
  if (!IsDir(*lower))
    return Fail(kExitBadInput, "mount: lower directory", *lower,
                "not a directory");
  auto mnt = RealPath(a.mountpoint);
  if (!mnt) return Fail(kExitBadInput, "mount: mountpoint", mnt.error());
  if (!IsDir(*mnt))
    return Fail(kExitBadInput, "mount: mountpoint", *mnt, "not a directory");
  if (Within(*mnt, *lower) || Within(*lower, *mnt))
    return Fail(kExitBadInput, "mount: mountpoint", *mnt,
                "is inside the lower directory or contains it");
  std::string name = a.name.empty() ? sys::Basename(*mnt) : a.name;
  if (!ValidSandboxName(name))
    return Fail(kExitBadInput, "mount: sandbox name", name,
                "use 1-64 letters, digits, '.', '_' or '-' (not . or ..)");
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  if (IsDir(state)) {
    auto real_state = RealPath(state);
    if (real_state && (Within(*mnt, *real_state) || Within(*real_state, *mnt)))
      return Fail(kExitBadInput, "mount: mountpoint", *mnt,
                  "is inside the state directory or contains it");
  }
  if (IsAcqfsMounted(*mnt))
    return Fail(kExitBadInput, "mount: mountpoint", *mnt,
                "already holds an acqfs mount");

  MountConfig config;
  config.allow_other = a.allow_other;
  if (int rc = ApplyOptions(a.options, &config)) return rc;

  SandboxPaths paths(state, name);
  bool created = !Exists(paths.dir);
  SandboxMeta meta;
  if (!created) {
    auto m = ReadMeta(paths.meta);
    if (!m) return Fail(kExitBadInput, "mount: sandbox metadata", m.error());
    if (m->lower != *lower)
      return Fail(kExitBadInput, "mount: sandbox", name,
                  "exists over a different lower directory (" + m->lower + ")");
    meta = *m;
  }
  auto undo = [&] {
    if (created) (void)RemoveTree(AT_FDCWD, paths.dir, paths.dir);
  };
  for (const auto& d : {paths.upper, paths.work}) {
    if (Status s = MakeDirs(d); !s) {
      undo();
      return Fail(kExitFailed, "mount: state directory", s.error());
    }
  }
  if (created) {
    if (Status s = MatchRootAttrs(*lower, paths.upper); !s) {
      undo();
      return Fail(kExitFailed, "mount: upper layer", s.error());
    }
  }
  int lock = ::open(paths.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || ::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    undo();
    if (e == EWOULDBLOCK)
      return Fail(kExitBadInput, "mount: sandbox", name,
                  "is already mounted (its daemon holds " + paths.lock + ")");
    return Fail(kExitFailed, "mount: lock", paths.lock, std::strerror(e));
  }
  if (meta.xattr_namespace.empty())
    meta.xattr_namespace =
        LayerFormat::DefaultNamespace(config.force_userxattr) ==
                XattrNamespace::kTrusted
            ? "trusted"
            : "user";
  if (meta.xattr_namespace == "trusted" && ::geteuid() != 0) {
    undo();
    return Fail(kExitBadInput, "mount: sandbox", name,
                "its layers use trusted.overlay xattrs; mount it as root");
  }
  config.force_userxattr = meta.xattr_namespace == "user";
  meta.name = name;
  meta.lower = *lower;
  meta.mountpoint = *mnt;
  if (Status s = WriteMeta(paths.meta, meta); !s) {
    undo();
    return Fail(kExitFailed, "mount: sandbox metadata", s.error());
  }
  config.lower = *lower;
  config.upper = paths.upper;
  config.work = paths.work;
  config.mountpoint = *mnt;
  DaemonOptions d;
  d.config = config;
  d.log_path = paths.log;
  d.pid_path = paths.pid;
  d.log_level = a.log_level;
  d.foreground = a.foreground;
  Status s = StartDaemon(d);
  if (!s) {
    undo();
    return Fail(kExitFailed, "mount", *mnt, s.error().op);
  }
  return 0;
}

// Finds the sandbox a `umount` argument names: a sandbox name, or the
// mountpoint one of them was mounted on.
bool FindSandbox(const std::string& state, const std::string& arg,
                 SandboxPaths* out, SandboxMeta* meta) {
  if (ValidSandboxName(arg) && Exists(state + "/" + arg + "/meta.json")) {
    *out = SandboxPaths(state, arg);
    auto m = ReadMeta(out->meta);
    if (m) *meta = *m;
    return m.ok();
  }
  auto real = RealPath(arg);
  std::string target = real ? *real : Absolute(arg);
  UniqueDir dir(::opendir(state.c_str()));
  if (!dir) return false;
  while (struct dirent* e = ::readdir(dir.get())) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    SandboxPaths p(state, n);
    auto m = ReadMeta(p.meta);
    if (m && m->mountpoint == target) {
      *out = p;
      *meta = *m;
      return true;
    }
  }
  return false;
}

int RunUmount(const std::string& arg, const std::string& state_flag) {
  std::string state = Absolute(ResolveStateDir(state_flag));
  SandboxPaths paths(state, "_");
  SandboxMeta meta;
  if (!FindSandbox(state, arg, &paths, &meta)) {
    auto real = RealPath(arg);
    if (real && IsAcqfsMounted(*real)) {  // a mount made outside the state dir
      if (Status s = Unmount(*real); !s)
        return Fail(kExitFailed, "umount", s.error());
      return 0;
    }
    return Fail(kExitBadInput, "umount", arg, "no such sandbox or acqfs mount");
  }
  bool mounted = IsAcqfsMounted(meta.mountpoint);
  if (mounted) {
    if (Status s = Unmount(meta.mountpoint); !s)
      return Fail(kExitFailed, "umount", s.error());
  } else if (!Exists(paths.pid)) {
    return Fail(kExitBadInput, "umount", arg, "not mounted");
  }
  if (Status s = WaitForDaemonExit(paths.pid, 15.0); !s)
    return Fail(kExitFailed, "umount", s.error());
  return 0;
}

}  // namespace
}  // namespace acqfs::cli

int main(int argc, char** argv) {
  using namespace acqfs::cli;
  CLI::App app{"acqfs: a copy-on-write workspace over a git checkout"};
  app.set_version_flag("--version", std::string("acqfs ") + ACQFS_VERSION);
  app.require_subcommand(1);

  MountArgs m;
  auto* mount = app.add_subcommand(
      "mount",
      "Mount LOWER read-only under a writable upper layer at MOUNTPOINT");
  mount->add_option("lower", m.lower, "The directory shown read-only below")
      ->required();
  mount->add_option("mountpoint", m.mountpoint, "Where the merged view appears")
      ->required();
  mount->add_option("--name", m.name,
                    "Sandbox name (default: the mountpoint's basename)");
  mount->add_option("--state-dir", m.state_dir,
                    "State directory (default: $ACQFS_STATE_DIR, "
                    "$XDG_STATE_HOME/acqfs or ~/.local/state/acqfs)");
  mount->add_flag("--foreground", m.foreground,
                  "Serve in this process until unmounted");
  mount->add_flag("--allow-other", m.allow_other,
                  "Let other users (e.g. a container's) use the mount");
  mount->add_option("-o", m.options,
                    "Options: userxattr, timeout=SECONDS, threads=N, "
                    "writeback, debug");
  mount->add_option("--log-level", m.log_level,
                    "trace, debug, info, warn or error (default info)");
  mount->add_flag_callback(
      "-v,--verbose", [&] { m.log_level = "debug"; },
      "Log every failed request");

  std::string target, umount_state;
  auto* umount = app.add_subcommand("umount", "Unmount a sandbox");
  umount->add_option("target", target, "A sandbox name or its mountpoint")
      ->required();
  umount->add_option("--state-dir", umount_state, "State directory");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 1;
  }
  if (*mount) return RunMount(m);
  if (*umount) return RunUmount(target, umount_state);
  return 1;
}
