// `acqfs bench` end to end: it times a command in acqfs sandboxes and in git
// clones of a checkout (text and JSON), runs it at each workspace's root,
// reports a failing command with its exit status and stderr (exit 2), and in
// every outcome (success, failure, SIGINT during the command) leaves nothing
// behind: no mount, no `sandbox-*` remote, no temporary directory or state
// directory, and a host checkout that is exactly as it was.
// Each test points bench's $TMPDIR at a directory of its own, so "nothing
// left" means that directory is empty again.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
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

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    tmp_.MakeDir("home", 0755);
    bench_tmp_ = tmp_.MakeDir("bench-tmp", 0755);
    lower_ = tmp_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(lower_));
    before_ = Snapshot(lower_, OutsideGit());
    git_before_ = Snapshot(lower_ + "/.git", InsideGit());
  }

  static SnapshotOptions OutsideGit() {
    return SnapshotOptions::CheckoutOutsideGit();
  }
  static SnapshotOptions InsideGit() {
    return SnapshotOptions::GitDirContent();
  }

  EnvAdditions Env() const {
    EnvAdditions env = GitEnv(tmp_.Sub("home"));
    env.push_back({"TMPDIR", bench_tmp_});
    return env;
  }

  CommandResult Bench(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {AcqfsBinary(), "bench"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, 300, "", Env());
  }

  // Nothing of bench's is left: no mount, no sandbox remote, an empty
  // $TMPDIR (so no workdir, clone or state directory), and the host
  // checkout as it was.
  AssertionResult NothingLeft() {
    for (const MountEntry& m : MountsBelow(bench_tmp_))
      return AssertionFailure() << "still mounted: " << m.mount_point;
    std::vector<std::string> names;
    if (auto r = ListDir(bench_tmp_, &names); !r) return r;
    if (!names.empty())
      return AssertionFailure() << "left in $TMPDIR: " << names[0];
    CommandResult remotes = RunGit(lower_, {"remote"}, tmp_.Sub("home"));
    if (!remotes.ok()) return AssertionFailure() << remotes.Describe();
    if (remotes.out.find("sandbox-") != std::string::npos)
      return AssertionFailure() << "remote left: " << remotes.out;
    CommandResult config =
        RunGit(lower_, {"config", "--local", "--list"}, tmp_.Sub("home"));
    if (config.out.find("sandbox-") != std::string::npos)
      return AssertionFailure() << "config left: " << config.out;
    if (auto same = SnapshotsEqual(before_, Snapshot(lower_, OutsideGit()));
        !same)
      return same << " (the checkout changed)";
    if (auto same = SnapshotsEqual(git_before_,
                                   Snapshot(lower_ + "/.git", InsideGit()));
        !same)
      return same << " (the checkout's .git changed)";
    return AssertionSuccess();
  }

  TempDir tmp_;
  std::string bench_tmp_;
  std::string lower_;
  TreeSnapshot before_, git_before_;
};

nlohmann::json ParseJson(const CommandResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.Describe();
  return j;
}

TEST_F(BenchCli, HelpNamesTheOptionsAndTheSeparator) {
  CommandResult r = Bench({"--help"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  for (const char* word : {"Usage:", "bench", "--repo", "--runs", "--state-dir",
                           "--json", "sh -c"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << r.Describe();
  CommandResult top = RunCommand({AcqfsBinary(), "--help"}, 60);
  EXPECT_NE(top.out.find("bench"), std::string::npos) << top.Describe();
}

TEST_F(BenchCli, JsonHasEveryRunAndPositiveMedians) {
  CommandResult r = Bench({"--repo", lower_, "--runs", "2", "--json", "--",
                           "sh", "-c", "ls >/dev/null"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  nlohmann::json j = ParseJson(r);
  EXPECT_EQ(j["repo"], RealPath(lower_)) << j.dump();
  EXPECT_EQ(j["runs"], 2) << j.dump();
  EXPECT_EQ(j["command"], nlohmann::json({"sh", "-c", "ls >/dev/null"}))
      << j.dump();
  for (const char* kind : {"acqfs", "clone"}) {
    const nlohmann::json& k = j[kind];
    ASSERT_EQ(k["seconds"].size(), 2u) << kind << j.dump();
    ASSERT_EQ(k["setup_seconds"].size(), 2u) << kind << j.dump();
    for (const auto& s : k["seconds"]) EXPECT_GT(s.get<double>(), 0) << kind;
    for (const auto& s : k["setup_seconds"])
      EXPECT_GT(s.get<double>(), 0) << kind;
    EXPECT_GT(k["median_seconds"].get<double>(), 0) << kind << j.dump();
    EXPECT_GT(k["setup_median_seconds"].get<double>(), 0) << kind;
  }
  EXPECT_NEAR(j["ratio"].get<double>(),
              j["acqfs"]["median_seconds"].get<double>() /
                  j["clone"]["median_seconds"].get<double>(),
              1e-9)
      << j.dump();
  // The standard lower repo has local edits, untracked and ignored files.
  EXPECT_EQ(j["checkout_clean"], false) << j.dump();
  EXPECT_NE(r.err.find("note: the checkout has uncommitted"), std::string::npos)
      << r.Describe();
  EXPECT_TRUE(NothingLeft());
}

TEST_F(BenchCli, TextReportHasRunsMediansRatioAndSetup) {
  CommandResult r = Bench({"--repo", lower_, "--runs", "1", "--", "true"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  for (const char* word :
       {"`true`", "median", "acqfs/clone",
        "workspace setup (median): acqfs mount", "git clone"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << r.Describe();
  EXPECT_TRUE(NothingLeft());
}

// The command runs at the root of a sandbox, then of a clone (never in the
// checkout), and what it writes there stays there.
TEST_F(BenchCli, CommandRunsAtEachWorkspaceRootAndItsWritesStayThere) {
  const std::string record = tmp_.Sub("cwds");
  const std::string script =
      "test -f docs/a.txt && test -d .git && pwd -P >> " + record +
      " && echo made > made-by-bench.txt && git status --porcelain >/dev/null";
  CommandResult r =
      Bench({"--repo", lower_, "--runs", "2", "--", "sh", "-c", script});
  ASSERT_TRUE(r.ok()) << r.Describe();
  std::string cwds;
  ASSERT_TRUE(ReadFile(record, &cwds));
  std::stringstream ss(cwds);
  std::vector<std::string> lines;
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u) << cwds;
  const std::string base = RealPath(bench_tmp_) + "/acqfs-bench-";
  for (size_t i = 0; i < lines.size(); i++) {
    EXPECT_EQ(lines[i].rfind(base, 0), 0u) << cwds;
    const char* kind = i % 2 == 0 ? "/mnt-" : "/clone-";
    EXPECT_NE(lines[i].find(kind + std::to_string(i / 2)), std::string::npos)
        << cwds;
  }
  EXPECT_TRUE(NothingLeft());
}

TEST_F(BenchCli, AFailingCommandExitsTwoNamingItsStatusAndStderr) {
  CommandResult r =
      Bench({"--repo", lower_, "--runs", "2", "--json", "--", "sh", "-c",
             "echo first-line >&2; echo boom-from-command >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_EQ(r.err.rfind("acqfs: bench: run 1 in the acqfs sandbox: ", 0), 0u)
      << r.Describe();
  EXPECT_NE(r.err.find("exited with status 3"), std::string::npos)
      << r.Describe();
  EXPECT_NE(r.err.find("boom-from-command"), std::string::npos) << r.Describe();
  EXPECT_EQ(r.out, "") << r.Describe();
  EXPECT_TRUE(NothingLeft());
}

// scratch.txt is untracked: the sandbox shows it, a clone does not.
TEST_F(BenchCli, ACommandFailingOnlyInTheCloneIsReportedThere) {
  CommandResult r = Bench(
      {"--repo", lower_, "--runs", "1", "--", "test", "-f", lower::kUntracked});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(
      r.err.find("acqfs: bench: run 1 in the clone: `test -f " +
                 std::string(lower::kUntracked) + "`: exited with status 1"),
      std::string::npos)
      << r.Describe();
  EXPECT_TRUE(NothingLeft());
}

TEST_F(BenchCli, ACommandThatCannotStartExitsTwo) {
  CommandResult r =
      Bench({"--repo", lower_, "--runs", "1", "--", "no-such-program-xyz"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("could not be started: No such file or directory"),
            std::string::npos)
      << r.Describe();
  EXPECT_TRUE(NothingLeft());
}

// A state directory that contains $TMPDIR makes `acqfs mount` refuse (the
// mountpoint would be inside it): bench reports the mount's own message,
// exits 2, and leaves the state directory as it found it.
TEST_F(BenchCli, AFailedMountIsReportedWithTheMountsReason) {
  std::vector<std::string> before;
  ASSERT_TRUE(ListDir(tmp_.path(), &before));
  CommandResult r = Bench({"--repo", lower_, "--runs", "1", "--state-dir",
                           tmp_.path(), "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_EQ(r.err.rfind("acqfs: bench: acqfs mount: ", 0), 0u) << r.Describe();
  EXPECT_NE(r.err.find("exited with status 1"), std::string::npos)
      << r.Describe();
  EXPECT_NE(r.err.find("acqfs: mount: mountpoint: "), std::string::npos)
      << r.Describe();
  EXPECT_NE(r.err.find("is inside the state directory"), std::string::npos)
      << r.Describe();
  std::vector<std::string> after;
  ASSERT_TRUE(ListDir(tmp_.path(), &after));
  EXPECT_EQ(after, before);
  EXPECT_TRUE(NothingLeft());
}

TEST_F(BenchCli, BadInputExitsOne) {
  TempDir plain;
  CommandResult r = Bench({"--repo", plain.path(), "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(r.err.rfind("acqfs: bench: repository: " + plain.path() +
                            ": not in a git checkout",
                        0),
            0u)
      << r.Describe();
  r = Bench({"--repo", lower_, "--runs", "0", "--", "true"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_EQ(r.err.rfind("acqfs: usage: acqfs bench: ", 0), 0u) << r.Describe();
  r = Bench({"--repo", lower_});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_TRUE(NothingLeft());
}

// The repository defaults to the current directory's top level.
TEST_F(BenchCli, RepoDefaultsToTheCurrentCheckout) {
  std::vector<std::string> argv = {AcqfsBinary(), "bench", "--runs", "1",
                                   "--json",      "--",    "true"};
  CommandResult r = RunCommand(argv, 300, lower_ + "/src/lib", Env());
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(ParseJson(r)["repo"], RealPath(lower_)) << r.out;
  EXPECT_TRUE(NothingLeft());
}

// A --state-dir that exists is left as it was found (empty); one that did
// not exist is removed with the parents bench made for it.
TEST_F(BenchCli, StateDirIsLeftAsFound) {
  const std::string existing = tmp_.MakeDir("state", 0700);
  CommandResult r = Bench(
      {"--repo", lower_, "--runs", "1", "--state-dir", existing, "--", "true"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  std::vector<std::string> names;
  ASSERT_TRUE(ListDir(existing, &names));
  EXPECT_TRUE(names.empty()) << names[0];
  const std::string fresh = tmp_.Sub("new-parent/state");
  r = Bench(
      {"--repo", lower_, "--runs", "1", "--state-dir", fresh, "--", "true"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_FALSE(Exists(tmp_.Sub("new-parent")));
  EXPECT_TRUE(NothingLeft());
}

// Ctrl-C (SIGINT to bench's process group, as a terminal sends it) while the
// command runs in the sandbox: the command ends, the sandbox is unmounted
// and removed, and bench exits 2 saying so.
TEST_F(BenchCli, SigintDuringTheCommandUnmountsAndRemovesEverything) {
  const std::vector<std::string> sleeper = {"sleep", "4711"};
  std::vector<std::string> words = {AcqfsBinary(), "bench", "--repo", lower_,
                                    "--runs",      "2",     "--"};
  words.insert(words.end(), sleeper.begin(), sleeper.end());
  std::vector<std::string> env;
  for (char** e = environ; *e; e++) env.emplace_back(*e);
  for (const auto& [k, v] : Env()) env.push_back(k + "=" + v);  // later wins
  std::vector<char*> argv, envp;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string err = tmp_.Sub("bench.err");
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ASSERT_EQ(::posix_spawn_file_actions_init(&actions), 0);
  ASSERT_EQ(::posix_spawnattr_init(&attr), 0);
  ::posix_spawn_file_actions_addopen(&actions, 2, err.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  pid_t pid = 0;
  int rc =
      ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  ASSERT_EQ(rc, 0) << std::strerror(rc);

  // Wait until the command runs in the mounted sandbox.
  bool running = false;
  for (int i = 0; i < 600 && !running; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    running = !MountsBelow(bench_tmp_).empty() && ProcessRunning(sleeper);
  }
  EXPECT_TRUE(running) << "the command never ran in a mounted sandbox";
  ASSERT_SYS_OK(::kill(-pid, SIGINT));
  int status = 0;
  bool ended = WaitForChild(pid, &status, 60);
  ASSERT_TRUE(ended) << "bench did not end within 60 s of SIGINT";
  std::string text;
  ASSERT_TRUE(ReadFile(err, &text));
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 2) << text;
  EXPECT_NE(text.find("acqfs: bench: `sleep 4711`: interrupted by SIGINT; "
                      "removed everything it made"),
            std::string::npos)
      << text;
  EXPECT_FALSE(ProcessRunning(sleeper));
  EXPECT_TRUE(NothingLeft());
}

}  // namespace
}  // namespace acqfs::test
