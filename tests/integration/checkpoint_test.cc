// A sandbox's history as a stack of frozen layers (docs/stack.md): a
// checkpoint while mounted, with writes in flight; rewind; fork; kill -9 in
// the middle of a checkpoint. The oracle is the kernel overlayfs mounting
// the same stack (lowerdir=TOP:...:L1:HOST), which must show what the FUSE
// mount showed.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/mounts.h"
#include "harness/snapshot.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

CommandResult Acqfs(const Sandbox& s, std::vector<std::string> args) {
  std::vector<std::string> argv = {AcqfsBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--state-dir");
  argv.push_back(s.state_dir());
  return RunCommand(argv, 120);
}

// `git -C DIR ARGS` (a shell command line), its output without the last
// newline.
std::string Git(const std::string& dir, const std::string& args) {
  std::string out = Sh("git -C " + ShellQuote(dir) + " " + args);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// lowerdir=TOP:...:L1:HOST for the sandbox's stack.
std::string LowerDirs(const Sandbox& s) {
  std::string out;
  std::vector<std::string> frozen = s.frozen();
  for (auto it = frozen.rbegin(); it != frozen.rend(); ++it) out += *it + ":";
  return out + s.lower();
}

// Unmounts the sandbox and checks that the kernel overlayfs over its stack
// shows `fuse_view`.
void ExpectKernelAgrees(Sandbox& s, TempDir& tmp, const TreeSnapshot& fuse_view,
                        const SnapshotOptions& options) {
  ASSERT_TRUE(fuse_view.errors.empty()) << DiffSnapshots(fuse_view, fuse_view);
  ASSERT_TRUE(s.Unmount());
  const std::string target = tmp.MakeDir("kernel-view");
  MountGuard guard(target);
  CommandResult r =
      MountKernelOverlay(LowerDirs(s), s.upper(), s.work(), target);
  ASSERT_TRUE(r.ok()) << "kernel overlayfs refused the stack: " << r.Describe();
  TreeSnapshot kernel_view = Snapshot(target, options);
  kernel_view.root = "kernel overlayfs " + target;
  EXPECT_TRUE(SnapshotsEqual(fuse_view, kernel_view, 40));
}

SnapshotOptions View() {
  SnapshotOptions o = SnapshotOptions::MergedView();
  o.skip = {".git"};
  return o;
}

class Stack : public BothFileModes {};
ACQFS_IN_BOTH_FILE_MODES(Stack);

TEST_P(Stack, CheckpointsWhileMountedMatchTheKernelOnTheSameStack) {
  const std::string m = sandbox().mountpoint();
  ASSERT_TRUE(RunMixedWorkload(m));
  CommandResult c1 = Acqfs(
      sandbox(), {"checkpoint", sandbox().name(), "-m", "after the workload"});
  ASSERT_TRUE(c1.ok()) << c1.Describe();
  EXPECT_EQ(sandbox().frozen().size(), 1u);
  // Changes on top of the frozen layer: copy-ups from it, deletions of
  // what it holds, a directory of it renamed.
  ASSERT_TRUE(RunShell("cd " + ShellQuote(m) +
                           " && for f in $(find . -path ./.git -prune -o "
                           "-type f -print | head -20); do echo more >> $f; "
                           "done && rm -rf docs && mkdir docs && echo new > "
                           "docs/a.txt && echo x > second",
                       60)
                  .ok());
  CommandResult c2 = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
  ASSERT_TRUE(c2.ok()) << c2.Describe();
  ASSERT_TRUE(
      RunShell("cd " + ShellQuote(m) + " && echo third > third && rm second",
               60)
          .ok());
  EXPECT_EQ(sandbox().frozen().size(), 2u);
  TreeSnapshot fuse_view = Snapshot(m, View());
  ExpectKernelAgrees(sandbox(), tmp(), fuse_view, View());
}

TEST_P(Stack, NoWriteInFlightIsLostOrLandsInAFrozenLayer) {
  const std::string m = sandbox().mountpoint();
  // A writer appending numbered lines while checkpoints are taken.
  std::thread writer([&] {
    RunShell("cd " + ShellQuote(m) +
                 " && i=0; while [ $i -lt 3000 ]; do echo line$i >> log; "
                 "i=$((i+1)); done",
             120);
  });
  std::vector<std::pair<std::string, TreeSnapshot>> frozen_then;
  for (int i = 0; i < 5; ++i) {
    CommandResult c = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
    ASSERT_TRUE(c.ok()) << c.Describe();
    std::string top = sandbox().frozen().back();
    frozen_then.emplace_back(top, Snapshot(top, SnapshotOptions::Everything()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  writer.join();
  std::string expected;
  for (int i = 0; i < 3000; ++i) expected += "line" + std::to_string(i) + "\n";
  EXPECT_EQ(ReadFile(m + "/log"), expected);
  // A frozen layer is never written once frozen.
  for (const auto& [dir, then] : frozen_then)
    EXPECT_TRUE(
        SnapshotsEqual(then, Snapshot(dir, SnapshotOptions::Everything())))
        << dir;
}

TEST_P(Stack, RewindRestoresTheTreeByteForByte) {
  const std::string m = sandbox().mountpoint();
  ASSERT_TRUE(
      RunShell("cd " + ShellQuote(m) +
                   " && echo ignored > build.o && printf '*.o\\n' > "
                   ".gitignore && chmod 0640 docs/a.txt && setfattr -n "
                   "user.k -v v docs/b.txt && ln -s docs/a.txt link && ln "
                   "docs/b.txt hard && mkdir -p deep/er && echo z > "
                   "deep/er/z && rm -f docs/gone 2>/dev/null; true",
               60)
          .ok());
  SnapshotOptions o = View();
  o.link_groups = true;
  o.nlink = true;
  const TreeSnapshot at_checkpoint = Snapshot(m, o);
  CommandResult c =
      Acqfs(sandbox(), {"checkpoint", sandbox().name(), "-m", "good"});
  ASSERT_TRUE(c.ok()) << c.Describe();
  // The agent's bad turn: everything but .git removed, something else built.
  ASSERT_TRUE(RunShell("cd " + ShellQuote(m) +
                           " && find . -mindepth 1 -maxdepth 1 ! -name .git "
                           "-exec rm -rf {} + && echo junk > junk && mkdir "
                           "docs && echo other > docs/a.txt",
                       60)
                  .ok());
  ASSERT_TRUE(sandbox().Unmount());
  CommandResult r = Acqfs(sandbox(), {"rewind", sandbox().name(), "1"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_NE(r.out.find("undoes this"), std::string::npos) << r.Describe();
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_TRUE(SnapshotsEqual(at_checkpoint, Snapshot(m, o), 40));
  // And the rewind is undone by rewinding to the checkpoint it made.
  ASSERT_TRUE(sandbox().Unmount());
  CommandResult u = Acqfs(sandbox(), {"rewind", sandbox().name(), "2"});
  ASSERT_TRUE(u.ok()) << u.Describe();
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_EQ(ReadFile(m + "/junk"), "junk\n");
  EXPECT_EQ(ReadFile(m + "/docs/a.txt"), "other\n");
  EXPECT_FALSE(Exists(m + "/link"));
}

TEST_P(Stack, RewindWhileMountedShowsTheOldTreeAtOnce) {
  const std::string m = sandbox().mountpoint();
  ASSERT_TRUE(RunShell("cd " + ShellQuote(m) +
                           " && echo kept > kept && mkdir -p keepdir/sub && "
                           "echo s > keepdir/sub/s && chmod 0600 kept",
                       60)
                  .ok());
  const TreeSnapshot at_checkpoint = Snapshot(m, View());
  CommandResult c = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  // Looked up, listed and cached by the kernel before the rewind.
  ASSERT_TRUE(RunShell("cd " + ShellQuote(m) +
                           " && rm -rf keepdir docs && echo gone > kept && "
                           "echo new > newfile && ls -laR . > /dev/null",
                       60)
                  .ok());
  CommandResult r = Acqfs(sandbox(), {"rewind", sandbox().name(), "1"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_NE(r.out.find("undoes this"), std::string::npos) << r.Describe();
  EXPECT_EQ(ReadFile(m + "/kept"), "kept\n");
  EXPECT_FALSE(Exists(m + "/newfile"));
  EXPECT_EQ(ReadFile(m + "/keepdir/sub/s"), "s\n");
  TreeSnapshot fuse_view = Snapshot(m, View());
  EXPECT_TRUE(SnapshotsEqual(at_checkpoint, fuse_view, 40));
  // Writes after the rewind go on from there.
  ASSERT_TRUE(RunShell("echo after >> " + ShellQuote(m + "/kept"), 30).ok());
  EXPECT_EQ(ReadFile(m + "/kept"), "kept\nafter\n");
  fuse_view = Snapshot(m, View());
  ExpectKernelAgrees(sandbox(), tmp(), fuse_view, View());
}

TEST_P(Stack, ForksShareTheFrozenLayersAndGoOnIndependently) {
  const std::string m = sandbox().mountpoint();
  ASSERT_TRUE(
      RunShell("cd " + ShellQuote(m) + " && echo base > shared", 60).ok());
  const std::string mnt2 = tmp().MakeDir("fork-mnt");
  MountGuard guard(mnt2);
  CommandResult f =
      Acqfs(sandbox(), {"fork", sandbox().name(), "forked", mnt2});
  ASSERT_TRUE(f.ok()) << f.Describe();
  EXPECT_EQ(ReadFile(mnt2 + "/shared"), "base\n");
  ASSERT_TRUE(RunShell("echo a > " + ShellQuote(m + "/only-a"), 30).ok());
  ASSERT_TRUE(RunShell("echo b > " + ShellQuote(mnt2 + "/only-b") +
                           " && echo changed > " + ShellQuote(mnt2 + "/shared"),
                       30)
                  .ok());
  EXPECT_FALSE(Exists(mnt2 + "/only-a"));
  EXPECT_FALSE(Exists(m + "/only-b"));
  EXPECT_EQ(ReadFile(m + "/shared"), "base\n");
  EXPECT_EQ(ReadFile(mnt2 + "/shared"), "changed\n");
  // The fork's stack names the parent's frozen layer itself (no copy).
  nlohmann::json child = nlohmann::json::parse(
      ReadFile(sandbox().state_dir() + "/forked/stack.json"));
  std::vector<std::string> parent = sandbox().frozen();
  ASSERT_EQ(parent.size(), 1u);
  ASSERT_EQ(child["frozen"].size(), 1u);
  EXPECT_EQ(sandbox().state_dir() + "/" + child["frozen"][0].get<std::string>(),
            parent[0]);
  CommandResult u = Acqfs(sandbox(), {"umount", "forked", "--no-export"});
  EXPECT_TRUE(u.ok()) << u.Describe();
  CommandResult rm = Acqfs(sandbox(), {"rm", "--force", "forked"});
  EXPECT_TRUE(rm.ok()) << rm.Describe();
  // The parent's layer stays: its own stack uses it.
  EXPECT_TRUE(Exists(parent[0]));
  EXPECT_EQ(ReadFile(m + "/shared"), "base\n");
}

TEST_P(Stack, SquashKeepsTheTreeAndTheFilesNumbers) {
  const std::string m = sandbox().mountpoint();
  const std::vector<std::string> turns = {
      "echo 1 > one && mkdir -p made/sub && echo s > made/sub/s && ln -s one "
      "sym && ln one h-link",
      "rm -rf docs && mkdir docs && echo again > docs/a.txt && echo 2 >> one",
      "mv made moved && rm sym && setfattr -n user.k -v v one",
      "rm -f h-link && echo 4 > four && chmod 0700 moved", "echo 5 > five"};
  for (const auto& t : turns) {
    CommandResult turn = RunShell("cd " + ShellQuote(m) + " && " + t, 60);
    ASSERT_TRUE(turn.ok()) << turn.Describe();
    CommandResult c = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
    ASSERT_TRUE(c.ok()) << c.Describe();
  }
  SnapshotOptions o = View();
  o.ino = true;
  o.skip.push_back("moved");  // a directory made by the sandbox: renumbered
  const TreeSnapshot before = Snapshot(m, o);
  const TreeSnapshot before_all = Snapshot(m, View());
  ASSERT_TRUE(sandbox().Unmount());
  CommandResult sq =
      Acqfs(sandbox(), {"squash", sandbox().name(), "--keep", "1"});
  ASSERT_TRUE(sq.ok()) << sq.Describe();
  EXPECT_EQ(sandbox().frozen().size(), 2u);
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_TRUE(SnapshotsEqual(before, Snapshot(m, o), 40));
  // The checkpoints merged away are gone; the two left still rewind.
  CommandResult list =
      Acqfs(sandbox(), {"checkpoints", sandbox().name(), "--json"});
  ASSERT_TRUE(list.ok()) << list.Describe();
  EXPECT_EQ(nlohmann::json::parse(list.out)["checkpoints"].size(), 2u)
      << list.out;
  TreeSnapshot fuse_view = Snapshot(m, View());
  EXPECT_TRUE(SnapshotsEqual(before_all, fuse_view, 40));
  ExpectKernelAgrees(sandbox(), tmp(), fuse_view, View());
}

// Two forks of one sandbox, built at once, export different branches; the
// host fetches both, and their timelines share the checkpoint commits below
// the fork point.
// A fork made with a relative --state-dir (as `acqfs fork a b --state-dir
// st` from the folder above): its remote in the host's .git/config named
// `st/b/bridge.git`, a path git took relative to wherever it ran, and the
// host's `git fetch` failed ("does not appear to be a git repository").
TEST_P(Stack, AForkMadeWithARelativeStateDirIsFetchedByTheHost) {
  ASSERT_TRUE(RunShell("cd " + ShellQuote(sandbox().mountpoint()) +
                           " && echo forked > forked.txt",
                       30)
                  .ok());
  const std::string state = sandbox().state_dir();
  const std::string up = state.substr(0, state.rfind('/'));
  const std::string rel = state.substr(state.rfind('/') + 1);
  CommandResult f = RunCommand(
      {AcqfsBinary(), "fork", sandbox().name(), "relfork", "--state-dir", rel},
      120, up);
  ASSERT_TRUE(f.ok()) << f.Describe();
  const std::string url =
      Git(sandbox().lower(), "config remote.sandbox-relfork.url");
  EXPECT_EQ(url, state + "/relfork/bridge.git");
  CommandResult e = Acqfs(sandbox(), {"export", "relfork"});
  ASSERT_TRUE(e.ok()) << e.Describe();
  CommandResult fetch = RunShell(
      "git -C " + ShellQuote(sandbox().lower()) + " fetch -q sandbox-relfork",
      60);
  EXPECT_TRUE(fetch.ok()) << fetch.Describe();
  EXPECT_EQ(
      Git(sandbox().lower(), "show sandbox-relfork/acqfs-worktree:forked.txt"),
      "forked");
  CommandResult rm = Acqfs(sandbox(), {"rm", "--force", "relfork"});
  EXPECT_TRUE(rm.ok()) << rm.Describe();
}

TEST_P(Stack, ForksExportTheirOwnBranchesOnSharedCheckpointCommits) {
  const std::string m = sandbox().mountpoint();
  const std::string host = sandbox().lower();
  ASSERT_TRUE(
      RunShell("cd " + ShellQuote(m) + " && echo base > base.txt", 30).ok());
  ASSERT_TRUE(
      Acqfs(sandbox(), {"checkpoint", sandbox().name(), "-m", "base"}).ok());
  const std::string mnt2 = tmp().MakeDir("fork-mnt");
  MountGuard guard(mnt2);
  CommandResult f = Acqfs(sandbox(), {"fork", sandbox().name(), "other", mnt2});
  ASSERT_TRUE(f.ok()) << f.Describe();
  auto work = [&](const std::string& dir, const std::string& branch) {
    return RunShell("cd " + ShellQuote(dir) + " && git checkout -q -b " +
                        branch + " && echo " + branch + " > " + branch +
                        ".txt && git add -A && git -c user.name=t -c "
                        "user.email=t@t commit -qm " +
                        branch +
                        " && echo "
                        "after > after-" +
                        branch,
                    120);
  };
  CommandResult a, b;
  std::thread ta([&] { a = work(m, "feature-a"); });
  std::thread tb([&] { b = work(mnt2, "feature-b"); });
  ta.join();
  tb.join();
  ASSERT_TRUE(a.ok()) << a.Describe();
  ASSERT_TRUE(b.ok()) << b.Describe();
  ASSERT_TRUE(
      Acqfs(sandbox(), {"checkpoint", sandbox().name(), "-m", "a done"}).ok());
  ASSERT_TRUE(Acqfs(sandbox(), {"checkpoint", "other", "-m", "b done"}).ok());
  for (const std::string& n : {sandbox().name(), std::string("other")}) {
    CommandResult e = Acqfs(sandbox(), {"export", n});
    ASSERT_TRUE(e.ok()) << e.Describe();
    CommandResult fetch =
        RunShell("git -C " + ShellQuote(host) + " fetch -q sandbox-" + n, 120);
    ASSERT_TRUE(fetch.ok()) << fetch.Describe();
  }
  const std::string ra = "refs/remotes/sandbox-" + sandbox().name();
  const std::string rb = "refs/remotes/sandbox-other";
  EXPECT_EQ(Git(host, "rev-parse -q --verify " + ra + "/feature-a").size(),
            40u);
  EXPECT_EQ(Git(host, "rev-parse -q --verify " + rb + "/feature-b").size(),
            40u);
  EXPECT_EQ(Git(host, "rev-parse -q --verify " + ra + "/feature-b || true"),
            "");
  // Each timeline: its checkpoints' messages, newest first.
  auto timeline = [&](const std::string& ref) {
    return Git(host, "log --first-parent --format=%s HEAD.." + ref +
                         "/acqfs-worktree^2");
  };
  EXPECT_EQ(timeline(ra), "a done\nfork other\nbase");
  EXPECT_EQ(timeline(rb), "b done\nfork other\nbase");
  // The commit of checkpoint "base" (and of the fork's) is one commit.
  auto commit_of = [&](const std::string& ref, const std::string& subject) {
    return Git(host, "log --first-parent --format=%H --grep='^" + subject +
                         "$' HEAD.." + ref + "/acqfs-worktree^2");
  };
  EXPECT_EQ(commit_of(ra, "base"), commit_of(rb, "base"));
  EXPECT_EQ(commit_of(ra, "fork other"), commit_of(rb, "fork other"));
  EXPECT_NE(commit_of(ra, "a done"), commit_of(rb, "b done"));
  // Stock git diffs two checkpoints.
  EXPECT_EQ(Git(host, "diff --name-only " + commit_of(ra, "base") + " " +
                          commit_of(ra, "a done") + " -- ':!.git'"),
            "after-feature-a\nfeature-a.txt");
  // A second export builds nothing again: the same commits.
  const std::string before = Git(host, "rev-parse " + ra + "/acqfs-worktree");
  CommandResult again = Acqfs(sandbox(), {"export", sandbox().name()});
  ASSERT_TRUE(again.ok()) << again.Describe();
  EXPECT_NE(again.out.find("nothing new"), std::string::npos) << again.out;
  (void)before;
  CommandResult u = Acqfs(sandbox(), {"umount", "other", "--no-export"});
  EXPECT_TRUE(u.ok()) << u.Describe();
}

TEST_P(Stack, SquashWhileMountedChangesNothingTheMountShows) {
  const std::string m = sandbox().mountpoint();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(RunShell("cd " + ShellQuote(m) + " && mkdir -p t" +
                             std::to_string(i) + " && echo " +
                             std::to_string(i) + " > t" + std::to_string(i) +
                             "/f && echo " + std::to_string(i) +
                             " >> log && rm -rf t" +
                             std::to_string(i > 0 ? i - 1 : 0) + "/gone",
                         30)
                    .ok());
    ASSERT_TRUE(Acqfs(sandbox(), {"checkpoint", sandbox().name()}).ok());
  }
  const TreeSnapshot before = Snapshot(m, View());
  // A reader holds a file of a frozen layer open across the squash.
  CommandResult r = RunShell("cd " + ShellQuote(m) + " && exec 3< t0/f && " +
                                 ShellQuote(AcqfsBinary()) + " squash " +
                                 sandbox().name() + " --keep 1 --state-dir " +
                                 ShellQuote(sandbox().state_dir()) +
                                 " && cat <&3 && echo more >> log",
                             60);
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_NE(r.out.find("frozen layers now"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n0\n"), std::string::npos) << r.out;
  EXPECT_EQ(sandbox().frozen().size(), 2u);
  TreeSnapshot after = Snapshot(m, View());
  after.entries.erase("log");
  TreeSnapshot expected = before;
  expected.entries.erase("log");
  EXPECT_TRUE(SnapshotsEqual(expected, after, 40));
  EXPECT_EQ(ReadFile(m + "/log"), "0\n1\n2\n3\n4\n5\nmore\n");
  ASSERT_TRUE(Acqfs(sandbox(), {"checkpoint", sandbox().name()}).ok());
  TreeSnapshot fuse_view = Snapshot(m, View());
  ExpectKernelAgrees(sandbox(), tmp(), fuse_view, View());
}

// A stack.json damaged by hand: every command names it and stops (exit 1),
// nothing is written, and `rm --force` still removes the sandbox.
TEST_P(Stack, ADamagedStackIsNamedAndRmForceStillRemovesTheSandbox) {
  ASSERT_TRUE(Acqfs(sandbox(), {"checkpoint", sandbox().name()}).ok());
  ASSERT_TRUE(sandbox().Unmount());
  const std::string stack = sandbox().layer_dir() + "/stack.json";
  const std::vector<std::string> damages = {
      "", "not json", "{\"version\": 2}",
      "{\"version\":1,\"upper\":\"../../etc\",\"frozen\":[],\"base\":0,"
      "\"next_number\":1,\"checkpoints\":[]}"};
  const std::string good = ReadFile(stack);
  for (const auto& d : damages) {
    SCOPED_TRACE(d);
    ASSERT_TRUE(
        RunShell("printf %s " + ShellQuote(d) + " > " + ShellQuote(stack), 10)
            .ok());
    for (std::vector<std::string> args :
         {std::vector<std::string>{"checkpoint", sandbox().name()},
          {"checkpoints", sandbox().name()},
          {"rewind", sandbox().name(), "1"},
          {"fork", sandbox().name(), "f2"},
          {"squash", sandbox().name()},
          {"status", sandbox().name()},
          {"export", sandbox().name()},
          {"rm", sandbox().name()}}) {
      CommandResult r = Acqfs(sandbox(), args);
      EXPECT_EQ(r.exit_code, 1) << r.Describe();
      EXPECT_NE(r.err.find("stack.json"), std::string::npos) << r.Describe();
    }
    CommandResult mount =
        Acqfs(sandbox(), {"mount", sandbox().lower(), sandbox().mountpoint(),
                          "--name", sandbox().name()});
    EXPECT_EQ(mount.exit_code, 1) << mount.Describe();
    EXPECT_NE(mount.err.find("stack.json"), std::string::npos)
        << mount.Describe();
    EXPECT_EQ(ReadFile(stack), d);  // nothing written
    EXPECT_FALSE(Exists(sandbox().state_dir() + "/f2"));
  }
  CommandResult rm = Acqfs(sandbox(), {"rm", "--force", sandbox().name()});
  EXPECT_TRUE(rm.ok()) << rm.Describe();
  EXPECT_FALSE(Exists(sandbox().layer_dir()));
  (void)good;
}

TEST_P(Stack, KillNineDuringCheckpointsLeavesAStackTheKernelAgreesWith) {
  const std::string m = sandbox().mountpoint();
  ASSERT_TRUE(RunShell("cd " + ShellQuote(m) + " && echo 1 > one", 30).ok());
  // Checkpoints racing a kill -9 of the daemon.
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    ::kill(sandbox().daemon_pid(), SIGKILL);
  });
  for (int i = 0; i < 40; ++i) {
    (void)RunShell(
        "echo " + std::to_string(i) + " >> " + ShellQuote(m + "/one"), 10);
    if (!Acqfs(sandbox(), {"checkpoint", sandbox().name()}).ok()) break;
  }
  killer.join();
  // Whatever instant it died at, the stack on disk is whole: it mounts, and
  // the kernel shows what acqfs shows.
  (void)sandbox().Unmount();  // a dead daemon's mount: torn down
  ASSERT_TRUE(sandbox().Remount());
  TreeSnapshot fuse_view = Snapshot(m, View());
  EXPECT_TRUE(Exists(m + "/one"));
  ExpectKernelAgrees(sandbox(), tmp(), fuse_view, View());
}

// The state folder is its owner's to change, and root runs acqfs on it
// (issue 32): a layer directory of the store replaced by a symlink is never
// followed. A frozen layer pointing at a directory of root's secrets is
// refused by export (it used to put them into checkpoint commits the owner
// can fetch); an upper pointing at another directory is refused by mount
// and checkpoint; a frozen layer pointing at the host checkout is refused
// by squash --keep 0 (it used to hard-link the host's files). Each refusal
// names the layer, and nothing outside the store is read or changed.
class StackStore : public MountTest {};

TEST_F(StackStore, ASymlinkedLayerIsNeverFollowed) {
  Sandbox& s = sandbox();
  ASSERT_TRUE(WriteFile(s.mountpoint() + "/work.txt", "agent's\n"));
  CommandResult c = Acqfs(s, {"checkpoint", s.name(), "-m", "one"});
  ASSERT_TRUE(c.ok()) << c.Describe();
  ASSERT_TRUE(WriteFile(s.mountpoint() + "/more.txt", "more\n"));
  c = Acqfs(s, {"checkpoint", s.name(), "-m", "two"});
  ASSERT_TRUE(c.ok()) << c.Describe();
  ASSERT_TRUE(s.Unmount());
  const std::vector<std::string> frozen = s.frozen();
  ASSERT_EQ(frozen.size(), 2u);
  // Root's secret, in a directory only root reads.
  const std::string secrets = tmp().MakeDir("secrets", 0700);
  ASSERT_TRUE(WriteFile(secrets + "/shadow", "root:secret\n"));
  ASSERT_EQ(::chmod((secrets + "/shadow").c_str(), 0600), 0);
  const std::string moved = frozen[0] + ".real";
  ASSERT_EQ(::rename(frozen[0].c_str(), moved.c_str()), 0);
  ASSERT_EQ(::symlink(secrets.c_str(), frozen[0].c_str()), 0);
  auto refused = [&](const CommandResult& r, const std::string& layer) {
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find(layer), std::string::npos) << r.Describe();
    EXPECT_NE(r.err.find("symlink"), std::string::npos) << r.Describe();
  };
  refused(Acqfs(s, {"export", s.name()}), frozen[0]);
  const std::string bridge = s.state_dir() + "/" + s.name() + "/bridge.git";
  EXPECT_EQ(Sh("git --git-dir=" + ShellQuote(bridge) +
               " log --all --format= --name-only 2>/dev/null | "
               "grep -c shadow || true"),
            "0\n");
  // Squash with --keep 0 over a frozen layer pointing at the host checkout:
  // refused, the host's files keep their links and ctimes.
  ASSERT_EQ(::unlink(frozen[0].c_str()), 0);
  ASSERT_EQ(::symlink(lower().c_str(), frozen[0].c_str()), 0);
  const TreeSnapshot host0 = Snapshot(lower(), SnapshotOptions::Everything());
  refused(Acqfs(s, {"squash", s.name(), "--keep", "0"}), frozen[0]);
  EXPECT_TRUE(
      SnapshotsEqual(host0, Snapshot(lower(), SnapshotOptions::Everything())));
  ASSERT_EQ(::unlink(frozen[0].c_str()), 0);
  ASSERT_EQ(::rename(moved.c_str(), frozen[0].c_str()), 0);
  // An upper replaced by a symlink to another directory: mount and
  // checkpoint refuse, and the directory is not written.
  const std::string upper = s.upper();
  const std::string elsewhere = tmp().MakeDir("elsewhere");
  const std::string upper_moved = upper + ".real";
  ASSERT_EQ(::rename(upper.c_str(), upper_moved.c_str()), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), upper.c_str()), 0);
  refused(Acqfs(s, {"checkpoint", s.name()}), upper);
  CommandResult m =
      Acqfs(s, {"mount", lower(), s.mountpoint(), "--name", s.name()});
  refused(m, upper);
  EXPECT_FALSE(FindMount(s.mountpoint()).has_value());
  EXPECT_EQ(Sh("ls -A " + ShellQuote(elsewhere) + " | wc -l"), "0\n");
  ASSERT_EQ(::unlink(upper.c_str()), 0);
  ASSERT_EQ(::rename(upper_moved.c_str(), upper.c_str()), 0);
  CommandResult e = Acqfs(s, {"export", s.name()});
  EXPECT_TRUE(e.ok()) << e.Describe();
}

// A mounted squash with a relative state directory (issue 32): the daemon
// refused the merged layer the client named by a relative path ("st/box/
// squash.<id>: Invalid argument"); now the stack commands take the state
// directory absolute, and the daemon knows the layer by its folder.
TEST_F(StackStore, AMountedSquashWorksWithARelativeStateDir) {
  Sandbox& s = sandbox();
  for (const char* f : {"/a.txt", "/b.txt"}) {
    ASSERT_TRUE(WriteFile(s.mountpoint() + f, "x\n"));
    CommandResult c = Acqfs(s, {"checkpoint", s.name()});
    ASSERT_TRUE(c.ok()) << c.Describe();
  }
  const std::string state = s.state_dir();
  const size_t slash = state.rfind('/');
  CommandResult q = RunCommand({AcqfsBinary(), "squash", s.name(), "--keep",
                                "0", "--state-dir", state.substr(slash + 1)},
                               120, state.substr(0, slash));
  EXPECT_TRUE(q.ok()) << q.Describe();
  EXPECT_EQ(s.frozen().size(), 1u);
  std::string a;
  EXPECT_TRUE(ReadFile(s.mountpoint() + "/a.txt", &a));
  EXPECT_EQ(a, "x\n");
}

// Mounted, `acqfs rewind box 99` said "its daemon does not serve a control
// socket": the CLI took every ENOENT for a missing socket, the daemon's
// own answer too (issue 32). It says what unmounted says.
TEST_F(StackStore, ANoSuchCheckpointIsSaidMountedAsUnmounted) {
  Sandbox& s = sandbox();
  CommandResult c = Acqfs(s, {"checkpoint", s.name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  CommandResult mounted = Acqfs(s, {"rewind", s.name(), "99"});
  EXPECT_NE(mounted.exit_code, 0);
  EXPECT_NE(mounted.err.find("no such checkpoint"), std::string::npos)
      << mounted.Describe();
  EXPECT_EQ(mounted.err.find("control socket"), std::string::npos)
      << mounted.Describe();
  ASSERT_TRUE(s.Unmount());
  CommandResult unmounted = Acqfs(s, {"rewind", s.name(), "99"});
  EXPECT_EQ(unmounted.exit_code, mounted.exit_code) << unmounted.Describe();
  EXPECT_NE(unmounted.err.find("no such checkpoint"), std::string::npos)
      << unmounted.Describe();
}

}  // namespace
}  // namespace acqfs::test
