// Mount options are honoured or refused, never accepted and ignored (issue
// 34, section 4). Each option given to mount.fuse.acqfs (as mount(8) runs
// it) or to `acqfs mount` is either applied, so that /proc/self/mountinfo
// shows it and the mount behaves as the kernel overlayfs mounted with the
// same option over the same kind of layers, or refused with a message that
// names it, a non-zero exit and nothing mounted:
//   - ro: every change fails as on the kernel overlayfs mounted ro;
//   - remount,ro then remount,rw (mount(8)'s call of the helper, and
//     `acqfs remount`): the same results as the kernel overlayfs's;
//   - noatime (every mount) and nodiratime as flags; a read leaves the
//     access time as the kernel overlayfs's does; atime, relatime,
//     strictatime, lazytime, sync and dirsync refused;
//   - dev and suid applied for root (a device node opens, as on the kernel
//     overlayfs), refused for an ordinary user;
//   - the helper's SOURCE and -o fsname= are the mount's source, so
//     `umount SOURCE` works; `acqfs mount` names its mount acqfs:NAME.
// Each runs in both file modes (ACQFS_IN_BOTH_FILE_MODES).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "harness/temp_dir.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

// Every change a mount can be asked for, one line each: "label: ok" or
// "label: ERRNO". Run in the root of a mount of kLower's tree.
constexpr char kChanges[] = R"(
import errno, os, sys
os.chdir(sys.argv[1])
tag = sys.argv[2]
def t(label, f):
    try:
        f()
        print(label + ": ok")
    except OSError as e:
        print(label + ": " + errno.errorcode.get(e.errno, str(e.errno)))
def write(p, flags):
    fd = os.open(p, flags, 0o644)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)
t("read", lambda: open("docs/a.txt").read())
t("create", lambda: write("new-" + tag, os.O_CREAT | os.O_WRONLY))
t("write", lambda: write("docs/a.txt", os.O_WRONLY))
t("append", lambda: write("docs/b.txt", os.O_WRONLY | os.O_APPEND))
t("truncate", lambda: os.truncate("docs/b.txt", 1))
t("mkdir", lambda: os.mkdir("dir-" + tag))
t("rmdir", lambda: os.rmdir("empty"))
t("unlink", lambda: os.unlink("gone.txt"))
t("rename", lambda: os.rename("docs/c.txt", "docs/c-" + tag))
t("symlink", lambda: os.symlink("docs/a.txt", "ln-" + tag))
t("link", lambda: os.link("docs/a.txt", "hard-" + tag))
t("chmod", lambda: os.chmod("docs/a.txt", 0o600))
t("chown", lambda: os.chown("docs/a.txt", 1, 1))
t("utime", lambda: os.utime("docs/a.txt", (1, 1)))
t("setxattr", lambda: os.setxattr("docs/a.txt", "user.k", b"v"))
t("mkfifo", lambda: os.mkfifo("fifo-" + tag))
)";

// The lower both mounts show.
void MakeLower(const std::string& lower) {
  MakeDir(lower + "/docs");
  MakeDir(lower + "/empty");
  MakeFile(lower + "/docs/a.txt", "alpha\n");
  MakeFile(lower + "/docs/b.txt", "beta\n");
  MakeFile(lower + "/docs/c.txt", "gamma\n");
  MakeFile(lower + "/gone.txt", "gone\n");
}

CommandResult RunChanges(const std::string& root, const std::string& tag) {
  return RunCommand({kPython, "-c", kChanges, root, tag}, 60);
}

// The per-mount options of the mount at `path` ("" when nothing is there).
std::string OptionsAt(const std::string& path) {
  auto m = FindMount(path);
  return m ? m->mount_options : "";
}

// A mount made through mount.fuse.acqfs for one test: unmounted (and its
// daemon reaped) in every outcome.
class HelperMount {
 public:
  explicit HelperMount(std::string mnt) : mnt_(std::move(mnt)) {}
  ~HelperMount() { Unmount(); }
  HelperMount(const HelperMount&) = delete;
  HelperMount& operator=(const HelperMount&) = delete;

  CommandResult Mount(const std::string& source, const std::string& options) {
    CommandResult r =
        RunCommand({MountHelperBinary(), source, mnt_, "-o", options}, 30);
    daemons_ = PidsWithArgument(mnt_);
    return r;
  }
  void Unmount() {
    if (FindMount(mnt_) && FindMount(mnt_)->fs_type == "fuse.acqfs") {
      CommandResult u = RunCommand({"fusermount3", "-u", mnt_}, 30);
      EXPECT_TRUE(u.ok()) << u.Describe();
    }
    EXPECT_EQ(ForceUnmount(mnt_), "");
    for (pid_t pid : daemons_) {
      EXPECT_TRUE(WaitForProcessExit(pid, 10)) << "daemon " << pid;
      KillIfAlive(pid, "acqfs");
    }
    daemons_.clear();
  }

 private:
  std::string mnt_;
  std::vector<pid_t> daemons_;
};

// One acqfs mount through the helper and one kernel overlayfs, each over
// its own upper and work directories above the same lower; the parameter
// is the file mode ("" or "handles").
class HelperOptions : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(IsRoot()) << "these tests mount, as root";
    lower_ = tmp_.MakeDir("lower");
    MakeLower(lower_);
    mnt_ = RealPath(tmp_.MakeDir("mnt"));
    kmnt_ = RealPath(tmp_.MakeDir("kernel"));
    tmp_.MakeDir("upper");
    tmp_.MakeDir("work");
    tmp_.MakeDir("kupper");
    tmp_.MakeDir("kwork");
    acqfs_ = std::make_unique<HelperMount>(mnt_);
    kernel_guard_ = std::make_unique<MountGuard>(kmnt_);
  }
  void TearDown() override {
    acqfs_.reset();
    kernel_guard_.reset();
  }

  // The helper's -o for these layers, with `extra` and the file mode.
  std::string Layers(const std::string& extra) const {
    std::string o = "lowerdir=" + lower_ + ",upperdir=" + tmp_.Sub("upper") +
                    ",workdir=" + tmp_.Sub("work");
    if (!GetParam().empty()) o += "," + GetParam();
    if (!extra.empty()) o += "," + extra;
    return o;
  }
  CommandResult MountAcqfs(const std::string& extra,
                           const std::string& source = "acqfs-test") {
    return acqfs_->Mount(source, Layers(extra));
  }
  CommandResult MountKernel(const std::string& extra) {
    std::string o = "lowerdir=" + lower_ + ",upperdir=" + tmp_.Sub("kupper") +
                    ",workdir=" + tmp_.Sub("kwork") +
                    ",index=off,redirect_dir=off,metacopy=off";
    if (!extra.empty()) o += "," + extra;
    return RunCommand({"mount", "-t", "overlay", "overlay", kmnt_, "-o", o},
                      30);
  }
  // The same changes in both mounts: the same results, line for line.
  void SameChanges(const std::string& when) {
    CommandResult a = RunChanges(mnt_, "a");
    CommandResult k = RunChanges(kmnt_, "a");
    ASSERT_TRUE(a.ok()) << a.Describe();
    ASSERT_TRUE(k.ok()) << k.Describe();
    EXPECT_EQ(a.out, k.out) << when << ": acqfs (left) and the kernel "
                            << "overlayfs (right) differ";
    last_ = a.out;
  }
  // mount(8)'s call of the helper for `mount -o remount,FLAG MNT` (seen
  // with strace: it repeats the mount's options, then its super block's).
  CommandResult HelperRemount(const std::string& flag) {
    auto m = FindMount(mnt_);
    if (!m) return CommandResult{};
    std::string o = flag;
    auto add = [&o](const std::string& list) {
      std::stringstream ss(list);
      for (std::string x; std::getline(ss, x, ',');)
        if (x != "rw" && x != "ro") o += "," + x;
    };
    add(m->mount_options);
    o += ",remount";
    add(m->super_options);
    return RunCommand(
        {MountHelperBinary(), m->source, mnt_, "-o", o, "-t", "fuse.acqfs"},
        30);
  }

  TempDir tmp_;
  std::string lower_, mnt_, kmnt_, last_;
  std::unique_ptr<HelperMount> acqfs_;
  std::unique_ptr<MountGuard> kernel_guard_;
};

using ReadOnlyMount = HelperOptions;

TEST_P(ReadOnlyMount, RefusesEveryChangeAsTheKernelOverlayDoes) {
  CommandResult r = MountAcqfs("ro");
  ASSERT_TRUE(r.ok()) << r.Describe();
  CommandResult k = MountKernel("ro");
  ASSERT_TRUE(k.ok()) << k.Describe();
  auto a = FindMount(mnt_);
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->HasMountOption("ro")) << a->mount_options;
  EXPECT_NE(("," + a->super_options + ",").find(",ro,"), std::string::npos)
      << a->super_options;
  EXPECT_TRUE(FindMount(kmnt_)->HasMountOption("ro"));
  SameChanges("mounted ro");
  EXPECT_NE(last_.find("create: EROFS"), std::string::npos) << last_;
  EXPECT_NE(last_.find("read: ok"), std::string::npos) << last_;
  // Nothing reached the upper layer.
  EXPECT_TRUE(ListDir(tmp_.Sub("upper")).empty());
}

ACQFS_IN_BOTH_FILE_MODES(ReadOnlyMount);

using Remount = HelperOptions;

TEST_P(Remount, RoThenRwThroughTheHelperAsTheKernelOverlay) {
  ASSERT_TRUE(MountAcqfs("").ok());
  CommandResult k = MountKernel("");
  ASSERT_TRUE(k.ok()) << k.Describe();
  CommandResult ro = HelperRemount("ro");
  ASSERT_TRUE(ro.ok()) << ro.Describe();
  CommandResult kro = RunCommand({"mount", "-o", "remount,ro", kmnt_}, 30);
  ASSERT_TRUE(kro.ok()) << kro.Describe();
  EXPECT_TRUE(FindMount(mnt_)->HasMountOption("ro")) << OptionsAt(mnt_);
  EXPECT_EQ(OptionsAt(mnt_).find("relatime"), std::string::npos)
      << "the remount kept noatime: " << OptionsAt(mnt_);
  SameChanges("after remount,ro");
  EXPECT_NE(last_.find("mkdir: EROFS"), std::string::npos) << last_;
  CommandResult rw = HelperRemount("rw");
  ASSERT_TRUE(rw.ok()) << rw.Describe();
  CommandResult krw = RunCommand({"mount", "-o", "remount,rw", kmnt_}, 30);
  ASSERT_TRUE(krw.ok()) << krw.Describe();
  EXPECT_TRUE(FindMount(mnt_)->HasMountOption("rw")) << OptionsAt(mnt_);
  EXPECT_TRUE(FindMount(mnt_)->HasMountOption("nosuid")) << OptionsAt(mnt_);
  SameChanges("after remount,rw");
  EXPECT_NE(last_.find("mkdir: ok"), std::string::npos) << last_;
  // A remount cannot change what only a new mount sets.
  CommandResult other = RunCommand(
      {MountHelperBinary(), "acqfs-test", mnt_, "-o", "remount,ro,threads=8"},
      30);
  EXPECT_NE(other.exit_code, 0) << other.Describe();
  EXPECT_NE(other.err.find("threads=8"), std::string::npos) << other.err;
  EXPECT_TRUE(FindMount(mnt_)->HasMountOption("rw")) << OptionsAt(mnt_);
}

ACQFS_IN_BOTH_FILE_MODES(Remount);

using AtimeOptions = HelperOptions;

TEST_P(AtimeOptions, NoatimeAndNodiratimeAreTheMountsFlags) {
  // A lower file whose access time is older than its change: a read under
  // relatime would update it.
  MakeFile(lower_ + "/old.txt", "old\n");
  SetTimes(lower_ + "/old.txt", 1000000000);
  ASSERT_TRUE(MountAcqfs("noatime,nodiratime").ok());
  CommandResult k = MountKernel("noatime,nodiratime");
  ASSERT_TRUE(k.ok()) << k.Describe();
  for (const std::string& m : {mnt_, kmnt_}) {
    EXPECT_TRUE(FindMount(m)->HasMountOption("noatime")) << OptionsAt(m);
    EXPECT_TRUE(FindMount(m)->HasMountOption("nodiratime")) << OptionsAt(m);
  }
  // Every acqfs mount is noatime, as it behaves.
  const struct stat before = Lstat(mnt_ + "/old.txt");
  EXPECT_EQ(ContentOf(mnt_ + "/old.txt"), "old\n");
  EXPECT_EQ(ContentOf(kmnt_ + "/old.txt"), "old\n");
  EXPECT_EQ(Lstat(kmnt_ + "/old.txt").st_atime, before.st_atime);
  acqfs_->Unmount();
  ASSERT_TRUE(MountAcqfs("").ok());
  EXPECT_TRUE(FindMount(mnt_)->HasMountOption("noatime")) << OptionsAt(mnt_);
  EXPECT_EQ(ContentOf(mnt_ + "/old.txt"), "old\n");
  EXPECT_EQ(Lstat(mnt_ + "/old.txt").st_atime, before.st_atime)
      << "a read changed the access time of a noatime mount";
}

TEST_P(AtimeOptions, ThoseAcqfsCannotHonourAreRefusedByName) {
  for (const std::string o : {"relatime", "strictatime", "atime", "lazytime",
                              "sync", "dirsync", "norelatime"}) {
    CommandResult r = MountAcqfs(o);
    EXPECT_NE(r.exit_code, 0) << o << " accepted: " << r.Describe();
    EXPECT_NE(r.err.find("-o " + o + ":"), std::string::npos)
        << "the message does not name " << o << ": " << r.err;
    EXPECT_FALSE(FindMount(mnt_).has_value()) << o << ": " << OptionsAt(mnt_);
    acqfs_->Unmount();
  }
}

ACQFS_IN_BOTH_FILE_MODES(AtimeOptions);

using DevSuid = HelperOptions;

TEST_P(DevSuid, AppliedForRootAsOnTheKernelOverlay) {
  ASSERT_TRUE(MountAcqfs("dev,suid,exec").ok());
  CommandResult k = MountKernel("dev,suid");
  ASSERT_TRUE(k.ok()) << k.Describe();
  for (const std::string& m : {mnt_, kmnt_}) {
    EXPECT_FALSE(FindMount(m)->HasMountOption("nodev")) << OptionsAt(m);
    EXPECT_FALSE(FindMount(m)->HasMountOption("nosuid")) << OptionsAt(m);
    struct statvfs sv {};
    ASSERT_EQ(::statvfs(m.c_str(), &sv), 0) << m;
    EXPECT_EQ(sv.f_flag & (ST_NODEV | ST_NOSUID), 0u) << m;
    // A device node made in the mount opens (/dev/null's numbers).
    CommandResult n =
        RunShell("mknod " + m + "/null c 1 3 && head -c 1 " + m + "/null", 30);
    EXPECT_TRUE(n.ok()) << m << ": " << n.Describe();
  }
  // The default stays nodev, nosuid: the same node does not open.
  acqfs_->Unmount();
  ASSERT_TRUE(MountAcqfs("").ok());
  EXPECT_TRUE(FindMount(mnt_)->HasMountOption("nodev")) << OptionsAt(mnt_);
  EXPECT_TRUE(FindMount(mnt_)->HasMountOption("nosuid")) << OptionsAt(mnt_);
  CommandResult closed = RunShell("head -c 1 " + mnt_ + "/null", 30);
  EXPECT_NE(closed.exit_code, 0) << closed.Describe();
}

TEST_P(DevSuid, RefusedForAnOrdinaryUserNamingTheOption) {
  for (const std::string o : {"dev", "suid", "nodiratime"}) {
    CommandResult r = RunCommand(
        {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         MountHelperBinary(), "src", mnt_, "-o", Layers(o)},
        30);
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("-o " + o + ":"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("only root"), std::string::npos) << r.err;
    EXPECT_FALSE(FindMount(mnt_).has_value());
  }
}

ACQFS_IN_BOTH_FILE_MODES(DevSuid);

using MountSource = HelperOptions;

TEST_P(MountSource, IsTheHelpersSourceOrFsnameAsOnTheKernelOverlay) {
  // A source of this test's alone: `umount SOURCE` below must not meet the
  // mount of the same test in the other file mode, running alongside.
  const std::string source = "sandbox-" + std::to_string(::getpid());
  ASSERT_TRUE(MountAcqfs("", source).ok());
  ASSERT_TRUE(MountKernel("").ok());
  EXPECT_EQ(FindMount(mnt_)->source, source);
  // `umount SOURCE` finds it, as for the kernel overlayfs ("overlay").
  CommandResult u = RunCommand({"umount", source}, 30);
  EXPECT_TRUE(u.ok()) << u.Describe();
  EXPECT_FALSE(FindMount(mnt_).has_value());
  acqfs_->Unmount();
  ASSERT_TRUE(MountAcqfs("fsname=named-by-option", "ignored").ok());
  EXPECT_EQ(FindMount(mnt_)->source, "named-by-option");
  acqfs_->Unmount();
  for (const std::string bad : {"fsname=", "fsname=a\tb"}) {
    CommandResult r = MountAcqfs(bad);
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    EXPECT_FALSE(FindMount(mnt_).has_value());
  }
  CommandResult blank = MountAcqfs("", "two words");
  EXPECT_NE(blank.exit_code, 0) << blank.Describe();
  EXPECT_NE(blank.err.find("two words"), std::string::npos) << blank.err;
  EXPECT_FALSE(FindMount(mnt_).has_value());
}

ACQFS_IN_BOTH_FILE_MODES(MountSource);

// The same through `acqfs mount` and `acqfs remount`.
class CliOptions : public BothFileModes {
 protected:
  SandboxOptions ModeOptions() const override {
    SandboxOptions o;
    o.name = "opts-sbx";
    o.extra_mount_args = {"-o", "noexec,nodiratime"};
    return o;
  }
};

TEST_P(CliOptions, AppliedNamedAndRemountedRoThenRw) {
  auto m = FindMount(sandbox().mountpoint());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->source, "acqfs:opts-sbx");
  for (const char* o : {"noexec", "nodiratime", "noatime", "nosuid", "nodev"})
    EXPECT_TRUE(m->HasMountOption(o)) << o << ": " << m->mount_options;
  CommandResult ro = RunCommand(
      {AcqfsBinary(), "remount", sandbox().mountpoint(), "-o", "ro"}, 30);
  ASSERT_TRUE(ro.ok()) << ro.Describe();
  m = FindMount(sandbox().mountpoint());
  EXPECT_TRUE(m->HasMountOption("ro")) << m->mount_options;
  EXPECT_TRUE(m->HasMountOption("noexec")) << "a remount kept the others";
  CommandResult changes = RunChanges(sandbox().mountpoint(), "a");
  ASSERT_TRUE(changes.ok()) << changes.Describe();
  EXPECT_NE(changes.out.find("create: EROFS"), std::string::npos)
      << changes.out;
  CommandResult rw = RunCommand(
      {AcqfsBinary(), "remount", sandbox().mountpoint(), "-o", "rw"}, 30);
  ASSERT_TRUE(rw.ok()) << rw.Describe();
  EXPECT_TRUE(FindMount(sandbox().mountpoint())->HasMountOption("rw"));
  MakeFile(M("after-rw.txt"), "rw\n");
  EXPECT_EQ(ContentOf(M("after-rw.txt")), "rw\n");
  CommandResult bad = RunCommand(
      {AcqfsBinary(), "remount", sandbox().mountpoint(), "-o", "strictatime"},
      30);
  EXPECT_EQ(bad.exit_code, 1) << bad.Describe();
  EXPECT_NE(bad.err.find("strictatime"), std::string::npos) << bad.err;
}

TEST_P(CliOptions, RefusesWhatItCannotHonourNamingIt) {
  const std::string mnt = tmp().MakeDir("second");
  for (const std::string o : {"relatime", "sync", "lazytime"}) {
    CommandResult r =
        RunCommand({AcqfsBinary(), "mount", lower(), mnt, "--name", "second",
                    "--state-dir", sandbox().state_dir(), "-o", o},
                   30);
    EXPECT_EQ(r.exit_code, 1) << o << ": " << r.Describe();
    EXPECT_NE(r.err.find("-o " + o), std::string::npos) << r.err;
    // With the reason, not as an option acqfs does not know.
    EXPECT_EQ(r.err.find("unknown"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(o == "sync" ? "does not sync" : "acqfs "),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(FindMount(mnt).has_value()) << o;
    EXPECT_EQ(ForceUnmount(mnt), "");
  }
}

ACQFS_IN_BOTH_FILE_MODES(CliOptions);

}  // namespace
}  // namespace acqfs::test
