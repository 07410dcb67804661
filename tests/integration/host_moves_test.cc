// The host keeps working while a sandbox lives (docs/git-bridge.md, "The
// base"). Every test runs the same agent steps in an acqfs sandbox and in a
// clone made at the mount (harness/clone_oracle.h), then the same host
// steps in the sandbox's host and in a byte-for-byte copy of it (commit,
// delete, rename, amend, reset, pull, branch switch, stash), then brings
// each agent's work back into its own host the same way, and checks:
//   - the sandbox's git (HEAD, branch, index, log) did not move with the
//     host's, and is the clone's;
//   - its `git status` is the clone's before the host moved, and after
//     it, but for the paths the host changed after the mount (the sandbox
//     sees the host's files live: docs/architecture.md, "Host edits while
//     mounted");
//   - the merge's outcome (a conflict or none, the files, the host's
//     status) is the clone's: git got to do a true 3-way merge.
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness/binaries.h"
#include "harness/clone_oracle.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

// Merges the sandbox's working-tree commit into `host` and the clone's into
// its copy of the host, the same way, and expects the same outcome: a
// conflict or none, the host's status and its files.
void ExpectMergesAlike(const std::string& host, const CloneWorld& world,
                       const std::string& home) {
  MergeOutcome ours = MergeInto(host, "sandbox-x/acqfs-worktree", home);
  MergeOutcome oracle = MergeInto(world.host(), "clone/acqfs-worktree", home);
  EXPECT_EQ(ours.conflict, oracle.conflict) << "acqfs:\n"
                                            << ours.Describe() << "clone:\n"
                                            << oracle.Describe();
  EXPECT_EQ(ours.status, oracle.status);
  EXPECT_EQ(ours.files, oracle.files) << "acqfs:\n"
                                      << ours.Describe() << "clone:\n"
                                      << oracle.Describe();
}

enum class AgentCommits { kNone, kOnMain, kOnBranch };
void PrintTo(AgentCommits a, std::ostream* os) {
  *os << (a == AgentCommits::kNone     ? "commits nothing"
          : a == AgentCommits::kOnMain ? "commits on main"
                                       : "commits on a branch");
}

struct HostMove {
  const char* name;
  const char* script;  // run in the host after the agent's steps
  bool needs_dirty;    // the move needs uncommitted host work (stash)
};

const HostMove kMoves[] = {
    {"Commit", "sed -i s/^a9$/a9-host/ a.txt\ngit commit -qam host", false},
    {"Delete", "git rm -q a.txt\ngit commit -qm delete", false},
    {"Rename", "git mv a.txt a-renamed.txt\ngit commit -qm rename", false},
    {"Amend", "sed -i s/^a9$/a9-amend/ a.txt\ngit commit -q --amend -am amend",
     false},
    {"Reset", "git reset -q --keep HEAD~1", false},
    {"Pull", "git pull -q --ff-only origin main", false},
    {"SwitchBranch", "git checkout -q other", false},
    {"Stash", "git stash push -q", true},
};

// The host of every test here: a clone of an upstream, with a branch of
// its own and a commit upstream to pull.
class HostRepo : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    tmp_.MakeDir("home", 0755);
    home_ = tmp_.Sub("home");
    host_ = tmp_.Sub("host");
    // upstream: c0, then c1 (a5); the host clones it; then upstream gains
    // c2 (a7, d.txt) for the host to pull; the host has a branch `other`.
    ASSERT_TRUE(RunIn(
        tmp_.path(),
        std::string(kLinesFunction) +
            "git init -q -b main up && cd up\n"
            "lines a.txt a; lines b.txt b; lines c.txt c; mkdir dir; "
            "lines dir/d.txt d\necho '*.log' > .gitignore\n"
            "git add -A && git commit -qm c0\n"
            "sed -i s/^a5$/a5-c1/ a.txt && git commit -qam c1\n"
            "cd .. && git clone -q up host && cd up\n"
            "sed -i s/^a7$/a7-up/ a.txt && sed -i s/^d1$/d1-up/ dir/d.txt\n"
            "git commit -qam c2\n"
            "cd ../host && git checkout -qb other\n"
            "sed -i s/^a10$/a10-other/ a.txt && sed -i s/^b5$/b5-other/ b.txt\n"
            "git commit -qam other && git checkout -q main\n",
        home_));
  }

  TempDir tmp_;
  std::string home_, host_;
};

class HostMoves : public HostRepo,
                  public ::testing::WithParamInterface<
                      std::tuple<int, AgentCommits, bool>> {
 protected:
  // The host's uncommitted work at the mount: a staged file, an edit, an
  // untracked file, an ignored one.
  void MakeHostDirty() {
    ASSERT_TRUE(RunIn(host_,
                      "echo staged > s.txt && git add s.txt\n"
                      "sed -i s/^c3$/c3-dirty/ c.txt\n"
                      "echo untracked > u.txt\necho noise > host.log\n",
                      home_));
  }

  std::string AgentScript(AgentCommits mode) {
    std::string s =
        "sed -i s/^a2$/a2-agent/ a.txt\n"
        "echo new > agent-new.txt\necho ignored > build.log\n";
    if (mode == AgentCommits::kOnMain) s += "git commit -qam agent\n";
    if (mode == AgentCommits::kOnBranch)
      s += "git checkout -qb agent\ngit commit -qam agent\n";
    return s;
  }

  // What the sandbox's (or the clone's) git says of itself.
  struct GitView {
    std::string head, branch, index, log, status;
  };
  GitView ViewOf(const std::string& dir) {
    GitView v;
    EXPECT_TRUE(RunIn(dir, "git rev-parse HEAD", home_, &v.head));
    EXPECT_TRUE(RunIn(dir, "git branch --show-current", home_, &v.branch));
    EXPECT_TRUE(RunIn(dir, "git ls-files -s", home_, &v.index));
    // Every commit of every ref (remote-tracking ones too), in one order.
    EXPECT_TRUE(
        RunIn(dir, "git log --format=%H%x20%s --all | sort", home_, &v.log));
    EXPECT_TRUE(RunIn(dir, "git status --porcelain", home_, &v.status));
    return v;
  }

  // `status` without the lines that name one of `paths`.
  static std::string Without(const std::string& status,
                             const std::set<std::string>& paths) {
    std::string out;
    std::istringstream in(status);
    std::string line;
    while (std::getline(in, line)) {
      bool names = false;
      for (const auto& p : paths)
        if (line.size() > 3 &&
            (line.substr(3) == p || line.substr(3).rfind(p + " ", 0) == 0 ||
             line.find("-> " + p) != std::string::npos))
          names = true;
      if (!names) out += line + "\n";
    }
    return out;
  }
};

TEST_P(HostMoves, MergeIsTheClonesAndTheSandboxsGitStaysItsOwn) {
  const HostMove& move = kMoves[std::get<0>(GetParam())];
  const AgentCommits mode = std::get<1>(GetParam());
  const bool dirty = std::get<2>(GetParam());
  if (dirty) MakeHostDirty();
  if (HasFatalFailure()) return;

  // The clone world is made from the host as the mount sees it.
  CloneWorld world;
  ASSERT_TRUE(CloneWorld::Make(host_, tmp_.Sub("world"), home_, &world));
  SandboxOptions o;
  o.name = "x";
  Sandbox sb(host_, o);
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  const std::string ws = sb.mountpoint();

  const std::string agent = AgentScript(mode);
  ASSERT_TRUE(RunIn(ws, agent, home_));
  ASSERT_TRUE(RunIn(world.clone(), agent, home_));
  GitView before = ViewOf(ws);
  GitView clone_before = ViewOf(world.clone());
  EXPECT_EQ(before.head, clone_before.head);
  EXPECT_EQ(before.branch, clone_before.branch);
  EXPECT_EQ(before.index, clone_before.index);
  EXPECT_EQ(before.status, clone_before.status);

  const auto host_files = TreeFiles(host_);
  ASSERT_TRUE(RunIn(host_, move.script, home_));
  ASSERT_TRUE(RunIn(world.host(), move.script, home_));
  std::set<std::string> host_changed;
  const auto host_after = TreeFiles(host_);
  for (const auto& [p, c] : host_after)
    if (!host_files.count(p) || host_files.at(p) != c) host_changed.insert(p);
  for (const auto& [p, c] : host_files)
    if (!host_after.count(p)) host_changed.insert(p);

  GitView after = ViewOf(ws);
  GitView clone_after = ViewOf(world.clone());
  // The sandbox's git did not move with the host's.
  EXPECT_EQ(after.head, before.head);
  EXPECT_EQ(after.branch, before.branch);
  EXPECT_EQ(after.index, before.index);
  EXPECT_EQ(after.log, before.log);
  EXPECT_EQ(after.log, clone_after.log);
  EXPECT_EQ(Without(after.status, host_changed),
            Without(clone_after.status, host_changed));
  EXPECT_EQ(Without(after.status, host_changed),
            Without(before.status, host_changed));

  ASSERT_TRUE(sb.Unmount());  // exports
  ASSERT_TRUE(RunIn(host_, "git fetch -q sandbox-x", home_));
  ASSERT_TRUE(world.Export());
  ExpectMergesAlike(host_, world, home_);
}

std::string MoveName(
    const ::testing::TestParamInfo<std::tuple<int, AgentCommits, bool>>& i) {
  static const char* kModes[] = {"AgentCommitsNothing", "AgentCommitsOnMain",
                                 "AgentCommitsOnABranch"};
  return std::string(kMoves[std::get<0>(i.param)].name) + "_" +
         kModes[static_cast<int>(std::get<1>(i.param))] +
         (std::get<2>(i.param) ? "_HostDirty" : "_HostClean");
}

// Every move, agent and host state, but a stash of a clean host.
std::vector<std::tuple<int, AgentCommits, bool>> AllCases() {
  std::vector<std::tuple<int, AgentCommits, bool>> cases;
  for (int m = 0; m < static_cast<int>(std::size(kMoves)); ++m)
    for (AgentCommits a :
         {AgentCommits::kNone, AgentCommits::kOnMain, AgentCommits::kOnBranch})
      for (bool dirty : {false, true})
        if (dirty || !kMoves[m].needs_dirty) cases.emplace_back(m, a, dirty);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryMove, HostMoves, ::testing::ValuesIn(AllCases()),
                         MoveName);

}  // namespace
}  // namespace acqfs::test

namespace acqfs::test {
namespace {

// The host moves first, the agent then writes a file the host changed: the
// sandbox sees the host's files live, so the agent's version of that file
// holds the host's change too, where a clone made at the mount would not
// (docs/git-bridge.md, "A host edit the sandbox wrote over"). The export
// leaves the host's change out: the working-tree commit's diff is the
// clone's (only the agent's line), and merging it is the clone's merge.
// The agent writes the file in place (a copy-up, whose source acqfs keeps)
// or replaces it by a rename (`sed -i`, as editors and git write).
struct HostFirstMove {
  const char* name;
  const char* script;  // run in the host before the agent writes a.txt
};

const HostFirstMove kFirstMoves[] = {
    {"Commit", "sed -i s/^a9$/a9-host/ a.txt\ngit commit -qam host"},
    {"Uncommitted", "sed -i s/^a9$/a9-host/ a.txt"},
    {"InPlaceUncommitted",
     "sed s/^a9$/a9-host/ a.txt > t && cat t > a.txt "
     "&& rm t"},
    {"Amend", "sed -i s/^a9$/a9-amend/ a.txt\ngit commit -q --amend -am amend"},
    {"Pull", "git pull -q --ff-only origin main"},
    {"SwitchBranch", "git checkout -q other"},
};

enum class AgentWrite { kInPlace, kRename };
void PrintTo(AgentWrite w, std::ostream* os) {
  *os << (w == AgentWrite::kInPlace ? "writes in place" : "renames");
}

class HostFirst
    : public HostRepo,
      public ::testing::WithParamInterface<std::tuple<int, AgentWrite, bool>> {
};

using HostFirstAgain = HostRepo;

TEST_P(HostFirst, TheWorkingTreeCommitHoldsOnlyTheAgentsChange) {
  const HostFirstMove& move = kFirstMoves[std::get<0>(GetParam())];
  const AgentWrite write = std::get<1>(GetParam());
  const bool host_dirty = std::get<2>(GetParam());
  if (host_dirty) {
    ASSERT_TRUE(RunIn(host_, "sed -i s/^c3$/c3-dirty/ c.txt", home_));
  }
  CloneWorld world;
  ASSERT_TRUE(CloneWorld::Make(host_, tmp_.Sub("world"), home_, &world));
  SandboxOptions o;
  o.name = "x";
  Sandbox sb(host_, o);
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  const std::string ws = sb.mountpoint();

  ASSERT_TRUE(RunIn(host_, move.script, home_));
  ASSERT_TRUE(RunIn(world.host(), move.script, home_));
  // The sandbox shows the host's a.txt once the timeout passed.
  const std::string want = TreeFiles(host_).at("a.txt");
  for (int i = 0; i < 100 && TreeFiles(ws).at("a.txt") != want; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(TreeFiles(ws).at("a.txt"), want);

  const std::string agent = write == AgentWrite::kRename
                                ? "sed -i s/^a2$/a2-agent/ a.txt\n"
                                : "sed s/^a2$/a2-agent/ a.txt > ../agent.tmp\n"
                                  "cat ../agent.tmp > a.txt\nrm ../agent.tmp\n";
  ASSERT_TRUE(RunIn(ws, agent, home_));
  ASSERT_TRUE(RunIn(world.clone(), agent, home_));

  ASSERT_TRUE(sb.Unmount());  // exports
  ASSERT_TRUE(RunIn(host_, "git fetch -q sandbox-x", home_));
  ASSERT_TRUE(world.Export());
  std::string ours, theirs;
  ASSERT_TRUE(RunIn(host_,
                    "git diff sandbox-x/acqfs-worktree^ "
                    "sandbox-x/acqfs-worktree",
                    home_, &ours));
  ASSERT_TRUE(RunIn(world.host(),
                    "git diff clone/acqfs-worktree^ clone/acqfs-worktree",
                    home_, &theirs));
  EXPECT_EQ(ours, theirs);
  EXPECT_NE(ours.find("+a2-agent"), std::string::npos) << ours;
  ExpectMergesAlike(host_, world, home_);
}

// The host edits the same line once more after the agent wrote the file.
// Written in place, the copy-up kept what the agent's version started from;
// replaced by a rename (sed -i), the rename kept the host's file it
// replaced: either way the agent's change still goes out alone, as the
// clone's. Removed and made anew, nothing recorded what the agent read:
// taken against the host's file now, the agent's version reverts the
// host's second edit on the line the host changed, which conflicts with
// the base, so the export keeps the file whole, host edit included, and
// says so (`host_edits_kept`).
TEST_F(HostFirstAgain, KeptSourcesGoOutAloneAFileMadeAnewIsKeptWholeAndSaid) {
  CloneWorld world;
  ASSERT_TRUE(CloneWorld::Make(host_, tmp_.Sub("world"), home_, &world));
  SandboxOptions o;
  o.name = "x";
  Sandbox sb(host_, o);
  ASSERT_TRUE(sb.mounted()) << sb.mount_failure();
  const std::string ws = sb.mountpoint();
  const std::string host_step =
      "for f in a b c; do sed -i s/^${f}9$/${f}9-host/ $f.txt; done\n"
      "git commit -qam host\n";
  ASSERT_TRUE(RunIn(host_, host_step, home_));
  ASSERT_TRUE(RunIn(world.host(), host_step, home_));
  const std::string want = TreeFiles(host_).at("c.txt");
  for (int i = 0; i < 100 && TreeFiles(ws).at("c.txt") != want; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(TreeFiles(ws).at("c.txt"), want);
  // a.txt in place, b.txt by rename, c.txt removed and made anew.
  const std::string agent =
      "sed s/^a2$/a2-agent/ a.txt > ../agent.tmp\n"
      "cat ../agent.tmp > a.txt\n"
      "sed -i s/^b2$/b2-agent/ b.txt\n"
      "sed s/^c2$/c2-agent/ c.txt > ../agent.tmp\n"
      "rm c.txt\ncat ../agent.tmp > c.txt\nrm ../agent.tmp\n";
  ASSERT_TRUE(RunIn(ws, agent, home_));
  ASSERT_TRUE(RunIn(world.clone(), agent, home_));
  const std::string again =
      "for f in a b c; do sed -i s/^${f}9-host$/${f}9-again/ $f.txt; done\n";
  ASSERT_TRUE(RunIn(host_, again, home_));
  ASSERT_TRUE(RunIn(world.host(), again, home_));

  std::string json;
  ASSERT_TRUE(RunIn(
      host_, AcqfsBinary() + " export x --json --state-dir " + sb.state_dir(),
      home_, &json));
  EXPECT_NE(json.find("\"host_edits_separated\": 2"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"path\": \"c.txt\""), std::string::npos) << json;
  ASSERT_TRUE(RunIn(host_, "git fetch -q sandbox-x", home_));
  ASSERT_TRUE(world.Export());
  std::string ours, theirs;
  ASSERT_TRUE(RunIn(host_,
                    "git diff sandbox-x/acqfs-worktree^ "
                    "sandbox-x/acqfs-worktree -- a.txt b.txt",
                    home_, &ours));
  ASSERT_TRUE(RunIn(world.host(),
                    "git diff clone/acqfs-worktree^ clone/acqfs-worktree "
                    "-- a.txt b.txt",
                    home_, &theirs));
  EXPECT_EQ(ours, theirs);
  ASSERT_TRUE(
      RunIn(host_, "git show sandbox-x/acqfs-worktree:c.txt", home_, &ours));
  EXPECT_NE(ours.find("c9-host"), std::string::npos) << ours;
  EXPECT_NE(ours.find("c2-agent"), std::string::npos) << ours;
}

std::string FirstName(
    const ::testing::TestParamInfo<std::tuple<int, AgentWrite, bool>>& i) {
  return std::string(kFirstMoves[std::get<0>(i.param)].name) +
         (std::get<1>(i.param) == AgentWrite::kRename ? "_AgentRenames"
                                                      : "_AgentWritesInPlace") +
         (std::get<2>(i.param) ? "_HostDirty" : "_HostClean");
}

INSTANTIATE_TEST_SUITE_P(
    EveryMove, HostFirst,
    ::testing::Combine(
        ::testing::Range(0, static_cast<int>(std::size(kFirstMoves))),
        ::testing::Values(AgentWrite::kInPlace, AgentWrite::kRename),
        ::testing::Bool()),
    FirstName);

}  // namespace
}  // namespace acqfs::test
