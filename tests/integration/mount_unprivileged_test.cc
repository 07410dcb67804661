// acqfs run by an unprivileged user (uid 65534): mount, a shell workload and
// unmount as that user; the upper layer must use user.overlay.* xattrs so
// that kernel overlayfs, mounted with -o userxattr inside a user namespace
// of the same user, shows the same tree.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
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

}  // namespace
}  // namespace acqfs::test
