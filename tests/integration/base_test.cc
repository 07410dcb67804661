// The base of a sandbox over a git checkout (docs/git-bridge.md, "The
// base"): recorded at the first mount, its .git the sandbox's own from
// then on, finished or recorded anew after a first mount that was killed;
// what `acqfs status` and `acqfs export` say of paths the host changed too;
// `acqfs apply`; two sandboxes of one host against two clones.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/clone_oracle.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

class Base : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    tmp_.MakeDir("home", 0755);
    home_ = tmp_.Sub("home");
    host_ = tmp_.Sub("host");
    state_ = tmp_.Sub("state");
    ASSERT_TRUE(RunIn(tmp_.path(),
                      std::string(kLinesFunction) +
                          "git init -q -b main host && cd host\n"
                          "lines a.txt a; lines b.txt b; lines c.txt c\n"
                          "echo '*.log' > .gitignore\n"
                          "git add -A && git commit -qm c0\n",
                      home_));
  }

  std::string Host(const std::string& script) {
    std::string out;
    EXPECT_TRUE(RunIn(host_, script, home_, &out));
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }
  std::unique_ptr<Sandbox> Mount(const std::string& name = "x") {
    SandboxOptions o;
    o.name = name;
    o.state_dir = state_;
    auto sb = std::make_unique<Sandbox>(host_, o);
    EXPECT_TRUE(sb->mounted()) << sb->mount_failure();
    return sb;
  }
  CommandResult Acqfs(std::vector<std::string> args) {
    std::vector<std::string> argv = {AcqfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(state_);
    return RunCommand(argv, 120, host_, GitEnv(home_));
  }
  nlohmann::json Json(std::vector<std::string> args) {
    args.push_back("--json");
    CommandResult r = Acqfs(args);
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.Describe();
    return j;
  }
  nlohmann::json Meta(const std::string& name = "x") {
    std::string text;
    EXPECT_TRUE(ReadFile(state_ + "/" + name + "/meta.json", &text));
    return nlohmann::json::parse(text, nullptr, false);
  }
  void WriteMeta(const nlohmann::json& j, const std::string& name = "x") {
    ASSERT_TRUE(WriteFile(state_ + "/" + name + "/meta.json", j.dump(2)));
  }

  TempDir tmp_;
  std::string home_, host_, state_;
};

TEST_F(Base, TheFirstMountRecordsItAndTheSandboxsGitIsItsOwn) {
  const std::string c0 = Host("git rev-parse HEAD");
  Host("echo staged > s.txt && git add s.txt && git checkout -qb work");
  auto sb = Mount();
  nlohmann::json base = Meta()["base"];
  EXPECT_EQ(base["state"], "recorded");
  EXPECT_EQ(base["head"], c0);
  EXPECT_EQ(base["branch"], "work");
  EXPECT_EQ(base["branches"]["main"], c0);
  EXPECT_EQ(base["own_git"], true);
  EXPECT_EQ(base["index"], "copied");
  // status --json and ls --json show it.
  EXPECT_EQ(Json({"status", "x"})["base"]["head"], c0);
  nlohmann::json ls = Json({"ls"});
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0]["base"]["branch"], "work");
  // The host moves: a commit, a branch, a merge in progress, a lock file.
  Host(
      "git commit -qm c1 && git checkout -qb later && "
      "echo ref > .git/MERGE_HEAD && touch .git/index.lock");
  std::string out;
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "git rev-parse HEAD; git branch --show-current; "
                    "git branch --format='%(refname:short)'; "
                    "git status --porcelain",
                    home_, &out));
  EXPECT_EQ(out, c0 + "\nwork\nmain\nwork\nA  s.txt\n");
  // The agent's git writes its own .git; the host's is untouched.
  ASSERT_TRUE(RunIn(sb->mountpoint(), "git commit -qm agent", home_));
  EXPECT_EQ(Host("git rev-parse work"), Host("git rev-parse later"));
  EXPECT_EQ(Host("git log -1 --format=%s work"), "c1");
  Host("rm .git/MERGE_HEAD .git/index.lock");
}

// A first mount killed while it recorded the base: before the copy of
// the host's .git was published the next mount records the base anew (now);
// after it, the next mount finishes from the copy (what the host had then).
TEST_F(Base, AnInterruptedRecordingIsRecordedAnewOrFinished) {
  const std::string c0 = Host("git rev-parse HEAD");
  {
    auto sb = Mount();
    ASSERT_TRUE(sb->Unmount());
  }
  const std::string upper = SandboxUpper(state_, "x");
  nlohmann::json meta = Meta();
  // Killed before the copy was published: no upper .git, junk in work.
  meta["base"]["state"] = "recording";
  WriteMeta(meta);
  Sh("rm -rf " + ShellQuote(upper + "/.git"));
  Sh("mkdir -p " + ShellQuote(state_ + "/x/work/acqfs-base/refs"));
  Host("git commit -q --allow-empty -m c1");
  const std::string c1 = Host("git rev-parse HEAD");
  {
    auto sb = Mount();
    EXPECT_EQ(Meta()["base"]["state"], "recorded");
    EXPECT_EQ(Meta()["base"]["head"], c1);
    EXPECT_FALSE(Exists(state_ + "/x/work/acqfs-base"));
    std::string head;
    ASSERT_TRUE(RunIn(sb->mountpoint(), "git rev-parse HEAD", home_, &head));
    EXPECT_EQ(head, c1 + "\n");
    ASSERT_TRUE(sb->Unmount());
  }
  // Killed after the copy was published: the copy is the base.
  meta = Meta();
  meta["base"]["state"] = "recording";
  meta["base"]["head"] = "";
  WriteMeta(meta);
  Host("git commit -q --allow-empty -m c2");
  auto sb = Mount();
  EXPECT_EQ(Meta()["base"]["head"], c1);
  std::string head;
  ASSERT_TRUE(RunIn(sb->mountpoint(), "git rev-parse HEAD", home_, &head));
  EXPECT_EQ(head, c1 + "\n");
  (void)c0;
}

// The daemon's copy of the index did not finish: copied at the next mount
// if the host's index is still the base's; else rebuilt from the base's
// HEAD, and said.
TEST_F(Base, ALostIndexCopyIsCopiedAgainOrRebuilt) {
  Host("echo staged > s.txt && git add s.txt");
  {
    auto sb = Mount();
    ASSERT_TRUE(sb->Unmount());
  }
  const std::string upper = SandboxUpper(state_, "x");
  nlohmann::json meta = Meta();
  meta["base"]["index"] = "pending";
  WriteMeta(meta);
  ASSERT_SYS_OK(::unlink((upper + "/.git/index").c_str()));
  {
    auto sb = Mount();
    std::string st;
    ASSERT_TRUE(RunIn(sb->mountpoint(), "git status --porcelain", home_, &st));
    EXPECT_EQ(st, "A  s.txt\n");  // the host's index, staged file and all
    EXPECT_EQ(Meta()["base"]["index"], "copied");
    ASSERT_TRUE(sb->Unmount());
  }
  meta = Meta();
  meta["base"]["index"] = "pending";
  WriteMeta(meta);
  ASSERT_SYS_OK(::unlink((upper + "/.git/index").c_str()));
  Host("git reset -q");  // the host's index is another one now
  SandboxOptions o;
  o.name = "x";
  o.state_dir = state_;
  Sandbox sb(host_, o);
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  EXPECT_EQ(Meta()["base"]["index"], "rebuilt");
  std::string st;
  ASSERT_TRUE(RunIn(sb.mountpoint(), "git status --porcelain", home_, &st));
  EXPECT_EQ(st, "?? s.txt\n");  // HEAD's tree: nothing staged
}

// kill -9 of `acqfs mount` at random instants of a first mount: the next
// mount always comes up with a whole base whose HEAD is the host's, and a
// git that works.
TEST_F(Base, KillNineDuringTheFirstMountLeavesAWholeBase) {
  for (int i = 0; i < 30; ++i) Host("echo $RANDOM > r" + std::to_string(i));
  Host("git add -A && git commit -qm many");
  const std::string head = Host("git rev-parse HEAD");
  std::mt19937 rng(42);
  for (int round = 0; round < 12; ++round) {
    const std::string name = "k" + std::to_string(round);
    const std::string mnt = tmp_.Sub("mnt-" + name);
    ASSERT_SYS_OK(::mkdir(mnt.c_str(), 0755));
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl(AcqfsBinary().c_str(), "acqfs", "mount", host_.c_str(),
              mnt.c_str(), "--name", name.c_str(), "--state-dir",
              state_.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 12000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Whatever it left (a daemon it forked, a mount) is taken down.
    (void)Acqfs({"umount", name, "--no-export"});
    CommandResult again = Acqfs({"mount", host_, mnt, "--name", name});
    ASSERT_TRUE(again.ok()) << "round " << round << ": " << again.Describe();
    std::string out;
    EXPECT_TRUE(
        RunIn(mnt, "git rev-parse HEAD; git status --porcelain", home_, &out))
        << "round " << round;
    EXPECT_EQ(out, head + "\n") << "round " << round;
    EXPECT_EQ(Meta(name)["base"]["head"], head);
    EXPECT_TRUE(Acqfs({"umount", name, "--no-export"}).ok());
  }
}

TEST_F(Base, StatusAndExportMarkPathsTheHostChangedToo) {
  Host("sed -i s/^c1$/c1-early/ c.txt");  // uncommitted before the mount
  auto sb = Mount();
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "sed -i s/^a2$/a2-agent/ a.txt\n"
                    "sed -i s/^b2$/b2-agent/ b.txt\n"
                    "sed -i s/^c2$/c2-agent/ c.txt\n"
                    "echo new > new.txt\n",
                    home_));
  // The host commits a.txt, renames b.txt in a commit; c.txt was its own
  // uncommitted change from before the mount: not a change since the base.
  Host(
      "sed -i s/^a9$/a9-host/ a.txt && git commit -qm a a.txt && "
      "git mv b.txt b2.txt && git commit -qm mv");
  nlohmann::json st = Json({"status", "x"});
  std::map<std::string, nlohmann::json> host;
  for (const auto& c : st["changes"]) host[c["path"]] = c["host"];
  ASSERT_EQ(host.size(), 4u) << st.dump(2);
  ASSERT_TRUE(host["a.txt"].is_array()) << st.dump(2);
  EXPECT_EQ(host["a.txt"][0]["change"], "committed");
  ASSERT_TRUE(host["b.txt"].is_array()) << st.dump(2);
  EXPECT_EQ(host["b.txt"][0]["change"], "committed-renamed");
  EXPECT_EQ(host["b.txt"][0]["renamed_to"], "b2.txt");
  EXPECT_TRUE(host["c.txt"].is_null()) << st.dump(2);
  EXPECT_TRUE(host["new.txt"].is_null());
  // An uncommitted change of the host's since the base.
  Host("sed -i s/^c9$/c9-host/ c.txt");
  st = Json({"status", "x"});
  for (const auto& c : st["changes"])
    if (c["path"] == "c.txt") {
      ASSERT_TRUE(c["host"].is_array()) << st.dump(2);
      EXPECT_EQ(c["host"][0]["change"], "uncommitted");
    }
  CommandResult text = Acqfs({"status", "x"});
  EXPECT_NE(text.out.find("M a.txt  (host: changed in a commit since the "
                          "base)"),
            std::string::npos)
      << text.out;
  // export says the same.
  nlohmann::json ex = Json({"export", "x"});
  std::set<std::string> marked;
  for (const auto& h : ex["host_changed"]) marked.insert(h["path"]);
  EXPECT_EQ(marked, (std::set<std::string>{"a.txt", "b.txt", "c.txt"}))
      << ex.dump(2);
}

TEST_F(Base, ApplyMergesEachFileAgainstTheBaseAllOrNothing) {
  auto sb = Mount();
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "sed -i s/^a2$/a2-agent/ a.txt\n"
                    "git rm -q b.txt && git commit -qm 'agent: no b'\n"
                    "mkdir -p d && echo new > d/new.txt\n"
                    "echo noise > x.log\n",
                    home_));
  // The host edits a.txt elsewhere (uncommitted) meanwhile.
  Host("sed -i s/^a9$/a9-host/ a.txt");
  const std::string before = Host("git status --porcelain");
  // --check says it applies and writes nothing.
  CommandResult check = Acqfs({"apply", "x", "--check"});
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
  EXPECT_EQ(Host("git status --porcelain"), before);
  CommandResult r = Acqfs({"apply", "x"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::string a;
  ASSERT_TRUE(ReadFile(host_ + "/a.txt", &a));
  EXPECT_NE(a.find("a2-agent\n"), std::string::npos) << a;
  EXPECT_NE(a.find("a9-host\n"), std::string::npos) << a;
  EXPECT_FALSE(Exists(host_ + "/b.txt"));
  EXPECT_FALSE(Exists(host_ + "/x.log"));  // ignored: not the agent's work
  std::string n;
  ASSERT_TRUE(ReadFile(host_ + "/d/new.txt", &n));
  EXPECT_EQ(n, "new\n");
  // Staged, as `git apply --3way` leaves them; HEAD did not move.
  EXPECT_EQ(Host("git diff --cached --name-status"),
            "M\ta.txt\nD\tb.txt\nA\td/new.txt");
  EXPECT_EQ(Host("git log --format=%s"), "c0");
}

TEST_F(Base, ApplyWritesNothingWhenAnythingConflicts) {
  auto sb = Mount();
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "sed -i s/^a2$/a2-agent/ a.txt\n"
                    "sed -i s/^b5$/b5-agent/ b.txt\necho n > n.txt\n",
                    home_));
  Host("sed -i s/^b5$/b5-host/ b.txt");
  const auto before = TreeFiles(host_);
  const std::string index = Host("git ls-files -s");
  for (bool check : {true, false}) {
    std::vector<std::string> args = {"apply", "x"};
    if (check) args.push_back("--check");
    CommandResult r = Acqfs(args);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_NE(r.out.find("C b.txt: both changed the same lines"),
              std::string::npos)
        << r.Describe();
    EXPECT_EQ(TreeFiles(host_), before);
    EXPECT_EQ(Host("git ls-files -s"), index);
  }
  // Limited to a path that does not conflict, it applies.
  CommandResult only = Acqfs({"apply", "x", "a.txt"});
  EXPECT_EQ(only.exit_code, 0) << only.Describe();
  EXPECT_EQ(Host("git diff --cached --name-only"), "a.txt");
  EXPECT_FALSE(Exists(host_ + "/n.txt"));
}

TEST_F(Base, ApplyRefusesABusyHostAPathOutsideAndAConflictMarker) {
  auto sb = Mount();
  ASSERT_TRUE(
      RunIn(sb->mountpoint(), "sed -i s/^a2$/a2-agent/ a.txt\n", home_));
  const auto before = TreeFiles(host_);
  struct Case {
    std::string setup, undo;
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"echo x > .git/MERGE_HEAD", "rm .git/MERGE_HEAD", {}, "MERGE_HEAD"},
      {"mkdir .git/rebase-merge",
       "rmdir .git/rebase-merge",
       {},
       "rebase-merge"},
      {"touch .git/index.lock", "rm .git/index.lock", {}, "index.lock"},
      {"", "", {"/etc/passwd"}, "outside the checkout"},
      {"", "", {"../x"}, "outside the checkout"},
      {"", "", {".git/config"}, ".git"},
      {"printf '<<<<<<< HEAD\\nx\\n=======\\ny\\n>>>>>>> o\\n' >> a.txt",
       "git checkout -q a.txt",
       {},
       "conflict marker"},
  };
  for (const Case& c : cases) {
    if (!c.setup.empty()) Host(c.setup);
    const auto now = TreeFiles(host_);
    std::vector<std::string> args = {"apply", "x"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    CommandResult r = Acqfs(args);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.Describe();
    EXPECT_EQ(TreeFiles(host_), now) << c.says;
    if (!c.undo.empty()) Host(c.undo);
  }
  EXPECT_EQ(TreeFiles(host_), before);
}

// The sandbox replaces a host symlink to a directory outside the checkout
// by a directory of its own: apply never writes through the host's link.
TEST_F(Base, ApplyNeverWritesThroughAHostSymlink) {
  const std::string outside = tmp_.Sub("outside");
  ASSERT_SYS_OK(::mkdir(outside.c_str(), 0755));
  Host("ln -s " + ShellQuote(outside) +
       " out && git add out && "
       "git commit -qm link");
  auto sb = Mount();
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "rm out && mkdir out && echo pwned > out/x\n", home_));
  CommandResult r = Acqfs({"apply", "x"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.out.find("out/x"), std::string::npos) << r.Describe();
  EXPECT_EQ(ListDir(outside).size(), 0u);
  EXPECT_EQ(Host("readlink out"), outside);
}

// Two sandboxes of one host, each against its own clone made at the same
// instant: every line of both agents and of the host ends up in the host,
// as with the clones.
TEST_F(Base, TwoSandboxesOfOneHostMergeAsTwoClones) {
  CloneWorld world_a, world_b;
  ASSERT_TRUE(CloneWorld::Make(host_, tmp_.Sub("wa"), home_, &world_a));
  auto a = Mount("a");
  auto b = Mount("b");
  const std::string agent_a = "sed -i s/^a2$/a2-A/ a.txt\n";
  const std::string agent_b = "sed -i s/^a5$/a5-B/ a.txt\ngit commit -qam B\n";
  const std::string host_move =
      "sed -i s/^a9$/a9-host/ a.txt\n"
      "git commit -qam host\n";
  ASSERT_TRUE(RunIn(a->mountpoint(), agent_a, home_));
  ASSERT_TRUE(RunIn(b->mountpoint(), agent_b, home_));
  // The second clone shares the first world's host copy.
  ASSERT_TRUE(RunIn(tmp_.path(),
                    "git clone -q " + ShellQuote(world_a.host()) + " cb\n",
                    home_));
  ASSERT_TRUE(RunIn(world_a.clone(), agent_a, home_));
  ASSERT_TRUE(RunIn(tmp_.Sub("cb"), agent_b, home_));
  Host(host_move);
  ASSERT_TRUE(RunIn(world_a.host(), host_move, home_));
  ASSERT_TRUE(a->Unmount());
  ASSERT_TRUE(b->Unmount());
  Host("git fetch -q sandbox-a && git fetch -q sandbox-b");
  ASSERT_TRUE(world_a.Export());
  ASSERT_TRUE(RunIn(world_a.host(),
                    "git fetch -q " + ShellQuote(tmp_.Sub("cb")) +
                        " '+refs/heads/*:refs/remotes/cb/*'",
                    home_));
  MergeOutcome ours_a = MergeInto(host_, "sandbox-a/acqfs-worktree", home_);
  MergeOutcome ours_b = MergeInto(host_, "sandbox-b/acqfs-worktree", home_);
  MergeOutcome theirs_a =
      MergeInto(world_a.host(), "clone/acqfs-worktree", home_);
  MergeOutcome theirs_b = MergeInto(world_a.host(), "cb/main", home_);
  EXPECT_FALSE(ours_a.conflict);
  EXPECT_FALSE(ours_b.conflict);
  EXPECT_EQ(ours_b.files, theirs_b.files);
  EXPECT_EQ(ours_b.conflict, theirs_b.conflict);
  EXPECT_EQ(ours_a.conflict, theirs_a.conflict);
  std::string a_txt;
  ASSERT_TRUE(ReadFile(host_ + "/a.txt", &a_txt));
  for (const char* line : {"a2-A\n", "a5-B\n", "a9-host\n"})
    EXPECT_NE(a_txt.find(line), std::string::npos) << a_txt;
}

// The host's git rewrites its index, HEAD, refs and packed-refs in a loop
// while the sandbox exports, and reports what the host changed: every
// export succeeds, and publishes the same work on the same base.
TEST_F(Base, ExportsWhileTheHostRewritesItsIndexHeadAndPackedRefs) {
  auto sb = Mount();
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "sed -i s/^a2$/a2-agent/ a.txt\necho n > new.txt\n",
                    home_));
  const std::string base = Meta()["base"]["head"];
  std::atomic<bool> stop{false};
  std::thread host([&] {
    int i = 0;
    while (!stop.load()) {
      std::string n = std::to_string(i++);
      CommandResult r = RunShell(
          "git commit -q --allow-empty -m h" + n + " && git branch -f b" + n +
              " && git pack-refs --all"
              " && git update-index --refresh >/dev/null || true"
              " && sed -i 's/^c5.*/c5-" +
              n + "/' c.txt && git add c.txt",
          60, host_, GitEnv(home_));
      (void)r;
    }
  });
  std::string tree;
  for (int round = 0; round < 15; ++round) {
    nlohmann::json j = Json({"export", "x"});
    ASSERT_TRUE(j.is_object());
    EXPECT_TRUE(j["refused"].empty()) << j.dump(2);
    EXPECT_EQ(j["base_commit"], base) << j.dump(2);
    const std::string parent = j["worktree_parent"];
    EXPECT_TRUE(parent.empty() || parent == base) << j.dump(2);
    CommandResult st = Acqfs({"status", "x", "--json"});
    EXPECT_TRUE(st.ok()) << st.Describe();
  }
  stop = true;
  host.join();
  Host("git fetch -q sandbox-x");
  EXPECT_EQ(Host("git diff --name-only " + base + " sandbox-x/acqfs-worktree"),
            "a.txt\nnew.txt");
}

// The host deletes the branch the sandbox is based on, rewrites its
// history and runs `git gc --prune=now` between the mount and the export:
// the base commit stays reachable through the host's HEAD reflog, so the
// sandbox's git and the export keep working (what the base does not keep
// yet: docs/git-bridge.md, "What the base does not cover yet").
TEST_F(Base, AHostGcAfterItsBranchWentKeepsTheSandboxAndTheExportWorking) {
  Host(
      "git checkout -qb feat && sed -i s/^b1$/b1-feat/ b.txt && "
      "git commit -qam feat");
  const std::string feat = Host("git rev-parse HEAD");
  auto sb = Mount();
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "sed -i s/^a2$/a2-agent/ a.txt\ngit commit -qam agent\n"
                    "echo later > later.txt\n",
                    home_));
  Host(
      "git checkout -q main && git branch -D feat >/dev/null && "
      "git commit -q --allow-empty -m c1 && git gc -q --prune=now");
  std::string out;
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "git fsck --no-progress --connectivity-only HEAD "
                    ">/dev/null && git log --format=%s -3 && "
                    "git status --porcelain",
                    home_, &out));
  // b.txt: the host's switch back to main rewrote it, and the sandbox
  // sees the host's files live.
  EXPECT_EQ(out, "agent\nfeat\nc0\n M b.txt\n?? later.txt\n");
  ASSERT_TRUE(sb->Unmount());
  Host("git fetch -q sandbox-x");
  EXPECT_EQ(Host("git rev-parse sandbox-x/acqfs-worktree~1~1"), feat);
  EXPECT_EQ(Host("git show sandbox-x/acqfs-worktree:later.txt"), "later");
  CommandResult rm = Acqfs({"rm", "x"});
  EXPECT_EQ(rm.exit_code, 0) << rm.Describe();
}

// The base's other branches (the sandbox's copy of .git names their tips)
// outlive the host's deleting them and pruning at once: refs of the host's
// keep them (refs/acqfs-keep/<name>/), so the sandbox's git log, checkout,
// fsck and gc of them work as in a clone. A fork keeps its own; rm removes
// them and leaves no empty directory.
TEST_F(Base, TheBasesOtherBranchesOutliveTheHostsDeletionAndGc) {
  Host(
      "git checkout -qb other && sed -i s/^b2$/b2-other/ b.txt && "
      "git commit -qam other && git checkout -qb topic/deep && "
      "sed -i s/^c2$/c2-deep/ c.txt && git commit -qam deep && "
      "git checkout -q main");
  const std::string other = Host("git rev-parse other");
  const std::string deep = Host("git rev-parse topic/deep");
  auto sb = Mount();
  EXPECT_EQ(Host("git for-each-ref --format='%(refname) %(objectname)' "
                 "refs/acqfs-keep"),
            "refs/acqfs-keep/x/other " + other +
                "\nrefs/acqfs-keep/x/topic/deep " + deep);
  CommandResult fork = Acqfs({"fork", "x", "y"});
  ASSERT_EQ(fork.exit_code, 0) << fork.Describe();
  EXPECT_EQ(Host("git rev-parse refs/acqfs-keep/y/other"), other);
  Host(
      "git branch -q -D other topic/deep && "
      "git reflog expire --expire=now --all && git gc -q --prune=now");
  std::string out;
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "git log --format=%s -1 other && "
                    "git log --format=%s -1 topic/deep && "
                    "git fsck --no-progress >/dev/null && git gc -q && "
                    "git checkout -q other && git rev-parse HEAD",
                    home_, &out));
  EXPECT_EQ(out, "other\ndeep\n" + other + "\n");
  ASSERT_TRUE(sb->Unmount());
  for (const char* name : {"y", "x"}) {
    CommandResult rm = Acqfs({"rm", name, "--force"});
    EXPECT_EQ(rm.exit_code, 0) << rm.Describe();
  }
  EXPECT_EQ(Host("git for-each-ref refs/acqfs-keep refs/acqfs-base"), "");
  EXPECT_FALSE(Exists(host_ + "/.git/refs/acqfs-keep"));
  EXPECT_FALSE(Exists(host_ + "/.git/refs/acqfs-base"));
}

// What the host had staged at the mount (a change, a new file) is in the
// sandbox's index; the host unstages it and prunes: the sandbox's `git
// diff --cached`, `git fsck` and `git commit` still work, as a clone's
// would with the same files staged, because the base's copy of the index
// had its objects copied into the upper (gitbridge/index_objects.h).
TEST_F(Base, WhatTheHostStagedOutlivesItsUnstagingAndGc) {
  Host(
      "sed -i s/^a3$/a3-staged/ a.txt && echo new > s.txt && "
      "git add a.txt s.txt && sed -i s/^a5$/a5-unstaged/ a.txt");
  const std::string staged = Host("git rev-parse :s.txt");
  auto sb = Mount();
  std::string out;
  ASSERT_TRUE(RunIn(sb->mountpoint(), "git status --porcelain", home_, &out));
  EXPECT_EQ(out, "MM a.txt\nA  s.txt\n");
  EXPECT_EQ(Meta()["base"]["index_objects"], 2);
  Host(
      "git reset -q --hard && git reflog expire --expire=now --all && "
      "git gc -q --prune=now");
  EXPECT_NE(Host("git cat-file -e " + staged + " 2>&1 || echo gone"), "")
      << "the host still has the staged blob: the test proves nothing";
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "git diff --cached --stat | tail -1 && "
                    "git fsck --no-progress && "
                    "git commit -qm agent && git show HEAD:s.txt && "
                    "git show HEAD:a.txt | grep -c staged",
                    home_, &out));
  EXPECT_EQ(out, " 2 files changed, 2 insertions(+), 1 deletion(-)\nnew\n1\n");
  ASSERT_TRUE(sb->Unmount());
}

// A daemon killed after its copy of the index and before it had copied
// what the index names beyond HEAD leaves "index": "pending" with the copy
// in place: the next mount copies the objects.
TEST_F(Base, KeepingCutShortIsDoneAtTheNextMount) {
  Host("echo new > s.txt && git add s.txt");
  const std::string id = Host("git rev-parse :s.txt");
  {
    auto sb = Mount();
    ASSERT_TRUE(sb->Unmount());
  }
  const std::string loose = SandboxUpper(state_, "x") + "/.git/objects/" +
                            id.substr(0, 2) + "/" + id.substr(2);
  ASSERT_TRUE(Exists(loose));
  ASSERT_SYS_OK(::unlink(loose.c_str()));
  nlohmann::json meta = Meta();
  meta["base"]["index"] = "pending";
  WriteMeta(meta);
  auto sb = Mount();
  EXPECT_EQ(Meta()["base"]["index"], "copied");
  EXPECT_TRUE(Exists(loose));
  ASSERT_TRUE(sb->Unmount());
}

// The other objects the sandbox's copy of .git names: an annotated tag on
// a branch the host then deletes, a lightweight tag, a remote-tracking
// branch `git fetch --prune` would drop, and two stash entries. The host
// deletes them all and prunes; the sandbox's git (and its fork's) still
// reads them, and `acqfs rm` takes the keep refs away.
TEST_F(Base, TagsRemoteBranchesAndTheStashOutliveTheHostsDeletionAndGc) {
  Host(
      "git checkout -qb rel && sed -i s/^b4$/b4-rel/ b.txt && "
      "git commit -qam rel && git tag -a v1 -m release && "
      "git checkout -qb wip && sed -i s/^b6$/b6-wip/ b.txt && "
      "git commit -qam wip && git tag light && "
      "git update-ref refs/remotes/origin/gone HEAD && "
      "git checkout -q main && git branch -q -D rel wip && "
      "sed -i s/^c1$/c1-s1/ c.txt && git stash -q && "
      "sed -i s/^c2$/c2-s2/ c.txt && git stash -q");
  auto sb = Mount();
  CommandResult fork = Acqfs({"fork", "x", "y"});
  ASSERT_EQ(fork.exit_code, 0) << fork.Describe();
  EXPECT_EQ(Host("git for-each-ref refs/acqfs-tips/x | wc -l"), "4");
  EXPECT_EQ(Host("git for-each-ref refs/acqfs-tips/y | wc -l"), "4");
  Host(
      "git tag -d v1 light >/dev/null && git update-ref -d "
      "refs/remotes/origin/gone && git stash clear && "
      "git reflog expire --expire=now --all && git gc -q --prune=now");
  std::string out;
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "git cat-file -t v1 && git log --format=%s -1 v1 && "
                    "git log --format=%s -1 light && "
                    "git log --format=%s -1 origin/gone && "
                    "git stash list | wc -l && "
                    "git stash show -p stash@{1} | grep '^+c' && "
                    "git fsck --no-progress && git stash pop -q && "
                    "grep -c c2-s2 c.txt",
                    home_, &out));
  EXPECT_EQ(out, "tag\nrel\nwip\nwip\n2\n+c1-s1\n1\n");
  ASSERT_TRUE(sb->Unmount());
  for (const char* name : {"y", "x"}) {
    CommandResult rm = Acqfs({"rm", name, "--force"});
    EXPECT_EQ(rm.exit_code, 0) << rm.Describe();
  }
  EXPECT_EQ(Host("git for-each-ref refs/acqfs-tips"), "");
  EXPECT_FALSE(Exists(host_ + "/.git/refs/acqfs-tips"));
}

// The sandbox's git lists the loose objects' fan-out directories (`git
// fsck`, `git count-objects`, `git prune`); the host's gc then packs the
// loose objects and deletes them. The listing the kernel had cached named
// the deleted files for the attribute timeout: the next `git fsck` failed
// ("unable to mmap ...: No such file or directory"). Fan-out directories
// are store directories now (Overlay::SharedObjectStoreDir).
TEST_F(Base, AHostGcBetweenTwoFscksLeavesNoLooseObjectBehind) {
  Host("for i in 1 2 3 4 5 6; do echo $i >> a.txt; git commit -qam c$i; done");
  ASSERT_NE(
      Host("find .git/objects -type f -path '*/[0-9a-f][0-9a-f]/*' | wc -l"),
      "0");
  auto sb = Mount();
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "git fsck --no-progress --no-dangling && "
                    "git count-objects -v >/dev/null",
                    home_));
  Host("git gc -q --prune=now");
  ASSERT_EQ(
      Host("find .git/objects -type f -path '*/[0-9a-f][0-9a-f]/*' | wc -l"),
      "0");
  std::string out;
  EXPECT_TRUE(RunIn(sb->mountpoint(),
                    "git fsck --no-progress --no-dangling 2>&1 && "
                    "git count-objects | cut -d' ' -f1",
                    home_, &out))
      << out;
  EXPECT_EQ(out, "0\n");
  ASSERT_TRUE(sb->Unmount());
}

// The host's reflogs name commits only they reach (an amended commit, a
// reset): the copy leaves them out, so that the host expiring its reflogs
// and pruning leaves the sandbox's `git fsck` passing, as a clone's, whose
// reflogs begin at the clone. The sandbox's begin at the mount; the
// kernel overlayfs over the same layers hides the host's too (opaque).
TEST_F(Base, ReflogsBeginAtTheMountSoTheHostsPruneBreaksNoFsck) {
  Host(
      "sed -i s/^a1$/a1-x/ a.txt && git commit -qam x && "
      "git commit -q --amend -m y && git reset -q --hard HEAD~1 && "
      "git reset -q --hard 'HEAD@{1}'");
  auto sb = Mount();
  Host("git reflog expire --expire=now --all && git gc -q --prune=now");
  std::string out;
  ASSERT_TRUE(RunIn(sb->mountpoint(),
                    "git fsck --no-progress --no-dangling 2>&1 && "
                    "git reflog | wc -l && git commit -q --allow-empty -m z "
                    "&& git reflog | wc -l",
                    home_, &out));
  EXPECT_EQ(out, "0\n1\n");
  ASSERT_TRUE(sb->Unmount());
}

// A submodule's repository (.git/modules/<name>) is the sandbox's own from
// the mount too, as .git is: the host checking another commit out in the
// submodule, unstaging there, deleting its tag and pruning leaves the
// sandbox's submodule at its HEAD, with its staged file, tag and a working
// `git commit` and `git fsck`; the keep refs in the submodule's repository
// go with `acqfs rm`. It used to be shared: the submodule's HEAD, index
// and refs followed the host's.
TEST_F(Base, ASubmodulesGitIsItsOwnToo) {
  ASSERT_TRUE(RunIn(tmp_.path(),
                    "git init -q -b main lib && cd lib && echo l1 > l.txt && "
                    "git add -A && git commit -qm l1 && echo l2 > l.txt && "
                    "git commit -qam l2 && git tag -a lt -m lt",
                    home_));
  Host(
      "git -c protocol.file.allow=always submodule -q add ../lib sub/lib && "
      "git commit -qm sub && cd sub/lib && git checkout -q HEAD~1 && "
      "echo staged > s.txt && git add s.txt");
  const std::string l1 = Host("git -C sub/lib rev-parse HEAD");
  auto sb = Mount();
  EXPECT_EQ(Meta()["policy"]["own_git_modules"],
            nlohmann::json::array({".git/modules/sub/lib"}));
  CommandResult fork = Acqfs({"fork", "x", "y"});
  ASSERT_EQ(fork.exit_code, 0) << fork.Describe();
  const std::string sub_git = host_ + "/.git/modules/sub/lib";
  EXPECT_EQ(Host("git --git-dir=" + sub_git +
                 " for-each-ref --format='%(refname)' refs/acqfs-base"),
            "refs/acqfs-base/x\nrefs/acqfs-base/y");
  Host(
      "cd sub/lib && git reset -q && rm s.txt && git checkout -q main && "
      "git tag -d lt >/dev/null && git reflog expire --expire=now --all && "
      "git gc -q --prune=now");
  std::string out;
  ASSERT_TRUE(RunIn(sb->mountpoint() + "/sub/lib",
                    "git rev-parse HEAD && git status --porcelain | grep s.txt "
                    "&& git log --format=%s -1 lt && "
                    "git fsck --no-progress --no-dangling && "
                    "git commit -qm agent && git log --format=%s -2",
                    home_, &out));
  EXPECT_EQ(out, l1 + "\nAD s.txt\nl2\nagent\nl1\n");
  ASSERT_TRUE(sb->Unmount());
  for (const char* name : {"y", "x"}) {
    CommandResult rm = Acqfs({"rm", name, "--force"});
    EXPECT_EQ(rm.exit_code, 0) << rm.Describe();
  }
  EXPECT_EQ(Host("git --git-dir=" + sub_git +
                 " for-each-ref refs/acqfs-base refs/acqfs-keep "
                 "refs/acqfs-tips"),
            "");
}

// A second sandbox's copy of .git holds none of acqfs's own refs but its
// own base's: not the first sandbox's keep refs, nor what the host fetched
// from its bridge (loose or packed). A remote of the user's that is merely
// named sandbox-... stays. So no sandbox sees another's work, nor keeps it.
TEST_F(Base, ASandboxsCopyOfGitHoldsNoneOfAcqfsOwnRefs) {
  Host(
      "git tag -a v1 -m v1 && "
      "git config remote.sandbox-prod.url /nowhere && "
      "git config remote.sandbox-prod.fetch "
      "'+refs/heads/*:refs/remotes/sandbox-prod/*' && "
      "git update-ref refs/remotes/sandbox-prod/main HEAD");
  {
    auto a = Mount("a");
    ASSERT_TRUE(RunIn(a->mountpoint(), "echo work > w.txt", home_));
    ASSERT_TRUE(a->Unmount());  // exports
  }
  Host(
      "git fetch -q sandbox-a && git pack-refs --all && git fetch -q "
      "sandbox-a");
  ASSERT_NE(Host("git for-each-ref refs/sandboxes refs/remotes/sandbox-a"), "");
  auto b = Mount("b");
  std::string out;
  ASSERT_TRUE(RunIn(b->mountpoint(),
                    "git for-each-ref --format='%(refname)' && "
                    "git fsck --no-progress --no-dangling",
                    home_, &out));
  EXPECT_EQ(out,
            "refs/acqfs-base/b\nrefs/heads/main\n"
            "refs/remotes/sandbox-prod/main\nrefs/tags/v1\n");
  // Only its own tips: the tag (main is kept as the base).
  EXPECT_EQ(Host("git for-each-ref refs/acqfs-tips/b | wc -l"), "1");
  ASSERT_TRUE(b->Unmount());
}

}  // namespace
}  // namespace acqfs::test
