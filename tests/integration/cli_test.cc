// The command line as a person meets it: --help on every subcommand,
// --version, usage errors in acqfs's error format, unknown sandboxes named in
// the message, -v raising the daemon log's detail, and progress lines that
// appear on a terminal and never in piped output.
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "harness/binaries.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

const std::vector<std::string> kSubcommands = {
    "mount", "umount", "export", "rm", "ls", "status", "diff", "bench"};

CommandResult Acqfs(const std::vector<std::string>& args,
                    const EnvAdditions& env = {}) {
  std::vector<std::string> argv = {AcqfsBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, 120, "", env);
}

TEST(Cli, EverySubcommandHasHelp) {
  CommandResult top = Acqfs({"--help"});
  ASSERT_TRUE(top.ok()) << top.Describe();
  for (const auto& sub : kSubcommands) {
    EXPECT_NE(top.out.find(sub), std::string::npos) << sub << top.Describe();
    CommandResult r = Acqfs({sub, "--help"});
    EXPECT_TRUE(r.ok()) << r.Describe();
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << r.Describe();
    EXPECT_NE(r.out.find(sub), std::string::npos) << r.Describe();
    EXPECT_NE(r.out.find("--state-dir"), std::string::npos) << r.Describe();
  }
}

TEST(Cli, VersionNamesTheProgramAndANumber) {
  CommandResult r = Acqfs({"--version"});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_TRUE(
      std::regex_match(r.out, std::regex("acqfs [0-9]+\\.[0-9]+\\.[0-9]+\n")))
      << r.Describe();
}

TEST(Cli, UsageErrorsUseTheErrorFormatAndExitOne) {
  struct Case {
    std::vector<std::string> args;
    std::string prefix;
  };
  const std::vector<Case> cases = {
      {{}, "acqfs: usage: acqfs: "},
      {{"frobnicate"}, "acqfs: usage: acqfs: "},
      {{"mount"}, "acqfs: usage: acqfs mount: "},
      {{"mount", "a", "b", "--no-such-flag"}, "acqfs: usage: acqfs mount: "},
      {{"status"}, "acqfs: usage: acqfs status: "},
      {{"ls", "extra"}, "acqfs: usage: acqfs ls: "},
  };
  for (const Case& c : cases) {
    CommandResult r = Acqfs(c.args);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_EQ(r.err.rfind(c.prefix, 0), 0u) << r.Describe();
    EXPECT_NE(r.err.find("--help"), std::string::npos) << r.Describe();
  }
}

TEST(Cli, AnUnknownSandboxIsNamedInTheMessage) {
  TempDir tmp;
  const std::string state = tmp.MakeDir("state");
  for (const std::string sub : {"export", "rm", "umount", "status", "diff"}) {
    CommandResult r = Acqfs({sub, "no-such-box", "--state-dir", state});
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_EQ(r.err.rfind("acqfs: " + sub + ": no-such-box: ", 0), 0u)
        << r.Describe();
  }
}

// -v makes the daemon log the requests that failed in the ordinary way
// (ENOENT lookups); the default level does not.
TEST(Cli, VerboseRaisesTheDaemonLogsDetail) {
  TempDir tmp;
  const std::string lower_dir = tmp.MakeDir("lower");
  ASSERT_TRUE(WriteFile(lower_dir + "/a.txt", "a\n"));
  for (bool verbose : {false, true}) {
    SandboxOptions options;
    options.name = verbose ? "loud" : "quiet";
    if (verbose) options.extra_mount_args = {"-v"};
    Sandbox sandbox(lower_dir, options);
    ASSERT_TRUE(sandbox.mounted()) << sandbox.mount_failure();
    struct stat st;
    EXPECT_NE(::stat(sandbox.M("no-such-file-here").c_str(), &st), 0);
    ASSERT_TRUE(sandbox.Unmount());
    const std::string log = sandbox.DaemonLog();
    EXPECT_EQ(log.find("[debug]") != std::string::npos, verbose) << log;
    EXPECT_EQ(log.find("no-such-file-here") != std::string::npos, verbose)
        << log;
  }
}

// Progress is drawn on a terminal (here a pty from script(1)) and never
// when stderr is a pipe; ACQFS_PROGRESS_DELAY_MS=0 removes the one-second
// delay so a small export shows it too.
class CliProgress : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    lower_ = tmp_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(lower_));
    SandboxOptions options;
    options.name = "busy";
    options.extra_umount_args = {"--no-export"};
    sandbox_ = std::make_unique<Sandbox>(lower_, options);
    ASSERT_TRUE(sandbox_->mounted()) << sandbox_->mount_failure();
    CommandResult w = RunShell(
        "mkdir many && for i in $(seq 1 2500); do echo $i > many/f$i; done",
        120, sandbox_->mountpoint());
    ASSERT_TRUE(w.ok()) << w.Describe();
    ASSERT_TRUE(sandbox_->Unmount());
  }
  // `acqfs ARGS --state-dir STATE` on a pty; what the terminal received.
  CommandResult OnTerminal(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {AcqfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(sandbox_->state_dir());
    return RunCommand({"script", "-qefc", ShellJoin(argv), "/dev/null"}, 120,
                      "", {{"ACQFS_PROGRESS_DELAY_MS", "0"}});
  }
  CommandResult Piped(const std::vector<std::string>& args) {
    std::vector<std::string> argv = args;
    argv.push_back("--state-dir");
    argv.push_back(sandbox_->state_dir());
    return Acqfs(argv, {{"ACQFS_PROGRESS_DELAY_MS", "0"}});
  }

  TempDir tmp_;
  std::string lower_;
  std::unique_ptr<Sandbox> sandbox_;
};

TEST_F(CliProgress, ExportShowsProgressOnATerminalOnly) {
  CommandResult piped = Piped({"export", "busy"});
  ASSERT_TRUE(piped.ok()) << piped.Describe();
  EXPECT_EQ(piped.err.find('\r'), std::string::npos) << piped.Describe();
  EXPECT_EQ(piped.err.find("\x1b["), std::string::npos) << piped.Describe();
  EXPECT_EQ(piped.out.find("\x1b["), std::string::npos) << piped.Describe();
  EXPECT_NE(piped.out.find("fetch with:"), std::string::npos)
      << piped.Describe();

  CommandResult tty = OnTerminal({"export", "busy"});
  ASSERT_TRUE(tty.ok()) << tty.Describe();
  EXPECT_NE(tty.out.find("\racqfs: export busy: scanning the upper layer: "),
            std::string::npos)
      << tty.Describe();
  // The line is erased before the result is printed.
  EXPECT_NE(tty.out.find("\r\x1b[K"), std::string::npos) << tty.Describe();
}

TEST_F(CliProgress, RmShowsProgressOnATerminal) {
  CommandResult tty = OnTerminal({"rm", "--force", "busy"});
  ASSERT_TRUE(tty.ok()) << tty.Describe();
  EXPECT_NE(tty.out.find("\racqfs: rm busy: removing files: "),
            std::string::npos)
      << tty.Describe();
  EXPECT_FALSE(Exists(sandbox_->layer_dir()));
}

}  // namespace
}  // namespace acqfs::test
