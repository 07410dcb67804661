// mount.fuse.acqfs: the helper mount(8) runs for `mount -t fuse.acqfs`:
//   mount.fuse.acqfs SOURCE MOUNTPOINT -o lowerdir=L,upperdir=U,workdir=W[,...]
// the calling convention of fuse-overlayfs and the unionmount test suite.
// It returns once the mount is usable, with the daemon in the background.
// SOURCE becomes the mount's source (as findmnt and `umount SOURCE` see it)
// unless -o fsname= names another. With -o remount (`mount -o remount,ro
// MNT` runs `mount.fuse.acqfs SOURCE MNT -o ro,...,remount -t fuse.acqfs`)
// it changes the running mount's flags instead (fuse/vfs_options.h).
// Who may use the mount is decided as for `acqfs mount` (daemon/allow_other.h):
// every user as root unless -o noallow_other, else only the caller unless
// -o allow_other (which needs user_allow_other in /etc/fuse.conf).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/sys.h"
#include "daemon/allow_other.h"
#include "daemon/daemon.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"
#include "state/state.h"

namespace {

int Usage() {
  std::fprintf(
      stderr,
      "usage: mount.fuse.acqfs SOURCE MOUNTPOINT -o "
      "lowerdir=DIR,upperdir=DIR,workdir=DIR[,userxattr][,allow_other|,"
      "noallow_other][,ro][,noexec][,nodiratime][,dev][,suid][,fsname=NAME]"
      "[,ACQFS OPTION...]\n"
      "       mount.fuse.acqfs SOURCE MOUNTPOINT -o remount,ro|rw[,noexec|"
      "exec][,...]\n"
      "Refused, with the reason: atime, relatime, strictatime, lazytime "
      "(every mount is noatime), sync, dirsync; dev, suid and nodiratime for "
      "an ordinary user.\n");
  return 1;
}

int Fail(const std::string& what, const std::string& subject,
         const std::string& reason) {
  std::fprintf(stderr, "acqfs: %s: %s: %s\n", what.c_str(), subject.c_str(),
               reason.c_str());
  return 1;
}

// mount(8)'s own options, which fstab lines carry and which ask nothing of
// the file system (the VFS flags are applied: ApplyMountOption).
bool Ignorable(const std::string& o) {
  static const char* kIgnored[] = {"defaults", "_netdev", "auto", "noauto",
                                   "nofail",   "user",    "users"};
  for (const char* i : kIgnored)
    if (o == i) return true;
  return o.rfind("x-", 0) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace acqfs;
  std::vector<std::string> pos;
  std::string opts;
  bool foreground = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-o" && i + 1 < argc) {
      if (!opts.empty()) opts += ",";
      opts += argv[++i];
    } else if (a.rfind("-o", 0) == 0 && a.size() > 2) {
      if (!opts.empty()) opts += ",";
      opts += a.substr(2);
    } else if (a == "-f") {
      foreground = true;
    } else if (a == "-t" && i + 1 < argc) {
      // mount(8) names the type (fuse.acqfs) on a remount
      ++i;
    } else if (a == "-n" || a == "-s" || a == "-v") {
      // mount(8) flags: no mtab, sloppy, verbose
    } else if (a == "-h" || a == "--help") {
      return Usage() - 1;
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2) return Usage();
  std::vector<std::string> options;
  {
    std::stringstream ss(opts);
    for (std::string o; std::getline(ss, o, ',');) options.push_back(o);
  }
  if (std::find(options.begin(), options.end(), "remount") != options.end()) {
    auto mnt = cli::RealPath(pos[1]);
    if (!mnt) return Fail("remount: mountpoint", pos[1], mnt.error().Message());
    std::vector<std::string> vfs;
    for (const auto& o : options)
      if (!Ignorable(o)) vfs.push_back(o);
    // The error names a path (the mountpoint) or the option it refuses.
    if (Status s = Remount(*mnt, vfs, ::geteuid() == 0); !s)
      return Fail("remount: " + s.error().op,
                  s.error().path.rfind('/', 0) == 0 ? s.error().path
                                                    : "-o " + s.error().path,
                  std::strerror(s.err()));
    return 0;
  }
  cli::DaemonOptions d;
  MountConfig& c = d.config;
  // The source names the mount, as for the kernel overlayfs and
  // fuse-overlayfs; -o fsname= below overrides it.
  if (Status s = CheckFsname(pos[0], pos[0]); !s)
    return Fail("mount: " + s.error().op, s.error().path,
                std::strerror(s.err()));
  c.fsname = pos[0];
  cli::AllowOtherRequest allow_other;
  for (const std::string& o : options) {
    if (o.empty() || Ignorable(o)) continue;
    bool taken = false;
    if (Status s = allow_other.TakeOption(o, &taken); !s)
      return Fail("mount", s.error().path, s.error().op);
    if (taken) continue;
    if (o.rfind("lowerdir=", 0) == 0)
      c.lower = o.substr(9);
    else if (o.rfind("upperdir=", 0) == 0)
      c.upper = o.substr(9);
    else if (o.rfind("workdir=", 0) == 0)
      c.work = o.substr(8);
    else if (Status s = ApplyMountOption(o, &c); !s)
      return Fail("mount: " + s.error().op, "-o " + o, std::strerror(s.err()));
  }
  // As `acqfs mount`: allow_other by default as root, never by default
  // for an ordinary user (daemon/allow_other.h).
  auto allow = allow_other.Decide(::geteuid());
  if (!allow)
    return Fail("mount", allow.error().path,
                std::string(std::strerror(allow.err())) + " (" +
                    allow.error().op + ")");
  c.allow_other = *allow;
  // lowerdir=TOP:...:HOST, as the kernel overlayfs takes a stack: the last
  // is the host, the others the frozen layers (docs/stack.md).
  if (c.lower.find(':') != std::string::npos) {
    std::vector<std::string> parts;
    std::stringstream ls(c.lower);
    for (std::string part; std::getline(ls, part, ':');) {
      if (part.empty())
        return Fail("mount", "lowerdir=" + c.lower, "an empty layer");
      parts.push_back(part);
    }
    c.lower = parts.back();
    for (size_t i = parts.size() - 1; i-- > 0;) c.frozen.push_back(parts[i]);
  }
  for (auto* p : {&c.lower, &c.upper, &c.work}) {
    if (p->empty()) return Usage();
    auto r = cli::RealPath(*p);
    if (!r) return Fail("mount", *p, r.error().Message());
    *p = *r;
  }
  for (auto& f : c.frozen) {
    auto r = cli::RealPath(f);
    if (!r) return Fail("mount", f, r.error().Message());
    f = *r;
  }
  // The upper layer of an acqfs sandbox (<state>/<name>/upper, or a layer
  // of <state>/.layers its stack.json names) comes with the sandbox's
  // policy in <state>/<name>/meta.json: it applies here too, and layers
  // whose policy cannot be read are not mounted without it.
  std::string sandbox_dir = c.upper.substr(0, c.upper.rfind('/'));
  if (sandbox_dir.size() > 8 &&
      sandbox_dir.compare(sandbox_dir.size() - 8, 8, "/.layers") == 0) {
    const std::string state = sandbox_dir.substr(0, sandbox_dir.size() - 8);
    const std::string ref = c.upper.substr(state.size() + 1);
    std::string owner;
    // A state directory that cannot be listed names no owner: the layer's
    // own folder is taken as the sandbox's.
    auto dir = sys::OpenDirPath(state, O_RDONLY);
    auto names = dir ? sys::ReadDir(dir->get(), state)
                     : Result<std::vector<sys::DirEntry>>(dir.error());
    for (const auto& e : names ? *names : std::vector<sys::DirEntry>{}) {
      const std::string& n = e.name;
      if (!cli::ValidSandboxName(n)) continue;
      auto m = cli::ReadStack(cli::StackPath(state, n));
      if (!m) continue;
      if (m->upper == ref) owner = state + "/" + n;
      bool frozen = false;
      for (const auto& f : m->frozen) frozen = frozen || f == ref;
      for (const auto& c : m->checkpoints)
        for (const auto& f : c.layers) frozen = frozen || f == ref;
      if (frozen)
        return Fail("mount", c.upper,
                    "is a frozen layer of sandbox " + n +
                        " (docs/stack.md): it is never written; give the "
                        "stack's upper (its stack.json) as upperdir");
    }
    if (!owner.empty()) sandbox_dir = owner;
  }
  const std::string meta = sandbox_dir + "/meta.json";
  if (::access(meta.c_str(), F_OK) == 0) {
    // As `acqfs mount` keeps it: only the sandbox's owner reaches its
    // layers (docs/sandboxes.md).
    if (Status s = cli::SecureSandboxDir(sandbox_dir); !s)
      return Fail("mount: sandbox folder", sandbox_dir, s.error().Message());
    auto m = cli::ReadMeta(meta);
    if (!m)
      return Fail("mount: sandbox metadata (its policy must apply)", meta,
                  m.error().Message());
    auto policy = m->policy.Build();
    if (!policy)
      return Fail("mount: sandbox policy", meta, policy.error().Message());
    c.policy = *policy;
    if (m->base.recorded() && m->base.own_git) {
      c.sources_dir = sandbox_dir + "/sources";
      c.sources_since_ns = m->base.time_ns;
    }
    if (Status e = CheckPolicyEnforceable(c); !e)
      return Fail("mount: " + e.error().op, "-o " + e.error().path,
                  std::strerror(e.err()));
  }
  auto mnt = cli::RealPath(pos[1]);
  if (!mnt) return Fail("mount: mountpoint", pos[1], mnt.error().Message());
  c.mountpoint = *mnt;
  d.foreground = foreground;
  Status s = cli::StartDaemon(d);
  if (!s) return Fail("mount", c.mountpoint, s.error().op);
  return 0;
}
