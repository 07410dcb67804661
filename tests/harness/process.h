// Looking at other processes by pid: liveness, waiting for exit, pid files.
// Nothing here kills by name; callers signal only pids they started.
// Thread-safety: stateless functions.
#ifndef ACQFS_TESTS_HARNESS_PROCESS_H_
#define ACQFS_TESTS_HARNESS_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace acqfs::test {

// True while `pid` exists and is not a zombie.
bool IsProcessAlive(pid_t pid);

// Polls until `pid` is gone (or a zombie); false when it outlived `seconds`.
bool WaitForProcessExit(pid_t pid, double seconds);

// The pid in a pid file ("123\n"); 0 when missing or malformed.
pid_t ReadPidFile(const std::string& path);

// argv of a process ({} when it is gone).
std::vector<std::string> ProcessArgs(pid_t pid);

// Sends SIGKILL to `pid` if it is alive and its argv[0] contains `expected`
// (a guard against a recycled pid), then waits for it to go. Returns false
// when it is still there afterwards.
bool KillIfAlive(pid_t pid, const std::string& expected);

// Live processes one of whose argv elements equals `arg` exactly (e.g. a
// mount point given to a daemon on its command line), leaving out a child
// of another one found (a forked child keeps its parent's argv).
std::vector<pid_t> PidsWithArgument(const std::string& arg);

// Waits up to `seconds` for the child `pid` to end and stores its wait
// status; when it does not end in time, kills it (SIGKILL), reaps it and
// returns false.
bool WaitForChild(pid_t pid, int* status, double seconds);

// Is a live process running with exactly this argv?
bool ProcessRunning(const std::vector<std::string>& argv);

// How many descriptors `pid` holds (entries of /proc/PID/fd); -1 when it
// cannot be read.
long CountFds(pid_t pid);
// A "VmHWM:"-style field of /proc/PID/status in KiB (peak resident size
// for "VmHWM"); -1 when missing.
long StatusKib(pid_t pid, const std::string& field);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_PROCESS_H_
