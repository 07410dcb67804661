// Containers with an acqfs sandbox as their workspace, end to end (issue 17).
// Rootful, with podman as root and with a Docker daemon of the test's own:
// a container as root and one as uid 1000 on a sandbox of a host checkout
// edit, create, delete and rename files, build with make, commit on a
// branch with git and leave uncommitted work. Then `acqfs export` and the
// host's `git fetch` bring back the branch and the working-tree commit, the
// upper layer holds the files with the container user's owner, and the
// host checkout is byte-identical. Four containers at once on four
// sandboxes of one checkout all finish and export, and `acqfs ls` lists the
// four. Rootless podman, as an ordinary user: the container's root, and
// --userns=keep-id with and without --allow-other; and the refusal of a
// mount that a Podman namespace made earlier would not see.
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "container/docker.h"
#include "container/podman.h"
#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/lower_repo.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "harness/sandbox.h"
#include "harness/snapshot.h"
#include "harness/temp_dir.h"

namespace acqfs::test {
namespace {

// What the container does in /workspace (busybox sh, set -eu).
constexpr char kContainerWork[] = R"sh(
g() { git -c user.name=Container -c user.email=container@example.com \
        -c safe.directory='*' -c init.defaultBranch=main "$@"; }
echo "edited in the container" >> README.md
echo "made in the container" > made.txt
rm docs/old.txt
mv src/b.txt src/renamed.txt
mkdir newdir
echo deep > newdir/deep.txt
chmod 0755 tool.sh
make
test "$(cat out/all.txt)" = "$(cat src/a.txt src/renamed.txt)"
g checkout -q -b from-container
g add -A
g commit -q -m "work of the container"
echo "left uncommitted" > wip.txt
echo "edited after the commit" >> README.md
)sh";

// The host checkout the containers work on, owned by uid:gid.
void MakeHostRepo(const std::string& dir, const std::string& home, uid_t uid,
                  gid_t gid) {
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  const std::string script = R"sh(
mkdir -p docs src
printf '# host\n' > README.md
printf 'old\n' > docs/old.txt
printf 'alpha\n' > src/a.txt
printf 'bravo\n' > src/b.txt
printf '#!/bin/sh\necho tool\n' > tool.sh
printf 'out/all.txt: $(sort $(wildcard src/*.txt))\n\tmkdir -p out\n\tcat $^ > $@\n' > Makefile
printf '/out/\n' > .gitignore
git init -q -b main .
git add -A
git -c user.name=Host -c user.email=host@example.com commit -q -m "host commit"
)sh";
  CommandResult r = RunShell(script, 60, dir, GitEnv(home));
  ASSERT_TRUE(r.ok()) << r.Describe();
  if (uid != 0) {
    ASSERT_TRUE(ChownTree(dir, uid, gid));
  }
}

std::string Git(const std::string& repo, const std::vector<std::string>& args,
                const std::string& home) {
  CommandResult r = RunGit(repo, args, home);
  EXPECT_TRUE(r.ok()) << r.Describe();
  return r.out;
}

// The container tests' own stores and images, made once for the program:
// rootful podman, and a Docker daemon of the test's own (docker.h).
Podman* store = nullptr;
Docker* docker = nullptr;

class EngineEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "rootful podman needs root (as CI has)";
    podman_ = std::make_unique<Podman>();
    CommandResult r = podman_->MakeImage();
    ASSERT_TRUE(r.ok()) << r.Describe();
    store = podman_.get();
    docker_ = std::make_unique<Docker>();
    ASSERT_EQ(docker_->failure(), "");
    CommandResult d = docker_->MakeImage();
    ASSERT_TRUE(d.ok()) << d.Describe();
    docker = docker_.get();
  }
  void TearDown() override {
    store = nullptr;
    docker = nullptr;
    docker_.reset();
    podman_.reset();
  }

 private:
  std::unique_ptr<Podman> podman_;
  std::unique_ptr<Docker> docker_;
};
const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new EngineEnvironment);

// The rootful engine a test parameter names; nullptr when it could not be
// set up (the environment reported why).
ContainerEngine* Engine(const std::string& name) {
  if (name == "docker") return docker;
  return store;
}

struct Who {
  const char* engine;  // "podman", "docker"
  const char* label;
  uid_t uid;
  gid_t gid;
  const char* user;  // --user, "" for root
};
// For test names and messages (ctest shows the parameter).
void PrintTo(const Who& w, std::ostream* os) {
  *os << w.engine << "_" << w.label;
}

// Rootful: podman as root, and docker (whose daemon is root), on a root
// mount, which is open to every user by default.
class Rootful : public ::testing::TestWithParam<Who> {
 protected:
  void SetUp() override {
    engine_ = Engine(GetParam().engine);
    ASSERT_NE(engine_, nullptr) << "the image could not be made";
    ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
    home_ = tmp_.MakeDir("home");
    lower_ = tmp_.Sub("host");
    ASSERT_NO_FATAL_FAILURE(
        MakeHostRepo(lower_, home_, GetParam().uid, GetParam().gid));
  }

  TempDir tmp_;
  ContainerEngine* engine_ = nullptr;
  std::string home_, lower_;
};

TEST_P(Rootful, EditsBuildsCommitsAndExports) {
  const Who who = GetParam();
  const SnapshotOptions outside = SnapshotOptions::CheckoutOutsideGit();
  const TreeSnapshot files0 = Snapshot(lower_, outside);
  SandboxOptions options;
  options.name = std::string(who.engine) + "-" + who.label;
  // The checkout of a user whom root serves: as `sudo acqfs ...` from that
  // user, which git (and so acqfs) trusts with another user's checkout.
  if (who.uid != 0)
    options.command_prefix = {"env", "SUDO_UID=" + std::to_string(who.uid)};
  Sandbox s(lower_, options);
  ASSERT_TRUE(s.mounted()) << s.mount_failure();
  // The mount registered the remote in .git/config; from here on nothing
  // of the host changes until the fetch.
  const TreeSnapshot host0 = Snapshot(lower_, SnapshotOptions::Everything());

  ContainerRun spec;
  spec.name = "acqfs-test-" + s.name();
  spec.workspace = s.mountpoint();
  spec.user = who.user;
  spec.script = kContainerWork;
  CommandResult run = engine_->Run(spec);
  ASSERT_TRUE(run.ok()) << run.Describe() << "\n--- daemon.log ---\n"
                        << s.DaemonLog();

  // The upper holds what the container made, owned by its user.
  for (const char* rel : {"made.txt", "wip.txt", "newdir/deep.txt",
                          "out/all.txt", "src/renamed.txt"}) {
    struct stat st;
    ASSERT_EQ(::lstat(s.U(rel).c_str(), &st), 0) << s.U(rel);
    EXPECT_EQ(st.st_uid, who.uid) << rel;
    EXPECT_EQ(st.st_gid, who.gid) << rel;
    EXPECT_EQ(st.st_mode & 07777, 0644u) << rel;
  }
  EXPECT_TRUE(
      SnapshotsEqual(host0, Snapshot(lower_, SnapshotOptions::Everything())))
      << "the container changed the host checkout";

  CommandResult e =
      RunCommand({"env", "SUDO_UID=" + std::to_string(who.uid), AcqfsBinary(),
                  "export", s.name(), "--state-dir", s.state_dir(), "--json"},
                 120);
  ASSERT_TRUE(e.ok()) << e.Describe();
  const auto report = nlohmann::json::parse(e.out);
  std::string branch_id;
  for (const auto& u : report["updates"])
    if (u["ref"] == "refs/heads/from-container") branch_id = u["new"];
  ASSERT_FALSE(branch_id.empty()) << e.out;
  EXPECT_EQ(report["worktree_parent"], branch_id) << e.out;
  EXPECT_TRUE(report["refused"].empty()) << e.out;
  // The export adds the remote sandbox-NAME to the host's .git/config
  // (git-bridge.md); the files are as they were.
  EXPECT_TRUE(
      SnapshotsEqual(host0, Snapshot(lower_, SnapshotOptions::Everything())))
      << "the export changed the host checkout";

  const std::string remote = "sandbox-" + s.name();
  Git(lower_, {"fetch", "-q", remote}, home_);
  const std::string b = remote + "/from-container";
  const std::string w = remote + "/acqfs-worktree";
  EXPECT_EQ(Git(lower_, {"rev-parse", b}, home_), branch_id + "\n");
  EXPECT_EQ(Git(lower_, {"log", "-1", "--format=%an %s", b}, home_),
            "Container work of the container\n");
  EXPECT_EQ(Git(lower_, {"ls-tree", "-r", "--format=%(objectmode) %(path)", b},
                home_),
            "100644 .gitignore\n100644 Makefile\n100644 README.md\n"
            "100644 made.txt\n100644 newdir/deep.txt\n100644 src/a.txt\n"
            "100644 src/renamed.txt\n100755 tool.sh\n");
  EXPECT_EQ(Git(lower_, {"show", w + ":wip.txt"}, home_), "left uncommitted\n");
  EXPECT_EQ(Git(lower_, {"show", w + ":README.md"}, home_),
            "# host\nedited in the container\nedited after the commit\n");
  EXPECT_EQ(Git(lower_, {"rev-parse", w + "^"}, home_), branch_id + "\n");
  // The fetch wrote only below .git; the files are as they were.
  EXPECT_TRUE(SnapshotsEqual(files0, Snapshot(lower_, outside)));
  EXPECT_TRUE(s.Unmount());
}

// Each of four containers builds in its own sandbox: 200 generated
// sources, `make -j2`, a commit on a branch of its own.
std::string BoxWork(int i) {
  return R"sh(
g() { git -c user.name=Container -c user.email=container@example.com \
        -c safe.directory='*' "$@"; }
n=1
while [ $n -le 200 ]; do echo "box )sh" +
         std::to_string(i) + R"sh( source $n" > src/gen-$n.txt; n=$((n+1)); done
make -j2
test "$(wc -l < out/all.txt)" -eq 202
g checkout -q -b box-)sh" +
         std::to_string(i) + R"sh(
g add -A
g commit -q -m "box )sh" +
         std::to_string(i) + R"sh("
)sh";
}

class RootfulMany : public ::testing::TestWithParam<const char*> {};

TEST_P(RootfulMany, FourContainersBuildOnFourSandboxesOfOneCheckout) {
  ContainerEngine* engine = Engine(GetParam());
  ASSERT_NE(engine, nullptr) << "the image could not be made";
  constexpr int kBoxes = 4;
  TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
  const std::string home = tmp.MakeDir("home");
  const std::string lower = tmp.Sub("host");
  ASSERT_NO_FATAL_FAILURE(MakeHostRepo(lower, home, 0, 0));
  const std::string state = tmp.MakeDir("state");
  std::vector<std::unique_ptr<Sandbox>> boxes;
  for (int i = 0; i < kBoxes; i++) {
    SandboxOptions o;
    o.name = "four-" + std::to_string(i);
    o.state_dir = state;
    boxes.push_back(std::make_unique<Sandbox>(lower, o));
    ASSERT_TRUE(boxes.back()->mounted()) << boxes.back()->mount_failure();
  }
  const TreeSnapshot host0 = Snapshot(lower, SnapshotOptions::Everything());
  std::vector<CommandResult> runs(kBoxes);
  std::vector<std::thread> threads;
  for (int i = 0; i < kBoxes; i++)
    threads.emplace_back([&, i] {
      ContainerRun spec;
      spec.name = std::string("acqfs-test-") + GetParam() + "-four-" +
                  std::to_string(i);
      spec.workspace = boxes[i]->mountpoint();
      spec.script = BoxWork(i);
      spec.timeout_seconds = 300;
      runs[i] = engine->Run(spec);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kBoxes; i++)
    EXPECT_TRUE(runs[i].ok()) << runs[i].Describe() << "\n--- daemon.log ---\n"
                              << boxes[i]->DaemonLog();

  CommandResult ls =
      RunCommand({AcqfsBinary(), "ls", "--state-dir", state, "--json"}, 60);
  ASSERT_TRUE(ls.ok()) << ls.Describe();
  const auto listed = nlohmann::json::parse(ls.out);
  ASSERT_EQ(listed.size(), static_cast<size_t>(kBoxes)) << ls.out;
  for (int i = 0; i < kBoxes; i++) {
    EXPECT_EQ(listed[i]["name"], "four-" + std::to_string(i)) << ls.out;
    EXPECT_EQ(listed[i]["state"], "mounted") << ls.out;
    EXPECT_GE(listed[i]["changed_paths"].get<int>(), 200) << ls.out;
  }
  for (int i = 0; i < kBoxes; i++) {
    const std::string name = "four-" + std::to_string(i);
    CommandResult e =
        RunCommand({AcqfsBinary(), "export", name, "--state-dir", state}, 120);
    EXPECT_TRUE(e.ok()) << e.Describe();
  }
  EXPECT_TRUE(
      SnapshotsEqual(host0, Snapshot(lower, SnapshotOptions::Everything())))
      << "the containers or the exports changed the host checkout";
  for (int i = 0; i < kBoxes; i++) {
    const std::string remote = "sandbox-four-" + std::to_string(i);
    Git(lower, {"fetch", "-q", remote}, home);
    EXPECT_EQ(
        Git(lower,
            {"show", remote + "/box-" + std::to_string(i) + ":src/gen-7.txt"},
            home),
        "box " + std::to_string(i) + " source 7\n");
  }
  for (auto& b : boxes) EXPECT_TRUE(b->Unmount());
}

// Rootless: an ordinary user (made once, with the subordinate id ranges
// useradd gives) mounts a sandbox of their own checkout without
// --allow-other and runs rootless podman on it. The container's root is
// the user, so it gets in; what it makes is the user's in the upper layer
// and comes back through export and the user's own fetch. The pause
// process podman starts after the mount holds a copy of it, which umount
// must end (ForeignCopy in mount_robustness_test.cc).
constexpr char kRootlessUser[] = "acqfs-podman";

class RootlessPodman : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "needs root to set up (as CI has)";
    if (::getpwnam(kRootlessUser) == nullptr) {
      CommandResult add = RunCommand(
          {"useradd", "--create-home", "--shell", "/bin/sh", kRootlessUser},
          60);
      ASSERT_TRUE(add.ok()) << add.Describe();
    }
    const struct passwd* pw = ::getpwnam(kRootlessUser);
    ASSERT_NE(pw, nullptr);
    uid_ = pw->pw_uid;
    gid_ = pw->pw_gid;
    struct stat st;
    ASSERT_EQ(::stat("/dev/fuse", &st), 0);
    fuse_mode_ = st.st_mode & 07777;
    ASSERT_EQ(::chmod("/dev/fuse", 0666), 0);
    ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
    home_ = tmp_.MakeDir("home", 0755, uid_, gid_);
    xdg_ = tmp_.MakeDir("xdg", 0700, uid_, gid_);
    lower_ = tmp_.Sub("host");
    ASSERT_NO_FATAL_FAILURE(MakeHostRepo(lower_, home_, uid_, gid_));
  }
  void TearDown() override {
    // The pause process keeps the user's podman namespace: end it.
    std::ifstream in(xdg_ + "/libpod/tmp/pause.pid");
    pid_t pause = 0;
    if (in >> pause && pause > 0) ::kill(pause, SIGKILL);
    if (fuse_mode_ >= 0) ::chmod("/dev/fuse", static_cast<mode_t>(fuse_mode_));
  }
  // Podman run by the user, with a store the user owns.
  PodmanUser User() const {
    PodmanUser user;
    user.prefix = AsUser();
    user.uid = uid_;
    user.gid = gid_;
    return user;
  }
  // A sandbox the user mounts, with its directories the user's.
  SandboxOptions UserSandbox(const std::string& name) const {
    SandboxOptions options;
    options.name = name;
    options.command_prefix = AsUser();
    options.owner_uid = uid_;
    options.owner_gid = gid_;
    return options;
  }
  // The user's own `git fetch REMOTE` in the host checkout.
  void FetchAsUser(const std::string& remote) const {
    std::vector<std::string> fetch = AsUser();
    fetch.insert(fetch.end(), {"git", "-C", lower_, "fetch", "-q", remote});
    CommandResult f = RunCommand(fetch, 60);
    ASSERT_TRUE(f.ok()) << f.Describe();
  }
  std::vector<std::string> AsUser() const {
    return {"setpriv",
            "--reuid=" + std::to_string(uid_),
            "--regid=" + std::to_string(gid_),
            "--init-groups",
            "env",
            "HOME=" + home_,
            "XDG_RUNTIME_DIR=" + xdg_};
  }

  TempDir tmp_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  int fuse_mode_ = -1;
  std::string home_, xdg_, lower_;
};

TEST_F(RootlessPodman, TheContainersRootIsTheUserAndItsWorkComesBack) {
  SandboxOptions options = UserSandbox("rootless");
  Sandbox s(lower_, options);
  ASSERT_TRUE(s.mounted()) << s.mount_failure();
  const TreeSnapshot host0 = Snapshot(lower_, SnapshotOptions::Everything());
  {
    Podman podman(User());
    CommandResult image = podman.MakeImage();
    ASSERT_TRUE(image.ok()) << image.Describe();
    ContainerRun spec;
    spec.name = "acqfs-test-rootless";
    spec.workspace = s.mountpoint();
    spec.script = kContainerWork;
    CommandResult run = podman.Run(spec);
    ASSERT_TRUE(run.ok()) << run.Describe() << "\n--- daemon.log ---\n"
                          << s.DaemonLog();
  }
  for (const char* rel : {"made.txt", "wip.txt", "out/all.txt"}) {
    struct stat st;
    ASSERT_EQ(::lstat(s.U(rel).c_str(), &st), 0) << s.U(rel);
    EXPECT_EQ(st.st_uid, uid_) << rel;
    EXPECT_EQ(st.st_gid, gid_) << rel;
  }
  EXPECT_TRUE(
      SnapshotsEqual(host0, Snapshot(lower_, SnapshotOptions::Everything())))
      << "the container changed the host checkout";
  // umount ends the daemon that the pause process's copy keeps alive, and
  // exports.
  ASSERT_TRUE(s.Unmount());
  ASSERT_NO_FATAL_FAILURE(FetchAsUser("sandbox-rootless"));
  EXPECT_EQ(
      Git(lower_,
          {"log", "-1", "--format=%an %s", "sandbox-rootless/from-container"},
          home_),
      "Container work of the container\n");
  EXPECT_EQ(
      Git(lower_, {"show", "sandbox-rootless/acqfs-worktree:wip.txt"}, home_),
      "left uncommitted\n");
}

// A tmpfs of the test's at `dir` (in the machine's mount namespace), owned
// by uid:gid, made shared or private; detached in every outcome.
class TestTmpfs {
 public:
  TestTmpfs(const std::string& dir, unsigned long propagation, uid_t uid,
            gid_t gid)
      : dir_(dir) {
    const std::string opts =
        "mode=0755,uid=" + std::to_string(uid) + ",gid=" + std::to_string(gid);
    if (::mount("acqfs-test", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0)
      return;
    mounted_ = true;
    ok_ = ::mount(nullptr, dir.c_str(), nullptr, propagation, nullptr) == 0;
  }
  ~TestTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return ok_; }

 private:
  std::string dir_;
  bool mounted_ = false, ok_ = false;
};

// What a container sees in /workspace, one name per line.
constexpr char kListWorkspace[] = "ls -A /workspace";

// Podman's namespace made before the mount: rootless Podman's pause process
// keeps the mount namespace its first command made. A sandbox mounted after
// it on a private mount is not in it, so a container would see the empty
// directory beneath the mountpoint and write there, outside the sandbox:
// `acqfs mount` refuses it, says what to change and writes nothing;
// --ignore-podman-namespace mounts anyway (and the container does see the
// empty directory: the refusal's reason, shown). Under a shared mount the
// mount propagates into the namespace, and is allowed: the container works
// in the sandbox.
TEST_F(RootlessPodman, ANamespaceMadeBeforeTheMountIsRefusedUnlessItGetsIt) {
  // Both places exist before podman's namespace copies the mount table.
  TestTmpfs priv(tmp_.MakeDir("private"), MS_PRIVATE, uid_, gid_);
  TestTmpfs shared(tmp_.MakeDir("shared"), MS_SHARED, uid_, gid_);
  ASSERT_TRUE(priv.ok());
  ASSERT_TRUE(shared.ok());
  const std::string priv_mnt = tmp_.MakeDir("private/mnt", 0755, uid_, gid_);
  const std::string shared_mnt = tmp_.MakeDir("shared/mnt", 0755, uid_, gid_);
  const std::string state = tmp_.MakeDir("state", 0755, uid_, gid_);
  Podman podman(User());
  CommandResult image = podman.MakeImage();  // starts the pause process
  ASSERT_TRUE(image.ok()) << image.Describe();
  std::ifstream pid_file(xdg_ + "/libpod/tmp/pause.pid");
  pid_t pause = 0;
  ASSERT_TRUE(pid_file >> pause) << "podman started no pause process";

  std::vector<std::string> mount = AsUser();
  mount.insert(mount.end(), {AcqfsBinary(), "mount", lower_, priv_mnt, "--name",
                             "early", "--state-dir", state});
  CommandResult refused = RunCommand(mount, 60);
  EXPECT_EQ(refused.exit_code, 1) << refused.Describe();
  // Podman 4.3 keeps its namespace with catatonit when that is installed,
  // else with a process of its own named "podman pause".
  const std::string named =
      "rootless Podman's namespace, kept by your process " +
      std::to_string(pause) + " (";
  EXPECT_TRUE(refused.err.find(named + "catatonit -P)") != std::string::npos ||
              refused.err.find(named + "podman pause)") != std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("podman system migrate"), std::string::npos);
  EXPECT_NE(refused.err.find("--ignore-podman-namespace"), std::string::npos);
  struct stat st;
  EXPECT_NE(::lstat((state + "/early").c_str(), &st), 0)
      << "the refused mount made its sandbox folder";
  ASSERT_FALSE(FindMount(priv_mnt).has_value());

  {
    SandboxOptions options = UserSandbox("ignored");
    options.mountpoint = priv_mnt;
    options.extra_mount_args = {"--ignore-podman-namespace"};
    options.extra_umount_args = {"--no-export"};
    Sandbox s(lower_, options);
    ASSERT_TRUE(s.mounted()) << s.mount_failure();
    ContainerRun spec;
    spec.name = "acqfs-test-ignored";
    spec.workspace = priv_mnt;
    spec.script = kListWorkspace;
    CommandResult run = podman.Run(spec);
    ASSERT_TRUE(run.ok()) << run.Describe();
    EXPECT_EQ(run.out, "") << "the container saw the sandbox after all: the "
                              "refusal above was wrong";
    EXPECT_TRUE(s.Unmount());
  }

  SandboxOptions options = UserSandbox("propagated");
  options.mountpoint = shared_mnt;
  Sandbox s(lower_, options);
  ASSERT_TRUE(s.mounted()) << s.mount_failure();
  ContainerRun spec;
  spec.name = "acqfs-test-propagated";
  spec.workspace = shared_mnt;
  spec.script = "cat /workspace/src/a.txt; echo from-podman > /workspace/p.txt";
  CommandResult run = podman.Run(spec);
  ASSERT_TRUE(run.ok()) << run.Describe() << "\n--- daemon.log ---\n"
                        << s.DaemonLog();
  EXPECT_EQ(run.out, "alpha\n");
  EXPECT_EQ(ReadFile(s.U("p.txt")), "from-podman\n");
  EXPECT_TRUE(s.Unmount());
}

// --userns=keep-id: the container runs as the user's own uid, and the
// runtime works as a subordinate uid of the user's, which FUSE lets in only
// when the mount has allow_other. So keep-id on a mount without
// --allow-other fails at the start, loudly (never a container that runs on
// an empty or unreadable directory), and on one with it the container works
// as the user: what it makes is the user's in the upper layer and comes back
// through export. --allow-other needs user_allow_other in /etc/fuse.conf, so
// this runs as root in a private mount namespace whose /etc/fuse.conf is a
// file of the test's (bind-mounted; the host's is never changed), where the
// user mounts both sandboxes and then runs podman (whose namespace, made
// there after the mounts, holds them).
TEST_F(RootlessPodman, KeepIdNeedsAllowOtherAndThenWorksAsTheUser) {
  Podman podman(User());
  CommandResult image = podman.MakeImage();
  ASSERT_TRUE(image.ok()) << image.Describe();
  {  // MakeImage's pause process copied the machine's mount table: end it,
     // so that podman in the namespace below makes one there.
    std::ifstream in(xdg_ + "/libpod/tmp/pause.pid");
    pid_t pause = 0;
    ASSERT_TRUE(in >> pause);
    ASSERT_EQ(::kill(pause, SIGKILL), 0);
    for (int i = 0; i < 500 && ::kill(pause, 0) == 0; i++) {
      std::ifstream stat("/proc/" + std::to_string(pause) + "/stat");
      std::string pid, comm, state;
      if (stat >> pid >> comm >> state && state == "Z") break;  // unreaped
      ::usleep(10000);
    }
  }
  const std::string conf = tmp_.Sub("fuse.conf");
  ASSERT_TRUE(WriteFile(conf, "user_allow_other\n"));
  ASSERT_EQ(::chmod(conf.c_str(), 0644), 0);
  const std::string closed = tmp_.MakeDir("closed", 0755, uid_, gid_);
  const std::string open = tmp_.MakeDir("open", 0755, uid_, gid_);
  const std::string state = tmp_.MakeDir("state", 0755, uid_, gid_);
  ContainerRun on_closed;
  on_closed.name = "acqfs-test-keepid-closed";
  on_closed.workspace = closed;
  on_closed.userns = "keep-id";
  on_closed.script = "ls /workspace";
  ContainerRun on_open;
  on_open.name = "acqfs-test-keepid-open";
  on_open.workspace = open;
  on_open.userns = "keep-id";
  on_open.script = std::string("id -u > /workspace/uid.txt\n") + kContainerWork;
  const std::string as_user = ShellJoin(AsUser());
  const std::string acqfs = as_user + " " + ShellQuote(AcqfsBinary());
  const std::string st = " --state-dir " + ShellQuote(state);
  std::string script = "set -u\n";
  script += "mount --bind " + ShellQuote(conf) + " /etc/fuse.conf || exit 99\n";
  script += acqfs + " mount " + ShellQuote(lower_) + " " + ShellQuote(closed) +
            " --name closed" + st + " || exit 98\n";
  script += acqfs + " mount " + ShellQuote(lower_) + " " + ShellQuote(open) +
            " --name keepid --allow-other" + st + " || exit 97\n";
  script += ShellJoin(podman.RunLine(on_closed)) + " >&2; echo closed=$?\n";
  script += ShellJoin(podman.RunLine(on_open)) + " >&2; echo open=$?\n";
  script += acqfs + " umount closed --no-export" + st + " || exit 96\n";
  script += acqfs + " umount keepid" + st + " || exit 95\n";
  CommandResult r = RunCommand(
      {"unshare", "--mount", "--propagation", "private", "sh", "-c", script},
      400);
  for (const char* name : {"closed", "keepid"}) {
    const pid_t pid = ReadPidFile(state + "/" + name + "/daemon.pid");
    if (pid > 0 && IsProcessAlive(pid)) {
      ADD_FAILURE() << "the script left daemon " << pid << " running";
      ::kill(pid, SIGKILL);
    }
  }
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_NE(r.out.find("closed=1"), std::string::npos)
      << "keep-id on a mount without --allow-other did not fail\n"
      << r.Describe();
  EXPECT_NE(r.err.find("/workspace"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ermission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("open=0"), std::string::npos) << r.Describe();
  const std::string upper = SandboxUpper(state, "keepid");
  EXPECT_EQ(ReadFile(upper + "/uid.txt"), std::to_string(uid_) + "\n");
  for (const char* rel : {"uid.txt", "made.txt", "wip.txt", "out/all.txt"}) {
    struct stat sb;
    ASSERT_EQ(::lstat((upper + "/" + rel).c_str(), &sb), 0) << rel;
    EXPECT_EQ(sb.st_uid, uid_) << rel;
    EXPECT_EQ(sb.st_gid, gid_) << rel;
  }
  ASSERT_NO_FATAL_FAILURE(FetchAsUser("sandbox-keepid"));
  EXPECT_EQ(
      Git(lower_, {"show", "sandbox-keepid/acqfs-worktree:wip.txt"}, home_),
      "left uncommitted\n");
}

INSTANTIATE_TEST_SUITE_P(
    Users, Rootful,
    ::testing::Values(Who{"podman", "root", 0, 0, ""},
                      Who{"podman", "user1000", 1000, 1000, "1000:1000"},
                      Who{"docker", "root", 0, 0, ""},
                      Who{"docker", "user1000", 1000, 1000, "1000:1000"}),
    [](const auto& info) {
      return std::string(info.param.engine) + "_" + info.param.label;
    });
INSTANTIATE_TEST_SUITE_P(Engines, RootfulMany,
                         ::testing::Values("podman", "docker"),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace acqfs::test
