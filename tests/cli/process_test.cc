// The CLI's process unit (state/process.h): spawning with redirections, a
// working directory, an environment and a process group; wait statuses as
// a shell reports them; signals taken while waiting and passed on; shell
// quoting that /bin/sh reads back word for word; PATH lookup.
#include "state/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/sys.h"
#include "harness/layer_tree.h"

namespace acqfs::cli {
namespace {

// Runs `script` with /bin/sh -c and waits; its output when `out` is set.
ExitStatus Sh(const std::string& script, SpawnOptions o = {},
              std::string* out = nullptr) {
  auto pipe = MakePipe("test");
  EXPECT_TRUE(pipe.ok());
  if (out) o.stdout_fd = pipe->write.get();
  auto pid = Spawn("/bin/sh", {"sh", "-c", script}, o);
  EXPECT_TRUE(pid.ok()) << (pid ? "" : pid.error().Message());
  pipe->write.reset();
  if (out) {
    auto text = sys::ReadAll(pipe->read.get(), 1 << 20, "pipe");
    EXPECT_TRUE(text.ok());
    if (text) *out = *text;
  }
  auto st = Wait(pid ? *pid : -1, "sh");
  EXPECT_TRUE(st.ok());
  return st ? *st : ExitStatus(-1);
}

TEST(ProcessSpawn, ExitStatusesAndSignalsAsAShellReportsThem) {
  ExitStatus ok = Sh("exit 0");
  EXPECT_TRUE(ok.success());
  EXPECT_EQ(ok.ShellCode(99), 0);
  ExitStatus three = Sh("exit 3");
  EXPECT_TRUE(three.exited());
  EXPECT_FALSE(three.success());
  EXPECT_EQ(three.code(), 3);
  EXPECT_EQ(three.ShellCode(99), 3);
  EXPECT_EQ(three.Describe(), "exited with status 3");
  ExitStatus killed = Sh("kill -TERM $$");
  EXPECT_TRUE(killed.signaled());
  EXPECT_EQ(killed.signal(), SIGTERM);
  EXPECT_EQ(killed.ShellCode(99), 128 + SIGTERM);
  EXPECT_EQ(killed.Describe(), "was killed by signal 15 (Terminated)");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
}

TEST(ProcessSpawn, RedirectionsCwdEnvironmentAndGroup) {
  acqfs::test::TempTree t;
  SpawnOptions o;
  o.cwd = t.root();
  o.env = std::vector<std::string>{"ACQFS_X=a b", "PATH=/usr/bin:/bin"};
  o.new_group = true;
  o.stderr_path = t.root() + "/err";
  std::string out;
  ExitStatus st =
      Sh("echo \"$ACQFS_X|$(pwd -P)|$HOME\"; echo oops >&2; "
         "[ \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$ ] && echo own-group",
         o, &out);
  EXPECT_TRUE(st.success());
  std::string root = t.root();
  char buf[4096];
  if (::realpath(root.c_str(), buf)) root = buf;
  EXPECT_EQ(out, "a b|" + root + "|\nown-group\n");
  EXPECT_EQ(acqfs::test::ReadFile(t.root() + "/err"), "oops\n");
  // /dev/null in, and the inherited descriptors closed unless kept.
  SpawnOptions n;
  n.stdin_fd = SpawnOptions::kDevNull;
  auto keep = MakePipe("kept");
  ASSERT_TRUE(keep.ok());
  n.keep_fds = {keep->write.get()};
  std::string seen;
  EXPECT_TRUE(Sh("cat; echo kept >&" + std::to_string(keep->write.get()) +
                     " && echo wrote",
                 n, &seen)
                  .success());
  EXPECT_EQ(seen, "wrote\n");
  keep->write.reset();
  auto kept = sys::ReadAll(keep->read.get(), 100, "kept");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "kept\n");
  auto closed = MakePipe("closed");
  ASSERT_TRUE(closed.ok());
  EXPECT_FALSE(Sh("{ echo x >&" + std::to_string(closed->write.get()) +
                  "; } 2>/dev/null")
                   .success());
}

TEST(ProcessSpawn, ErrorsNameTheOperationAndTheProgram) {
  auto pid = Spawn("/nonexistent/acqfs-prog", {"acqfs-prog"}, {});
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.err(), ENOENT);
  EXPECT_EQ(pid.error().op, "posix_spawn");
  EXPECT_EQ(pid.error().path, "/nonexistent/acqfs-prog");
  SpawnOptions o;
  o.search_path = true;
  auto bad = Spawn("acqfs-no-such-program-here", {"x"}, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().path, "acqfs-no-such-program-here");
  auto none = Wait(1, "init");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.err(), ECHILD);
  EXPECT_EQ(none.error().op, "waitpid");
  EXPECT_EQ(none.error().path, "init");
}

TEST(ProcessSignals, ATerminationSignalIsTakenWhileWaitingAndPassedOn) {
  SignalWatch watch({SIGTERM, SIGINT}, {SIGTSTP});
  ASSERT_TRUE(watch.Start().ok());
  SpawnOptions o;
  o.new_group = true;
  o.reset_signals = watch.ChildDefaults();
  // The child waits to be killed; this process gets SIGTERM meanwhile.
  auto pid = Spawn("/bin/sh", {"sh", "-c", "kill -TERM $PPID; sleep 30"}, o);
  ASSERT_TRUE(pid.ok());
  std::vector<int> got;
  auto st = WaitWatching(watch, *pid, "sh", [&](int sig) {
    got.push_back(sig);
    EXPECT_TRUE(SendSignal(-*pid, sig, "sh's group").ok());
  });
  ASSERT_TRUE(st.ok()) << st.error().Message();
  EXPECT_EQ(got, std::vector<int>{SIGTERM});
  EXPECT_EQ(watch.first(), SIGTERM);
  EXPECT_TRUE(st->signaled());
  EXPECT_EQ(st->signal(), SIGTERM);
  // A dropped signal is taken and not reported.
  ASSERT_EQ(::kill(::getpid(), SIGTSTP), 0);
  EXPECT_TRUE(watch.Take().empty());
  // A process that is gone is no error.
  EXPECT_TRUE(SendSignal(*pid, SIGTERM, "gone").ok());
}

TEST(ProcessQuoting, EveryWordComesBackFromShUnchanged) {
  const std::vector<std::string> words = {
      "plain",     "with space",  "it's",  "",          "$HOME",
      "a\"b",      "back\\slash", "*",     "new\nline", "--flag=x,y",
      "tab\there", "'",           "~user", ";|&<>()"};
  EXPECT_EQ(ShellQuote("plain"), "plain");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
  for (const std::string& w : words) {
    std::string out;
    EXPECT_TRUE(Sh("printf '%s\\0' " + ShellQuote(w), {}, &out).success());
    EXPECT_EQ(out, w + std::string(1, '\0')) << ShellQuote(w);
  }
  std::string all;
  EXPECT_TRUE(Sh("printf '%s\\0' " + ShellLine(words), {}, &all).success());
  std::string want;
  for (const std::string& w : words) want += w + std::string(1, '\0');
  EXPECT_EQ(all, want);
}

TEST(ProcessPath, FindsTheFirstExecutableFileInPath) {
  acqfs::test::TempTree t;
  const std::string a = t.root() + "/a", b = t.root() + "/b";
  acqfs::test::MakeDir(a);
  acqfs::test::MakeDir(b);
  acqfs::test::MakeFile(a + "/tool", "#!/bin/sh\n", 0644);  // not executable
  acqfs::test::MakeDir(a + "/dir-tool");
  acqfs::test::MakeFile(b + "/tool", "#!/bin/sh\n", 0755);
  acqfs::test::MakeDir(b + "/dir-tool");
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", (a + ":" + b).c_str(), 1);
  auto found = FindInPath("tool");
  auto dir = FindInPath("dir-tool");
  auto missing = FindInPath("no-such-tool");
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, b + "/tool");
  ASSERT_FALSE(dir.ok());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.err(), ENOENT);
  EXPECT_EQ(missing.error().path, "no-such-tool");
  auto sh = FindInPath("sh");
  ASSERT_TRUE(sh.ok());
  EXPECT_EQ(sh->front(), '/');
}

TEST(ProcessEnvironment, EnvironmentWithReplacesTheVariable) {
  ::setenv("ACQFS_TEST_VAR", "old", 1);
  auto env = EnvironmentWith("ACQFS_TEST_VAR", "new");
  int seen = 0;
  for (const auto& e : env) {
    if (e.rfind("ACQFS_TEST_VAR=", 0) == 0) {
      ++seen;
      EXPECT_EQ(e, "ACQFS_TEST_VAR=new");
    }
  }
  EXPECT_EQ(seen, 1);
  ::unsetenv("ACQFS_TEST_VAR");
}

}  // namespace
}  // namespace acqfs::cli
