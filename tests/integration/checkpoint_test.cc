// A sandbox's history as a stack of frozen layers (docs/stack.md): a
// checkpoint while mounted, with writes in flight; rewind; fork; kill -9 in
// the middle of a checkpoint. The oracle is the kernel overlayfs mounting
// the same stack (lowerdir=TOP:...:L1:HOST), which must show what the FUSE
// mount showed.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/lower_repo.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "harness/snapshot.h"
#include "harness/temp_dir.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

CommandResult Acqfs(const Sandbox& s, std::vector<std::string> args) {
  return AcqfsIn(s, std::move(args));
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

// A name the kernel had looked up as missing (a negative entry it caches)
// exists again after a rewind to a checkpoint that holds it: `stat` said
// ENOENT, and open(O_CREAT) without O_EXCL failed with EEXIST (the daemon
// found the name the kernel thought free), found by a storm of rewinds
// during writes. In the root and in a directory the kernel knows.
TEST_P(Stack, ARewindShowsNamesTheKernelHadLookedUpAsMissing) {
  const std::string m = sandbox().mountpoint();
  ASSERT_TRUE(WriteFile(m + "/back", "back\n"));
  ASSERT_TRUE(WriteFile(m + "/docs/back", "back\n"));
  CommandResult c = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  // And a file open across the rewind: its object is gone, ESTALE (as NFS
  // says of a file handle whose file is gone; docs/stack.md).
  ASSERT_TRUE(WriteFile(m + "/held", "held\n"));
  ScopedFd held(::open((m + "/held").c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(held.valid()) << ErrnoName(errno);
  for (const std::string& p : {m + "/back", m + "/docs/back"}) {
    ASSERT_EQ(::unlink(p.c_str()), 0) << ErrnoName(errno);
    struct stat st;
    ASSERT_NE(::stat(p.c_str(), &st), 0);  // looked up: missing
    ASSERT_EQ(errno, ENOENT);
  }
  CommandResult r = Acqfs(sandbox(), {"rewind", sandbox().name(), "1"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  for (const std::string& p : {m + "/back", m + "/docs/back"}) {
    struct stat st;
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p << ": " << ErrnoName(errno);
    ScopedFd fd(
        ::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    EXPECT_TRUE(fd.valid()) << p << ": " << ErrnoName(errno);
  }
  EXPECT_EQ(ReadFile(m + "/back"), "back\n");
  if (sandbox().DaemonLog().find("passthrough: on") == std::string::npos) {
    EXPECT_EQ(::pwrite(held.get(), "x", 1, 0), -1);
    EXPECT_EQ(errno, ESTALE) << ErrnoName(errno);
  } else {
    // Passed through (-o handles as root), the kernel writes the file
    // itself: a file of no name since the rewind, as an unlinked one
    // (docs/stack.md).
    EXPECT_EQ(::pwrite(held.get(), "x", 1, 0), 1) << ErrnoName(errno);
  }
  EXPECT_FALSE(Exists(m + "/held"));
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

// A checkpoint taken while a data write is in flight waits for it, for
// every kind of data write (issue 33: the engine owns every write's
// duties). copy_file_range took no freeze gate, and neither did the
// truncate of an O_TRUNC open with -o handles, so bytes could land in the
// layer a checkpoint had just frozen. The daemon's test hook pauses each
// such write between its descriptor's lease and its first byte, where the
// checkpoint is sent: each frozen layer must stay byte for byte what it
// was when the checkpoint returned.
class PausedWrites : public BothFileModes {
 protected:
  SandboxOptions ModeOptions() const override {
    SandboxOptions o;
    o.command_prefix = {
        "env", "ACQFS_TEST_PAUSE_DATA_WRITE=copy_file_range:400,truncate:400"};
    return o;
  }
};
ACQFS_IN_BOTH_FILE_MODES(PausedWrites);

TEST_P(PausedWrites, AFrozenLayerStaysAsFrozenWhileADataWriteIsInFlight) {
  const std::string m = sandbox().mountpoint();
  const std::string data(1 << 20, 'c');
  ASSERT_TRUE(WriteFile(m + "/cfr-source", data));
  ASSERT_TRUE(WriteFile(m + "/cfr-target", "old copy\n"));
  ASSERT_TRUE(WriteFile(m + "/to-truncate", "old content to truncate\n"));
  // Each write, with a checkpoint sent while it is paused in the daemon.
  struct Case {
    const char* what;
    std::function<bool()> write;
  };
  const std::vector<Case> cases = {
      {"copy_file_range",
       [&] {
         ScopedFd in(::open((m + "/cfr-source").c_str(), O_RDONLY | O_CLOEXEC));
         ScopedFd out(
             ::open((m + "/cfr-target").c_str(), O_WRONLY | O_CLOEXEC));
         if (!in.valid() || !out.valid()) return false;
         loff_t oi = 0, oo = 0;
         return ::copy_file_range(in.get(), &oi, out.get(), &oo, data.size(),
                                  0) == static_cast<ssize_t>(data.size());
       }},
      {"O_TRUNC open",
       [&] {
         ScopedFd f(::open((m + "/to-truncate").c_str(),
                           O_WRONLY | O_TRUNC | O_CLOEXEC));
         return f.valid();
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    bool wrote = false;
    std::thread writer([&] { wrote = c.write(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    CommandResult cp = Acqfs(sandbox(), {"checkpoint", sandbox().name()});
    ASSERT_TRUE(cp.ok()) << cp.Describe();
    const std::string frozen = sandbox().frozen().back();
    const TreeSnapshot at_checkpoint =
        Snapshot(frozen, SnapshotOptions::Everything());
    writer.join();
    EXPECT_TRUE(wrote) << ErrnoName(errno);
    EXPECT_TRUE(SnapshotsEqual(at_checkpoint,
                               Snapshot(frozen, SnapshotOptions::Everything())))
        << "bytes landed in " << frozen << " after it was frozen";
  }
  std::string copy;
  ASSERT_TRUE(ReadFile(m + "/cfr-target", &copy));
  EXPECT_EQ(copy, data);
  std::string trunc;
  ASSERT_TRUE(ReadFile(m + "/to-truncate", &trunc));
  EXPECT_EQ(trunc, "");
}

// The state folder is its owner's to change, and root runs acqfs on it
// (issue 32): a layer directory of the store replaced by a symlink is never
// followed. A frozen layer pointing at a directory of root's secrets is
// refused by export (it used to put them into checkpoint commits the owner
// can fetch); an upper pointing at another directory is refused by mount
// and checkpoint; a frozen layer pointing at the host checkout is refused
// by squash --keep 0 (it used to hard-link the host's files). Each refusal
// names the layer, and nothing outside the store is read or changed.
class StackStore : public MountTest {
 protected:
  // Two checkpoints, each holding a file of its own (a.txt, b.txt), taken
  // while mounted: two frozen layers, something for squash to merge.
  void TwoCheckpoints(Sandbox& s) {
    for (const char* f : {"/a.txt", "/b.txt"}) {
      ASSERT_TRUE(WriteFile(s.mountpoint() + f, "x\n"));
      CommandResult c = Acqfs(s, {"checkpoint", s.name()});
      ASSERT_TRUE(c.ok()) << c.Describe();
    }
  }
};

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
  ASSERT_NO_FATAL_FAILURE(TwoCheckpoints(s));
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

// Rewrites the manifest at `path` with `change` applied to its JSON.
void EditStack(const std::string& path,
               const std::function<void(nlohmann::json&)>& change) {
  std::string text;
  ASSERT_TRUE(ReadFile(path, &text));
  nlohmann::json j = nlohmann::json::parse(text);
  change(j);
  ASSERT_TRUE(WriteFile(path, j.dump()));
}

// A live upper belongs to one sandbox (issue 32): a manifest naming another
// sandbox's live upper (as its upper, its frozen layer, or that sandbox's
// folder) is refused by mount, checkpoint and squash before anything is
// written, and that upper is neither written, frozen nor hard-linked.
TEST_F(StackStore, ALiveUpperHasOneOwner) {
  Sandbox& s = sandbox();
  ASSERT_TRUE(WriteFile(s.mountpoint() + "/a.txt", "a\n"));
  CommandResult c = Acqfs(s, {"checkpoint", s.name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  CommandResult f = Acqfs(s, {"fork", s.name(), "other", "--at", "1"});
  ASSERT_TRUE(f.ok()) << f.Describe();
  ASSERT_TRUE(s.Unmount());
  const std::string stack = s.state_dir() + "/" + s.name() + "/stack.json";
  const std::string other_stack = s.state_dir() + "/other/stack.json";
  std::string text;
  ASSERT_TRUE(ReadFile(other_stack, &text));
  const std::string other_upper =
      nlohmann::json::parse(text)["upper"].get<std::string>();
  const std::string other_dir = s.state_dir() + "/" + other_upper;
  ASSERT_TRUE(WriteFile(other_dir + "/theirs.txt", "theirs\n"));
  const TreeSnapshot theirs0 =
      Snapshot(other_dir, SnapshotOptions::Everything());
  std::string original;
  ASSERT_TRUE(ReadFile(stack, &original));
  auto refused = [&](const std::vector<std::string>& args) {
    CommandResult r = Acqfs(s, args);
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("other"), std::string::npos) << r.Describe();
    EXPECT_NE(r.err.find("live upper"), std::string::npos) << r.Describe();
    EXPECT_FALSE(FindMount(s.mountpoint()).has_value());
    EXPECT_TRUE(SnapshotsEqual(
        theirs0, Snapshot(other_dir, SnapshotOptions::Everything())));
    std::string now;
    EXPECT_TRUE(ReadFile(other_stack, &now));
    EXPECT_EQ(now, text) << "the other sandbox's manifest";
  };
  // Its upper is the other's upper.
  EditStack(stack, [&](nlohmann::json& j) { j["upper"] = other_upper; });
  refused({"mount", lower(), s.mountpoint(), "--name", s.name()});
  refused({"checkpoint", s.name()});
  refused({"rewind", s.name(), "1"});
  // Its upper is the other's folder.
  EditStack(stack, [&](nlohmann::json& j) { j["upper"] = "other/upper"; });
  refused({"checkpoint", s.name()});
  // Its bottom frozen layer is the other's live upper: squash --keep 0
  // would hard-link the other's files into its merged layer.
  ASSERT_TRUE(WriteFile(stack, original));
  EditStack(stack, [&](nlohmann::json& j) {
    j["frozen"].insert(j["frozen"].begin(), other_upper);
    for (auto& cp : j["checkpoints"])
      if (cp["number"] == j["base"]) cp["layers"] = j["frozen"];
  });
  refused({"squash", s.name(), "--keep", "0"});
  ASSERT_TRUE(WriteFile(stack, original));
  c = Acqfs(s, {"checkpoint", s.name()});
  EXPECT_TRUE(c.ok()) << c.Describe();
}

// mount.fuse.acqfs serving a sandbox's stack keeps checkpoint and rewind
// out, as acqfs mount does (issue 32): checkpoint froze the layer the
// helper's daemon was still writing.
TEST_F(StackStore, AStackTheMountHelperServesIsNotCheckpointedUnderIt) {
  Sandbox& s = sandbox();
  ASSERT_TRUE(WriteFile(s.mountpoint() + "/a.txt", "a\n"));
  CommandResult c = Acqfs(s, {"checkpoint", s.name()});
  ASSERT_TRUE(c.ok()) << c.Describe();
  ASSERT_TRUE(s.Unmount());
  std::string lowerdirs;
  const std::vector<std::string> frozen = s.frozen();
  for (auto it = frozen.rbegin(); it != frozen.rend(); ++it)
    lowerdirs += *it + ":";
  const std::string mnt = tmp().MakeDir("helper");
  const std::string upper = s.upper();
  CommandResult h =
      RunCommand({MountHelperBinary(), "acqfs", mnt, "-o",
                  "lowerdir=" + lowerdirs + lower() + ",upperdir=" + upper +
                      ",workdir=" + s.work()},
                 60);
  ASSERT_TRUE(h.ok()) << h.Describe();
  struct Unmount {
    std::string mnt;
    ~Unmount() {
      const std::vector<pid_t> daemons = PidsWithArgument(mnt);
      RunCommand({"fusermount3", "-u", mnt}, 30);
      for (pid_t pid : daemons) {
        WaitForProcessExit(pid, 20);
        KillIfAlive(pid, "acqfs");
      }
    }
  } unmount{mnt};
  ASSERT_TRUE(WriteFile(mnt + "/helper.txt", "written through the helper\n"));
  for (std::vector<std::string> args :
       {std::vector<std::string>{"checkpoint", s.name()},
        {"rewind", s.name(), "1"},
        {"squash", s.name(), "--keep", "0"}}) {
    CommandResult r = Acqfs(s, args);
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("in use by acqfs daemon pid"), std::string::npos)
        << r.Describe();
  }
  EXPECT_EQ(s.upper(), upper) << "the stack moved under the helper";
  EXPECT_EQ(s.frozen(), frozen);
}

// A held sandbox lock is said to be held, by whom (issue 32): during an
// unmounted squash, checkpoint said "control.sock: No such file or
// directory (its daemon does not serve a control socket ...)".
TEST_F(StackStore, AHeldLockIsSaidHeldByItsPid) {
  Sandbox& s = sandbox();
  ASSERT_NO_FATAL_FAILURE(TwoCheckpoints(s));
  ASSERT_TRUE(s.Unmount());
  // Held as a command holds it: an open file description lock.
  const std::string lock = s.state_dir() + "/" + s.name() + "/lock";
  ScopedFd fd(::open(lock.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << ErrnoName(errno);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  ASSERT_EQ(::fcntl(fd.get(), F_OFD_SETLK, &fl), 0) << ErrnoName(errno);
  const std::string pid = "pid " + std::to_string(::getpid());
  for (std::vector<std::string> args :
       {std::vector<std::string>{"checkpoint", s.name()},
        {"rewind", s.name(), "1"},
        {"squash", s.name(), "--keep", "0"}}) {
    CommandResult r = Acqfs(s, args);
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("busy"), std::string::npos) << r.Describe();
    EXPECT_NE(r.err.find(pid), std::string::npos) << r.Describe();
    EXPECT_EQ(r.err.find("control socket"), std::string::npos) << r.Describe();
  }
}

// Work that lives only in an undo point is never lost to rm (issue 32): a
// rewind kept what the agent wrote as checkpoint 2, export skipped it, and
// rm removed it with exit 0. Every checkpoint is now exported as
// refs/acqfs/checkpoints/<n>, which the host fetches and keeps after rm,
// and rm refuses while one is not exported or not fetched.
TEST_F(StackStore, WorkOnlyInAnUndoPointIsNeverLostToRm) {
  Sandbox& s = sandbox();
  CommandResult c = Acqfs(s, {"checkpoint", s.name(), "-m", "clean"});
  ASSERT_TRUE(c.ok()) << c.Describe();
  ASSERT_TRUE(WriteFile(s.mountpoint() + "/important.txt", "precious\n"));
  CommandResult r = Acqfs(s, {"rewind", s.name(), "1"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  // Straight to rm (which unmounts, and exports nothing): refused.
  CommandResult rm = Acqfs(s, {"rm", s.name()});
  EXPECT_NE(rm.exit_code, 0) << rm.Describe();
  EXPECT_NE(rm.err.find("checkpoint 2"), std::string::npos) << rm.Describe();
  EXPECT_TRUE(s.UnmountedElsewhere(20));  // rm unmounted it
  CommandResult e = Acqfs(s, {"export", s.name()});
  ASSERT_TRUE(e.ok()) << e.Describe();
  // Exported, not fetched: refused.
  rm = Acqfs(s, {"rm", s.name()});
  EXPECT_NE(rm.exit_code, 0) << rm.Describe();
  EXPECT_NE(rm.err.find("checkpoints/2"), std::string::npos) << rm.Describe();
  ASSERT_TRUE(Sh("git -C " + ShellQuote(lower()) + " fetch -q sandbox-" +
                 s.name() + " && echo ok") == "ok\n");
  rm = Acqfs(s, {"rm", s.name()});
  EXPECT_TRUE(rm.ok()) << rm.Describe();
  EXPECT_EQ(Sh("git -C " + ShellQuote(lower()) + " show refs/sandboxes/" +
               s.name() + "/checkpoints/2:important.txt"),
            "precious\n");
}

// A root command on a state folder an ordinary user owns acts there as
// that user (issue 32, state/as_owner.h). Root's checkpoint left stack.json
// root:root 0600, and the user's next mount failed ("Permission denied");
// root's squash left root-owned whiteouts in the user's merged layer; and
// root's export read whatever meta.json named as the host, a repository
// only root may read among them.
// An ordinary user's (uid 65534) sandbox in a state folder of theirs, and
// root running acqfs on it (`sudo` from that user: SUDO_UID, so a checkout
// of theirs is trusted).
class StackOwner : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "needs root (as CI has)";
    ASSERT_EQ(::chmod(t_.path().c_str(), 0755), 0);
    struct stat fuse;
    ASSERT_EQ(::stat("/dev/fuse", &fuse), 0);
    fuse_mode_ = static_cast<int>(fuse.st_mode & 07777);
    ASSERT_EQ(::chmod("/dev/fuse", 0666), 0);
    home_ = t_.MakeDir("home", 0755, 65534, 65534);
    lower_ = t_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(lower_));
    ASSERT_TRUE(ChownTree(lower_, 65534, 65534));
    mnt_ = t_.MakeDir("mnt", 0755, 65534, 65534);
    acqfs_ = t_.MakeDir("bin") + "/acqfs";
    ASSERT_TRUE(RunCommand({"cp", AcqfsBinary(), acqfs_}, 30).ok());
    state_ = home_ + "/st";
  }
  void TearDown() override {
    if (FindMount(mnt_).has_value()) RunCommand({"umount", "-l", mnt_}, 30);
    if (fuse_mode_ >= 0) ::chmod("/dev/fuse", static_cast<mode_t>(fuse_mode_));
  }
  // acqfs ARGS --state-dir STATE, as the user or as root.
  CommandResult Run(bool as_user, std::vector<std::string> args) {
    std::vector<std::string> argv;
    if (as_user)
      argv = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
    argv.insert(argv.end(), {"env", "HOME=" + home_});
    if (!as_user) argv.push_back("SUDO_UID=65534");
    argv.push_back(acqfs_);
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--state-dir", state_});
    return RunCommand(argv, 60);
  }
  CommandResult AsUser(std::vector<std::string> args) {
    return Run(true, std::move(args));
  }
  CommandResult AsRoot(std::vector<std::string> args) {
    return Run(false, std::move(args));
  }
  CommandResult ShAsUser(const std::string& script) {
    return RunCommand({"setpriv", "--reuid=65534", "--regid=65534",
                       "--clear-groups", "sh", "-c", script},
                      60);
  }

  TempDir t_;
  int fuse_mode_ = -1;
  std::string home_, lower_, mnt_, acqfs_, state_;
};

TEST_F(StackOwner, ARootCommandOnAUsersFolderActsAsItsOwner) {
  TempDir& t = t_;
  const std::string& lower = lower_;
  const std::string& mnt = mnt_;
  const std::string& state = state_;
  auto as_user = [&](std::vector<std::string> a) {
    return AsUser(std::move(a));
  };
  auto as_root = [&](std::vector<std::string> a) {
    return AsRoot(std::move(a));
  };
  auto sh_user = [&](const std::string& c) { return ShAsUser(c); };
  CommandResult r = as_user({"mount", lower, mnt, "--name", "ubox"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  r = sh_user("cd " + ShellQuote(mnt) + " && echo x > x.txt && rm README.md");
  ASSERT_TRUE(r.ok()) << r.Describe();
  ASSERT_TRUE(as_user({"checkpoint", "ubox"}).ok());
  r = sh_user("cd " + ShellQuote(mnt) + " && echo y > y.txt");
  ASSERT_TRUE(r.ok()) << r.Describe();
  ASSERT_TRUE(as_user({"umount", mnt}).ok());
  // Root's commands on the user's unmounted sandbox.
  for (std::vector<std::string> args :
       {std::vector<std::string>{"checkpoint", "ubox"},
        {"squash", "ubox", "--keep", "0"},
        {"rewind", "ubox", "2"},
        {"gc"}}) {
    r = as_root(args);
    EXPECT_TRUE(r.ok()) << r.Describe();
  }
  EXPECT_EQ(Sh("find " + ShellQuote(state) + " -user root -o -group root"), "");
  // The user's next mount works, and shows the work.
  r = as_user({"mount", lower, mnt, "--name", "ubox"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  r = sh_user("cd " + ShellQuote(mnt) + " && cat x.txt y.txt && ls README.md");
  EXPECT_EQ(r.out, "x\ny\n") << r.Describe();
  ASSERT_TRUE(as_user({"umount", mnt}).ok());
  // A meta.json naming a repository only root reads as the host: root's
  // export and diff are refused, and the bridge holds nothing of it.
  const std::string secret = t.MakeDir("secret", 0700);
  ASSERT_EQ(Sh("cd " + ShellQuote(secret) +
               " && git init -q && echo root-only > s && git add s && git -c "
               "user.name=r -c user.email=r@r commit -qm s && echo ok"),
            "ok\n");
  const std::string meta = state + "/ubox/meta.json";
  std::string text;
  ASSERT_TRUE(ReadFile(meta, &text));
  nlohmann::json j = nlohmann::json::parse(text);
  j["lower"] = secret;
  ASSERT_TRUE(WriteFile(meta, j.dump()));
  r = as_root({"export", "ubox"});
  EXPECT_NE(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.err.find(secret), std::string::npos) << r.Describe();
  r = as_root({"diff", "ubox"});
  EXPECT_NE(r.exit_code, 0) << r.Describe();
  std::string secret_head =
      Sh("git -C " + ShellQuote(secret) + " rev-parse HEAD");
  while (!secret_head.empty() && secret_head.back() == '\n')
    secret_head.pop_back();
  ASSERT_EQ(secret_head.size(), 40u);
  EXPECT_EQ(Sh("git --git-dir=" + ShellQuote(state + "/ubox/bridge.git") +
               " cat-file -e " + secret_head + " 2>/dev/null || echo absent"),
            "absent\n");
  j["lower"] = lower;
  ASSERT_TRUE(WriteFile(meta, j.dump()));
  r = as_user({"rm", "ubox", "--force"});
  EXPECT_TRUE(r.ok()) << r.Describe();
}

// Root mounting an ordinary user's sandbox follows no name the user
// replaced by a symlink in the sandbox's folder (issue 32): the daemon
// appended its log to whatever daemon.log named (/etc/passwd), the lock
// was created wherever `lock` pointed, and the bridge written wherever
// bridge.git pointed (objects/info/alternates of a repository of root's).
TEST_F(StackOwner, ARootMountOfAUsersSandboxFollowsNoSymlinkInItsFolder) {
  TempDir& t = t_;
  const std::string& lower = lower_;
  const std::string& mnt = mnt_;
  const std::string& state = state_;
  const std::string& acqfs = acqfs_;
  const std::string box = state + "/ubox";
  auto run = [&](bool as_user, std::vector<std::string> a) {
    return Run(as_user, std::move(a));
  };
  CommandResult r = run(true, {"mount", lower, mnt, "--name", "ubox"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  ASSERT_TRUE(run(true, {"umount", mnt}).ok());
  // Root's things, where only root reads.
  const std::string roots = t.MakeDir("roots", 0700);
  ASSERT_TRUE(WriteFile(roots + "/passwd", "root:x:0:0\n"));
  ASSERT_EQ(Sh("git init -q --bare " + ShellQuote(roots + "/repo.git") +
               " && echo ok"),
            "ok\n");
  const TreeSnapshot roots0 = Snapshot(roots, SnapshotOptions::Everything());
  auto swap = [&](const std::string& name, const std::string& target) {
    const std::string p = box + "/" + name;
    ASSERT_EQ(Sh("mv " + ShellQuote(p) + " " + ShellQuote(p + ".real") +
                 " 2>/dev/null; ln -s " + ShellQuote(target) + " " +
                 ShellQuote(p) + " && echo ok"),
              "ok\n");
  };
  auto unswap = [&](const std::string& name) {
    const std::string p = box + "/" + name;
    ASSERT_EQ(Sh("rm " + ShellQuote(p) + " && (mv " + ShellQuote(p + ".real") +
                 " " + ShellQuote(p) + " 2>/dev/null; true) && echo ok"),
              "ok\n");
  };
  // bridge.git pointing at root's repository, lock at a name in root's
  // directory: refused, neither written nor created.
  for (const auto& [name, target] :
       {std::pair<std::string, std::string>{"bridge.git", roots + "/repo.git"},
        {"lock", roots + "/nologin"}}) {
    swap(name, target);
    r = run(false, {"mount", lower, mnt, "--name", "ubox"});
    EXPECT_NE(r.exit_code, 0) << name << ": " << r.Describe();
    if (FindMount(mnt).has_value())
      RunCommand({acqfs, "umount", mnt, "--state-dir", state}, 60);
    unswap(name);
  }
  // daemon.log pointing at root's file: the daemon logs to a file of its
  // own, the owner's, and root's file is untouched.
  swap("daemon.log", roots + "/passwd");
  r = run(false, {"mount", lower, mnt, "--name", "ubox"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  r = run(false, {"umount", mnt});
  EXPECT_TRUE(r.ok()) << r.Describe();
  struct stat log;
  ASSERT_EQ(::lstat((box + "/daemon.log").c_str(), &log), 0);
  EXPECT_TRUE(S_ISREG(log.st_mode));
  EXPECT_EQ(log.st_uid, 65534u);
  EXPECT_TRUE(
      SnapshotsEqual(roots0, Snapshot(roots, SnapshotOptions::Everything())));
  r = run(true, {"rm", "ubox", "--force"});
  EXPECT_TRUE(r.ok()) << r.Describe();
}

}  // namespace
}  // namespace acqfs::test
