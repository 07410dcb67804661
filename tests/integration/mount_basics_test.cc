// The acqfs CLI's mount/umount contract, reading every lower file type
// through the mount, stable identity (st_ino and friends), statfs, access.
#include <fcntl.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

using MountCli = MountTest;
using ReadThrough = MountTest;
using Identity = MountTest;
using FsInfo = MountTest;

TEST_F(MountCli, MountIsFuseAcqfsWithNosuidNodev) {
  auto m = FindMount(sandbox().mountpoint());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->fs_type, "fuse.acqfs");
  // Named for its sandbox, so findmnt and `umount acqfs:NAME` tell it apart.
  EXPECT_EQ(m->source, "acqfs:" + sandbox().name());
  EXPECT_TRUE(m->HasMountOption("noatime")) << m->mount_options;
  EXPECT_TRUE(m->HasMountOption("nosuid")) << m->mount_options;
  EXPECT_TRUE(m->HasMountOption("nodev")) << m->mount_options;
}

TEST_F(MountCli, MountIsUsableWhenTheCommandReturns) {
  struct stat mnt, parent;
  ASSERT_TRUE(Lstat(sandbox().mountpoint(), &mnt));
  ASSERT_TRUE(Lstat(sandbox().mountpoint() + "/..", &parent));
  EXPECT_NE(mnt.st_dev, parent.st_dev);
  EXPECT_EQ(ContentOf(M(lower::kFileA)), lower::kFileAContent);
}

TEST_F(MountCli, StateDirectoryHoldsLayersPidFileAndLog) {
  struct stat st;
  ASSERT_TRUE(Lstat(sandbox().upper(), &st));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  ASSERT_TRUE(Lstat(sandbox().work(), &st));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(Exists(sandbox().log_file()));
  EXPECT_GT(sandbox().daemon_pid(), 0);
  EXPECT_TRUE(IsProcessAlive(sandbox().daemon_pid()));
}

TEST_F(MountCli, UmountByMountpointWaitsForTheDaemon) {
  const pid_t pid = sandbox().daemon_pid();
  ASSERT_TRUE(sandbox().Unmount(/*by_name=*/false));
  EXPECT_FALSE(FindMount(sandbox().mountpoint()).has_value());
  EXPECT_FALSE(IsProcessAlive(pid));
}

TEST_F(MountCli, UmountByNameWaitsForTheDaemon) {
  const pid_t pid = sandbox().daemon_pid();
  ASSERT_TRUE(sandbox().Unmount(/*by_name=*/true));
  EXPECT_FALSE(FindMount(sandbox().mountpoint()).has_value());
  EXPECT_FALSE(IsProcessAlive(pid));
}

TEST_F(MountCli, UpperLayerPersistsAcrossRemount) {
  ASSERT_TRUE(WriteFile(M("new.txt"), "persisted\n"));
  ASSERT_SYS_OK(::unlink(M(lower::kFileB).c_str()));
  ASSERT_TRUE(sandbox().Unmount());
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_EQ(ContentOf(M("new.txt")), "persisted\n");
  EXPECT_EQ(LstatErrno(M(lower::kFileB)), ENOENT);
  EXPECT_EQ(ContentOf(M(lower::kFileA)), lower::kFileAContent);
}

// Runs `cat path` as uid/gid 65534.
CommandResult CatAsNobody(const std::string& path) {
  return RunCommand({"setpriv", "--reuid=65534", "--regid=65534",
                     "--clear-groups", "cat", path},
                    30);
}

// Is `option` one of the comma-separated `options`?
bool HasOption(const std::string& options, const std::string& option) {
  size_t start = 0;
  for (;;) {
    size_t comma = options.find(',', start);
    if (options.compare(start, comma - start, option) == 0) return true;
    if (comma == std::string::npos) return false;
    start = comma + 1;
  }
}

// As root, acqfs mounts with allow_other by default (as the kernel
// overlayfs serves every user), and the kernel still checks each file's
// mode bits against the caller (default_permissions).
TEST_F(MountCli, OtherUsersGetNormalPermissionChecksByDefaultAsRoot) {
  auto m = FindMount(sandbox().mountpoint());
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(HasOption(m->super_options, "allow_other")) << m->super_options;
  EXPECT_TRUE(HasOption(m->super_options, "default_permissions"))
      << m->super_options;
  CommandResult r = CatAsNobody(M(lower::kFileA));
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, lower::kFileAContent);
  CommandResult denied = CatAsNobody(M(lower::kPrivateFile));
  EXPECT_FALSE(denied.ok()) << denied.Describe();
  EXPECT_NE(denied.err.find("Permission denied"), std::string::npos)
      << denied.Describe();
  // What a root sandbox makes gives them no privilege (nosuid, nodev): a
  // device node cannot be opened, a set-user-id root program runs as them.
  ASSERT_SYS_OK(::mknod(M("disk").c_str(), S_IFCHR | 0666, makedev(1, 3)));
  CommandResult dev = CatAsNobody(M("disk"));
  EXPECT_FALSE(dev.ok()) << dev.Describe();
  EXPECT_NE(dev.err.find("Permission denied"), std::string::npos)
      << dev.Describe();
  CommandResult cp = RunCommand({"cp", "/usr/bin/id", M("suid-id")}, 30);
  ASSERT_TRUE(cp.ok()) << cp.Describe();
  ASSERT_SYS_OK(::chmod(M("suid-id").c_str(), 04755));
  // Run by a shell that is nobody already (setpriv itself still holds
  // root's capabilities when it looks the program up).
  CommandResult id =
      RunCommand({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  "sh", "-c", "exec \"$0\" -u", M("suid-id")},
                 30);
  ASSERT_TRUE(id.ok()) << id.Describe();
  EXPECT_EQ(id.out, "65534\n") << id.Describe();
}

TEST(MountCliOptions, NoAllowOtherDeniesOtherUsersEverything) {
  TempDir tmp;
  ASSERT_SYS_OK(::chmod(tmp.path().c_str(), 0755));
  const std::string lower_dir = tmp.Sub("lower");
  ASSERT_TRUE(MakeLowerRepo(lower_dir));
  SandboxOptions options;
  options.extra_mount_args = {"--no-allow-other"};
  Sandbox sandbox(lower_dir, options);
  ASSERT_TRUE(sandbox.mounted()) << sandbox.mount_failure();
  auto m = FindMount(sandbox.mountpoint());
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(HasOption(m->super_options, "allow_other")) << m->super_options;
  for (const char* rel : {lower::kFileA, lower::kPrivateFile}) {
    CommandResult r = CatAsNobody(sandbox.M(rel));
    EXPECT_FALSE(r.ok()) << r.Describe();
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos)
        << r.Describe();
  }
  // Not even the mount's root can be looked at.
  CommandResult ls = RunCommand({"setpriv", "--reuid=65534", "--regid=65534",
                                 "--clear-groups", "ls", sandbox.mountpoint()},
                                30);
  EXPECT_FALSE(ls.ok()) << ls.Describe();
  // The owner (root) is not concerned.
  EXPECT_EQ(ContentOf(sandbox.M(lower::kFileA)), lower::kFileAContent);
}

TEST(MountCliOptions, AllowOtherLetsOtherUsersIn) {
  TempDir tmp;
  ASSERT_SYS_OK(::chmod(tmp.path().c_str(), 0755));
  const std::string lower_dir = tmp.Sub("lower");
  ASSERT_TRUE(MakeLowerRepo(lower_dir));
  SandboxOptions options;
  options.extra_mount_args = {"--allow-other"};
  Sandbox sandbox(lower_dir, options);
  ASSERT_TRUE(sandbox.mounted()) << sandbox.mount_failure();
  CommandResult r = CatAsNobody(sandbox.M(lower::kFileA));
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, lower::kFileAContent);
  // Permissions are still enforced for that user.
  CommandResult denied = CatAsNobody(sandbox.M(lower::kPrivateFile));
  EXPECT_FALSE(denied.ok()) << denied.Describe();
}

// Who may use the mount is chosen once per mount command; contradicting
// options are refused before anything is created.
TEST(MountCliOptions, ContradictoryAllowOtherOptionsAreRefused) {
  TempDir tmp;
  const std::string lower = tmp.MakeDir("lower");
  const std::string mnt = tmp.MakeDir("mnt");
  const std::string state = tmp.Sub("state");
  const std::vector<std::vector<std::string>> cases = {
      {"--allow-other", "--no-allow-other"},
      {"--no-allow-other", "-o", "allow_other"},
      {"-o", "allow_other,noallow_other"},
  };
  for (const auto& extra : cases) {
    std::vector<std::string> argv = {AcqfsBinary(), "mount",  lower,
                                     mnt,           "--name", "x",
                                     "--state-dir", state};
    argv.insert(argv.end(), extra.begin(), extra.end());
    CommandResult r = RunCommand(argv, 30);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_EQ(r.err.rfind("acqfs: mount: ", 0), 0u) << r.Describe();
    EXPECT_NE(r.err.find("contradicts"), std::string::npos) << r.Describe();
    EXPECT_FALSE(FindMount(mnt).has_value());
    EXPECT_FALSE(Exists(state));
  }
}

// A remount decides anew: allow_other belongs to the mount command, not to
// the sandbox.
TEST(MountCliOptions, ARemountDecidesAgain) {
  TempDir tmp;
  ASSERT_SYS_OK(::chmod(tmp.path().c_str(), 0755));
  const std::string lower_dir = tmp.Sub("lower");
  ASSERT_TRUE(MakeLowerRepo(lower_dir));
  SandboxOptions options;
  options.extra_mount_args = {"--no-allow-other"};
  Sandbox sandbox(lower_dir, options);
  ASSERT_TRUE(sandbox.mounted()) << sandbox.mount_failure();
  EXPECT_FALSE(CatAsNobody(sandbox.M(lower::kFileA)).ok());
  ASSERT_TRUE(sandbox.Unmount());
  CommandResult again =
      RunCommand({AcqfsBinary(), "mount", lower_dir, sandbox.mountpoint(),
                  "--name", sandbox.name(), "--state-dir", sandbox.state_dir()},
                 30);
  ASSERT_TRUE(again.ok()) << again.Describe();
  MountGuard guard(sandbox.mountpoint());
  CommandResult r = CatAsNobody(sandbox.M(lower::kFileA));
  EXPECT_TRUE(r.ok()) << r.Describe();
  CommandResult u =
      RunCommand({AcqfsBinary(), "umount", sandbox.name(), "--state-dir",
                  sandbox.state_dir(), "--no-export"},
                 60);
  EXPECT_TRUE(u.ok()) << u.Describe();
}

// mount.fuse.acqfs follows the same rule: allow_other as root unless
// -o noallow_other.
TEST(MountHelperOptions, AllowOtherByDefaultAsRootAndNoallowOther) {
  TempDir tmp;
  ASSERT_SYS_OK(::chmod(tmp.path().c_str(), 0755));
  const std::string lower_dir = tmp.Sub("lower");
  ASSERT_TRUE(MakeLowerRepo(lower_dir));
  for (const std::string extra : {"", ",noallow_other"}) {
    SCOPED_TRACE("-o ..." + extra);
    const std::string name = extra.empty() ? "default" : "noallow";
    const std::string upper = tmp.MakeDir(name + "-upper");
    const std::string work = tmp.MakeDir(name + "-work");
    const std::string mnt = tmp.MakeDir(name + "-mnt", 0755);
    MountGuard guard(mnt);
    CommandResult h =
        RunCommand({MountHelperBinary(), "acqfs", mnt, "-o",
                    "lowerdir=" + lower_dir + ",upperdir=" + upper +
                        ",workdir=" + work + extra},
                   30);
    ASSERT_TRUE(h.ok()) << h.Describe();
    const std::vector<pid_t> daemons = PidsWithArgument(mnt);
    auto m = FindMount(mnt);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(HasOption(m->super_options, "allow_other"), extra.empty())
        << m->super_options;
    CommandResult r = CatAsNobody(mnt + "/" + lower::kFileA);
    EXPECT_EQ(r.ok(), extra.empty()) << r.Describe();
    CommandResult u = RunCommand({"fusermount3", "-u", mnt}, 30);
    EXPECT_TRUE(u.ok()) << u.Describe();
    for (pid_t pid : daemons) {
      EXPECT_TRUE(WaitForProcessExit(pid, 20)) << "daemon " << pid;
      KillIfAlive(pid, "acqfs");
    }
  }
}

TEST(MountCliErrors, MissingLowerFailsWithMessageNamingIt) {
  TempDir tmp;
  const std::string missing = tmp.Sub("no-such-lower");
  const std::string mnt = tmp.MakeDir("mnt");
  const std::string state = tmp.MakeDir("state");
  CommandResult r = RunCommand({AcqfsBinary(), "mount", missing, mnt, "--name",
                                "x", "--state-dir", state},
                               30);
  EXPECT_FALSE(FindMount(mnt).has_value());
  ASSERT_FALSE(r.timed_out) << r.Describe();
  EXPECT_NE(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.err.rfind("acqfs: ", 0), 0u) << r.Describe();
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.Describe();
}

TEST(MountCliErrors, BadOptionValuesAreRefusedAndNothingIsCreated) {
  TempDir tmp;
  const std::string lower = tmp.MakeDir("lower");
  const std::string mnt = tmp.MakeDir("mnt");
  const std::string state = tmp.Sub("state");
  for (const char* opt :
       {"timeout=abc", "threads=0", "threads=2x", "nosuch", "warm_threads=0",
        "warm_threads=65", "warm_threads=2x", "warm_nice=20", "warm_nice=-1",
        "warm_nice=x"}) {
    CommandResult r = RunCommand({AcqfsBinary(), "mount", lower, mnt, "--name",
                                  "x", "--state-dir", state, "-o", opt},
                                 30);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_NE(r.err.find(std::string("-o ") + opt), std::string::npos)
        << r.Describe();
    EXPECT_FALSE(FindMount(mnt).has_value());
    EXPECT_FALSE(Exists(state)) << opt;
  }
}

TEST(MountCliErrors, UmountOfUnknownNameFails) {
  TempDir tmp;
  const std::string state = tmp.MakeDir("state");
  CommandResult r = RunCommand(
      {AcqfsBinary(), "umount", "never-mounted", "--state-dir", state}, 30);
  ASSERT_FALSE(r.timed_out) << r.Describe();
  EXPECT_NE(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.err.rfind("acqfs: ", 0), 0u) << r.Describe();
}

// The harness itself: a Sandbox whose daemon hangs still leaves no mount and
// no daemon behind (the failed `acqfs umount` is reported, as it should be).
TEST(SandboxCleanup, RecoversFromAStoppedDaemon) {
  TempDir tmp;
  const std::string lower_dir = tmp.Sub("lower");
  ASSERT_TRUE(MakeLowerRepo(lower_dir));
  std::string mnt;
  pid_t pid = 0;
  EXPECT_NONFATAL_FAILURE(
      {
        SandboxOptions options;
        options.umount_timeout_seconds = 20;
        Sandbox sandbox(lower_dir, options);
        mnt = sandbox.mountpoint();
        pid = sandbox.daemon_pid();
        if (sandbox.mounted() && pid > 0) ::kill(pid, SIGSTOP);
      },
      "acqfs umount");
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(FindMount(mnt).has_value());
  EXPECT_FALSE(IsProcessAlive(pid));
}

TEST_F(ReadThrough, EveryLowerFileTypeMatchesTheLower) {
  SnapshotOptions options = SnapshotOptions::Everything();  // no atime
  options.dir_size = false;  // directory sizes are file-system specific
  TreeSnapshot lower_view = Snapshot(lower(), options);
  TreeSnapshot mount_view = Snapshot(sandbox().mountpoint(), options);
  // The root is always merged with the upper layer's root directory, which
  // the mount created, so its ctime is the upper's (as in kernel overlayfs).
  ASSERT_NE(mount_view.Find("."), nullptr);
  mount_view.entries["."].ctime_ns = lower_view.entries["."].ctime_ns;
  // The sandbox's .git is its own from the mount (docs/git-bridge.md, "The
  // base"): a copy of the host's but its object store, made as a copy-up
  // makes one (the same content, mode, owner, times and inode numbers; a
  // ctime of its own).
  for (auto& [path, entry] : mount_view.entries)
    if ((path == ".git" || path.rfind(".git/", 0) == 0) &&
        path.rfind(".git/objects", 0) != 0 && lower_view.Find(path))
      entry.ctime_ns = lower_view.entries[path].ctime_ns;
  // Its reflogs begin at the mount, as a clone's begin at the clone: of the
  // host's, only the stash's is copied.
  for (auto it = lower_view.entries.begin(); it != lower_view.entries.end();)
    if (it->first.rfind(".git/logs/", 0) == 0 &&
        it->first != ".git/logs/refs" && it->first != ".git/logs/refs/stash")
      it = lower_view.entries.erase(it);
    else
      ++it;
  EXPECT_TRUE(SnapshotsEqual(lower_view, mount_view));
  EXPECT_GT(mount_view.entries.size(), 40u);
}

TEST_F(ReadThrough, SymlinksResolveInsideTheMount) {
  EXPECT_EQ(ContentOf(M(lower::kLinkToFile)), lower::kFileAContent);
  std::vector<std::string> names;
  ASSERT_TRUE(ListDir(M(lower::kLinkToDir), &names));
  EXPECT_EQ(names, (std::vector<std::string>{".hidden", "core.txt", "util"}));
  struct stat st;
  EXPECT_SYS_ERRNO(::stat(M(lower::kDanglingLink).c_str(), &st), ENOENT);
  char buf[256];
  ssize_t n = ::readlink(M(lower::kDanglingLink).c_str(), buf, sizeof(buf));
  ASSERT_SYS_OK(n);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)),
            lower::kDanglingLinkTarget);
}

TEST_F(ReadThrough, LowerFifoPassesData) {
  ScopedFd reader(::open(M(lower::kFifo).c_str(), O_RDONLY | O_NONBLOCK));
  ASSERT_SYS_OK(reader.get());
  ScopedFd writer(::open(M(lower::kFifo).c_str(), O_WRONLY | O_NONBLOCK));
  ASSERT_SYS_OK(writer.get());
  ASSERT_EQ(::write(writer.get(), "ping", 4), 4);
  char buf[8] = {};
  EXPECT_EQ(::read(reader.get(), buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf), "ping");
}

TEST_F(ReadThrough, ExecutableScriptRuns) {
  CommandResult r = RunCommand({M(lower::kScript)}, 30);
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, lower::kScriptOutput);
}

TEST_F(ReadThrough, LargeFileReadsAtEveryMebibyte) {
  ScopedFd lower_fd(::open(L(lower::kLargeFile).c_str(), O_RDONLY));
  ScopedFd mount_fd(::open(M(lower::kLargeFile).c_str(), O_RDONLY));
  ASSERT_SYS_OK(lower_fd.get());
  ASSERT_SYS_OK(mount_fd.get());
  std::string a(8192, '\0'), b(8192, '\0');
  for (off_t off = 0; off < static_cast<off_t>(lower::kLargeFileSize);
       off += (1 << 20) - 4096) {
    ASSERT_EQ(::pread(lower_fd.get(), a.data(), a.size(), off),
              ::pread(mount_fd.get(), b.data(), b.size(), off))
        << "offset " << off;
    ASSERT_EQ(a, b) << "content differs at offset " << off;
  }
}

TEST_F(Identity, UntouchedFilesReportTheLowerStat) {
  for (const char* rel :
       {lower::kReadme, lower::kOwnedFile, lower::kHardLinkA, lower::kScript,
        lower::kLinkToFile, lower::kFifo, lower::kLargeFile, ".git/index"}) {
    SCOPED_TRACE(rel);
    struct stat l = StatL(rel), m = StatM(rel);
    // The sandbox's own copy of the host's index, made at the mount (the
    // base, docs/git-bridge.md): all but its ctime, as after a copy-up.
    if (std::string(rel) == ".git/index") m.st_ctim = l.st_ctim;
    EXPECT_EQ(m.st_ino, l.st_ino);
    EXPECT_EQ(m.st_mode, l.st_mode);
    EXPECT_EQ(m.st_nlink, l.st_nlink);
    EXPECT_EQ(m.st_uid, l.st_uid);
    EXPECT_EQ(m.st_gid, l.st_gid);
    EXPECT_EQ(m.st_size, l.st_size);
    EXPECT_EQ(m.st_mtim.tv_sec, l.st_mtim.tv_sec);
    EXPECT_EQ(m.st_mtim.tv_nsec, l.st_mtim.tv_nsec);
    EXPECT_EQ(m.st_ctim.tv_sec, l.st_ctim.tv_sec);
    EXPECT_EQ(m.st_ctim.tv_nsec, l.st_ctim.tv_nsec);
  }
}

TEST_F(Identity, InodeNumberSurvivesCopyUp) {
  const struct stat lower_st = StatL(lower::kFileA);
  const struct stat before = StatM(lower::kFileA);
  EXPECT_EQ(before.st_ino, lower_st.st_ino);
  ASSERT_TRUE(AppendFile(M(lower::kFileA), "x"));
  EXPECT_TRUE(Exists(U(lower::kFileA))) << "append did not copy up";
  const struct stat after = StatM(lower::kFileA);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_size, before.st_size + 1);
  EXPECT_EQ(after.st_nlink, 1u);
  ScopedFd fd(::open(M(lower::kFileA).c_str(), O_RDONLY));
  struct stat via_fd;
  ASSERT_SYS_OK(::fstat(fd.get(), &via_fd));
  EXPECT_EQ(via_fd.st_ino, before.st_ino);
}

TEST_F(Identity, InodeNumberOfCopiedUpFileSurvivesRemount) {
  const ino_t lower_ino = StatL(lower::kFileA).st_ino;
  ASSERT_TRUE(AppendFile(M(lower::kFileA), "x"));
  ASSERT_TRUE(sandbox().Unmount());
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_EQ(StatM(lower::kFileA).st_ino, lower_ino)
      << "git's index keeps st_ino; a new number after remounting makes git "
         "rehash and rewrite the index";
}

TEST_F(Identity, HardLinkedLowerFilesShareOneInode) {
  const struct stat a = StatM(lower::kHardLinkA), b = StatM(lower::kHardLinkB);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 2u);
  EXPECT_EQ(b.st_nlink, 2u);
}

TEST_F(FsInfo, StatfsReportsFuseAndTheHostCapacity) {
  struct statfs mnt, host;
  ASSERT_SYS_OK(::statfs(sandbox().mountpoint().c_str(), &mnt));
  ASSERT_SYS_OK(::statfs(sandbox().upper().c_str(), &host));
  EXPECT_EQ(mnt.f_type, kFuseSuperMagic);
  EXPECT_GT(mnt.f_blocks, 0u);
  EXPECT_GT(mnt.f_bavail, 0u);
  EXPECT_GE(mnt.f_namelen, 255);
  // Lower and upper share one host file system here, so the total size must
  // be that file system's.
  EXPECT_EQ(static_cast<unsigned long long>(mnt.f_blocks) * mnt.f_frsize,
            static_cast<unsigned long long>(host.f_blocks) * host.f_frsize);
}

TEST_F(FsInfo, AccessFollowsModeBits) {
  EXPECT_SYS_OK(::access(M(lower::kFileA).c_str(), R_OK | W_OK));
  EXPECT_SYS_OK(::access(M(lower::kScript).c_str(), X_OK));
  EXPECT_SYS_ERRNO(::access(M(lower::kFileA).c_str(), X_OK), EACCES);
  EXPECT_SYS_ERRNO(::access(M("no/such/file").c_str(), F_OK), ENOENT);
  EXPECT_SYS_OK(::access(M(lower::kDocsDir).c_str(), R_OK | W_OK | X_OK));
  EXPECT_FALSE(Exists(U(lower::kFileA))) << "access() must not copy up";
}

}  // namespace
}  // namespace acqfs::test
