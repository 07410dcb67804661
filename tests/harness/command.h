// RunCommand / RunShell: run a program to completion with a deadline and
// capture what it printed; Sh: a shell command line that must succeed.
//
// The child runs in a process group of its own with stdin on /dev/null and
// every inherited descriptor above 2 closed. On timeout the whole group is
// killed with SIGKILL and the result says so (timed_out), distinct from a
// non-zero exit. A daemon that the child leaves behind keeps running; if it
// holds the output pipes open, reading stops shortly after the child exits
// and `pipes_left_open` records it.
// Thread-safety: each call is independent; safe to call from several threads.
#ifndef ACQFS_TESTS_HARNESS_COMMAND_H_
#define ACQFS_TESTS_HARNESS_COMMAND_H_

#include <string>
#include <utility>
#include <vector>

namespace acqfs::test {

// Extra environment entries: (name, value); they replace inherited ones.
using EnvAdditions = std::vector<std::pair<std::string, std::string>>;

struct CommandResult {
  std::string command;           // the argv, shell-quoted, for messages
  int exit_code = -1;            // exit status; -1 when killed by a signal
  int term_signal = 0;           // the signal that ended the child, or 0
  bool timed_out = false;        // the deadline passed and the group was killed
  bool pipes_left_open = false;  // a leftover process kept stdout/stderr
  std::string spawn_error;       // fork/exec failure, "" when the child ran
  std::string out;               // everything written to stdout
  std::string err;               // everything written to stderr

  // True when the child ran, exited by itself with status 0, in time.
  bool ok() const {
    return spawn_error.empty() && !timed_out && term_signal == 0 &&
           exit_code == 0;
  }
  // One paragraph for failure messages: command, outcome, stdout, stderr.
  std::string Describe() const;
};

// Runs argv[0] (looked up in PATH when it has no '/') with argv.
// `cwd` "" keeps the current directory.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         int timeout_seconds, const std::string& cwd = "",
                         const EnvAdditions& env = {});

// Runs `bash -c script` (with -e -u -o pipefail set).
CommandResult RunShell(const std::string& script, int timeout_seconds,
                       const std::string& cwd = "",
                       const EnvAdditions& env = {});

// Runs `sh -c 'script 2>&1'` (as popen(3) would: no -e, so "a; b" is b's
// status; stderr lands in the output too) and returns what it printed;
// fails the current test (ADD_FAILURE, with the output) unless it exits 0
// in time.
std::string Sh(const std::string& script, int timeout_seconds = 300);

// Quotes `s` for a POSIX shell ('...' with embedded quotes escaped).
std::string ShellQuote(const std::string& s);
// Joins the quoted words with spaces.
std::string ShellJoin(const std::vector<std::string>& words);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_COMMAND_H_
