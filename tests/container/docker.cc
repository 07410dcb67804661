#include "container/docker.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "harness/fs_util.h"
#include "harness/process.h"

#ifndef ACQFS_MAKE_IMAGE_SCRIPT
#error "ACQFS_MAKE_IMAGE_SCRIPT must be defined by the build"
#endif

namespace acqfs::test {

Docker::Docker() {
  if (tmp_.path().empty()) {
    failure_ = "no temporary directory";
    return;
  }
  client_ =
      ::access("/usr/bin/docker", X_OK) == 0 ? "/usr/bin/docker" : "docker";
  socket_ = tmp_.Sub("docker.sock");
  exec_root_ = tmp_.MakeDir("exec", 0700);
  log_ = tmp_.Sub("dockerd.log");
  const std::vector<std::string> argv = {
      "dockerd",
      "--data-root=" + tmp_.MakeDir("data", 0700),
      "--exec-root=" + exec_root_,
      "--pidfile=" + tmp_.Sub("dockerd.pid"),
      "--host=unix://" + socket_,
      "--iptables=false",
      "--ip6tables=false",
      "--bridge=none",
      "--storage-driver=vfs",
      "--exec-opt=native.cgroupdriver=cgroupfs",
      "--containerd-namespace=acqfs-test",
      "--default-ulimit=nofile=1024:1024"};
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const int log =
      ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log < 0 || null < 0) {
    failure_ = "cannot open " + log_ + " or /dev/null";
    if (log >= 0) ::close(log);
    if (null >= 0) ::close(null);
    return;
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the parent already ended
    ::dup2(null, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::setpgid(0, 0);
    ::execvp(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::close(log);
  ::close(null);
  if (pid_ < 0) {
    failure_ = "fork for dockerd failed";
    return;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      failure_ =
          "dockerd exited at start (is docker.io installed?)\n" + LogTail();
      return;
    }
    CommandResult v =
        RunCommand(Command({"version", "--format", "{{.Server.Version}}"}), 20);
    if (v.ok()) return;
    if (std::chrono::steady_clock::now() > deadline) {
      failure_ = "dockerd did not answer within 60 s: " + v.Describe() + "\n" +
                 LogTail();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Docker::~Docker() { Stop(); }

void Docker::Stop() {
  if (pid_ <= 0) return;
  if (failure_.empty()) {
    CommandResult ps = RunCommand(Command({"ps", "--all", "--quiet"}), 60);
    std::istringstream ids(ps.out);
    std::string id;
    std::vector<std::string> rm = {"rm", "--force"};
    while (ids >> id) rm.push_back(id);
    if (rm.size() > 2) {
      CommandResult r = RunCommand(Command(rm), 120);
      if (!r.ok()) ADD_FAILURE() << "removing the containers: " << r.Describe();
    }
  }
  ::kill(pid_, SIGTERM);
  int status = 0;
  if (!WaitForChild(pid_, &status, 30))
    ADD_FAILURE() << "dockerd did not stop within 30 s of SIGTERM; killed\n"
                  << LogTail();
  pid_ = -1;
  // The containerd it started ends with it; one left by a killed dockerd
  // is found by its configuration file, which is this test's.
  const std::string config = exec_root_ + "/containerd/containerd.toml";
  for (pid_t p : PidsWithArgument(config)) KillIfAlive(p, "containerd");
}

std::string Docker::LogTail() const {
  std::string text = ReadFile(log_);
  if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
  return "--- dockerd.log ---\n" + text;
}

std::vector<std::string> Docker::Command(
    const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {client_, "--host", "unix://" + socket_};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

CommandResult Docker::MakeImage() {
  return RunCommand(
      {"env", "ACQFS_IMAGE_ENGINE=" + client_, "TMPDIR=" + tmp_.path(), "bash",
       ACQFS_MAKE_IMAGE_SCRIPT, kTestImage, "--host", "unix://" + socket_},
      300);
}

}  // namespace acqfs::test
