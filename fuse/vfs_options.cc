#include "fuse/vfs_options.h"

#include <sys/mount.h>

#include <algorithm>
#include <cerrno>

namespace acqfs {
namespace {

// Options that ask the kernel to update access times. The kernel's FUSE
// never does (fuse_init_inode marks every inode S_NOATIME) and the daemon
// reads the layers with O_NOATIME, so an acqfs mount cannot honour them.
constexpr const char* kAtimeUpdates[] = {
    "atime",      "relatime",      "strictatime",
    "norelatime", "nostrictatime", "diratime",
};

const char kNoAtimeWhy[] =
    "mount option (acqfs never updates access times: the kernel leaves "
    "them to the daemon, which reads the layers with O_NOATIME; every "
    "acqfs mount is noatime)";

bool StartsWith(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

unsigned long VfsFlags::MsFlags() const {
  unsigned long f = MS_NOATIME;
  if (read_only) f |= MS_RDONLY;
  if (!dev) f |= MS_NODEV;
  if (!suid) f |= MS_NOSUID;
  if (noexec) f |= MS_NOEXEC;
  if (nodiratime) f |= MS_NODIRATIME;
  return f;
}

std::string VfsFlags::LibfuseOptions() const {
  std::string o = "noatime";
  o += read_only ? ",ro" : ",rw";
  o += dev ? ",dev" : ",nodev";
  o += suid ? ",suid" : ",nosuid";
  o += noexec ? ",noexec" : ",exec";
  return o;
}

std::vector<std::pair<std::string, bool>> VfsFlags::Expected() const {
  return {{"ro", read_only},         {"rw", !read_only}, {"nodev", !dev},
          {"nosuid", !suid},         {"noexec", noexec}, {"noatime", true},
          {"nodiratime", nodiratime}};
}

Status TakeVfsOption(const std::string& o, bool privileged, VfsFlags* f,
                     bool* taken) {
  *taken = true;
  auto root_only = [&](const char* why) -> Status {
    if (privileged) return Ok();
    return Error::Of(EPERM, why, o);
  };
  if (o == "ro") {
    f->read_only = true;
  } else if (o == "rw") {
    f->read_only = false;
  } else if (o == "dev" || o == "suid") {
    // fusermount3 would drop either without failing; a device node or a
    // set-user-id file the sandbox's user made in the upper would be a
    // way out of the sandbox (docs/architecture.md, "Mount options").
    ACQFS_TRY(root_only(
        "mount option (only root may mount with dev or suid: for an ordinary "
        "user they would let a file the sandbox made give privilege)"));
    (o == "dev" ? f->dev : f->suid) = true;
  } else if (o == "nodev") {
    f->dev = false;
  } else if (o == "nosuid") {
    f->suid = false;
  } else if (o == "exec") {
    f->noexec = false;
  } else if (o == "noexec") {
    f->noexec = true;
  } else if (o == "noatime" || o == "nolazytime" || o == "async") {
    // What every acqfs mount is: noatime (see kAtimeUpdates), timestamps
    // written to the layers with each change, changes not synced before
    // the reply.
  } else if (o == "nodiratime") {
    // libfuse 3.14 and fusermount3 do not know it: applied after the mount
    // with a remount of the mount's flags, which needs root.
    ACQFS_TRY(root_only(
        "mount option (only root may mount with nodiratime: fusermount3 "
        "cannot set it)"));
    f->nodiratime = true;
  } else if (std::find_if(std::begin(kAtimeUpdates), std::end(kAtimeUpdates),
                          [&](const char* a) { return o == a; }) !=
             std::end(kAtimeUpdates)) {
    return Error::Of(EINVAL, kNoAtimeWhy, o);
  } else if (o == "lazytime") {
    return Error::Of(EINVAL,
                     "mount option (acqfs keeps no timestamps in memory to "
                     "write later: each is written to the layers with its "
                     "change)",
                     o);
  } else if (o == "sync" || o == "dirsync") {
    return Error::Of(EINVAL,
                     "mount option (acqfs does not sync each change before "
                     "it replies; call fsync(2) or syncfs(2) where a change "
                     "must be on disk)",
                     o);
  } else {
    *taken = false;
  }
  return Ok();
}

Status CheckFsname(const std::string& fsname, const std::string& what) {
  if (fsname.empty() || fsname.size() > 255)
    return Error::Of(EINVAL, "mount source (1 to 255 bytes)", what);
  for (unsigned char ch : fsname)
    if (ch <= ' ' || ch == ',' || ch == '\\' || ch == 0x7f)
      return Error::Of(EINVAL,
                       "mount source (no comma, blank, backslash or "
                       "control character)",
                       what);
  return Ok();
}

Result<MountEntry> ReadMountedAs(const std::string& mountpoint) {
  auto table = ReadMountInfo("/proc/self/mountinfo");
  if (!table) return table.error();
  const MountEntry* found = nullptr;
  for (const MountEntry& e : *table)
    if (e.mountpoint == mountpoint) found = &e;  // the last one is on top
  if (!found) return Error::Of(EINVAL, "not a mount point", mountpoint);
  return *found;
}

Status CheckMountedAs(const std::string& mountpoint, const VfsFlags& flags,
                      const std::string& fsname) {
  auto m = ReadMountedAs(mountpoint);
  if (!m) return m.error();
  if (m->fstype != "fuse.acqfs")
    return Error::Of(EINVAL, "not an acqfs mount (" + m->fstype + ")",
                     mountpoint);
  for (const auto& [option, wanted] : flags.Expected())
    if (m->HasOption(option) != wanted)
      return Error::Of(EPERM,
                       "mount (the kernel mounted it " +
                           std::string(wanted ? "without " : "with ") + option +
                           ", against what was asked)",
                       option);
  if (m->source != fsname)
    return Error::Of(EPERM,
                     "mount (the kernel named it " + m->source + " instead)",
                     "fsname=" + fsname);
  return Ok();
}

Status SetMountFlags(const std::string& mountpoint, const VfsFlags& flags) {
  if (::mount(nullptr, mountpoint.c_str(), nullptr,
              MS_REMOUNT | MS_BIND | flags.MsFlags(), nullptr) != 0)
    return Error::Errno("mount(MS_REMOUNT|MS_BIND)", mountpoint);
  return Ok();
}

Status Remount(const std::string& mountpoint,
               const std::vector<std::string>& options, bool privileged) {
  auto m = ReadMountedAs(mountpoint);
  if (!m) return m.error();
  if (m->fstype != "fuse.acqfs")
    return Error::Of(EINVAL, "remount: not an acqfs mount (" + m->fstype + ")",
                     mountpoint);
  VfsFlags f;
  f.read_only = m->HasOption("ro");
  f.dev = !m->HasOption("nodev");
  f.suid = !m->HasOption("nosuid");
  f.noexec = m->HasOption("noexec");
  f.nodiratime = m->HasOption("nodiratime");
  for (const std::string& o : options) {
    if (o.empty() || o == "remount" || o == "defaults") continue;
    // mount(8) repeats the mount's own super block options; they stay.
    if (StartsWith(o, "user_id=") || StartsWith(o, "group_id=") ||
        o == "default_permissions" || o == "allow_other") {
      if (m->HasSuperOption(o)) continue;
      return Error::Of(EINVAL,
                       "remount option (set when the mount is made; only a "
                       "new mount changes it)",
                       o);
    }
    if (StartsWith(o, "fsname=")) {
      if (o.substr(7) == m->source) continue;
      return Error::Of(EINVAL,
                       "remount option (the source is set when the mount is "
                       "made)",
                       o);
    }
    bool taken = false;
    ACQFS_TRY(TakeVfsOption(o, privileged, &f, &taken));
    if (!taken)
      return Error::Of(EINVAL,
                       "remount option (not a mount flag; acqfs's own options "
                       "are set when the mount is made)",
                       o);
  }
  if (!privileged)
    return Error::Of(EPERM, "remount (needs root: fusermount3 cannot remount)",
                     mountpoint);
  // Not MS_BIND: the super block's read-only flag changes too, as a
  // remount of the kernel overlayfs changes both.
  if (::mount(nullptr, mountpoint.c_str(), nullptr, MS_REMOUNT | f.MsFlags(),
              nullptr) != 0)
    return Error::Errno("mount(MS_REMOUNT)", mountpoint);
  return CheckMountedAs(mountpoint, f, m->source);
}

}  // namespace acqfs
