// The git bridge end to end, with the real git on the host side: a sandbox
// over a dirty host checkout, agent work inside it, `acqfs export`, `git
// fetch sandbox-<name>` on the host, and what arrives; the crossing's safety
// (no hook, config or unsafe tree reaches the host); and `acqfs rm`.
#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
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
  // `acqfs ARGS --state-dir STATE`, after the words of `prefix` (e.g. a
  // prlimit invocation), killed after `timeout` seconds.
  CommandResult Acqfs(std::vector<std::string> args, int timeout = 120,
                      std::vector<std::string> prefix = {}) {
    std::vector<std::string> argv = std::move(prefix);
    argv.push_back(AcqfsBinary());
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(sandbox_->state_dir());
    return RunCommand(argv, timeout);
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
  // The base is the host's HEAD at the mount; the host's own uncommitted
  // work (README.md, scratch.txt) is in no commit of acqfs's: the agent's
  // commit holds it because `git add -A` in the sandbox took it.
  EXPECT_EQ(j["base_commit"], host_head_);
  EXPECT_EQ(Git(lower_, {"rev-parse", agent_tip + "^"}), host_head_);
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
  // On the base (the host's HEAD at the mount): the host's uncommitted
  // README.md and scratch.txt, which the sandbox sees, are not in it.
  EXPECT_EQ(j["base_commit"], host_head_);
  EXPECT_EQ(Git(lower_, {"rev-parse", wt + "^1"}), host_head_);
  EXPECT_EQ(Git(lower_, {"diff", "--name-status", wt + "^1", wt}),
            "M\tdocs/a.txt\nA\ttool.sh");
  EXPECT_EQ(Git(lower_, {"ls-tree", wt, "tool.sh"}).substr(0, 6), "100755");
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
// ---------------------------------------------------------------------------
// Trees deeper than PATH_MAX (issue 13): a path of more than 4,096 bytes
// from the layer root works in export, status, diff, ls and rm as on ext4.

// A python script that makes, below the directory `top`, one directory per
// name of `names` (each inside the previous one) through directory
// descriptors, then writes `content` to the file `leaf` at the bottom
// (opened O_APPEND when `append`, so an existing file is changed in place).
// No path longer than one name ever reaches a system call.
std::string ChainScript(const std::string& top,
                        const std::vector<std::string>& names,
                        const std::string& leaf, const std::string& content,
                        bool append = false) {
  std::string list;
  for (const std::string& n : names) list += "'" + n + "',";
  return "python3 - " + ShellQuote(top) + " <<'EOF'\n" +
         "import os, sys\n"
         "d = os.open(sys.argv[1], os.O_PATH)\n"
         "for n in [" +
         list +
         "]:\n"
         "    try:\n"
         "        os.mkdir(n, dir_fd=d)\n"
         "    except FileExistsError:\n"
         "        pass\n"
         "    nd = os.open(n, os.O_PATH | os.O_DIRECTORY, dir_fd=d)\n"
         "    os.close(d)\n"
         "    d = nd\n"
         "flags = os.O_WRONLY | os.O_CREAT | " +
         (append ? "os.O_APPEND" : "os.O_TRUNC") +
         "\n"
         "f = os.open('" +
         leaf + "', flags, 0o644, dir_fd=d)\n" + "os.write(f, b'" + content +
         "')\n"
         "os.close(f)\n"
         "EOF\n";
}

std::vector<std::string> Repeat(const std::string& name, size_t n) {
  return std::vector<std::string>(n, name);
}

std::string JoinPath(const std::vector<std::string>& names,
                     const std::string& leaf) {
  std::string p;
  for (const std::string& n : names) p += n + "/";
  return p + leaf;
}

// The paths of `acqfs status --json`'s output, with their kinds.
std::map<std::string, std::string> StatusKinds(const std::string& out) {
  std::map<std::string, std::string> kinds;
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return kinds;
  const auto& list = j.is_array() ? j : j["changes"];
  for (const auto& c : list) kinds[c["path"]] = c["kind"];
  return kinds;
}

// 2,050 nested directories "d" and a file: 4,108 bytes from the layer root.
// The old export walked the merged view from the root for every ancestor's
// .gitignore (O(depth^3): minutes) and then refused the working tree.
TEST_F(GitBridge, AWorkingTreeDeeperThanPathMaxIsPublishedWithTheBranches) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(
      "git checkout -q -b agent && echo mine > mine.txt && git add . && "
      "git commit -q -m mine");
  std::string agent_tip = Git(M(""), {"rev-parse", "agent"});
  const std::vector<std::string> chain = Repeat("d", 2050);
  CommandResult made = RunShell(
      ChainScript(sandbox_->upper(), chain, "deep.txt", "deep\\n"), 30);
  ASSERT_TRUE(made.ok()) << made.Describe();
  const std::string deep = JoinPath(chain, "deep.txt");
  auto start = std::chrono::steady_clock::now();
  CommandResult r = Acqfs({"export", sandbox_->name(), "--json"}, 60);
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(r.ok()) << r.Describe();
  std::cerr << "[ deep ] export of the 2,050-deep tree: " << secs << " s\n";
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.Describe();
  EXPECT_TRUE(j["refused"].empty()) << j.dump();
  EXPECT_TRUE(j["skipped"].empty()) << j.dump();
  Fetch();
  EXPECT_EQ(Git(lower_, {"rev-parse", remote() + "/agent"}), agent_tip);
  std::string wt = remote() + "/acqfs-worktree";
  EXPECT_EQ(Git(lower_, {"cat-file", "-p", wt + ":" + deep}), "deep");
  std::string names = Git(lower_, {"ls-tree", "-r", "--name-only", wt});
  EXPECT_NE(("\n" + names + "\n").find("\n" + deep + "\n"), std::string::npos);
  EXPECT_NE(("\n" + names + "\n").find("\nmine.txt\n"), std::string::npos);
  ASSERT_TRUE(sandbox_->Unmount());
  // Exported and fetched: nothing would be lost.
  CommandResult rm = Acqfs({"rm", sandbox_->name()}, 60);
  EXPECT_TRUE(rm.ok()) << rm.Describe();
  EXPECT_FALSE(Exists(sandbox_->layer_dir()));
}

// The same tree under an open-files limit of 256, soft and hard: the walks
// hold a bounded number of descriptors (the old ones held two per level,
// 4,100 here). The CLI never raises its own limit (no setrlimit in cli/),
// and with the hard limit at 256 it could not without privileges anyway.
TEST_F(GitBridge, StatusAndExportOfATreeDeeperThanPathMaxNeedFewDescriptors) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  const std::vector<std::string> chain = Repeat("d", 2050);
  CommandResult made = RunShell(
      ChainScript(sandbox_->upper(), chain, "deep.txt", "deep\\n"), 30);
  ASSERT_TRUE(made.ok()) << made.Describe();
  const std::string deep = JoinPath(chain, "deep.txt");
  const std::vector<std::string> low = {"prlimit", "--nofile=256:256"};
  CommandResult limits = RunCommand(
      {"prlimit", "--nofile=256:256", "sh", "-c", "ulimit -Sn; ulimit -Hn"},
      10);
  ASSERT_TRUE(limits.ok()) << limits.Describe();
  EXPECT_EQ(limits.out, "256\n256\n");
  CommandResult st = Acqfs({"status", sandbox_->name(), "--json"}, 60, low);
  ASSERT_TRUE(st.ok()) << st.Describe();
  auto kinds = StatusKinds(st.out);
  EXPECT_EQ(kinds.size(), 2051u);  // every directory, and the file
  EXPECT_EQ(kinds[deep], "added");
  CommandResult ex = Acqfs({"export", sandbox_->name(), "--json"}, 60, low);
  ASSERT_TRUE(ex.ok()) << ex.Describe();
  Fetch();
  EXPECT_EQ(
      Git(lower_, {"cat-file", "-p", remote() + "/acqfs-worktree:" + deep}),
      "deep");
}

// The commands below run under small open-files limits, soft and hard:
// 24 for status, diff and ls, 32 for export (which also holds libgit2's and
// the ignore rules' descriptors). The new walks need 16 and 24 whatever the
// depth; the old ones held a descriptor or two per level and needed 34 for
// the 24 levels of the first tree below.
const std::vector<std::string> kScanFds = {"prlimit", "--nofile=24:24"};
const std::vector<std::string> kExportFds = {"prlimit", "--nofile=32:32"};

// 24 nested directories of 200-byte names made through the mount (4,834
// bytes with the file), then every reader of the layers.
TEST_F(GitBridge, ATreeOf24DirectoriesOf200ByteNamesWorksInEveryCommand) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  std::vector<std::string> chain;
  for (int i = 0; i < 24; ++i) {
    std::string n = std::to_string(10 + i);
    chain.push_back(n + std::string(200 - n.size(), 'n'));
  }
  CommandResult made = RunShell(ChainScript(sandbox_->mountpoint(), chain,
                                            "bottom.txt", "at the bottom\\n"),
                                30);
  ASSERT_TRUE(made.ok()) << made.Describe();
  const std::string bottom = JoinPath(chain, "bottom.txt");
  ASSERT_GT(bottom.size(), 4096u);
  auto start = std::chrono::steady_clock::now();
  CommandResult st =
      Acqfs({"status", sandbox_->name(), "--json"}, 60, kScanFds);
  ASSERT_TRUE(st.ok()) << st.Describe();
  auto kinds = StatusKinds(st.out);
  EXPECT_EQ(kinds.size(), 25u) << st.out.substr(0, 2000);
  EXPECT_EQ(kinds[bottom], "added");
  EXPECT_EQ(kinds[chain[0]], "added");
  CommandResult text = Acqfs({"status", sandbox_->name()}, 60, kScanFds);
  ASSERT_TRUE(text.ok()) << text.Describe();
  EXPECT_NE(text.out.find("A " + bottom + "\n"), std::string::npos);
  CommandResult diff = Acqfs({"diff", sandbox_->name()}, 60, kScanFds);
  ASSERT_TRUE(diff.ok()) << diff.Describe();
  EXPECT_NE(diff.out.find("+++ b/" + bottom), std::string::npos)
      << diff.out.substr(0, 2000);
  EXPECT_NE(diff.out.find("\n+at the bottom\n"), std::string::npos);
  CommandResult ls = Acqfs({"ls", "--json"}, 60, kScanFds);
  ASSERT_TRUE(ls.ok()) << ls.Describe();
  auto rows = nlohmann::json::parse(ls.out, nullptr, false);
  ASSERT_FALSE(rows.is_discarded()) << ls.out;
  const auto& list = rows.is_array() ? rows : rows["sandboxes"];
  bool seen = false;
  for (const auto& row : list) {
    if (row["name"] != sandbox_->name()) continue;
    seen = true;
    EXPECT_EQ(row["changed_paths"], 25) << row.dump();
  }
  EXPECT_TRUE(seen) << ls.out;
  CommandResult ex =
      Acqfs({"export", sandbox_->name(), "--json"}, 60, kExportFds);
  ASSERT_TRUE(ex.ok()) << ex.Describe();
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cerr << "[ deep ] status x2, diff, ls and export of the 24x200 tree: "
            << secs << " s\n";
  Fetch();
  EXPECT_EQ(
      Git(lower_, {"cat-file", "-p", remote() + "/acqfs-worktree:" + bottom}),
      "at the bottom");
}

// A host tree deeper than PATH_MAX (untracked in the host, made in the
// lower through directory descriptors) whose bottom file the sandbox
// changes through the mount.
TEST_F(GitBridge, ALowerTreeDeeperThanPathMaxChangedAtTheBottomIsExported) {
  std::vector<std::string> chain;
  for (int i = 0; i < 30; ++i)
    chain.push_back("h" + std::to_string(i) + std::string(150, 'x'));
  CommandResult host =
      RunShell(ChainScript(lower_, chain, "deep.txt", "host\\n"), 30);
  ASSERT_TRUE(host.ok()) << host.Describe();
  const std::string deep = JoinPath(chain, "deep.txt");
  ASSERT_GT(deep.size(), 4096u);
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  CommandResult edit = RunShell(
      ChainScript(sandbox_->mountpoint(), chain, "deep.txt", "sandbox\\n",
                  /*append=*/true),
      30);
  ASSERT_TRUE(edit.ok()) << edit.Describe();
  CommandResult st =
      Acqfs({"status", sandbox_->name(), "--json"}, 60, kScanFds);
  ASSERT_TRUE(st.ok()) << st.Describe();
  auto kinds = StatusKinds(st.out);
  EXPECT_EQ(kinds[deep], "modified") << st.out.substr(0, 2000);
  // The copied-up directories are no change of their own.
  for (const auto& [path, kind] : kinds)
    EXPECT_TRUE(path == deep || path.rfind("h0", 0) != 0)
        << kind << " " << path;
  CommandResult diff = Acqfs({"diff", sandbox_->name(), deep}, 60, kScanFds);
  ASSERT_TRUE(diff.ok()) << diff.Describe();
  EXPECT_NE(diff.out.find("\n host\n+sandbox\n"), std::string::npos)
      << diff.out.substr(0, 2000);
  CommandResult ex =
      Acqfs({"export", sandbox_->name(), "--json"}, 60, kExportFds);
  ASSERT_TRUE(ex.ok()) << ex.Describe();
  auto j = nlohmann::json::parse(ex.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << ex.Describe();
  EXPECT_TRUE(j["refused"].empty()) << j.dump();
  Fetch();
  std::string wt = remote() + "/acqfs-worktree";
  EXPECT_EQ(Git(lower_, {"cat-file", "-p", wt + ":" + deep}), "host\nsandbox");
  // Not checked: the host's own untracked copy in its working-state commit.
  // libgit2 1.5's status opens working-directory paths whole and takes a
  // directory it cannot open (ENAMETOOLONG) for a missing one, so host
  // files beyond PATH_MAX are left out of that commit (docs/git-bridge.md).
}

// A host checkout holding an untracked tree nested more than 100 deep,
// which libgit2 1.5's status refuses ("directory nesting too deep (100)"):
// the export never reads the host's working tree (the working-tree commit
// is the sandbox's HEAD with its own changes), so it goes out whole and
// `acqfs rm` has nothing to keep once the host fetched it. (It used to
// refuse the working tree, and before that to fail the whole export.)
TEST_F(GitBridge, AHostTreeNestedBeyondLibgit2sLimitDoesNotStopTheExport) {
  CommandResult host =
      RunShell(ChainScript(lower_, Repeat("n", 150), "f.txt", "nested\\n"), 30);
  ASSERT_TRUE(host.ok()) << host.Describe();
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(
      "git checkout -q -b agent && echo mine > mine.txt && git add mine.txt "
      "&& git commit -q -m mine && echo later > later.txt");
  std::string agent_tip = Git(M(""), {"rev-parse", "agent"});
  CommandResult r = Acqfs({"export", sandbox_->name(), "--json"}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.Describe();
  EXPECT_TRUE(j["refused"].empty()) << j.dump();
  Fetch();
  EXPECT_EQ(Git(lower_, {"rev-parse", remote() + "/agent"}), agent_tip);
  std::string wt = remote() + "/acqfs-worktree";
  EXPECT_EQ(Git(lower_, {"diff", "--name-status", wt + "^1", wt}),
            "A\tlater.txt");
  ASSERT_TRUE(sandbox_->Unmount());
  CommandResult rm = Acqfs({"rm", sandbox_->name()});
  EXPECT_EQ(rm.exit_code, 0) << rm.Describe();
}

// What truly cannot be recorded still refuses the working tree alone: a
// directory the export may not read (mode 000, and an export without
// CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, as a root without them). The
// branches still go out and `acqfs rm` counts the working tree as unsaved.
TEST_F(GitBridge, AnUnreadableWorkingTreeIsRefusedAndTheBranchesGoOut) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(
      "git checkout -q -b agent && echo mine > mine.txt && git add . && "
      "git commit -q -m mine && mkdir locked && echo x > locked/f && "
      "chmod 000 locked");
  std::string agent_tip = Git(M(""), {"rev-parse", "agent"});
  CommandResult r = Acqfs(
      {"export", sandbox_->name(), "--json"}, 60,
      {"setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.Describe();
  std::string refused = j["refused"].dump();
  EXPECT_NE(refused.find("working tree: "), std::string::npos) << refused;
  EXPECT_NE(refused.find("locked"), std::string::npos) << refused;
  Fetch();
  EXPECT_EQ(Git(lower_, {"rev-parse", remote() + "/agent"}), agent_tip);
  InMount("chmod 755 locked");
  ASSERT_TRUE(sandbox_->Unmount());
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

// ---- names git refuses (issue 12, item 2) ----------------------------------

// The host's own `git fsck` is the oracle: what it reports about any object
// (its quiet notes about symlinked dotfiles included), "" when nothing.
std::string FsckReports(const std::string& repo, const std::string& home) {
  CommandResult r = RunGit(
      repo,
      {"-c", "fsck.gitignoreSymlink=error", "-c",
       "fsck.gitattributesSymlink=error", "-c", "fsck.mailmapSymlink=error",
       "fsck", "--no-dangling", "--no-progress"},
      home);
  std::string out;
  std::istringstream lines(r.out + r.err);
  for (std::string line; std::getline(lines, line);)
    if (line.find("error") != std::string::npos ||
        line.find("warning") != std::string::npos)
      out += line + "\n";
  if (!r.ok()) out += "exit " + std::to_string(r.exit_code) + "\n";
  return out;
}

// The paths `skipped` names, sorted, after checking each entry's fields.
std::vector<std::string> SkippedPaths(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (!j.contains("skipped") || !j["skipped"].is_array()) return out;
  for (const auto& k : j["skipped"]) {
    EXPECT_FALSE(k["reason"].get<std::string>().empty()) << k.dump();
    EXPECT_EQ(k["from"], "sandbox") << k.dump();
    out.push_back(k["path"].get<std::string>());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(GitBridge, SymlinkedDotfilesInEverySpellingStayOutOfTheWorkingTree) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(R"SH(
    for n in GITMOD~1 .gitmodules. '.gitmodules ' gi7eba~1 .gitignore \
             sub/.gitattributes .MAILMAP gi250a~1; do
      mkdir -p "$(dirname "$n")"
      rm -f "$n"  # the host tracks a .gitignore
      ln -s /etc/passwd "$n"
    done
    echo fine > fine.txt
    git checkout -q -b agent
    echo agent > agent.txt && git add agent.txt && git commit -q -m agent
  )SH");
  CommandResult r = Acqfs({"export", sandbox_->name(), "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.Describe();
  EXPECT_EQ(SkippedPaths(j),
            (std::vector<std::string>{".MAILMAP", ".gitignore", ".gitmodules ",
                                      ".gitmodules.", "GITMOD~1", "gi250a~1",
                                      "gi7eba~1", "sub/.gitattributes"}))
      << j.dump();
  EXPECT_TRUE(j["refused"].empty()) << j.dump();
  Fetch();
  std::string wt = remote() + "/acqfs-worktree";
  EXPECT_EQ(Git(lower_, {"show", wt + ":fine.txt"}), "fine");
  EXPECT_EQ(Git(lower_, {"rev-parse", remote() + "/agent"}),
            Git(M(""), {"rev-parse", "agent"}));
  EXPECT_EQ(Git(lower_, {"ls-tree", "--name-only", wt, "GITMOD~1", "sub"}), "");
  // Left out means absent: the host's tracked .gitignore, which the sandbox
  // replaced by a symlink, is not in the commit either.
  EXPECT_EQ(Git(lower_, {"ls-tree", "--name-only", wt, ".gitignore"}), "");
  EXPECT_EQ(FsckReports(lower_, home()), "");
  // The human report names each path.
  r = Acqfs({"export", sandbox_->name()});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  EXPECT_NE(r.err.find("left out of the working tree: GITMOD~1: .gitmodules "
                       "as a symlink"),
            std::string::npos)
      << r.Describe();
}

TEST_F(GitBridge, DotGitSpellingsInTheWorkingTreeNeitherFailNorBlockBranches) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(R"(
    git checkout -q -b agent
    echo agent > agent.txt && git add agent.txt && git commit -q -m agent
    for d in .GIT git~1 .git. '.git ' sub/.GIT GIT~1 .Git; do
      mkdir -p "$d/hooks"
      printf '#!/bin/sh\ntouch /tmp/pwned\n' > "$d/hooks/post-checkout"
      printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > "$d/config"
    done
    mkdir -p .gitmodules && echo x > .gitmodules/inside
    echo kept > sub/kept.txt
  )");
  CommandResult r = Acqfs({"export", sandbox_->name(), "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  EXPECT_EQ(r.err.find("Input/output error"), std::string::npos)
      << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.Describe();
  EXPECT_EQ(SkippedPaths(j), (std::vector<std::string>{
                                 ".GIT", ".Git", ".git ", ".git.",
                                 ".gitmodules", "GIT~1", "git~1", "sub/.GIT"}))
      << j.dump();
  Fetch();
  EXPECT_EQ(Git(lower_, {"rev-parse", remote() + "/agent"}),
            Git(M(""), {"rev-parse", "agent"}));
  std::string wt = remote() + "/acqfs-worktree";
  EXPECT_EQ(Git(lower_, {"show", wt + ":sub/kept.txt"}), "kept");
  std::istringstream names(Git(lower_, {"ls-tree", "-r", "--name-only", wt}));
  for (std::string n; std::getline(names, n);)
    for (const std::string& bad : SkippedPaths(j))
      EXPECT_NE(n.rfind(bad, 0), 0u) << n;
  EXPECT_EQ(FsckReports(lower_, home()), "");
  // Checking the commit out on the host writes none of it.
  Git(lower_, {"stash", "-q", "-u"});
  Git(lower_, {"checkout", "-q", "--detach", wt});
  EXPECT_FALSE(Exists(lower_ + "/.GIT"));
  EXPECT_FALSE(Exists(lower_ + "/sub/.GIT"));
  EXPECT_TRUE(Exists(lower_ + "/sub/kept.txt"));
  // rm names what would be lost: paths git refuses are never exported.
  ASSERT_TRUE(sandbox_->Unmount());
  CommandResult rm = Acqfs({"rm", sandbox_->name()});
  EXPECT_EQ(rm.exit_code, 1) << rm.Describe();
  EXPECT_NE(rm.err.find("would lose (cannot be exported): path sub/.GIT: "),
            std::string::npos)
      << rm.Describe();
}

TEST_F(GitBridge, BranchNamesCheckRefFormatRefusesAreRefusedByName) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(R"(
    git checkout -q -b good
    echo good > good.txt && git add good.txt && git commit -q -m good
    git update-ref refs/heads/HEAD good
    git update-ref refs/heads/-x good
    git update-ref refs/heads/topic/-ok good
  )");
  CommandResult r = Acqfs({"export", sandbox_->name(), "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.Describe();
  std::string refused;
  for (const auto& why : j["refused"]) refused += why.get<std::string>() + "\n";
  EXPECT_NE(refused.find("HEAD: "), std::string::npos) << refused;
  EXPECT_NE(refused.find("-x: "), std::string::npos) << refused;
  EXPECT_NE(refused.find("check-ref-format"), std::string::npos) << refused;
  Fetch();
  std::string heads = Git(lower_, {"for-each-ref", "--format=%(refname)",
                                   "refs/remotes/" + remote() + "/"});
  EXPECT_NE(heads.find("/good"), std::string::npos) << heads;
  EXPECT_NE(heads.find("/topic/-ok"), std::string::npos) << heads;
  EXPECT_EQ(heads.find("/-x"), std::string::npos) << heads;
  EXPECT_EQ(heads.find(remote() + "/HEAD"), std::string::npos) << heads;
  std::string bridge = sandbox_->layer_dir() + "/bridge.git";
  EXPECT_EQ(Git(bridge, {"for-each-ref", "--format=%(refname)", "refs/heads/"}),
            "refs/heads/good\nrefs/heads/topic/-ok");
}

// The branches' trees are held to the same rules, all of git fsck's: each
// branch below names a tree that git's own tools would not write, made
// with plumbing in the sandbox. None is published; the host's fsck stays
// clean after the fetch.
TEST_F(GitBridge, BranchTreesAreHeldToEveryRuleGitFsckApplies) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  // <branch> <raw tree entries as mode/name pairs, the object a blob or the
  // empty tree> written with `git hash-object --literally`.
  InMount(R"SH(
    git checkout -q -b fine
    echo fine > fine.txt && git add fine.txt && git commit -q -m fine
    python3 - <<'PY'
import subprocess
def git(*args, data=None):
    return subprocess.run(["git", *args], input=data, check=True,
                          capture_output=True).stdout.strip()
blob = bytes.fromhex(git("hash-object", "-w", "--stdin", data=b"x\n").decode())
sub = git("hash-object", "-w", "-t", "tree", "--stdin", data=b"")
sub = bytes.fromhex(git("mktree", data=b"100644 blob " + blob.hex().encode() +
                        b"\tf\n").decode())
cases = {
    "ignore-link": [(b"120000", b".gitignore", blob)],
    "attributes-link": [(b"120000", b"GITATT~1", blob)],
    "mailmap-link": [(b"120000", b".mailmap.", blob)],
    "fallback-short-name": [(b"120000", b"~1234567", blob)],
    "backslash-gitmodules": [(b"120000", b"a\\.gitmodules", blob)],
    "backslash-dotgit": [(b"100644", b"a\\.git", blob)],
    "link-mode-bits": [(b"120755", b".gitmodules", blob)],
    "gitmodules-directory": [(b"40000", b".gitmodules", sub)],
    "zero-padded": [(b"040000", b"dir", sub)],
    "unsorted": [(b"100644", b"b", blob), (b"100644", b"a", blob)],
    "twice": [(b"100644", b"a", blob), (b"100644", b"a", blob)],
}
head = git("rev-parse", "HEAD").decode()
for branch, entries in cases.items():
    raw = b"".join(m + b" " + n + b"\0" + i for m, n, i in entries)
    tree = git("hash-object", "-w", "-t", "tree", "--literally", "--stdin",
               data=raw).decode()
    commit = git("commit-tree", tree, "-p", head, "-m", branch).decode()
    git("update-ref", "refs/heads/" + branch, commit)
PY
  )SH");
  CommandResult r = Acqfs({"export", sandbox_->name(), "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.Describe();
  std::set<std::string> refused;
  for (const auto& why : j["refused"]) {
    std::string w = why.get<std::string>();
    refused.insert(w.substr(0, w.find(':')));
  }
  EXPECT_EQ(refused,
            (std::set<std::string>{
                "attributes-link", "backslash-dotgit", "backslash-gitmodules",
                "fallback-short-name", "gitmodules-directory", "ignore-link",
                "link-mode-bits", "mailmap-link", "twice", "unsorted",
                "zero-padded"}))
      << j.dump();
  Fetch();
  EXPECT_EQ(Git(lower_, {"for-each-ref", "--format=%(refname:short)",
                         "refs/remotes/" + remote() + "/"}),
            remote() + "/acqfs-worktree\n" + remote() + "/fine");
  EXPECT_EQ(FsckReports(lower_, home()), "");
}

// ---- a damaged bridge (issue 12, item 5) -----------------------------------

TEST_F(GitBridge, ADamagedBridgeFailsTheExportAndExportingAnewRebuildsIt) {
  SandboxOptions opts;
  opts.extra_umount_args = {"--no-export"};
  Mount(opts);
  InMount(R"(
    git checkout -q -b agent
    echo agent > agent-only.txt && git add agent-only.txt
    git commit -q -m agent
    git checkout -q -
    echo wt > wt.txt
  )");
  nlohmann::json first = ExportJson();
  std::string agent = Git(M(""), {"rev-parse", "agent"});
  std::string wt = first["worktree_commit"];
  const std::string bridge = sandbox_->layer_dir() + "/bridge.git";
  // The agent branch's own objects, truncated to nothing: no export reads
  // them again, but `git fetch` needs them.
  std::vector<std::string> ids;
  for (const std::string& rev :
       {agent, agent + "^{tree}", agent + ":agent-only.txt"})
    ids.push_back(Git(bridge, {"rev-parse", rev}));
  for (const std::string& id : ids) {
    ASSERT_EQ(id.size(), 40u);
    std::string file =
        bridge + "/objects/" + id.substr(0, 2) + "/" + id.substr(2);
    ASSERT_TRUE(Exists(file)) << file;
    ASSERT_EQ(::truncate(file.c_str(), 0), 0) << file;
  }
  CommandResult r = Acqfs({"export", sandbox_->name()});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find(bridge), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("damaged bridge repository"), std::string::npos)
      << r.Describe();
  EXPECT_NE(r.err.find("export again to rebuild"), std::string::npos)
      << r.Describe();
  // Indeed the host could not fetch it.
  EXPECT_NE(RunGit(lower_, {"fetch", "-q", remote()}, home()).exit_code, 0);
  // Recovery (docs/git-bridge.md): remove the bridge, export again.
  ASSERT_TRUE(RunShell("rm -rf " + ShellQuote(bridge), 30).ok());
  nlohmann::json rebuilt = ExportJson();
  EXPECT_TRUE(rebuilt["refused"].empty()) << rebuilt.dump();
  Fetch();
  EXPECT_EQ(Git(lower_, {"rev-parse", remote() + "/agent"}), agent);
  EXPECT_EQ(Git(lower_, {"show", remote() + "/acqfs-worktree:wt.txt"}), "wt");
  EXPECT_EQ(FsckReports(lower_, home()), "");
  EXPECT_EQ(Git(lower_, {"remote", "get-url", remote()}), bridge);
  // A pack that git made in the bridge, truncated: the same.
  InMount("echo more > more.txt");
  ExportJson();
  Git(bridge, {"repack", "-q", "-a", "-d", "-l"});
  std::string pack =
      RunShell("ls " + ShellQuote(bridge) + "/objects/pack/*.pack", 30).out;
  while (!pack.empty() && pack.back() == '\n') pack.pop_back();
  ASSERT_FALSE(pack.empty());
  ASSERT_EQ(::truncate(pack.c_str(), 0), 0) << pack;
  r = Acqfs({"export", sandbox_->name()});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find(bridge), std::string::npos) << r.Describe();
  ASSERT_TRUE(RunShell("rm -rf " + ShellQuote(bridge), 30).ok());
  ExportJson();
  Fetch();
  EXPECT_EQ(Git(lower_, {"show", remote() + "/acqfs-worktree:more.txt"}),
            "more");
  (void)wt;
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

// A checkout another user owns, used by root (rootful containers of a
// user's checkout, issue 17): libgit2 refuses it as git does ("dubious
// ownership"), which libgit2 1.5.1 reports as a missing safe.directory
// (GIT_ENOTFOUND). It used to be taken for a plain directory: the mount
// came up without the remote, export said "no git repository to export
// to", and umount exited 0 without exporting. Now every command refuses,
// naming the owner and the ways out; as git does, root through sudo from
// the owner (SUDO_UID) and a safe.directory entry are trusted, and the
// host's .git/config keeps its owner when root adds the remote.
TEST(GitBridgeOwner, AnotherUsersCheckoutIsRefusedNotTakenForAPlainDirectory) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root (as CI has)";
  TempDir t;
  ASSERT_EQ(::chmod(t.path().c_str(), 0755), 0);
  const std::string lower = t.Sub("theirs");
  ASSERT_TRUE(MakeLowerRepo(lower));
  ASSERT_TRUE(ChownTree(lower, 1000, 1000));
  const std::string home = t.MakeDir("home");
  const std::string state = t.MakeDir("state");
  const std::string mnt = t.MakeDir("mnt");
  const TreeSnapshot host0 = Snapshot(lower, SnapshotOptions::Everything());
  auto acqfs = [&](std::vector<std::string> args, EnvAdditions env = {}) {
    args.insert(args.begin(), AcqfsBinary());
    args.insert(args.end(), {"--state-dir", state});
    env.push_back({"HOME", home});
    return RunCommand(args, 60, "", env);
  };
  auto refused_for_owner = [&](const CommandResult& r, int code) {
    EXPECT_EQ(r.exit_code, code) << r.Describe();
    for (const char* part : {"is owned by uid 1000", "runs as uid 0",
                             "dubious ownership", "safe.directory"})
      EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n"
                                                     << r.Describe();
  };
  CommandResult m = acqfs({"mount", lower, mnt, "--name", "theirs"});
  refused_for_owner(m, 1);
  EXPECT_FALSE(FindMount(mnt).has_value()) << "mounted despite the refusal";
  EXPECT_TRUE(
      SnapshotsEqual(host0, Snapshot(lower, SnapshotOptions::Everything())));

  // Through sudo from the owner: trusted, as git trusts it.
  const EnvAdditions sudo = {{"SUDO_UID", "1000"}};
  m = acqfs({"mount", lower, mnt, "--name", "theirs"}, sudo);
  ASSERT_TRUE(m.ok()) << m.Describe();
  struct stat st;
  ASSERT_EQ(::stat((lower + "/.git/config").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u) << ".git/config changed owner with the remote";
  EXPECT_EQ(st.st_gid, 1000u);
  ASSERT_TRUE(WriteFile(mnt + "/from-root.txt", "root's work\n"));
  // Without it, export and umount refuse and keep the work for later.
  refused_for_owner(acqfs({"export", "theirs"}), 2);
  CommandResult u = acqfs({"umount", "theirs"});
  EXPECT_NE(u.exit_code, 0) << u.Describe();
  EXPECT_NE(u.err.find("dubious ownership"), std::string::npos) << u.Describe();
  EXPECT_FALSE(FindMount(mnt).has_value());
  // Trusted by a safe.directory entry of the caller's own git config.
  ASSERT_TRUE(
      WriteFile(home + "/.gitconfig", "[safe]\n\tdirectory = " + lower + "\n"));
  CommandResult e = acqfs({"export", "theirs", "--json"});
  ASSERT_TRUE(e.ok()) << e.Describe();
  CommandResult fetch = RunGit(lower, {"fetch", "-q", "sandbox-theirs"}, home);
  ASSERT_TRUE(fetch.ok()) << fetch.Describe();
  EXPECT_EQ(
      RunGit(lower, {"show", "sandbox-theirs/acqfs-worktree:from-root.txt"},
             home)
          .out,
      "root's work\n");
  ASSERT_EQ(::stat((lower + "/.git/config").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
}

// Root through sudo mounting, exporting and removing a sandbox of another
// user's checkout writes keep refs (refs/acqfs-base, refs/acqfs-keep,
// refs/acqfs-tips) and, removing them, packed-refs. Everything it leaves in
// the user's .git is the user's: the directories libgit2 made were root's,
// and the user's `git gc` failed to pack them ("cannot lock ref ...
// Permission denied"), as did `git update-ref -d` of them.
TEST(GitBridgeOwner, RootLeavesNothingOfItsOwnInAnotherUsersRepository) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root (as CI has)";
  TempDir t;
  ASSERT_EQ(::chmod(t.path().c_str(), 0755), 0);
  const std::string lower = t.Sub("theirs");
  ASSERT_TRUE(MakeLowerRepo(lower));
  const std::string home = t.MakeDir("home");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"tag", "-a", "v1", "-m", "v1"},
        {"branch", "topic/side"}})
    ASSERT_TRUE(RunGit(lower, args, home).ok());
  ASSERT_TRUE(ChownTree(lower, 1000, 1000));
  const std::string state = t.MakeDir("state");
  const std::string mnt = t.MakeDir("mnt");
  auto acqfs = [&](std::vector<std::string> args) {
    args.insert(args.begin(), AcqfsBinary());
    args.insert(args.end(), {"--state-dir", state});
    return RunCommand(args, 60, "", {{"HOME", home}, {"SUDO_UID", "1000"}});
  };
  auto roots = [&] {
    return Sh("find " + ShellQuote(lower + "/.git") + " -user root");
  };
  auto as_owner = [&](const std::string& git_args) {
    return RunCommand(
        {"setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups",
         "sh", "-c", "git -c safe.directory='*' " + git_args + " 2>&1"},
        60, lower, {{"HOME", home}});
  };
  CommandResult m = acqfs({"mount", lower, mnt, "--name", "theirs"});
  ASSERT_TRUE(m.ok()) << m.Describe();
  ASSERT_TRUE(WriteFile(mnt + "/w.txt", "work\n"));
  CommandResult u = acqfs({"umount", "theirs"});
  ASSERT_TRUE(u.ok()) << u.Describe();
  ASSERT_NE(Sh("git -C " + ShellQuote(lower) +
               " -c safe.directory='*' for-each-ref refs/acqfs-tips"),
            "");
  EXPECT_EQ(roots(), "");
  CommandResult gc = as_owner("gc -q");
  EXPECT_TRUE(gc.ok() && gc.out.empty()) << gc.Describe();
  CommandResult fork = acqfs({"fork", "theirs", "mine"});
  ASSERT_TRUE(fork.ok()) << fork.Describe();
  EXPECT_EQ(roots(), "");
  CommandResult del = as_owner("update-ref -d refs/acqfs-keep/mine/topic/side");
  EXPECT_TRUE(del.ok() && del.out.empty()) << del.Describe();
  for (const char* name : {"mine", "theirs"}) {
    CommandResult rm = acqfs({"rm", name, "--force"});
    EXPECT_TRUE(rm.ok()) << rm.Describe();
  }
  EXPECT_EQ(roots(), "");
  EXPECT_EQ(Sh("git -C " + ShellQuote(lower) +
               " -c safe.directory='*' for-each-ref refs/acqfs-base "
               "refs/acqfs-keep refs/acqfs-tips"),
            "");
}

// Export of a mounted sandbox at work: a path changed between the scan and
// its read makes export take the working-tree snapshot again, so that it is
// one whole reading of the upper layer; only a sandbox that keeps changing
// through every attempt refuses the working tree, saying why and what to
// do. (It used to refuse at the first such path: "open directory: ...: No
// such file or directory".) Once the agent stops, export publishes the
// working tree, and the host's files stay as they were.
TEST_F(GitBridge, ExportOfASandboxChangingUnderItRetakesTheSnapshot) {
  Mount();
  const std::string host_a = ContentOf(lower_ + "/docs/a.txt");
  ChurnRace race = RaceWithChurn(
      sandbox_->mountpoint(), 7,
      {AcqfsBinary(), "export", sandbox_->name(), "--state-dir",
       sandbox_->state_dir()},
      [](const CommandResult& r) {
        EXPECT_NE(r.err.find("the sandbox changed it while export read it"),
                  std::string::npos)
            << r.Describe();
      });
  EXPECT_TRUE(race.churn.ok()) << race.churn.Describe();
  EXPECT_GT(race.ok, 0) << "no export of " << race.runs << " succeeded";
  CommandResult quiet = Acqfs({"export", sandbox_->name()});
  ASSERT_TRUE(quiet.ok()) << quiet.Describe();
  Fetch();
  std::string b = ContentOf(M("docs/b.txt"));
  while (!b.empty() && b.back() == '\n') b.pop_back();
  EXPECT_EQ(Git(lower_, {"show", remote() + "/acqfs-worktree:docs/b.txt"}), b);
  EXPECT_EQ(ContentOf(lower_ + "/docs/a.txt"), host_a);
}

}  // namespace
}  // namespace acqfs::test
