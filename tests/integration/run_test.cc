// `acqfs run` end to end: a command runs inside bubblewrap with the sandbox's
// mount as /workspace; a C project builds and passes its tests there while
// the host checkout stays byte for byte as it was, and the work arrives on
// the host with `git fetch sandbox-<name>`; the command's exit status comes
// back; --no-export exports nothing; the box has no network (unless
// --network=host), no host checkout, no state directory and a read-only /usr;
// a running mount is reused and left mounted, a mount run made is removed;
// refusals happen before anything is mounted or created; SIGTERM reaches the
// command, and run unmounts and exits 128+15.
// Each test has a private state directory and $XDG_RUNTIME_DIR (where run
// puts its default mountpoints) and removes its sandboxes with `acqfs rm
// --force`, so that no mount and no sandbox-* remote is left behind.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "integration/mount_fixture.h"

extern char** environ;

namespace acqfs::test {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

class RunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    CommandResult bwrap = RunShell("command -v bwrap", 30);
    ASSERT_TRUE(bwrap.ok()) << "bwrap is missing: bash scripts/install-deps.sh "
                               "installs it (package bubblewrap)\n"
                            << bwrap.Describe();
    tmp_.MakeDir("home", 0755);
    runtime_ = tmp_.MakeDir("runtime", 0700);
    state_ = tmp_.Sub("state");
    lower_ = tmp_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(lower_));
  }

  void TearDown() override {
    for (const std::string& name : names_) {
      CommandResult rm = RunCommand(
          {AcqfsBinary(), "rm", "--force", name, "--state-dir", state_}, 120);
      // A name a test expected to be refused was never created.
      if (!rm.ok() && rm.err.find("no such sandbox") == std::string::npos)
        ADD_FAILURE() << rm.Describe();
    }
    for (const MountEntry& m : MountsBelow(tmp_.path()))
      ADD_FAILURE() << "left mounted: " << m.mount_point;
    CommandResult remotes = RunGit(lower_, {"remote"}, home());
    EXPECT_EQ(remotes.out.find("sandbox-"), std::string::npos)
        << remotes.Describe();
  }

  std::string home() const { return tmp_.Sub("home"); }
  // Where run mounts NAME by default.
  std::string DefaultMountpoint(const std::string& name) const {
    return runtime_ + "/acqfs-0/" + name;
  }
  std::string Remote(const std::string& name) const {
    return "sandbox-" + name;
  }

  EnvAdditions Env(EnvAdditions extra = {}) const {
    EnvAdditions env = GitEnv(home());
    env.push_back({"XDG_RUNTIME_DIR", runtime_});
    env.push_back({"ACQFS_PROGRESS", "never"});
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  }

  // `acqfs run NAME --state-dir STATE ARGS...`, run from `cwd`.
  CommandResult Run(const std::string& name,
                    const std::vector<std::string>& args,
                    const std::string& cwd = "", EnvAdditions extra = {}) {
    names_.insert(name);
    std::vector<std::string> argv = {AcqfsBinary(), "run", name, "--state-dir",
                                     state_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, 300, cwd, Env(std::move(extra)));
  }

  CommandResult Acqfs(std::vector<std::string> args) {
    std::vector<std::string> argv = {AcqfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(state_);
    return RunCommand(argv, 120, "", Env());
  }

  // git in the host checkout; the trimmed stdout, a failure if git fails.
  std::string Git(const std::vector<std::string>& args) {
    CommandResult r = RunGit(lower_, args, home());
    EXPECT_TRUE(r.ok()) << r.Describe();
    std::string out = r.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }
  // `git fetch sandbox-NAME` on the host, then a file of the fetched
  // working-tree commit.
  std::string FetchedFile(const std::string& name, const std::string& path) {
    Git({"fetch", "-q", Remote(name)});
    return Git({"show", Remote(name) + "/acqfs-worktree:" + path});
  }

  // The sandbox's state as `acqfs ls --json` reports it ("" when absent).
  std::string StateOf(const std::string& name) {
    CommandResult r = Acqfs({"ls", "--json"});
    EXPECT_TRUE(r.ok()) << r.Describe();
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (!j.is_array()) return "";
    for (const auto& s : j)
      if (s["name"] == name) return s["state"].get<std::string>();
    return "";
  }

  // Nothing of a refused run: no state directory, no mount, no remote, no
  // mountpoint.
  AssertionResult NothingCreated() {
    if (Exists(state_))
      return AssertionFailure() << "state directory created: " << state_;
    for (const MountEntry& m : MountsBelow(tmp_.path()))
      return AssertionFailure() << "mounted: " << m.mount_point;
    CommandResult remotes = RunGit(lower_, {"remote"}, home());
    if (remotes.out.find("sandbox-") != std::string::npos)
      return AssertionFailure() << "remote added: " << remotes.out;
    std::vector<std::string> names;
    if (auto r = ListDir(runtime_, &names); !r) return r;
    if (!names.empty() && names != std::vector<std::string>{"acqfs-0"})
      return AssertionFailure() << "left in $XDG_RUNTIME_DIR: " << names[0];
    if (!names.empty()) {
      if (auto r = ListDir(runtime_ + "/acqfs-0", &names); !r) return r;
      if (!names.empty())
        return AssertionFailure() << "mountpoint left: " << names[0];
    }
    return AssertionSuccess();
  }

  TempDir tmp_;
  std::string runtime_, state_, lower_;
  std::set<std::string> names_;
};

SnapshotOptions OutsideGit() { return SnapshotOptions::CheckoutOutsideGit(); }

// In .git: content, modes and owners, but not .git/config, which the
// sandbox's remote is added to.
// The writes a mount makes to the host's .git: the remote in its config,
// and the refs that keep the sandbox's base (git-bridge.md, "The base is
// kept on the host"; `acqfs rm` removes them).
SnapshotOptions InsideGitButConfig() {
  SnapshotOptions o = SnapshotOptions::GitDirContent();
  o.skip = {"config", "refs/acqfs-base", "refs/acqfs-keep"};
  return o;
}

// A small C project: `make test` builds a program, runs it, checks its
// output and writes a report.
void WriteCProject(const std::string& dir) {
  ASSERT_SYS_OK(::mkdir(dir.c_str(), 0755));
  ASSERT_TRUE(WriteFile(dir + "/sum.c", R"(#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  long total = 0;
  for (int i = 1; i < argc; i++) total += strtol(argv[i], NULL, 10);
  printf("%ld\n", total);
  return 0;
}
)"));
  ASSERT_TRUE(WriteFile(dir + "/Makefile",
                        "CC ?= cc\n"
                        "sum: sum.c\n"
                        "\t$(CC) -O2 -Wall -o sum sum.c\n"
                        "test: sum\n"
                        "\t./sum 2 3 37 > result.txt\n"
                        "\tgrep -qx 42 result.txt\n"
                        "\techo PASS > test-report.txt\n"
                        ".PHONY: test\n"));
}

TEST_F(RunTest, BuildsAndTestsACProjectAndTheWorkArrivesWithFetch) {
  WriteCProject(lower_ + "/sum");
  const TreeSnapshot before = Snapshot(lower_, OutsideGit());
  const TreeSnapshot git_before =
      Snapshot(lower_ + "/.git", InsideGitButConfig());
  CommandResult r = Run("calc", {"--repo", lower_, "--", "sh", "-c",
                                 "pwd > sum/where.txt && make -C sum test && "
                                 "cat sum/test-report.txt"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  // stdout is the command's alone; the export reports on stderr.
  EXPECT_EQ(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1), "PASS\n")
      << r.Describe();
  EXPECT_EQ(r.out.find("fetch with"), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("fetch with: git -C " + RealPath(lower_) +
                       " fetch sandbox-calc"),
            std::string::npos)
      << r.Describe();
  // The host checkout did not change, and run unmounted what it mounted.
  EXPECT_TRUE(SnapshotsEqual(before, Snapshot(lower_, OutsideGit())));
  EXPECT_TRUE(SnapshotsEqual(git_before,
                             Snapshot(lower_ + "/.git", InsideGitButConfig())));
  EXPECT_FALSE(FindMount(DefaultMountpoint("calc")).has_value());
  EXPECT_FALSE(Exists(DefaultMountpoint("calc")));
  EXPECT_EQ(StateOf("calc"), "not-mounted");
  // The work arrives with a fetch.
  EXPECT_EQ(FetchedFile("calc", "sum/test-report.txt"), "PASS");
  EXPECT_EQ(FetchedFile("calc", "sum/result.txt"), "42");
  EXPECT_EQ(FetchedFile("calc", "sum/where.txt"), "/workspace");
  EXPECT_EQ(Git({"cat-file", "-t", Remote("calc") + "/acqfs-worktree:sum/sum"}),
            "blob");
}

TEST_F(RunTest, ExitCodeComesBackAndNoExportExportsNothing) {
  CommandResult r = Run("seven", {"--repo", lower_, "--", "sh", "-c",
                                  "echo seven > seven.txt; exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.Describe();
  // A failing command is exported too.
  EXPECT_EQ(FetchedFile("seven", "seven.txt"), "seven");

  r = Run("seven", {"--no-export", "--", "sh", "-c", "kill -KILL $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.Describe();

  r = Run("quiet", {"--repo", lower_, "--no-export", "--", "sh", "-c",
                    "echo quiet > quiet.txt"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.err, "") << r.Describe();
  EXPECT_EQ(ContentOf(SandboxUpper(state_, "quiet") + "/quiet.txt"), "quiet\n");
  Git({"fetch", "-q", Remote("quiet")});
  EXPECT_NE(RunGit(lower_,
                   {"rev-parse", "--verify", "-q",
                    Remote("quiet") + "/acqfs-worktree"},
                   home())
                .exit_code,
            0);
  EXPECT_EQ(Git({"for-each-ref", "refs/remotes/" + Remote("quiet") + "/"}), "");
}

// What the command sees: facts printed one per line.
constexpr char kProbe[] = R"sh(
echo "net=$(readlink /proc/self/ns/net)"
for i in $(tail -n +3 /proc/net/dev | cut -d: -f1); do echo "if=$i"; done
test -e "$1" && echo lower=visible || echo lower=absent
test -e "$2" && echo state=visible || echo state=absent
touch /usr/acqfs-run-probe 2>/dev/null && echo usr=writable || echo usr=read-only
mount -o remount,rw,bind /usr 2>/dev/null && echo remount=done || echo remount=refused
test -f docs/a.txt && echo workspace=lower
echo "cwd=$(pwd)"
echo "home=$HOME"
)sh";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  return lines;
}

bool Has(const std::vector<std::string>& lines, const std::string& line) {
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

// The interfaces of this process's network namespace, as "if=NAME" lines.
std::vector<std::string> HostInterfaces() {
  std::ifstream in("/proc/net/dev");
  std::vector<std::string> ifs;
  int n = 0;
  for (std::string l; std::getline(in, l);) {
    if (++n <= 2) continue;
    std::string name = l.substr(0, l.find(':'));
    name.erase(0, name.find_first_not_of(' '));
    ifs.push_back("if=" + name);
  }
  return ifs;
}

TEST_F(RunTest, TheBoxHasNoNetworkByDefaultAndHidesTheHost) {
  const std::string host_net =
      "net=" + std::filesystem::read_symlink("/proc/self/ns/net").string();
  const std::vector<std::string> probe = {
      "--no-export",    "--",  "sh", "-c", kProbe, "probe",
      RealPath(lower_), state_};
  std::vector<std::string> args = {"--repo", lower_};
  args.insert(args.end(), probe.begin(), probe.end());
  CommandResult r = Run("box", args);
  ASSERT_TRUE(r.ok()) << r.Describe();
  std::vector<std::string> lines = Lines(r.out);
  EXPECT_FALSE(Has(lines, host_net)) << r.out;
  std::vector<std::string> ifs;
  for (const auto& l : lines)
    if (l.rfind("if=", 0) == 0) ifs.push_back(l);
  EXPECT_EQ(ifs, std::vector<std::string>{"if=lo"}) << r.out;
  for (const char* want :
       {"lower=absent", "state=absent", "usr=read-only", "remount=refused",
        "workspace=lower", "cwd=/workspace", "home=/tmp"})
    EXPECT_TRUE(Has(lines, want)) << want << "\n" << r.Describe();
  EXPECT_FALSE(Exists("/usr/acqfs-run-probe"));

  args = {"--network=host"};
  args.insert(args.end(), probe.begin(), probe.end());
  r = Run("box", args);
  ASSERT_TRUE(r.ok()) << r.Describe();
  lines = Lines(r.out);
  EXPECT_TRUE(Has(lines, host_net)) << host_net << "\n" << r.out;
  ifs.clear();
  for (const auto& l : lines)
    if (l.rfind("if=", 0) == 0) ifs.push_back(l);
  EXPECT_EQ(ifs, HostInterfaces()) << r.out;
  for (const char* want :
       {"lower=absent", "state=absent", "usr=read-only", "remount=refused"})
    EXPECT_TRUE(Has(lines, want)) << want << "\n" << r.Describe();
  EXPECT_FALSE(Exists("/usr/acqfs-run-probe"));
}

TEST_F(RunTest, ReusesARunningMountAndUnmountsOnlyWhatItMounted) {
  // Mounted by hand: run uses it and leaves it mounted.
  const std::string mnt = tmp_.MakeDir("mnt");
  names_.insert("shared");
  CommandResult m = Acqfs({"mount", lower_, mnt, "--name", "shared"});
  ASSERT_TRUE(m.ok()) << m.Describe();
  CommandResult r = Run("shared", {"--", "sh", "-c", "echo reused > r.txt"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_TRUE(FindMount(mnt).has_value());
  EXPECT_EQ(ContentOf(mnt + "/r.txt"), "reused\n");
  EXPECT_EQ(FetchedFile("shared", "r.txt"), "reused");
  EXPECT_EQ(StateOf("shared"), "mounted");
  // A running sandbox's policy cannot change; it stays mounted.
  r = Run("shared", {"--hide", "*.txt", "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("acqfs: run: sandbox: shared: was created with the "
                       "policy"),
            std::string::npos)
      << r.Describe();
  EXPECT_TRUE(FindMount(mnt).has_value());
  CommandResult u = Acqfs({"umount", "shared", "--no-export"});
  EXPECT_TRUE(u.ok()) << u.Describe();

  // Unknown: run creates it at the default mountpoint and unmounts it.
  r = Run("fresh", {"--repo", lower_, "--no-export", "--", "sh", "-c",
                    "echo first > earlier.txt; cat /proc/self/mountinfo"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_NE(r.out.find(" /workspace "), std::string::npos) << r.out;
  std::ifstream meta(state_ + "/fresh/meta.json");
  auto j = nlohmann::json::parse(meta, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["mountpoint"], RealPath(runtime_) + "/acqfs-0/fresh") << j.dump();
  EXPECT_FALSE(FindMount(DefaultMountpoint("fresh")).has_value());
  EXPECT_FALSE(Exists(DefaultMountpoint("fresh")));
  EXPECT_EQ(StateOf("fresh"), "not-mounted");
  // Known but not mounted: run mounts it again, with its upper layer.
  r = Run("fresh", {"--no-export", "--", "cat", "earlier.txt"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, "first\n");
  EXPECT_FALSE(FindMount(DefaultMountpoint("fresh")).has_value());
  EXPECT_EQ(StateOf("fresh"), "not-mounted");
}

// When run mounts, who may use the mount follows its flags, and the default
// follows who mounts (root: every user, with permission checks); a mount run
// reuses is never changed.
TEST_F(RunTest, WhoMayUseTheMountFollowsTheFlagsWhenRunMounts) {
  const std::vector<std::string> show = {
      "--no-export", "--", "grep", " /workspace ", "/proc/self/mountinfo"};
  auto workspace_options = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--repo", lower_});
    flags.insert(flags.end(), show.begin(), show.end());
    CommandResult r = Run("who", flags);
    EXPECT_TRUE(r.ok()) << r.Describe();
    EXPECT_FALSE(FindMount(DefaultMountpoint("who")).has_value());
    return r.out;
  };
  EXPECT_NE(workspace_options({}).find("allow_other"), std::string::npos);
  const std::string off = workspace_options({"--no-allow-other"});
  EXPECT_NE(off.find("default_permissions"), std::string::npos) << off;
  EXPECT_EQ(off.find("allow_other"), std::string::npos) << off;
  EXPECT_NE(workspace_options({"--allow-other"}).find("allow_other"),
            std::string::npos);
  CommandResult both =
      Run("who", {"--allow-other", "--no-allow-other", "--", "true"});
  EXPECT_EQ(both.exit_code, 1) << both.Describe();
  EXPECT_EQ(both.err,
            "acqfs: run: --no-allow-other: contradicts --allow-other: give "
            "one or the other\n")
      << both.Describe();
  // A running mount is used as it is.
  const std::string mnt = tmp_.MakeDir("mnt");
  CommandResult m = Acqfs({"mount", lower_, mnt, "--name", "who"});
  ASSERT_TRUE(m.ok()) << m.Describe();
  CommandResult reuse = Run("who", {"--no-allow-other", "--", "true"});
  EXPECT_EQ(reuse.exit_code, 1) << reuse.Describe();
  EXPECT_NE(reuse.err.find("--no-allow-other"), std::string::npos)
      << reuse.Describe();
  EXPECT_TRUE(FindMount(mnt).has_value());
  CommandResult u = Acqfs({"umount", "who", "--no-export"});
  EXPECT_TRUE(u.ok()) << u.Describe();
}

TEST_F(RunTest, RefusalsMountNothingAndCreateNothing) {
  const std::string no_bwrap = tmp_.MakeDir("empty-bin");
  CommandResult r = Run("refused", {"--repo", lower_, "--", "true"}, "",
                        {{"PATH", no_bwrap}});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(r.err, "acqfs: run: bwrap: not found in PATH (" + no_bwrap +
                       "); install it with `apt-get install bubblewrap`\n")
      << r.Describe();
  EXPECT_TRUE(NothingCreated());

  r = Run("refused", {"--repo", lower_, "--network=bridge", "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(r.err, "acqfs: run: --network: bridge: must be none or host\n")
      << r.Describe();

  r = Run("refused", {"--repo", lower_});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(r.err, "acqfs: run: COMMAND: missing (give it after --)\n")
      << r.Describe();
  // The name comes before `--`; never the command's first word.
  names_.insert("make");
  CommandResult misplaced =
      RunCommand({AcqfsBinary(), "run", "--state-dir", state_, "--repo", lower_,
                  "--", "make", "test"},
                 120, "", Env());
  EXPECT_EQ(misplaced.exit_code, 1) << misplaced.Describe();
  EXPECT_EQ(misplaced.err.rfind("acqfs: usage: acqfs run: ", 0), 0u)
      << misplaced.Describe();
  EXPECT_TRUE(NothingCreated());

  // An unknown sandbox needs a directory to show.
  r = Run("refused", {"--", "true"}, tmp_.path());
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("acqfs: run: repository: " + tmp_.path() +
                       ": not in a git checkout"),
            std::string::npos)
      << r.Describe();
  r = Run("refused", {"--repo", tmp_.Sub("missing"), "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("not a directory"), std::string::npos) << r.Describe();
  r = Run("bad/name", {"--repo", lower_, "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_TRUE(NothingCreated());

  // A refusal of `acqfs mount` is printed as mount prints it, and the
  // mountpoint run made for it is gone again.
  Git({"remote", "add", "sandbox-taken", "/somewhere/else.git"});
  r = Run("taken", {"--repo", lower_, "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(r.err.rfind("acqfs: mount: ", 0), 0u) << r.Describe();
  EXPECT_NE(r.err.find("sandbox-taken"), std::string::npos) << r.Describe();
  Git({"remote", "remove", "sandbox-taken"});
  EXPECT_TRUE(NothingCreated());
}

TEST_F(RunTest, SigtermReachesTheCommandThenRunUnmountsAndExits) {
  names_.insert("stop");
  const std::string script =
      "trap 'echo got-term > term.txt; exit 3' TERM; "
      "echo started > started.txt; sleep 4712 & wait";
  std::vector<std::string> words = {
      AcqfsBinary(), "run", "stop", "--state-dir", state_, "--repo",
      lower_,        "--",  "sh",   "-c",          script};
  std::vector<std::string> env;
  for (char** e = environ; *e; e++) env.emplace_back(*e);
  for (const auto& [k, v] : Env()) env.push_back(k + "=" + v);  // later wins
  std::vector<char*> argv, envp;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string err = tmp_.Sub("run.err");
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ASSERT_EQ(::posix_spawn_file_actions_init(&actions), 0);
  ASSERT_EQ(::posix_spawnattr_init(&attr), 0);
  ASSERT_EQ(
      ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0),
      0);
  ASSERT_EQ(::posix_spawn_file_actions_addopen(
                &actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644),
            0);
  ASSERT_EQ(::posix_spawnattr_setpgroup(&attr, 0), 0);
  ASSERT_EQ(::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP), 0);
  pid_t pid = 0;
  int rc =
      ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  ASSERT_EQ(rc, 0) << std::strerror(rc);

  // Wait until the command runs in the mounted sandbox.
  const std::vector<std::string> sleeper = {"sleep", "4712"};
  bool running = false;
  for (int i = 0; i < 1200 && !running; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    running = Exists(SandboxUpper(state_, "stop") + "/started.txt") &&
              ProcessRunning(sleeper);
  }
  EXPECT_TRUE(running) << "the command never ran";
  EXPECT_TRUE(FindMount(DefaultMountpoint("stop")).has_value());
  ASSERT_SYS_OK(::kill(pid, SIGTERM));
  int status = 0;
  bool ended = WaitForChild(pid, &status, 60);
  ASSERT_TRUE(ended) << "run did not end within 60 s of SIGTERM";
  std::string text;
  ASSERT_TRUE(ReadFile(err, &text));
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << text;
  EXPECT_NE(text.find("acqfs: run: `sh -c "), std::string::npos) << text;
  EXPECT_NE(text.find("interrupted by SIGTERM; unmounted the sandbox; not "
                      "exported (`acqfs export stop` publishes its work)"),
            std::string::npos)
      << text;
  // The command's own handler ran (the signal was passed on, not a kill),
  // nothing of the sandbox is left running, and the mount is gone.
  EXPECT_EQ(ContentOf(SandboxUpper(state_, "stop") + "/term.txt"),
            "got-term\n");
  EXPECT_FALSE(ProcessRunning(sleeper));
  EXPECT_FALSE(FindMount(DefaultMountpoint("stop")).has_value());
  EXPECT_FALSE(Exists(DefaultMountpoint("stop")));
  EXPECT_EQ(StateOf("stop"), "not-mounted");
}

// The policy options reach the mount run makes (docs/sandboxes.md).
TEST_F(RunTest, PolicyOptionsApplyWhenRunCreatesTheSandbox) {
  ASSERT_TRUE(WriteFile(lower_ + "/deploy.pem", "secret\n"));
  CommandResult r =
      Run("guarded", {"--repo", lower_, "--hide", "*.pem", "--no-export", "--",
                      "sh", "-c", "test ! -e deploy.pem && echo hidden"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.out, "hidden\n");
  // A remount with another policy is refused as `acqfs mount` refuses it.
  r = Run("guarded", {"--hide", "*.key", "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("acqfs: mount: sandbox: guarded: was created with the "
                       "policy"),
            std::string::npos)
      << r.Describe();
  EXPECT_FALSE(Exists(DefaultMountpoint("guarded")));
}

// Empty or malformed policy values are refused by run itself, with the
// option and value named, before it makes a mountpoint, a sandbox or a
// remote, and before the command runs.
TEST_F(RunTest, EmptyOrMalformedPolicyValuesAreRefusedBeforeAnything) {
  const std::string empty = tmp_.Sub("empty.json");
  ASSERT_TRUE(WriteFile(empty, ""));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--quota", ""}, "--quota ''"},
      {{"--quota", "10 M"}, "--quota '10 M'"},
      {{"--hide", ""}, "--hide ''"},
      {{"--read-only", ".env "}, "--read-only '.env '"},
      {{"--policy", ""}, "--policy ''"},
      {{"--policy", empty}, "--policy '" + empty + "'"},
  };
  for (const auto& [args, says] : cases) {
    std::vector<std::string> argv = {"--repo", lower_};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const char* w : {"--", "echo", "the command ran"}) argv.push_back(w);
    CommandResult r = Run("bad-value", argv);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_EQ(r.err.rfind("acqfs: run: " + says + ": ", 0), 0u)
        << "expected " << says << " in: " << r.Describe();
    EXPECT_EQ(r.out, "") << r.Describe();
    EXPECT_TRUE(NothingCreated()) << r.Describe();
  }
}

}  // namespace
}  // namespace acqfs::test
