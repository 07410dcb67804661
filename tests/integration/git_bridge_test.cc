// The git bridge end to end, with the real git on the host side: a sandbox
// over a dirty host checkout, agent work inside it, `acqfs export`, `git
// fetch sandbox-<name>` on the host, and what arrives; the crossing's safety
// (no hook, config or unsafe tree reaches the host); and `acqfs rm`.
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

class GitBridge : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    tmp_.MakeDir("home", 0755);
    lower_ = tmp_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(lower_));
    ASSERT_TRUE(RunGit(lower_, {"rev-parse", "HEAD"}, home()).ok());
    host_head_ = Git(lower_, {"rev-parse", "HEAD"});
  }
  void Mount(SandboxOptions options = {}) {
    sandbox_ = std::make_unique<Sandbox>(lower_, options);
    ASSERT_TRUE(sandbox_->mounted()) << sandbox_->mount_failure();
  }
  void TearDown() override {
    if (HasFailure() && sandbox_)
      std::cerr << "--- daemon.log ---\n" << sandbox_->DaemonLog() << "\n";
    sandbox_.reset();
  }

  std::string home() const { return tmp_.Sub("home"); }
  std::string remote() const { return "sandbox-" + sandbox_->name(); }
  std::string M(const std::string& rel) const { return sandbox_->M(rel); }

  // git in `repo`; the trimmed stdout, a test failure if git fails.
  std::string Git(const std::string& repo,
                  const std::vector<std::string>& args) {
    CommandResult r = RunGit(repo, args, home());
    EXPECT_TRUE(r.ok()) << r.Describe();
    std::string out = r.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }
  // A shell script in the mount with the test's git environment.
  void InMount(const std::string& script) {
    CommandResult r = RunShell("set -e\n" + script, 120, sandbox_->mountpoint(),
                               GitEnv(home()));
    ASSERT_TRUE(r.ok()) << r.Describe();
  }
  CommandResult Acqfs(std::vector<std::string> args) {
    std::vector<std::string> argv = {AcqfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(sandbox_->state_dir());
    return RunCommand(argv, 120);
  }
  nlohmann::json ExportJson() {
    CommandResult r = Acqfs({"export", sandbox_->name(), "--json"});
    EXPECT_TRUE(r.ok()) << r.Describe();
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  }
  void Fetch() { Git(lower_, {"fetch", "-q", remote()}); }

  TempDir tmp_;
  std::string lower_;
  std::string host_head_;
  std::unique_ptr<Sandbox> sandbox_;
};

TEST_F(GitBridge, MountRegistersTheRemoteOnTheHost) {
  Mount();
  EXPECT_EQ(Git(lower_, {"remote", "get-url", remote()}),
            sandbox_->layer_dir() + "/bridge.git");
  std::string specs =
      Git(lower_, {"config", "--get-all", "remote." + remote() + ".fetch"});
  EXPECT_NE(specs.find("refs/sandboxes/" + sandbox_->name() + "/"),
            std::string::npos)
      << specs;
  // Fetching before anything was exported works (and brings nothing).
  Fetch();
  EXPECT_EQ(Git(lower_, {"for-each-ref", "refs/remotes/" + remote() + "/"}),
            "");
}

TEST_F(GitBridge, AgentBranchAndWorkingTreeArriveWithFetch) {
  Mount();
  InMount(R"(
    echo "changed by agent" >> docs/a.txt
    echo new > added.txt
    rm docs/b.txt
    mv src/top.txt src/moved.txt
    chmod +x docs/private.txt
    ln -s docs/a.txt link-to-a
    git checkout -q -b agent
    git add -A
    git commit -q -m "agent work"
    echo "after commit" >> README.md
    echo untracked > later.txt
    echo ignored > noise.log
    rm src/lib/core.txt
  )");
  std::string agent_tip = Git(M(""), {"rev-parse", "agent"});
  nlohmann::json j = ExportJson();
  EXPECT_TRUE(j["refused"].empty()) << j.dump();
  Fetch();
  EXPECT_EQ(Git(lower_, {"rev-parse", remote() + "/agent"}), agent_tip);
  EXPECT_EQ(Git(lower_, {"log", "-1", "--format=%s", remote() + "/agent"}),
            "agent work");
  std::string wt = remote() + "/acqfs-worktree";
  // Its tree is what `git add -A` records in the sandbox.
  InMount("git add -A");
  std::string sandbox_tree = Git(M(""), {"write-tree"});
  EXPECT_EQ(Git(lower_, {"rev-parse", wt + "^{tree}"}), sandbox_tree);
  // Its first parent is the sandbox's HEAD; the diff is the later edits.
  EXPECT_EQ(Git(lower_, {"rev-parse", wt + "^1"}), agent_tip);
  EXPECT_EQ(Git(lower_, {"diff", "--name-status", wt + "^1", wt}),
            "M\tREADME.md\nA\tlater.txt\nD\tsrc/lib/core.txt");
  // The host's own uncommitted work sits in its own commit below it.
  std::string dirty = j["host_dirty_commit"];
  ASSERT_FALSE(dirty.empty());
  EXPECT_EQ(Git(lower_, {"merge-base", "--is-ancestor", dirty, wt}), "");
  EXPECT_EQ(Git(lower_, {"rev-parse", dirty + "^"}), host_head_);
  EXPECT_EQ(Git(lower_, {"diff", "--name-status", dirty + "^", dirty}),
            "M\tREADME.md\nA\tscratch.txt");
  // Kept in refs/sandboxes/ as well.
  EXPECT_EQ(Git(lower_, {"rev-parse", "refs/sandboxes/" + sandbox_->name() +
                                          "/heads/agent"}),
            agent_tip);
}

TEST_F(GitBridge, WorkingTreeCommitShowsOnlyTheSandboxEditsOverHostWork) {
  Mount();
  InMount(R"(
    echo "sandbox line" >> docs/a.txt
    printf '#!/bin/sh\n' > tool.sh && chmod +x tool.sh
  )");
  nlohmann::json j = ExportJson();
  Fetch();
  std::string wt = remote() + "/acqfs-worktree";
  std::string dirty = j["host_dirty_commit"];
  EXPECT_EQ(Git(lower_, {"rev-parse", wt + "^1"}), dirty);
  EXPECT_EQ(Git(lower_, {"diff", "--name-status", wt + "^1", wt}),
            "M\tdocs/a.txt\nA\ttool.sh");
  EXPECT_EQ(Git(lower_, {"ls-tree", wt, "tool.sh"}).substr(0, 6), "100755");
  EXPECT_EQ(Git(lower_, {"rev-parse", dirty + "^1"}), host_head_);
}

TEST_F(GitBridge, ExportsChainAndAnExportWithNothingNewPublishesNothing) {
  Mount();
  InMount("echo one > one.txt");
  nlohmann::json first = ExportJson();
  std::string w1 = first["worktree_commit"];
  ASSERT_FALSE(w1.empty());
  nlohmann::json again = ExportJson();
  EXPECT_TRUE(again["nothing_new"].get<bool>()) << again.dump();
  EXPECT_EQ(again["worktree_commit"], w1);
  InMount("echo two > two.txt");
  nlohmann::json third = ExportJson();
  std::string w3 = third["worktree_commit"];
  ASSERT_NE(w3, w1);
  Fetch();
  EXPECT_EQ(Git(lower_, {"merge-base", "--is-ancestor", w1, w3}), "");
}

TEST_F(GitBridge, ABranchDeletedInTheSandboxLeavesTheBridge) {
  Mount();
  InMount(R"(
    git checkout -q -b short-lived
    echo x > x.txt && git add x.txt && git commit -q -m x
    git checkout -q -b keeper
  )");
  nlohmann::json first = ExportJson();
  std::string bridge = sandbox_->layer_dir() + "/bridge.git";
  EXPECT_EQ(Git(bridge, {"for-each-ref", "--format=%(refname)", "refs/heads/"}),
            "refs/heads/keeper\nrefs/heads/short-lived");
  InMount("git branch -q -D short-lived");
  nlohmann::json second = ExportJson();
  EXPECT_EQ(Git(bridge, {"for-each-ref", "--format=%(refname)", "refs/heads/"}),
            "refs/heads/keeper");
  bool deleted = false;
  for (const auto& u : second["updates"])
    deleted =
        deleted || (u["ref"] == "refs/heads/short-lived" && u["new"] == "");
  EXPECT_TRUE(deleted) << second.dump();
  nlohmann::json third = ExportJson();
  EXPECT_TRUE(third["nothing_new"].get<bool>()) << third.dump();
}

TEST_F(GitBridge, SandboxHooksConfigAndUnsafeTreesNeverReachTheHost) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  std::string marker = tmp_.Sub("hook-ran");
  // The hooks, their modes and contents, and the config. `ls -lA` leaves out
  // `..` (.git itself), which the host's own git below changes.
  CommandResult before =
      RunShell("cd " + ShellQuote(lower_) +
                   " && cat .git/config && ls -lA .git/hooks && cat "
                   ".git/hooks/* 2>/dev/null",
               30);
  ASSERT_TRUE(before.ok()) << before.Describe();
  InMount(
      "for h in post-merge post-checkout pre-commit post-fetch "
      "reference-transaction; do\n"
      "  printf '#!/bin/sh\\ntouch " +
      marker +
      "\\n' > .git/hooks/$h\n"
      "  chmod +x .git/hooks/$h\n"
      "done\n"
      "git config core.hooksPath .git/hooks\n"
      "git config core.fsmonitor 'touch " +
      marker +
      "'\n"
      "git config alias.st '!touch " +
      marker +
      "'\n"
      "git checkout -q -b agent\n"
      "echo fine > fine.txt && git add fine.txt && git commit -q -n -m fine\n"
      // A commit whose tree holds a .git directory, made with plumbing.
      "blob=$(echo '[core]' | git hash-object -w --stdin)\n"
      "inner=$(printf '100644 blob %s\\tconfig\\n' $blob | git mktree)\n"
      "top=$(printf '040000 tree %s\\t.git\\n' $inner | git mktree)\n"
      "c=$(echo evil | git commit-tree $top -p HEAD)\n"
      "git update-ref refs/heads/evil $c\n");
  ::unlink(marker.c_str());  // the sandbox's own git may have run them
  CommandResult r = Acqfs({"export", sandbox_->name()});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  EXPECT_NE(r.err.find("evil"), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find(".git"), std::string::npos) << r.Describe();
  Fetch();
  EXPECT_EQ(RunGit(lower_, {"rev-parse", "--verify", "-q", remote() + "/agent"},
                   home())
                .exit_code,
            0);
  EXPECT_EQ(RunGit(lower_, {"rev-parse", "--verify", "-q", remote() + "/evil"},
                   home())
                .exit_code,
            1);
  Git(lower_, {"stash", "-q", "-u"});
  Git(lower_, {"merge", "-q", "--no-edit", remote() + "/agent"});
  Git(lower_, {"status", "-s"});
  EXPECT_FALSE(Exists(marker)) << "a sandbox hook or command ran on the host";
  CommandResult after = RunShell("cd " + ShellQuote(lower_) +
                                     " && cat .git/config && ls -lA .git/hooks "
                                     "&& cat .git/hooks/* 2>/dev/null",
                                 30);
  ASSERT_TRUE(after.ok()) << after.Describe();
  EXPECT_EQ(after.out, before.out);
}

// Issue 12: the sandbox names another host repository's commit in a branch
// and keeps swapping its .git/objects (and .git itself) for symlinks into
// that repository while export runs in a loop. No export may publish it,
// and after a fetch the host holds none of its objects.
TEST_F(GitBridge, ExportNeverPublishesAnotherRepositorysObjects) {
  std::string other = tmp_.Sub("other");
  CommandResult made =
      RunShell("git init -q -b main " + ShellQuote(other) + " && cd " +
                   ShellQuote(other) +
                   " && echo secret > secret.txt && git add . && git -c "
                   "user.name=t -c user.email=t@t commit -q -m s",
               30, "", GitEnv(home()));
  ASSERT_TRUE(made.ok()) << made.Describe();
  std::string foreign = Git(other, {"rev-parse", "HEAD"});
  std::string foreign_blob = Git(other, {"rev-parse", "HEAD:secret.txt"});
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(
      "git checkout -q -b agent && echo mine > mine.txt && git add . && "
      "git commit -q -m mine\n"
      "echo " +
      foreign + " > .git/refs/heads/leak\n");
  std::string stop = tmp_.Sub("stop-swapping");
  // Each state lasts a random few milliseconds, so that an export's check
  // and its reads of one commit's objects can fall in different states.
  std::string swaps = "python3 - " + ShellQuote(stop) + " " +
                      ShellQuote(other + "/.git") + R"( <<'EOF'
import os, random, sys, time
stop, other = sys.argv[1], sys.argv[2]
def pause():
    time.sleep(random.uniform(0, 0.02))
while not os.path.exists(stop):
    for name, target in ((".git/objects", other + "/objects"),
                         (".git", other)):
        os.rename(name, name + ".real")
        os.symlink(target, name)
        pause()
        os.unlink(name)
        os.rename(name + ".real", name)
        pause()
EOF
)";
  CommandResult swapper_result;
  std::thread swapper(
      [&] { swapper_result = RunShell(swaps, 120, sandbox_->mountpoint()); });
  int exports = 0, published_agent = 0;
  std::string leaked;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    CommandResult r = Acqfs({"export", sandbox_->name(), "--json"});
    ++exports;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded()) continue;  // e.g. .git missing at that instant
    for (const auto& u : j["updates"]) {
      if (u["ref"] == "refs/heads/leak" && u["new"] != "") leaked = u.dump();
      if (u["ref"] == "refs/heads/agent" && u["new"] != "") ++published_agent;
    }
  }
  ASSERT_TRUE(WriteFile(stop, ""));
  swapper.join();
  EXPECT_TRUE(swapper_result.ok()) << swapper_result.Describe();
  EXPECT_EQ(leaked, "") << "after " << exports << " exports";
  EXPECT_GT(exports, 10);
  EXPECT_GT(published_agent, 0) << "the sandbox's own branch never went out";
  // A gitfile pointing at the other repository is not followed either.
  InMount("mv .git .git.real && echo 'gitdir: " + other + "/.git' > .git");
  Acqfs({"export", sandbox_->name()});
  InMount("rm .git && mv .git.real .git");
  std::string bridge = sandbox_->layer_dir() + "/bridge.git";
  for (const std::string& id : {foreign, foreign_blob})
    EXPECT_NE(RunGit(bridge, {"cat-file", "-e", id}, home()).exit_code, 0)
        << id << " reached the bridge";
  Fetch();
  for (const std::string& id : {foreign, foreign_blob})
    EXPECT_NE(RunGit(lower_, {"cat-file", "-e", id}, home()).exit_code, 0)
        << id << " reached the host";
  EXPECT_EQ(RunGit(lower_, {"rev-parse", "--verify", "-q", remote() + "/leak"},
                   home())
                .exit_code,
            1);
}

// Issue 12: a working tree deeper than PATH_MAX (2,050 nested directories,
// made below the upper with directory descriptors, as renames inside the
// sandbox can). Export refuses the working-tree commit and names why, and
// still publishes the branches; `acqfs rm` counts it as work it would lose.
TEST_F(GitBridge, AWorkingTreeDeeperThanPathMaxIsRefusedAndTheBranchesGoOut) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(
      "git checkout -q -b agent && echo mine > mine.txt && git add . && "
      "git commit -q -m mine");
  std::string agent_tip = Git(M(""), {"rev-parse", "agent"});
  CommandResult made = RunShell("python3 - " + ShellQuote(sandbox_->upper()) +
                                    R"( <<'EOF'
import os, sys
d = os.open(sys.argv[1], os.O_PATH)
for i in range(2050):
    os.mkdir("d", dir_fd=d)
    n = os.open("d", os.O_PATH, dir_fd=d)
    os.close(d)
    d = n
f = os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=d)
os.write(f, b"deep\n")
EOF
)",
                                30);
  ASSERT_TRUE(made.ok()) << made.Describe();
  CommandResult r = Acqfs({"export", sandbox_->name(), "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.Describe();
  std::string refused = j["refused"].dump();
  EXPECT_NE(refused.find("working tree: "), std::string::npos) << refused;
  Fetch();
  EXPECT_EQ(Git(lower_, {"rev-parse", remote() + "/agent"}), agent_tip);
  sandbox_->Unmount();
  CommandResult rm = Acqfs({"rm", sandbox_->name()});
  EXPECT_NE(rm.exit_code, 0) << rm.Describe();
  EXPECT_NE(rm.err.find("working tree"), std::string::npos) << rm.Describe();
}

TEST_F(GitBridge, RmRefusesUntilTheHostFetchedAndFetchedWorkSurvives) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount("echo keep > keep.txt");
  ASSERT_TRUE(sandbox_->Unmount());
  CommandResult r = Acqfs({"rm", sandbox_->name()});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("never exported"), std::string::npos) << r.Describe();
  EXPECT_TRUE(Exists(sandbox_->layer_dir()));
  ExportJson();
  r = Acqfs({"rm", sandbox_->name()});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("not fetched"), std::string::npos) << r.Describe();
  EXPECT_TRUE(Exists(sandbox_->layer_dir()));
  Fetch();
  r = Acqfs({"rm", sandbox_->name()});
  EXPECT_TRUE(r.ok()) << r.Describe();
  EXPECT_FALSE(Exists(sandbox_->layer_dir()));
  EXPECT_NE(RunGit(lower_, {"remote", "get-url", remote()}, home()).exit_code,
            0);
  // Not even an empty section header is left in the host's config.
  EXPECT_EQ(ContentOf(lower_ + "/.git/config").find(remote()),
            std::string::npos)
      << ContentOf(lower_ + "/.git/config");
  std::string kept = Git(lower_, {"show", "refs/sandboxes/" + sandbox_->name() +
                                              "/worktree:keep.txt"});
  EXPECT_EQ(kept, "keep");
}

TEST_F(GitBridge, RmForceDropsUnsavedWorkAndSaysWhat) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount("echo lost > lost.txt");
  ASSERT_TRUE(sandbox_->Unmount());
  CommandResult r = Acqfs({"rm", sandbox_->name(), "--force"});
  EXPECT_TRUE(r.ok()) << r.Describe();
  EXPECT_NE(r.err.find("dropped"), std::string::npos) << r.Describe();
  EXPECT_FALSE(Exists(sandbox_->layer_dir()));
}

TEST_F(GitBridge, MountRefusesARemoteOfThatNameThatPointsElsewhere) {
  Git(lower_, {"remote", "add", "sandbox-taken", "/somewhere/else.git"});
  TempDir t;
  std::string mnt = t.MakeDir("mnt");
  std::string state = t.Sub("state");
  CommandResult r = RunCommand({AcqfsBinary(), "mount", lower_, mnt, "--name",
                                "taken", "--state-dir", state},
                               60);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("sandbox-taken"), std::string::npos) << r.Describe();
  EXPECT_FALSE(Exists(state + "/taken"));
  EXPECT_EQ(Git(lower_, {"remote", "get-url", "sandbox-taken"}),
            "/somewhere/else.git");
}

TEST_F(GitBridge, MountRefusesAWorktreeWhoseRepositoryLivesOutsideIt) {
  std::string linked = tmp_.Sub("linked");
  Git(lower_, {"worktree", "add", "-q", linked});
  TempDir t;
  std::string mnt = t.MakeDir("mnt");
  std::string state = t.Sub("state");
  CommandResult r = RunCommand(
      {AcqfsBinary(), "mount", linked, mnt, "--state-dir", state}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("pointing at a repository outside it"),
            std::string::npos)
      << r.Describe();
  EXPECT_FALSE(Exists(state + "/mnt"));
}

TEST(GitBridgeNoRepo, ExportOfADirectoryThatIsNotACheckoutSaysSo) {
  TempDir t;
  std::string lower = t.MakeDir("plain");
  ASSERT_TRUE(WriteFile(lower + "/f.txt", "x"));
  Sandbox sb(lower);
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  CommandResult r = RunCommand(
      {AcqfsBinary(), "export", sb.name(), "--state-dir", sb.state_dir()}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("no git repository to export to"), std::string::npos)
      << r.Describe();
}

}  // namespace
}  // namespace acqfs::test
