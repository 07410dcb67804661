// acqfs mount: validates, lays out the sandbox's state folder, registers the
// sandbox-<name> remote when the lower is a git checkout, starts the daemon.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/daemon.h"
#include "cli/state.h"
#include "common/sys.h"
#include "fs/layer_format.h"
#include "gitbridge/export.h"
#include "gitbridge/remote.h"

namespace acqfs::cli {
namespace {

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

// Applies -o options acqfs understands to the mount config.
int ApplyOptions(const std::vector<std::string>& opts, MountConfig* c) {
  for (const auto& list : opts) {
    std::stringstream ss(list);
    std::string o;
    while (std::getline(ss, o, ',')) {
      if (o.empty()) continue;
      if (Status s = ApplyMountOption(o, c); !s)
        return Fail(kExitBadInput, "mount: " + s.error().op, "-o " + o,
                    std::strerror(s.err()));
    }
  }
  return 0;
}

// A lower whose .git is a file naming a repository outside the lower (a
// `git worktree` or a checkout made with --separate-git-dir): git inside the
// sandbox would follow that absolute path and write to the host's repository
// directly, outside the overlay. acqfs refuses rather than mount a sandbox
// with that hole. (Relative gitdirs, as submodules use, stay inside.)
int CheckGitFile(const std::string& lower) {
  std::string gitfile = lower + "/.git";
  struct stat st;
  if (::lstat(gitfile.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  std::ifstream in(gitfile);
  std::string line;
  std::getline(in, line);
  if (line.rfind("gitdir:", 0) != 0) return 0;
  std::string dir = line.substr(7);
  while (!dir.empty() && (dir.front() == ' ' || dir.front() == '\t'))
    dir.erase(dir.begin());
  while (!dir.empty() && (dir.back() == '\r' || dir.back() == ' '))
    dir.pop_back();
  if (dir.empty() || dir.front() != '/') return 0;
  auto real = RealPath(dir);
  if (real && Within(*real, lower)) return 0;
  return Fail(kExitBadInput, "mount: lower directory", lower,
              ".git is a file pointing at a repository outside it (" + dir +
                  "): git in the sandbox would write there directly; mount "
                  "the main checkout instead");
}

// The checked, canonical operands of a mount.
struct MountTarget {
  std::string lower, mountpoint, name, state;
};

int CheckMountArgs(const MountArgs& a, MountTarget* t) {
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
  *t = MountTarget{*lower, *mnt, name, state};
  return 0;
}

// Reads the sandbox's metadata when it exists; refuses a different lower.
int LoadMeta(const MountTarget& t, const SandboxPaths& paths, bool created,
             SandboxMeta* meta) {
  if (created) return 0;
  auto m = ReadMeta(paths.meta);
  if (!m) return Fail(kExitBadInput, "mount: sandbox metadata", m.error());
  if (m->lower != t.lower)
    return Fail(kExitBadInput, "mount: sandbox", t.name,
                "exists over a different lower directory (" + m->lower + ")");
  *meta = *m;
  return 0;
}

// Creates the layer directories (a new upper root takes the lower root's
// attributes) and takes the sandbox's lock, which the daemon inherits.
int PrepareLayers(const MountTarget& t, const SandboxPaths& paths,
                  bool created) {
  for (const auto& d : {paths.upper, paths.work}) {
    if (Status s = MakeDirs(d); !s)
      return Fail(kExitFailed, "mount: state directory", s.error());
  }
  if (created) {
    if (Status s = MatchRootAttrs(t.lower, paths.upper); !s)
      return Fail(kExitFailed, "mount: upper layer", s.error());
  }
  int lock = ::open(paths.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || ::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    if (e == EWOULDBLOCK)
      return Fail(kExitBadInput, "mount: sandbox", t.name,
                  "is already mounted (its daemon holds " + paths.lock + ")");
    return Fail(kExitFailed, "mount: lock", paths.lock, std::strerror(e));
  }
  return 0;  // the descriptor stays open for the daemon
}

int ChooseNamespace(const MountTarget& t, MountConfig* config,
                    SandboxMeta* meta) {
  if (meta->xattr_namespace.empty())
    meta->xattr_namespace =
        LayerFormat::DefaultNamespace(config->force_userxattr) ==
                XattrNamespace::kTrusted
            ? "trusted"
            : "user";
  if (meta->xattr_namespace == "trusted" && ::geteuid() != 0)
    return Fail(kExitBadInput, "mount: sandbox", t.name,
                "its layers use trusted.overlay xattrs; mount it as root");
  config->force_userxattr = meta->xattr_namespace == "user";
  return 0;
}

}  // namespace

int RunMount(const MountArgs& a) {
  MountTarget t;
  if (int rc = CheckMountArgs(a, &t)) return rc;
  if (int rc = CheckGitFile(t.lower)) return rc;
  MountConfig config;
  config.allow_other = a.allow_other;
  if (int rc = ApplyOptions(a.options, &config)) return rc;
  SandboxPaths paths(t.state, t.name);
  const bool git = gitbridge::IsGitCheckout(t.lower);
  if (git) {
    if (Status s = gitbridge::CheckRemoteFree(t.lower, t.name, paths.bridge);
        !s)
      return Fail(kExitBadInput, "mount: " + s.error().op, t.lower,
                  "remove it or choose another --name");
  }
  const bool created = !Exists(paths.dir);
  SandboxMeta meta;
  if (int rc = LoadMeta(t, paths, created, &meta)) return rc;
  bool remote_added = false;
  auto fail = [&](int rc) {
    if (remote_added) (void)gitbridge::UnregisterRemote(t.lower, t.name);
    if (created) (void)sys::RemoveTree(AT_FDCWD, paths.dir, paths.dir);
    return rc;
  };
  if (int rc = PrepareLayers(t, paths, created)) return fail(rc);
  if (int rc = ChooseNamespace(t, &config, &meta)) return fail(rc);
  meta.name = t.name;
  meta.lower = t.lower;
  meta.mountpoint = t.mountpoint;
  if (Status s = WriteMeta(paths.meta, meta); !s)
    return fail(Fail(kExitFailed, "mount: sandbox metadata", s.error()));
  if (git) {
    remote_added = true;
    if (Status s = gitbridge::PrepareBridge(ExportConfigFor(paths, meta)); !s)
      return fail(Fail(kExitFailed, "mount: git bridge", s.error()));
  }
  config.lower = t.lower;
  config.upper = paths.upper;
  config.work = paths.work;
  config.mountpoint = t.mountpoint;
  DaemonOptions d;
  d.config = config;
  d.log_path = paths.log;
  d.pid_path = paths.pid;
  d.log_level = a.log_level;
  d.foreground = a.foreground;
  if (Status s = StartDaemon(d); !s)
    return fail(Fail(kExitFailed, "mount", t.mountpoint, s.error().op));
  return 0;
}

}  // namespace acqfs::cli
