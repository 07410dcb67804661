// Forks and removals that die or race (issue 32, section 4; docs/stack.md,
// "Commit points"). Each kill-point walk runs a command under strace's
// fault injector, killed (SIGKILL) at the Nth call of one state-changing
// syscall, for every such syscall the command makes and N = 1, 2, ... until
// it runs to completion. After each kill:
//   - the state folder holds the child whole (its metadata, its stack, the
//     layers its stack names), or no child at all;
//   - `acqfs ls` succeeds;
//   - `acqfs rm --force child` (when the child exists) and `acqfs gc` bring
//     the state folder back to what it was: the same sandboxes, the same
//     store layers, no folder of a fork or removal left;
//   - the host checkout is as it was: its files (content, modes, owners,
//     times, ctimes, link counts), .git's files, .git/config and every ref;
//     with no child, at once (the host is written only after a fork's
//     commit).
// A child a fork left after its commit (its host-side steps cut short) gets
// them done by its next command that takes its lock (here an unmounted
// checkpoint; a mount alike, tried for some), and mounts and exports; so
// does a sandbox an rm left whole after it began to unregister.
// The one thing a kill may leave on the host is a git lock file (a kill
// inside git's lock protocol, as a killed git leaves it); the walks remove
// it as the person would, and print where.
// Kill points are walked at the calls that can change something: an openat
// or openat2 for reading only (the dynamic loader's, libgit2's reads)
// leaves what a kill at the next call that can change something leaves.
// The race: forks to one name at once; one wins whole, the others say the
// name exists and leave nothing behind.
//
// strace is a test dependency (scripts/install-deps.sh); the walks need it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/lower_repo.h"
#include "harness/sandbox.h"
#include "harness/snapshot.h"
#include "harness/temp_dir.h"

namespace acqfs::test {
namespace {

constexpr char kParent[] = "box";
constexpr char kChild[] = "child";

// The syscalls that change files, directories, locks or what a process
// leaves behind (openat creates and truncates; write and pwrite64 fill).
const std::vector<std::string>& StateSyscalls() {
  static const std::vector<std::string> all = {
      "openat",      "openat2",      "mkdir",       "mkdirat",   "rename",
      "renameat",    "renameat2",    "link",        "linkat",    "unlink",
      "unlinkat",    "rmdir",        "symlink",     "symlinkat", "fsync",
      "fdatasync",   "syncfs",       "fchmod",      "fchmodat",  "chmod",
      "fchown",      "fchownat",     "chown",       "lchown",    "utimensat",
      "write",       "pwrite64",     "writev",      "ftruncate", "fallocate",
      "flock",       "fcntl",        "setxattr",    "lsetxattr", "fsetxattr",
      "removexattr", "lremovexattr", "fremovexattr"};
  return all;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> out;
  for (const std::string& n : ListDir(dir)) out.insert(n);
  return out;
}

std::string Join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& e : s) out += (out.empty() ? "" : " ") + e;
  return "{" + out + "}";
}

// Every ref a manifest names (upper, frozen, checkpoints' layers,
// moved_from), or nullopt when it does not parse.
std::optional<std::set<std::string>> Referenced(const std::string& stack) {
  nlohmann::json j = nlohmann::json::parse(Slurp(stack), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  std::set<std::string> out;
  try {
    out.insert(j.at("upper").get<std::string>());
    for (const auto& f : j.at("frozen")) out.insert(f.get<std::string>());
    for (const auto& c : j.at("checkpoints"))
      for (const auto& l : c.at("layers")) out.insert(l.get<std::string>());
    if (j.contains("moved_from"))
      out.insert(j["moved_from"].get<std::string>());
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return out;
}

class StackCrash : public ::testing::Test {
 protected:
  void SetUp() override {
    CommandResult st = RunCommand({"strace", "-V"}, 30);
    ASSERT_TRUE(st.ok()) << "strace is needed (scripts/install-deps.sh): "
                         << st.Describe();
    tmp_ = std::make_unique<TempDir>();
    home_ = tmp_->MakeDir("home");
    repo_ = tmp_->MakeDir("repo");
    state_ = tmp_->MakeDir("state", 0700);
    // A tiny checkout: one commit, an annotated tag (a tip the base keeps
    // with refs/acqfs-tips/), a modified and an untracked file.
    ASSERT_TRUE(WriteFile(repo_ + "/a.txt", "alpha\n"));
    for (std::vector<std::string> args :
         {std::vector<std::string>{"init", "-q", "-b", "main"},
          {"config", "user.name", "t"},
          {"config", "user.email", "t@example.com"},
          {"add", "a.txt"},
          {"commit", "-q", "-m", "one"},
          {"tag", "-a", "v1", "-m", "v1"}}) {
      CommandResult r = RunGit(repo_, args, home_);
      ASSERT_TRUE(r.ok()) << r.Describe();
    }
    ASSERT_TRUE(WriteFile(repo_ + "/a.txt", "alpha\nlocal\n"));
    ASSERT_TRUE(WriteFile(repo_ + "/untracked.txt", "u\n"));
    SandboxOptions o;
    o.name = kParent;
    o.state_dir = state_;
    parent_ = std::make_unique<Sandbox>(repo_, o);
    ASSERT_TRUE(parent_->mounted()) << parent_->mount_failure();
    ASSERT_TRUE(WriteFile(parent_->M("b.txt"), "agent\n"));
    CommandResult c = Acqfs({"checkpoint", kParent, "-m", "one"});
    ASSERT_TRUE(c.ok()) << c.Describe();
    ASSERT_TRUE(WriteFile(parent_->M("c.txt"), "more\n"));
    if (!KeepParentMounted()) {
      ASSERT_TRUE(parent_->Unmount());
    }
    host_ = HostNow();
    host_fetched_ = HostNow(/*fetched=*/true);
    layers_ = StoreLayers();
    state_entries_ = Entries(state_);
    parent_stack_ = Slurp(StackOf(kParent));
  }

  void TearDown() override {
    if (!stale_locks_.empty()) {
      std::printf("%zu kill points left a git lock file in the host's .git:\n",
                  stale_locks_.size());
      for (const auto& l : stale_locks_) std::printf("  %s\n", l.c_str());
    }
  }

  // A fixture whose walk forks a mounted parent says true.
  virtual bool KeepParentMounted() const { return false; }

  std::string StackOf(const std::string& name) const {
    return state_ + "/" + name + "/stack.json";
  }

  CommandResult Acqfs(std::vector<std::string> args, int timeout = 120) {
    std::vector<std::string> argv = {AcqfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(state_);
    return RunCommand(argv, timeout);
  }

  // `acqfs ARGS` under strace, killed at the `n`th call of `sys`.
  CommandResult KilledAt(const std::vector<std::string>& args,
                         const std::string& sys, int n) {
    std::vector<std::string> argv = {
        "strace",
        "-f",
        "-o",
        "/dev/null",
        "-e",
        "trace=" + sys,
        "-e",
        "inject=" + sys + ":signal=KILL:when=" + std::to_string(n),
        AcqfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(state_);
    return RunCommand(argv, 120);
  }

  // The calls of the state-changing syscalls `acqfs ARGS` makes, in order,
  // by syscall (a run to completion under strace, traced only): for each
  // call, whether it can change anything (an openat for reading only, like
  // the dynamic loader's, cannot: a kill there leaves what a kill at the
  // next call that can change something leaves).
  std::map<std::string, std::vector<bool>> SyscallsOf(
      const std::vector<std::string>& args) {
    std::string list;
    for (const auto& s : StateSyscalls()) list += (list.empty() ? "" : ",") + s;
    const std::string log = tmp_->Sub("strace.log");
    std::vector<std::string> argv = {"strace",     "-f", "-s", "0",
                                     "-o",         log,  "-e", "trace=" + list,
                                     AcqfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(state_);
    CommandResult r = RunCommand(argv, 120);
    EXPECT_TRUE(r.ok()) << r.Describe();
    std::map<std::string, std::vector<bool>> calls;
    std::istringstream in(Slurp(log));
    static const std::regex call(R"(^\d+\s+([a-z0-9_]+)\((.*))");
    static const std::regex writes(
        R"(O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_TMPFILE)");
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, call)) continue;
      const std::string name = m[1];
      const std::string rest = m[2];
      bool changes = true;
      if (name == "openat" || name == "openat2")
        changes = std::regex_search(rest, writes);
      calls[name].push_back(changes);
    }
    ::unlink(log.c_str());
    return calls;
  }

  // Git's lock files in the host's .git (config.lock, a ref's .lock): a
  // kill inside git's lock protocol leaves one, as a killed git does, and
  // the next writer is told to remove it. Removed here as the person would,
  // and counted.
  void ClearStaleGitLocks(const std::string& where) {
    for (const auto& [rel, info] :
         Snapshot(repo_ + "/.git", SnapshotOptions::GitDirContent()).entries) {
      if (info.type != 'f' || rel.size() < 5 ||
          rel.compare(rel.size() - 5, 5, ".lock") != 0)
        continue;
      stale_locks_.push_back(where + ": .git/" + rel);
      EXPECT_EQ(::unlink((repo_ + "/.git/" + rel).c_str()), 0) << rel;
    }
  }

  // Every ref of the host, as .git/refs and packed-refs hold them.
  std::string RefsNow() {
    std::string out;
    SnapshotOptions o = SnapshotOptions::GitDirContent();
    for (const auto& [rel, info] : Snapshot(repo_ + "/.git/refs", o).entries)
      if (info.type == 'f')
        out += "refs/" + rel + " " + Slurp(repo_ + "/.git/refs/" + rel);
    out += "packed-refs:\n" + Slurp(repo_ + "/.git/packed-refs");
    return out;
  }

  struct Host {
    TreeSnapshot tree;   // the checkout outside .git
    TreeSnapshot git;    // .git's files but for refs, logs and config
    std::string config;  // .git/config
    std::string refs;    // every ref and what it names
  };
  // `fetched`: the host fetched from the child, which adds objects and
  // FETCH_HEAD (left out).
  Host HostNow(bool fetched = false) {
    Host h;
    h.tree = Snapshot(repo_, SnapshotOptions::CheckoutOutsideGit());
    SnapshotOptions g = SnapshotOptions::GitDirContent();
    g.dir_size = false;
    g.skip = {"refs", "logs", "config", "packed-refs"};
    if (fetched) {
      g.skip.push_back("objects");
      g.skip.push_back("FETCH_HEAD");
    }
    h.git = Snapshot(repo_ + "/.git", g);
    h.config = Slurp(repo_ + "/.git/config");
    h.refs = RefsNow();
    return h;
  }
  // The refs a host's fetch of the child leaves by design (rm keeps them).
  static std::string WithoutFetched(const std::string& refs) {
    std::istringstream in(refs);
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.rfind(std::string("refs/sandboxes/") + kChild + "/", 0) != 0)
        out += line + "\n";
    return out;
  }
  void ExpectHostAsBefore(const std::string& where, bool fetched = false) {
    Host now = HostNow(fetched);
    EXPECT_TRUE(SnapshotsEqual(host_.tree, now.tree)) << where;
    EXPECT_TRUE(
        SnapshotsEqual(fetched ? host_fetched_.git : host_.git, now.git))
        << where;
    EXPECT_EQ(host_.config, now.config) << where;
    EXPECT_EQ(host_.refs, fetched ? WithoutFetched(now.refs) : now.refs)
        << where;
  }

  // The layer dirs of the store.
  std::set<std::string> StoreLayers() {
    std::set<std::string> out;
    static const std::regex id("^[0-9a-f]{16}$");
    for (const auto& n : Entries(state_ + "/.layers"))
      if (std::regex_match(n, id)) out.insert(n);
    return out;
  }

  // The child exists whole: metadata, a stack whose layers are all there,
  // listed by ls (which succeeds).
  void ExpectWholeChild(const std::string& where) {
    const std::string dir = state_ + "/" + kChild;
    EXPECT_TRUE(Exists(dir + "/meta.json")) << where;
    EXPECT_TRUE(IsDir(dir + "/work")) << where;
    EXPECT_TRUE(IsDir(dir + "/bridge.git")) << where;
    auto refs = Referenced(dir + "/stack.json");
    ASSERT_TRUE(refs.has_value()) << where << ": " << dir << "/stack.json";
    for (const auto& ref : *refs)
      EXPECT_TRUE(IsDir(state_ + "/" + ref)) << where << ": " << ref;
    CommandResult ls = Acqfs({"ls", "--json"});
    ASSERT_TRUE(ls.ok()) << where << ": " << ls.Describe();
    nlohmann::json j = nlohmann::json::parse(ls.out, nullptr, false);
    bool listed = false;
    if (j.is_array())
      for (const auto& e : j) listed = listed || e.value("name", "") == kChild;
    EXPECT_TRUE(listed) << where << ": " << ls.out;
  }

  // The child's host-side steps are done: its remote names its bridge, and
  // its base is kept.
  void ExpectChildOnHost(const std::string& where) {
    EXPECT_FALSE(Exists(state_ + "/" + kChild + "/host.pending")) << where;
    CommandResult url = RunGit(
        repo_,
        {"config", "--get", std::string("remote.sandbox-") + kChild + ".url"},
        home_);
    EXPECT_EQ(url.out, state_ + "/" + kChild + "/bridge.git\n")
        << where << ": " << url.Describe();
    const std::string refs = RefsNow();
    EXPECT_NE(refs.find(std::string("refs/acqfs-base/") + kChild + " "),
              std::string::npos)
        << where << ": " << refs;
    EXPECT_NE(refs.find(std::string("refs/acqfs-tips/") + kChild + "/"),
              std::string::npos)
        << where << ": " << refs;
  }

  // After a killed (or finished) command: ls works; rm --force of the child
  // and gc leave the state folder and the store as they were.
  void ExpectCleanedUp(const std::string& where, bool fetched = false) {
    if (Exists(state_ + "/" + kChild)) {
      CommandResult rm = Acqfs({"rm", "--force", kChild});
      EXPECT_TRUE(rm.ok()) << where << ": " << rm.Describe();
    }
    if (restore_parent_) {
      ASSERT_TRUE(WriteFile(StackOf(kParent), parent_stack_));
    }
    CommandResult gc = Acqfs({"gc"});
    EXPECT_TRUE(gc.ok()) << where << ": " << gc.Describe();
    EXPECT_EQ(Join(Entries(state_)), Join(state_entries_)) << where;
    EXPECT_EQ(Join(StoreLayers()), Join(layers_)) << where;
    for (const auto& n : Entries(state_ + "/.layers")) {
      static const std::regex ok("^([0-9a-f]{16}(\\.stats)?|lock)$");
      EXPECT_TRUE(std::regex_match(n, ok)) << where << ": .layers/" << n;
    }
    ExpectHostAsBefore(where, fetched);
  }

  // Runs `args` killed at every call of every state-changing syscall it
  // makes, in turn, then once to completion; `after` checks each outcome
  // (`where` names the kill point; `finished` when it ran to completion).
  // Stops at the first failure. Returns the number of kill points.
  int WalkKillPoints(
      const std::vector<std::string>& args, const std::function<void()>& before,
      const std::function<void(const std::string&, bool)>& after) {
    before();
    const auto calls = SyscallsOf(args);
    after("a traced run", true);
    EXPECT_FALSE(calls.empty());
    int points = 0;
    for (const auto& [sys, changes] : calls) {
      for (size_t n = 1;; ++n) {
        if (n > changes.size() + 100) {
          ADD_FAILURE() << sys << ": still killed at call " << n;
          return points;
        }
        if (n <= changes.size() && !changes[n - 1]) continue;
        before();
        if (HasFailure()) return points;
        CommandResult r = KilledAt(args, sys, static_cast<int>(n));
        const std::string where = "killed at " + sys + " #" + std::to_string(n);
        const bool killed = r.term_signal == SIGKILL;
        if (!killed) {
          EXPECT_TRUE(r.ok()) << where << ": " << r.Describe();
        }
        after(killed ? where : sys + ": ran to completion", !killed);
        if (HasFailure()) return points;
        if (!killed) break;
        ++points;
      }
    }
    return points;
  }

  // Mounts the child, writes in it and unmounts it (which exports): a
  // whole child works.
  void ExpectChildMountsAndExports(const std::string& where) {
    SandboxOptions o;
    o.name = kChild;
    o.state_dir = state_;
    Sandbox child(repo_, o);
    ASSERT_TRUE(child.mounted()) << where << ": " << child.mount_failure();
    EXPECT_EQ(Slurp(child.M("b.txt")), "agent\n") << where;
    ASSERT_TRUE(WriteFile(child.M("d.txt"), "child\n"));
    ASSERT_TRUE(child.Unmount()) << where;
    ExpectChildOnHost(where);
    CommandResult refs =
        RunCommand({"git", "--git-dir", state_ + "/" + kChild + "/bridge.git",
                    "for-each-ref", "--format=%(refname)"},
                   60);
    EXPECT_NE(refs.out.find("refs/acqfs/worktree"), std::string::npos)
        << where << ": " << refs.Describe();
  }

  // The check after each kill of a fork.
  void AfterFork(const std::string& where, bool finished, int* children,
                 int* mounted_budget) {
    const std::string dir = state_ + "/" + kChild;
    if (finished) {
      ASSERT_TRUE(Exists(dir)) << where;
    }
    if (Exists(dir)) {
      ++*children;
      ClearStaleGitLocks(where);
      ExpectWholeChild(where);
      if (HasFailure()) return;
      // Its host-side steps: done by the fork, else by its next command
      // that takes its lock (an unmounted checkpoint).
      if (Exists(dir + "/host.pending") || finished) {
        if (*mounted_budget > 0 && Exists(dir + "/host.pending")) {
          --*mounted_budget;
          ExpectChildMountsAndExports(where);
        } else {
          CommandResult c = Acqfs({"checkpoint", kChild});
          EXPECT_TRUE(c.ok()) << where << ": " << c.Describe();
          ExpectChildOnHost(where);
        }
      }
    } else {
      // No child: the host was never written.
      ExpectHostAsBefore(where + " (no child)");
      CommandResult ls = Acqfs({"ls"});
      EXPECT_TRUE(ls.ok()) << where << ": " << ls.Describe();
    }
    ExpectCleanedUp(where);
  }

  std::unique_ptr<TempDir> tmp_;
  std::string home_, repo_, state_;
  std::unique_ptr<Sandbox> parent_;
  Host host_, host_fetched_;
  std::set<std::string> layers_, state_entries_;
  std::string parent_stack_;
  bool restore_parent_ = false;
  std::vector<std::string> stale_locks_;
};

TEST_F(StackCrash, AForkAtACheckpointKilledAnywhereLeavesNoDebris) {
  int children = 0, budget = 3;
  const auto t0 = std::chrono::steady_clock::now();
  const int points = WalkKillPoints(
      {"fork", kParent, kChild, "--at", "1"}, [] {},
      [&](const std::string& where, bool finished) {
        AfterFork(where, finished, &children, &budget);
      });
  std::printf(
      "fork --at 1: %d kill points, %d left a child, %.1f s\n", points,
      children,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count());
  EXPECT_GT(points, 50);
}

// A squash killed anywhere (issue 33: one commit, CommitSquash) leaves the
// old stack or the new one, never a stack naming a layer that is not
// there; the next squash finishes and sweeps what the killed one left in the
// sandbox's folder, and gc leaves no layer no stack names. A second sandbox
// forked at checkpoint 2 keeps the old layers alive, so each run starts from
// the same stack.
TEST_F(StackCrash, ASquashKilledAnywhereLeavesTheOldStackOrTheNewOne) {
  CommandResult c = Acqfs({"checkpoint", kParent, "-m", "two"});
  ASSERT_TRUE(c.ok()) << c.Describe();
  CommandResult f = Acqfs({"fork", kParent, "keeper", "--at", "2"});
  ASSERT_TRUE(f.ok()) << f.Describe();
  host_ = HostNow();  // the fork added its remote and refs
  const std::string old_stack = Slurp(StackOf(kParent));
  auto old_refs = Referenced(StackOf(kParent));
  ASSERT_TRUE(old_refs.has_value());
  nlohmann::json j = nlohmann::json::parse(old_stack);
  ASSERT_EQ(j["frozen"].size(), 2u) << old_stack;
  // The squashed stack's one frozen layer holds what the two held.
  auto check_new = [&](const std::string& where, const nlohmann::json& now) {
    ASSERT_EQ(now["frozen"].size(), 1u) << where;
    const std::string merged =
        state_ + "/" + now["frozen"][0].get<std::string>();
    EXPECT_EQ(Slurp(merged + "/b.txt"), "agent\n") << where;
    EXPECT_EQ(Slurp(merged + "/c.txt"), "more\n") << where;
    EXPECT_EQ(now["upper"], j["upper"]) << where;
  };
  const auto t0 = std::chrono::steady_clock::now();
  int old_left = 0;
  const int points = WalkKillPoints(
      {"squash", kParent, "--keep", "0"},
      [&] { ASSERT_TRUE(WriteFile(StackOf(kParent), old_stack)); },
      [&](const std::string& where, bool finished) {
        const std::string now_text = Slurp(StackOf(kParent));
        auto refs = Referenced(StackOf(kParent));
        ASSERT_TRUE(refs.has_value()) << where << ": " << now_text;
        for (const auto& ref : *refs)
          EXPECT_TRUE(IsDir(state_ + "/" + ref)) << where << ": " << ref;
        if (now_text == old_stack) {
          EXPECT_FALSE(finished) << where;
          ++old_left;
          CommandResult again = Acqfs({"squash", kParent, "--keep", "0"});
          ASSERT_TRUE(again.ok()) << where << ": " << again.Describe();
        }
        check_new(where, nlohmann::json::parse(Slurp(StackOf(kParent))));
        for (const auto& n : Entries(state_ + "/" + kParent)) {
          if (now_text == old_stack || finished) {
            EXPECT_NE(n.rfind("squash.", 0), 0u) << where << ": " << n;
          }
        }
        CommandResult gc = Acqfs({"gc"});
        ASSERT_TRUE(gc.ok()) << where << ": " << gc.Describe();
        std::set<std::string> named = Referenced(StackOf(kParent)).value();
        const std::set<std::string> kept =
            Referenced(StackOf("keeper")).value();
        named.insert(kept.begin(), kept.end());
        for (const auto& id : StoreLayers())
          EXPECT_TRUE(named.count(".layers/" + id)) << where << ": " << id;
        ExpectHostAsBefore(where);
      });
  std::printf(
      "squash: %d kill points, %d left the old stack, %.1f s\n", points,
      old_left,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count());
  EXPECT_GT(points, 10);
  // The squashed sandbox mounts and shows what it showed.
  SandboxOptions o;
  o.name = kParent;
  o.state_dir = state_;
  Sandbox box(repo_, o);
  ASSERT_TRUE(box.mounted()) << box.mount_failure();
  EXPECT_EQ(Slurp(box.M("b.txt")), "agent\n");
  EXPECT_EQ(Slurp(box.M("c.txt")), "more\n");
  EXPECT_EQ(Slurp(box.M("a.txt")), "alpha\nlocal\n");
  ASSERT_TRUE(box.Unmount());
}

TEST_F(StackCrash, AForkOfTheLiveStateKilledAnywhereLeavesNoDebris) {
  // The parent's own commit (its fork checkpoint) is undone by hand after
  // each run, so that every run starts from the same stack.
  restore_parent_ = true;
  int children = 0, budget = 2;
  const auto t0 = std::chrono::steady_clock::now();
  const int points = WalkKillPoints(
      {"fork", kParent, kChild}, [] {},
      [&](const std::string& where, bool finished) {
        // The parent is whole, whatever its checkpoint became.
        CommandResult c = Acqfs({"checkpoints", kParent});
        EXPECT_TRUE(c.ok()) << where << ": " << c.Describe();
        AfterFork(where, finished, &children, &budget);
      });
  std::printf(
      "fork (live state): %d kill points, %d left a child, %.1f s\n", points,
      children,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count());
  EXPECT_GT(points, 50);
}

class RmCrash : public StackCrash {
 protected:
  void Walk(bool force) {
    // Each run removes a fresh child (exported and fetched by the host
    // without --force, so that rm has nothing to refuse).
    auto before = [&] {
      CommandResult f = Acqfs({"fork", kParent, kChild, "--at", "1"});
      ASSERT_TRUE(f.ok()) << f.Describe();
      if (!force) {
        CommandResult e = Acqfs({"export", kChild});
        ASSERT_TRUE(e.ok()) << e.Describe();
        CommandResult g = RunGit(
            repo_, {"fetch", "-q", std::string("sandbox-") + kChild}, home_);
        ASSERT_TRUE(g.ok()) << g.Describe();
      }
    };
    std::vector<std::string> args = {"rm", kChild};
    if (force) args.push_back("--force");
    int whole = 0, redone = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const int points =
        WalkKillPoints(args, before, [&](const std::string& where, bool done) {
          const std::string dir = state_ + "/" + kChild;
          if (done) {
            EXPECT_FALSE(Exists(dir)) << where;
          }
          ClearStaleGitLocks(where);
          if (Exists(dir)) {
            ++whole;
            ExpectWholeChild(where);
            if (HasFailure()) return;
            if (force && Exists(dir + "/host.pending")) {
              // Killed after it began to unregister: the sandbox's next
              // command that readies its stack registers it again.
              ++redone;
              CommandResult c = Acqfs({"checkpoint", kChild});
              EXPECT_TRUE(c.ok()) << where << ": " << c.Describe();
              ExpectChildOnHost(where);
            }
            CommandResult rm = Acqfs(args);
            EXPECT_TRUE(rm.ok()) << where << ": " << rm.Describe();
            EXPECT_FALSE(Exists(dir)) << where;
          } else {
            CommandResult ls = Acqfs({"ls"});
            EXPECT_TRUE(ls.ok()) << where << ": " << ls.Describe();
          }
          ExpectCleanedUp(where, /*fetched=*/!force);
        });
    std::printf(
        "rm%s: %d kill points, %d left the sandbox whole (%d registered "
        "again by a checkpoint), %.1f s\n",
        force ? " --force" : "", points, whole, redone,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
    EXPECT_GT(points, 20);
  }
};

TEST_F(RmCrash, RmKilledAnywhereLeavesTheSandboxWholeOrNothing) {
  Walk(/*force=*/false);
}

TEST_F(RmCrash, RmForceKilledAnywhereLeavesTheSandboxWholeOrNothing) {
  Walk(/*force=*/true);
}

// A mounted parent's fork of its live state: the checkpoint is the
// daemon's; the fork's own kill points are the client's.
class MountedForkCrash : public StackCrash {
 protected:
  bool KeepParentMounted() const override { return true; }
};

TEST_F(MountedForkCrash, AForkOfAMountedSandboxKilledAnywhereLeavesNoDebris) {
  int children = 0, budget = 1;
  const auto t0 = std::chrono::steady_clock::now();
  // Each run's fork checkpoint stays in the parent's history (the daemon
  // owns its stack): the parent is rewound to checkpoint 1 after each, so
  // that its stack stays shallow, and the store is compared with what the
  // parent's manifest names.
  const int points = WalkKillPoints(
      {"fork", kParent, kChild}, [] {},
      [&](const std::string& where, bool finished) {
        const std::string dir = state_ + "/" + kChild;
        if (finished) {
          ASSERT_TRUE(Exists(dir)) << where;
        }
        if (Exists(dir)) {
          ++children;
          ClearStaleGitLocks(where);
          ExpectWholeChild(where);
          if (HasFailure()) return;
          if (budget > 0 && Exists(dir + "/host.pending")) {
            --budget;
            ExpectChildMountsAndExports(where);
          } else if (Exists(dir + "/host.pending") || finished) {
            CommandResult c = Acqfs({"checkpoint", kChild});
            EXPECT_TRUE(c.ok()) << where << ": " << c.Describe();
            ExpectChildOnHost(where);
          }
          CommandResult rm = Acqfs({"rm", "--force", kChild});
          EXPECT_TRUE(rm.ok()) << where << ": " << rm.Describe();
        } else {
          ExpectHostAsBefore(where + " (no child)");
          CommandResult ls = Acqfs({"ls"});
          EXPECT_TRUE(ls.ok()) << where << ": " << ls.Describe();
        }
        CommandResult rw = Acqfs({"rewind", kParent, "1"});
        EXPECT_TRUE(rw.ok()) << where << ": " << rw.Describe();
        CommandResult gc = Acqfs({"gc"});
        EXPECT_TRUE(gc.ok()) << where << ": " << gc.Describe();
        EXPECT_EQ(Join(Entries(state_)), Join(state_entries_)) << where;
        auto named = Referenced(StackOf(kParent));
        ASSERT_TRUE(named.has_value()) << where;
        std::set<std::string> ids;
        for (const auto& ref : *named)
          ids.insert(ref.substr(ref.rfind('/') + 1));
        EXPECT_EQ(Join(StoreLayers()), Join(ids)) << where;
        ExpectHostAsBefore(where);
      });
  std::printf(
      "fork (mounted parent): %d kill points, %d left a child, %.1f s\n",
      points, children,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count());
  EXPECT_GT(points, 50);
}

// Forks to one new name at once: exactly one succeeds, whole; the others
// say the name exists and touch nothing (they used to remove the winner's
// folder, both succeeded, or a remote was left for no sandbox).
TEST_F(StackCrash, ForksToOneNameAtOnceMakeOneWholeSandbox) {
  constexpr int kRounds = 12, kForks = 4;
  // Load: CPU hogs, so that the forks interleave in more ways.
  std::vector<pid_t> hogs;
  for (int i = 0; i < 2; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(120);
      for (;;) {
      }
    }
    ASSERT_GT(pid, 0);
    hogs.push_back(pid);
  }
  struct Stop {
    std::vector<pid_t>& pids;
    ~Stop() {
      for (pid_t p : pids) {
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
      }
    }
  } stop{hogs};
  for (int round = 0; round < kRounds; ++round) {
    // Every other round forks the live state: the losers must not
    // checkpoint the parent either.
    const bool live = round % 2 == 1;
    std::vector<std::string> args = {"fork", kParent, kChild};
    if (!live) {
      args.push_back("--at");
      args.push_back("1");
    }
    const std::string checkpoints_before = Slurp(StackOf(kParent));
    std::vector<CommandResult> results(kForks);
    std::vector<std::thread> threads;
    for (int i = 0; i < kForks; ++i)
      threads.emplace_back([&, i] { results[i] = Acqfs(args); });
    for (auto& t : threads) t.join();
    const std::string where = "round " + std::to_string(round);
    int won = 0;
    for (const CommandResult& r : results) {
      if (r.ok()) {
        ++won;
        continue;
      }
      EXPECT_EQ(r.exit_code, 1) << where << ": " << r.Describe();
      EXPECT_NE(r.err.find("a sandbox of that name exists already"),
                std::string::npos)
          << where << ": " << r.Describe();
    }
    EXPECT_EQ(won, 1) << where;
    ExpectWholeChild(where);
    ExpectChildOnHost(where);
    // Nothing but the winner's: no fork folder, one new upper.
    std::set<std::string> want = state_entries_;
    want.insert(kChild);
    EXPECT_EQ(Join(Entries(state_)), Join(want)) << where;
    if (live) {
      // One fork checkpoint in the parent, the winner's.
      auto before = nlohmann::json::parse(checkpoints_before, nullptr, false);
      auto after =
          nlohmann::json::parse(Slurp(StackOf(kParent)), nullptr, false);
      ASSERT_TRUE(before.is_object() && after.is_object()) << where;
      EXPECT_EQ(after["checkpoints"].size(), before["checkpoints"].size() + 1)
          << where;
    }
    restore_parent_ = live;
    ExpectCleanedUp(where);
    if (HasFailure()) return;
  }
}

// A folder of a sandbox's name without meta.json (an older acqfs's killed
// fork left `lock` and `work`, or a stack.json that kept a layer from gc)
// is shown by ls, refused by rm, removed by rm --force unless a command
// holds its lock; a fork to its name says it exists.
TEST_F(StackCrash, AFolderWithoutMetadataIsListedAndRemovedByRmForce) {
  const std::string dir = state_ + "/" + kChild;
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir + "/work").c_str(), 0700), 0);
  ASSERT_TRUE(WriteFile(dir + "/lock", ""));
  // A stack.json naming a layer of its own, as the old fork killed at its
  // fourth fsync left it.
  const std::string orphan = "0123456789abcdef";
  ASSERT_EQ(::mkdir((state_ + "/.layers/" + orphan).c_str(), 0755), 0);
  nlohmann::json stack = nlohmann::json::parse(parent_stack_);
  stack["upper"] = ".layers/" + orphan;
  ASSERT_TRUE(WriteFile(dir + "/stack.json", stack.dump()));
  CommandResult ls = Acqfs({"ls"});
  EXPECT_TRUE(ls.ok()) << ls.Describe();
  EXPECT_NE(ls.err.find(dir + ": no sandbox"), std::string::npos)
      << ls.Describe();
  EXPECT_NE(ls.err.find(std::string("acqfs rm --force ") + kChild),
            std::string::npos)
      << ls.Describe();
  CommandResult fork = Acqfs({"fork", kParent, kChild, "--at", "1"});
  EXPECT_EQ(fork.exit_code, 1) << fork.Describe();
  EXPECT_NE(fork.err.find("exists already"), std::string::npos)
      << fork.Describe();
  CommandResult plain = Acqfs({"rm", kChild});
  EXPECT_EQ(plain.exit_code, 1) << plain.Describe();
  EXPECT_NE(plain.err.find("--force"), std::string::npos) << plain.Describe();
  EXPECT_TRUE(Exists(dir));
  {
    // Held by a command at work (a mount making it): refused.
    int fd = ::open((dir + "/lock").c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    ASSERT_EQ(::fcntl(fd, F_OFD_SETLK, &fl), 0);
    CommandResult held = Acqfs({"rm", "--force", kChild});
    EXPECT_EQ(held.exit_code, 1) << held.Describe();
    EXPECT_TRUE(Exists(dir + "/stack.json"));
    ::close(fd);
  }
  CommandResult force = Acqfs({"rm", "--force", kChild});
  EXPECT_TRUE(force.ok()) << force.Describe();
  EXPECT_FALSE(Exists(dir));
  EXPECT_FALSE(Exists(state_ + "/.layers/" + orphan));
  ExpectCleanedUp("after rm --force");
  CommandResult again = Acqfs({"fork", kParent, kChild, "--at", "1"});
  EXPECT_TRUE(again.ok()) << again.Describe();
}

}  // namespace
}  // namespace acqfs::test
