// acqfs run by an unprivileged user (uid 65534): mount, a shell workload and
// unmount as that user; the upper layer must use user.overlay.* xattrs so
// that kernel overlayfs, mounted with -o userxattr inside a user namespace
// of the same user, shows the same tree.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

// Makes /dev/fuse usable by everyone for the test's duration (CI machines
// have it 0600) and restores the old mode afterwards.
class DevFuseOpenToAll {
 public:
  DevFuseOpenToAll() {
    struct stat st;
    if (::stat(kPath, &st) != 0) {
      ADD_FAILURE() << "stat " << kPath << ": " << ErrnoName(errno);
      return;
    }
    old_mode_ = st.st_mode & 07777;
    EXPECT_SYS_OK(::chmod(kPath, 0666));
  }
  ~DevFuseOpenToAll() {
    if (old_mode_ >= 0) ::chmod(kPath, static_cast<mode_t>(old_mode_));
  }
  DevFuseOpenToAll(const DevFuseOpenToAll&) = delete;
  DevFuseOpenToAll& operator=(const DevFuseOpenToAll&) = delete;

 private:
  static constexpr char kPath[] = "/dev/fuse";
  int old_mode_ = -1;
};

// The shell workload run as nobody inside the mount.
constexpr char kWorkload[] = R"(
echo created > new.txt
echo appended >> docs/a.txt
rm docs/b.txt
mkdir newdir && echo inside > newdir/f
mv src/lib lib-moved
rm -rf hello && mkdir hello && echo fresh > hello/fresh.txt
setfattr -n user.added -v yes new.txt
ln -s new.txt new-link
)";

class Unprivileged : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "needs root to set up (as CI has)";
    ASSERT_SYS_OK(::chmod(tmp_.path().c_str(), 0755));
    home_ = tmp_.MakeDir("home", 0755, kNobody, kNogroup);
    lower_ = tmp_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(lower_));
    ASSERT_TRUE(ChownTree(lower_, kNobody, kNogroup));
    acqfs_ = Reachable(AcqfsBinary(), "acqfs");
    tool_ = Reachable(SnapshotToolBinary(), "acqfs_snapshot_tool");
  }

  // setpriv to nobody, with HOME set.
  std::vector<std::string> AsNobody(std::vector<std::string> argv) const {
    std::vector<std::string> full = {"setpriv",       "--reuid=65534",
                                     "--regid=65534", "--clear-groups",
                                     "env",           "HOME=" + home_};
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  }

  // `binary` itself when nobody can execute it there, else a copy in tmp_.
  std::string Reachable(const std::string& binary, const std::string& name) {
    if (RunCommand(AsNobody({"test", "-x", binary}), 10).ok()) return binary;
    const std::string copy = tmp_.MakeDir("bin") + "/" + name;
    CommandResult r = RunCommand({"cp", binary, copy}, 30);
    EXPECT_TRUE(r.ok()) << r.Describe();
    return copy;
  }

  TreeSnapshot SnapshotAsNobody(const std::vector<std::string>& argv,
                                const std::string& label) {
    CommandResult r = RunCommand(argv, 120);
    EXPECT_TRUE(r.ok()) << r.Describe();
    TreeSnapshot s = TreeSnapshot::Parse(r.out, label);
    return s;
  }

  DevFuseOpenToAll dev_fuse_;
  TempDir tmp_;
  std::string home_, lower_, acqfs_, tool_;
};

// Every overlay xattr in `upper` must be in the user namespace.
void ExpectOnlyUserOverlayXattrs(const std::string& upper) {
  SnapshotOptions options;
  options.content = false;
  TreeSnapshot s = Snapshot(upper, options);
  ASSERT_TRUE(s.errors.empty()) << DiffSnapshots(s, s);
  for (const auto& [path, entry] : s.entries) {
    for (const auto& [name, value] : entry.xattrs) {
      EXPECT_NE(name.rfind("trusted.overlay.", 0), 0u)
          << path << " carries " << name << " though the daemon ran as nobody";
      if (name == "user.overlay.opaque") {
        EXPECT_EQ(value, "y") << path;
      }
    }
  }
}

TEST_F(Unprivileged, MountWorkloadAndKernelOracleAsNobody) {
  SandboxOptions options;
  options.name = "unpriv";
  options.command_prefix = AsNobody({});
  options.owner_uid = kNobody;
  options.owner_gid = kNogroup;
  options.acqfs_bin = acqfs_;
  Sandbox sandbox(lower_, options);
  ASSERT_TRUE(sandbox.mounted()) << sandbox.mount_failure();
  auto m = FindMount(sandbox.mountpoint());
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->super_options.find("user_id=65534"), std::string::npos)
      << m->super_options;

  // Root may not even chdir into nobody's mount (no allow_other), so the
  // shell changes directory itself.
  const std::string script =
      "cd " + ShellQuote(sandbox.mountpoint()) + "\n" + kWorkload;
  CommandResult work = RunCommand(AsNobody({"bash", "-euc", script}), 120);
  ASSERT_TRUE(work.ok()) << work.Describe();
  TreeSnapshot fuse_view = SnapshotAsNobody(
      AsNobody({tool_, "--merged-view", "--no-owner", sandbox.mountpoint()}),
      "acqfs as nobody");
  ASSERT_TRUE(fuse_view.errors.empty()) << DiffSnapshots(fuse_view, fuse_view);
  ASSERT_NE(fuse_view.Find("lib-moved/util/deep/leaf.txt"), nullptr);
  ASSERT_TRUE(sandbox.Unmount());

  EXPECT_TRUE(IsWhiteout(sandbox.U(lower::kFileB)));
  EXPECT_TRUE(IsWhiteout(sandbox.U(lower::kLibDir)));
  ExpectOnlyUserOverlayXattrs(sandbox.upper());
  std::string opaque;  // hello/ was removed and re-created: an opaque dir
  EXPECT_TRUE(
      GetXattr(sandbox.U(lower::kHelloDir), "user.overlay.opaque", &opaque));
  EXPECT_EQ(opaque, "y");

  const std::string target = tmp_.MakeDir("kernel", 0755, kNobody, kNogroup);
  const std::string oracle =
      "mount -t overlay overlay " + ShellQuote(target) + " -o " +
      ShellQuote("userxattr,lowerdir=" + lower_ + ",upperdir=" +
                 sandbox.upper() + ",workdir=" + sandbox.work()) +
      " && exec " + ShellJoin({tool_, "--merged-view", "--no-owner", target});
  TreeSnapshot kernel_view =
      SnapshotAsNobody(AsNobody({"unshare", "-rm", "sh", "-c", oracle}),
                       "kernel overlayfs (userxattr, user namespace)");
  EXPECT_TRUE(SnapshotsEqual(fuse_view, kernel_view, 40));
}

// Both scripts below start with this: they work in argv[1]; err(f) is "ok",
// "ok VALUE" or the errno's name.
constexpr char kPyPrelude[] = R"(
import errno, os, sys
os.chdir(sys.argv[1])
def err(f):
    try:
        r = f()
        return "ok" if r is None else "ok " + str(r)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
)";

// A file created read-only stays writable through the descriptor that
// created it, as does one made read-only by fchmod after it was opened;
// reopening it is refused. So on ext4, so in an ordinary user's mount, also
// after the daemon's file cache (512 descriptors) dropped the descriptor it
// served them with: the daemon, not root, reopens its own 0444 file by
// widening its mode for the open (fs/owner_open.h). git writes every loose
// object this way. The same script runs as nobody in a plain directory of
// the same file system and in the mount, in both file modes; the outputs
// must be the same.
constexpr char kReadOnlyWrites[] = R"(
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
os.umask(0o022)
N = 1200
made = [os.open("ro%d" % i, os.O_CREAT | os.O_EXCL | os.O_RDWR,
                0o200 if i % 3 == 0 else 0o444) for i in range(N)]
print("writes", sum(err(lambda: os.write(fd, b"object %d\n" % i)) != "EACCES"
                    for i, fd in enumerate(made)), "of", N)
print("reads", sum(os.pread(fd, 64, 0).startswith(b"object")
                   for fd in made), "of", N)
late = os.open("late", os.O_CREAT | os.O_RDWR, 0o644)
os.write(late, b"before\n")
os.fchmod(late, 0o400)
others = [os.open("o%d" % i, os.O_CREAT | os.O_RDWR, 0o644) for i in range(N)]
for fd in others:
    os.write(fd, b"x")
    os.close(fd)
print("write after fchmod", err(lambda: os.write(late, b"after\n")))
print("truncate after fchmod", err(lambda: os.ftruncate(late, 10)))
os.unlink("ro1")
print("write unlinked", err(lambda: os.pwrite(made[1], b"OBJECT", 0)))
print("read unlinked", err(lambda: os.pread(made[1], 6, 0)))
print("reopen ro2 for writing", err(lambda: os.close(os.open("ro2", os.O_WRONLY))))
print("reopen ro3 for reading", err(lambda: os.close(os.open("ro3", os.O_RDONLY))))
for fd in made + [late]:
    os.close(fd)
for name in ("ro2", "ro3", "late"):
    st = os.stat(name)
    print(name, oct(st.st_mode), st.st_size)
os.mkdir("shut")
with open("shut/inside", "w") as f:
    f.write("in\n")
with open("zero", "w") as f:
    f.write("zero\n")
os.chmod("shut", 0)
os.chmod("zero", 0)
)";

// After a remount (so the daemon looks every name up afresh): a file and a
// directory of mode 0 are listed and stat'ed with their mode, refuse what
// ext4 refuses their owner, and can be chmod'ed back and removed. The
// daemon reads their user.overlay.* xattrs to look them up, which their
// mode denies it.
constexpr char kModeZero[] = R"(
mine = lambda: sorted(n for n in os.listdir(".") if n in ("late", "shut", "zero"))
print("listed", mine())
for name in ("shut", "zero"):
    print(name, err(lambda: oct(os.lstat(name).st_mode)))
print("open zero", err(lambda: os.close(os.open("zero", os.O_RDONLY))))
print("list shut", err(lambda: os.listdir("shut")))
print("stat shut/inside", err(lambda: os.lstat("shut/inside")))
print("chmod shut", err(lambda: os.chmod("shut", 0o755)))
print("chmod zero", err(lambda: os.chmod("zero", 0o644)))
print("read", open("shut/inside").read().strip(), open("zero").read().strip())
os.chmod("shut", 0o500)
print("rm in read-only dir", err(lambda: os.unlink("shut/inside")))
os.chmod("shut", 0o700)
os.unlink("shut/inside")
os.rmdir("shut")
os.unlink("zero")
print("gone", mine())
)";

TEST_F(Unprivileged, ReadOnlyFilesStayWritableThroughTheirDescriptors) {
  const std::string disk = tmp_.MakeDir("disk", 0755, kNobody, kNogroup);
  CommandResult want =
      RunCommand(AsNobody({"python3", "-c",
                           std::string(kPyPrelude) + kReadOnlyWrites, disk}),
                 120);
  ASSERT_TRUE(want.ok()) << want.Describe();
  ASSERT_NE(want.out.find("writes 1200 of 1200"), std::string::npos)
      << want.out;
  CommandResult want_zero = RunCommand(
      AsNobody({"python3", "-c", std::string(kPyPrelude) + kModeZero, disk}),
      120);
  ASSERT_TRUE(want_zero.ok()) << want_zero.Describe();
  for (bool handles : {false, true}) {
    SCOPED_TRACE(handles ? "-o handles" : "handle-less");
    SandboxOptions options;
    options.name = handles ? "ro-handles" : "ro";
    options.command_prefix = AsNobody({});
    options.owner_uid = kNobody;
    options.owner_gid = kNogroup;
    options.acqfs_bin = acqfs_;
    if (handles) options.extra_mount_args = {"-o", "handles"};
    // The first unmount leaves files of mode 0, which export (like git
    // add) cannot read.
    options.extra_umount_args = {"--no-export"};
    Sandbox sandbox(lower_, options);
    ASSERT_TRUE(sandbox.mounted()) << sandbox.mount_failure();
    CommandResult got = RunCommand(
        AsNobody({"python3", "-c", std::string(kPyPrelude) + kReadOnlyWrites,
                  sandbox.mountpoint()}),
        120);
    EXPECT_TRUE(got.ok()) << got.Describe();
    EXPECT_EQ(got.out, want.out);
    ASSERT_TRUE(sandbox.Unmount());
    ASSERT_TRUE(sandbox.Remount());
    CommandResult zero = RunCommand(
        AsNobody({"python3", "-c", std::string(kPyPrelude) + kModeZero,
                  sandbox.mountpoint()}),
        120);
    EXPECT_TRUE(zero.ok()) << zero.Describe();
    EXPECT_EQ(zero.out, want_zero.out);
    ASSERT_TRUE(sandbox.Unmount());
    // The modes in the upper are the ones asked for, and no journal is left.
    EXPECT_EQ(Lstat(sandbox.U("ro2")).st_mode & 07777, 0444u);
    EXPECT_EQ(Lstat(sandbox.U("ro3")).st_mode & 07777, 0200u);
    EXPECT_EQ(Lstat(sandbox.U("late")).st_mode & 07777, 0400u);
    const std::string journal = sandbox.work() + "/acqfs-modes";
    EXPECT_TRUE(!Exists(journal) || ReadFile(journal).empty());
  }
}

// An ordinary user's mount is for that user only unless --allow-other is
// given, which needs `user_allow_other` in /etc/fuse.conf: without it the
// request is refused before anything is created, naming the file. Each case
// runs in a private mount namespace whose /etc/fuse.conf is a file of the
// test's (bind-mounted), so the host's file is never changed; the acqfs
// mount made there is seen and unmounted there.
class UnprivilegedAllowOther : public Unprivileged {
 protected:
  // Runs `script` with sh as root in a new mount namespace where
  // /etc/fuse.conf holds `fuse_conf`; in it, as_nobody runs a command as
  // nobody, $ACQFS is acqfs, $MNT a mountpoint of nobody's, $STATE a
  // state directory (not made yet) and $NAME a sandbox name of the case's.
  CommandResult InNamespace(const std::string& fuse_conf,
                            const std::string& script) {
    const std::string dir = tmp_.MakeDir("case" + std::to_string(++cases_),
                                         0755, kNobody, kNogroup);
    const std::string conf = dir + "/fuse.conf";
    EXPECT_TRUE(WriteFile(conf, fuse_conf));
    EXPECT_SYS_OK(::chmod(conf.c_str(), 0644));
    mnt_ = tmp_.MakeDir("case" + std::to_string(cases_) + "/mnt", 0755, kNobody,
                        kNogroup);
    state_ = dir + "/state";
    name_ = "box" + std::to_string(cases_);  // each has its own remote
    std::string prelude = "set -u\n";
    prelude +=
        "mount --bind " + ShellQuote(conf) + " /etc/fuse.conf || exit 99\n";
    prelude += "as_nobody() { " + ShellJoin(AsNobody({})) + " \"$@\"; }\n";
    prelude += "ACQFS=" + ShellQuote(acqfs_) + "\n";
    prelude += "MNT=" + ShellQuote(mnt_) + "\n";
    prelude += "STATE=" + ShellQuote(state_) + "\n";
    prelude += "NAME=" + name_ + "\n";
    prelude += "mounted() { grep -F \" $MNT \" /proc/self/mountinfo; }\n";
    CommandResult r = RunCommand({"unshare", "--mount", "--propagation",
                                  "private", "sh", "-c", prelude + script},
                                 120);
    // A daemon the script left behind keeps its namespace and mount alive.
    const pid_t pid = ReadPidFile(state_ + "/" + name_ + "/daemon.pid");
    if (pid > 0 && IsProcessAlive(pid)) {
      ADD_FAILURE() << "the script left daemon " << pid << " running";
      EXPECT_TRUE(KillIfAlive(pid, "acqfs"));
    }
    return r;
  }

  int cases_ = 0;
  std::string mnt_, state_, name_;
};

TEST_F(UnprivilegedAllowOther, NeedsUserAllowOtherInFuseConf) {
  // Refused, with the machine's default file and with a line fusermount3
  // ignores (no newline at the end of the file): exit 1, nothing made.
  for (const std::string conf :
       {"# user_allow_other - ...\n#user_allow_other\n", "user_allow_other"}) {
    for (const auto& [flag, spelling] :
         {std::pair<std::string, std::string>{"--allow-other", "--allow-other"},
          {"-oallow_other", "-o allow_other"}}) {
      SCOPED_TRACE("fuse.conf '" + conf + "', " + flag);
      CommandResult r = InNamespace(
          conf, "as_nobody \"$ACQFS\" mount " + ShellQuote(lower_) +
                    " \"$MNT\" --name \"$NAME\" --state-dir \"$STATE\" " +
                    flag +
                    "; rc=$?\n"
                    "if mounted; then as_nobody \"$ACQFS\" umount \"$NAME\" "
                    "--state-dir "
                    "\"$STATE\" --no-export; echo MOUNTED; fi\n"
                    "exit $rc\n");
      EXPECT_EQ(r.exit_code, 1) << r.Describe();
      EXPECT_EQ(r.out.find("MOUNTED"), std::string::npos) << r.Describe();
      EXPECT_EQ(r.err.rfind("acqfs: mount: /etc/fuse.conf: ", 0), 0u)
          << r.Describe();
      EXPECT_NE(r.err.find("`user_allow_other`"), std::string::npos)
          << r.Describe();
      EXPECT_NE(r.err.find(spelling), std::string::npos) << r.Describe();
      EXPECT_FALSE(Exists(state_)) << "state directory created";
    }
  }
  // acqfs run refuses it the same way before it does anything.
  {
    CommandResult r = InNamespace(
        "#user_allow_other\n",
        "as_nobody \"$ACQFS\" run \"$NAME\" --repo " + ShellQuote(lower_) +
            " --state-dir \"$STATE\" --mountpoint \"$MNT\" --allow-other "
            "-- true\n");
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_EQ(r.err.rfind("acqfs: run: /etc/fuse.conf: ", 0), 0u)
        << r.Describe();
    EXPECT_FALSE(Exists(state_)) << "state directory created";
  }
  // With the line (blanks and a comment around it, as fusermount3 allows):
  // other users, root among them, get in; without --allow-other they do
  // not, whatever fuse.conf says.
  const std::string both =
      "as_nobody \"$ACQFS\" mount " + ShellQuote(lower_) +
      " \"$MNT\" --name \"$NAME\" --state-dir \"$STATE\" $FLAG || exit 10\n"
      "mounted\n"
      "cat \"$MNT/" +
      std::string(lower::kFileA) +
      "\"; rc=$?\n"
      "as_nobody \"$ACQFS\" umount \"$NAME\" --state-dir \"$STATE\" "
      "--no-export || exit 11\n"
      "exit $rc\n";
  CommandResult in = InNamespace("  user_allow_other  # let users share\n",
                                 "FLAG=--allow-other\n" + both);
  EXPECT_TRUE(in.ok()) << in.Describe();
  EXPECT_NE(in.out.find("allow_other"), std::string::npos) << in.Describe();
  EXPECT_NE(in.out.find(lower::kFileAContent), std::string::npos)
      << in.Describe();
  CommandResult out = InNamespace("user_allow_other\n", "FLAG=\n" + both);
  EXPECT_EQ(out.exit_code, 1) << out.Describe();  // cat's
  EXPECT_EQ(out.out.find("allow_other"), std::string::npos) << out.Describe();
  EXPECT_NE(out.err.find("Permission denied"), std::string::npos)
      << out.Describe();
}

}  // namespace
}  // namespace acqfs::test
