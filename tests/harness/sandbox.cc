#include "harness/sandbox.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "harness/binaries.h"
#include "harness/mounts.h"
#include "harness/process.h"

namespace acqfs::test {
namespace {

constexpr double kDaemonExitSeconds = 10;
constexpr size_t kLogTail = 8000;

std::string DescribeMountsAt(const std::string& path) {
  std::string found;
  for (const auto& m : ReadMountInfo()) {
    if (m.mount_point == path) {
      found += "  " + m.fs_type + " " + m.source + " " + m.mount_options + "\n";
    }
  }
  return found.empty() ? "  (nothing mounted there)\n" : found;
}

}  // namespace

std::string TestTransport() {
  const char* t = std::getenv("ACQFS_TEST_TRANSPORT");
  return t != nullptr && *t != '\0' ? t : "dev";
}

Sandbox::Sandbox(std::string lower, SandboxOptions options)
    : lower_(std::move(lower)), options_(std::move(options)) {
  if (tmp_.path().empty()) return;  // TempDir reported the failure
  ::chmod(tmp_.path().c_str(), 0755);
  const uid_t uid = options_.owner_uid;
  const gid_t gid = options_.owner_gid;
  state_dir_ = options_.state_dir.empty()
                   ? tmp_.MakeDir("state", 0755, uid, gid)
                   : options_.state_dir;
  mountpoint_ = options_.mountpoint.empty()
                    ? tmp_.MakeDir("mnt", 0755, uid, gid)
                    : options_.mountpoint;
  Mount();
}

Sandbox::~Sandbox() {
  if (mounted_) {
    auto r = Unmount();
    if (!r) ADD_FAILURE() << "unmounting the sandbox: " << r.message();
  }
  std::string leftovers = ForceCleanup();
  if (!leftovers.empty()) ADD_FAILURE() << leftovers;
}

std::vector<std::string> Sandbox::AcqfsCommand(
    std::vector<std::string> args) const {
  std::vector<std::string> argv = options_.command_prefix;
  argv.push_back(options_.acqfs_bin.empty() ? AcqfsBinary()
                                            : options_.acqfs_bin);
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

void Sandbox::Mount() {
  struct stat log_st;
  const size_t log_before = ::stat(log_file().c_str(), &log_st) == 0
                                ? static_cast<size_t>(log_st.st_size)
                                : 0;
  std::vector<std::string> args = {"mount",   lower_,        mountpoint_,
                                   "--name",  options_.name, "--state-dir",
                                   state_dir_};
  args.insert(args.end(), options_.extra_mount_args.begin(),
              options_.extra_mount_args.end());
  const std::string transport =
      options_.transport.empty() ? TestTransport() : options_.transport;
  if (transport == "dev" || transport == "uring") {
    args.push_back("-o");
    args.push_back(transport == "dev" ? "nouring" : "uring");
  }
  CommandResult r =
      RunCommand(AcqfsCommand(args), options_.mount_timeout_seconds);
  mounted_ = FindMount(mountpoint_).has_value();  // so cleanup knows
  daemon_pid_ = ReadPidFile(pid_file());
  if (!r.ok()) {
    mount_failure_ = "acqfs mount failed: " + r.Describe();
  } else if (std::string problem = CheckMounted(); !problem.empty()) {
    mount_failure_ = problem;
  }
  if (!mount_failure_.empty()) {
    mount_failure_ += "\n--- daemon.log ---\n" + DaemonLog();
    ADD_FAILURE() << mount_failure_;
    return;
  }
  if (daemon_pid_ == 0) {
    ADD_FAILURE() << "acqfs mount succeeded but " << pid_file()
                  << " holds no pid";
  }
  if (transport == "uring") {
    std::string line;
    auto said = WaitForWarmWalk(options_.mount_timeout_seconds, log_before,
                                &line, "fuse transport: ");
    if (!said)
      ADD_FAILURE() << said.message();
    else if (line.find("fuse transport: io_uring") == std::string::npos)
      ADD_FAILURE() << "the test runs on the io_uring transport, but the "
                       "daemon says: "
                    << line << "\n--- daemon.log ---\n"
                    << DaemonLog();
  }
  if (options_.wait_for_warm_walk) {
    auto walked =
        WaitForWarmWalk(options_.warm_walk_timeout_seconds, log_before);
    if (!walked) ADD_FAILURE() << walked.message();
    walked = WaitForWarmWalk(options_.warm_walk_timeout_seconds, log_before,
                             nullptr, "host watch");
    if (!walked) ADD_FAILURE() << walked.message();
  }
}

::testing::AssertionResult Sandbox::WaitForWarmWalk(double seconds,
                                                    size_t log_offset,
                                                    std::string* line,
                                                    const char* what) const {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    std::ifstream in(log_file());
    std::string log((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
    if (log.size() > log_offset) {
      size_t at = log.find(what, log_offset);
      if (at != std::string::npos) {
        if (line != nullptr) *line = log.substr(at, log.find('\n', at) - at);
        return ::testing::AssertionSuccess();
      }
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ::testing::AssertionFailure()
         << "no line of the " << what << " in daemon.log " << seconds
         << " s after the mount:\n"
         << DaemonLog();
}

std::string Sandbox::CheckMounted() const {
  auto m = FindMount(mountpoint_);
  if (m && m->fs_type == "fuse.acqfs") return "";
  return "acqfs mount exited 0 but " + mountpoint_ +
         " is not a fuse.acqfs mount; mounts there:\n" +
         DescribeMountsAt(RealPath(mountpoint_));
}

::testing::AssertionResult Sandbox::Unmount(bool by_name) {
  if (!mounted_) return ::testing::AssertionSuccess();
  if (daemon_pid_ == 0) daemon_pid_ = ReadPidFile(pid_file());
  const std::string target = by_name ? options_.name : mountpoint_;
  std::vector<std::string> args = {"umount", target, "--state-dir", state_dir_};
  args.insert(args.end(), options_.extra_umount_args.begin(),
              options_.extra_umount_args.end());
  CommandResult r =
      RunCommand(AcqfsCommand(args), options_.umount_timeout_seconds);
  std::ostringstream problems;
  if (!r.ok()) problems << "acqfs umount failed: " << r.Describe() << "\n";
  if (FindMount(mountpoint_)) {
    problems << mountpoint_ << " is still mounted after acqfs umount\n";
  }
  // A failed umount is torn down below; waiting for its daemon is pointless.
  if (r.ok() && daemon_pid_ != 0 &&
      !WaitForProcessExit(daemon_pid_, kDaemonExitSeconds)) {
    problems << "daemon pid " << daemon_pid_
             << " still runs after acqfs umount returned\n";
  }
  mounted_ = false;
  if (problems.str().empty()) return ::testing::AssertionSuccess();
  problems << ForceCleanup();
  return ::testing::AssertionFailure()
         << problems.str() << "--- daemon.log ---\n"
         << DaemonLog();
}

::testing::AssertionResult Sandbox::UnmountedElsewhere(double seconds) {
  if (!mounted_) return ::testing::AssertionFailure() << "not mounted";
  if (daemon_pid_ == 0) daemon_pid_ = ReadPidFile(pid_file());
  std::ostringstream problems;
  if (daemon_pid_ != 0 && !WaitForProcessExit(daemon_pid_, seconds))
    problems << "daemon pid " << daemon_pid_ << " still runs after " << seconds
             << " s\n";
  if (FindMount(mountpoint_)) problems << mountpoint_ << " is still mounted\n";
  mounted_ = false;
  if (problems.str().empty()) return ::testing::AssertionSuccess();
  problems << ForceCleanup();
  return ::testing::AssertionFailure()
         << problems.str() << "--- daemon.log ---\n"
         << DaemonLog();
}

::testing::AssertionResult Sandbox::Remount() {
  if (mounted_) return ::testing::AssertionFailure() << "still mounted";
  mount_failure_.clear();
  daemon_pid_ = 0;
  Mount();
  if (mounted_ && mount_failure_.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "remount: " << mount_failure_;
}

std::string Sandbox::ForceCleanup() {
  std::string report;
  if (!mountpoint_.empty() && FindMount(mountpoint_)) {
    report += "forcibly unmounting " + mountpoint_ + "\n";
    report += ForceUnmount(mountpoint_);
  }
  if (daemon_pid_ == 0 && !state_dir_.empty()) {
    daemon_pid_ = ReadPidFile(pid_file());
  }
  if (IsProcessAlive(daemon_pid_)) {
    report += "killing daemon pid " + std::to_string(daemon_pid_) + "\n";
    if (!KillIfAlive(daemon_pid_, "acqfs")) {
      report += "daemon pid " + std::to_string(daemon_pid_) + " survived\n";
    }
  }
  mounted_ = false;
  return report;
}

std::string Sandbox::DaemonLog() const {
  std::ifstream in(log_file());
  if (!in) return "(no " + log_file() + ")";
  std::string log((std::istreambuf_iterator<char>(in)),
                  std::istreambuf_iterator<char>());
  if (log.size() <= kLogTail) return log;
  return "[...]" + log.substr(log.size() - kLogTail);
}

namespace {
nlohmann::json ReadStackJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json();
  return nlohmann::json::parse(in, nullptr, false);
}
}  // namespace

std::string SandboxUpper(const std::string& state, const std::string& name) {
  nlohmann::json j = ReadStackJson(state + "/" + name + "/stack.json");
  if (j.is_object() && j.contains("upper") && j["upper"].is_string())
    return state + "/" + j["upper"].get<std::string>();
  return state + "/" + name + "/upper";
}

std::string Sandbox::upper() const {
  return SandboxUpper(state_dir_, options_.name);
}

std::vector<std::string> Sandbox::frozen() const {
  std::vector<std::string> out;
  nlohmann::json j = ReadStackJson(layer_dir() + "/stack.json");
  if (j.is_object() && j.contains("frozen") && j["frozen"].is_array())
    for (const auto& f : j["frozen"])
      if (f.is_string()) out.push_back(state_dir_ + "/" + f.get<std::string>());
  return out;
}

}  // namespace acqfs::test
