#include "integration/mount_fixture.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

#include "harness/binaries.h"

namespace acqfs::test {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

// A syscall-style result as an AssertionResult naming the step.
AssertionResult Sys(long rc, const std::string& what) {
  if (rc != -1) return AssertionSuccess();
  return AssertionFailure() << what << ": " << ErrnoName(errno);
}

AssertionResult Expect(bool condition, const std::string& what) {
  if (condition) return AssertionSuccess();
  return AssertionFailure() << what;
}

AssertionResult Shell(const std::string& script, const std::string& cwd) {
  CommandResult r = RunShell(script, 120, cwd);
  if (r.ok()) return AssertionSuccess();
  return AssertionFailure() << r.Describe();
}

AssertionResult CopyRange(const std::string& from, const std::string& to,
                          off_t offset, size_t length) {
  ScopedFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  ScopedFd out(
      ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!in.valid() || !out.valid()) return Sys(-1, "open " + from + " / " + to);
  loff_t off_in = offset, off_out = 0;
  while (length > 0) {
    ssize_t n =
        ::copy_file_range(in.get(), &off_in, out.get(), &off_out, length, 0);
    if (n < 0) return Sys(-1, "copy_file_range to " + to);
    if (n == 0) {
      return AssertionFailure() << "copy_file_range to " << to
                                << " stopped with " << length << " bytes left";
    }
    length -= static_cast<size_t>(n);
  }
  return Sys(out.Close(), "close " + to);
}

AssertionResult MmapOverwrite(const std::string& path,
                              const std::string& data) {
  ScopedFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return Sys(-1, "open O_RDWR " + path);
  void* map = ::mmap(nullptr, data.size(), PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd.get(), 0);
  if (map == MAP_FAILED) return Sys(-1, "mmap MAP_SHARED " + path);
  std::memcpy(map, data.data(), data.size());
  AssertionResult r = Sys(::msync(map, data.size(), MS_SYNC), "msync " + path);
  if (::munmap(map, data.size()) != 0 && r) r = Sys(-1, "munmap " + path);
  if (r) r = Sys(fd.Close(), "close " + path);
  return r;
}

AssertionResult Fallocate(const std::string& path, off_t length) {
  ScopedFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) return Sys(-1, "open " + path);
  AssertionResult r =
      Sys(::fallocate(fd.get(), 0, 0, length), "fallocate " + path);
  if (r) r = Sys(::fsync(fd.get()), "fsync " + path);
  if (r) r = Sys(fd.Close(), "close " + path);
  return r;
}

// Data paths: write, truncate, append, fallocate, copy_file_range, mmap.
AssertionResult WorkloadData(const std::string& R) {
  AssertionResult r = Sys(::mkdir((R + "/new").c_str(), 0755), "mkdir new");
  if (r) r = WriteFile(R + "/new/created.txt", "created\n");
  if (r) r = Sys(::truncate((R + "/docs/b.txt").c_str(), 3), "truncate b");
  if (r) r = AppendFile(R + "/src/top.txt", "+appended\n");
  if (r) r = Fallocate(R + "/new/falloc.bin", 1 << 20);
  if (r) {
    r = CopyRange(R + "/" + lower::kLargeFile, R + "/new/large-part.bin",
                  1 << 20, 2 << 20);
  }
  if (r) r = MmapOverwrite(R + "/" + lower::kDeepFile, "LEAF!");
  if (r) {
    r = Sys(::truncate((R + "/" + lower::kLargeFile).c_str(), (60 << 20) + 1),
            "truncate large.bin");
  }
  return r;
}

// Namespace changes: unlink (lower, upper), mkdir/rmdir, rmdir of an emptied
// lower directory, rm -rf and re-creation of a lower directory.
AssertionResult WorkloadNamespace(const std::string& R) {
  AssertionResult r = Sys(::unlink((R + "/" + lower::kEmptyFile).c_str()),
                          "unlink lower empty.txt");
  if (r) r = WriteFile(R + "/new/tmp.txt", "temporary\n");
  if (r) r = Sys(::unlink((R + "/new/tmp.txt").c_str()), "unlink upper file");
  if (r) r = Sys(::mkdir((R + "/new/sub").c_str(), 0755), "mkdir new/sub");
  if (r) r = Sys(::rmdir((R + "/new/sub").c_str()), "rmdir new/sub");
  if (r) r = Sys(::unlink((R + "/scripts/run.sh").c_str()), "unlink run.sh");
  if (r) r = Sys(::rmdir((R + "/scripts").c_str()), "rmdir lower scripts");
  if (r) r = Sys(::unlink((R + "/" + lower::kHardLinkB).c_str()), "unlink two");
  if (r) {
    r = Shell("rm -rf docs && mkdir docs && echo fresh > docs/fresh.txt", R);
  }
  return r;
}

AssertionResult WorkloadRenames(const std::string& R) {
  AssertionResult r = Sys(
      ::rename((R + "/README.md").c_str(), (R + "/README-moved.md").c_str()),
      "rename README.md");
  if (r) {
    r = Sys(::rename((R + "/debug.log").c_str(), (R + "/build/out.o").c_str()),
            "rename over lower file");
  }
  if (r) {
    r = Sys(::rename((R + "/src/lib").c_str(), (R + "/lib-moved").c_str()),
            "rename lower directory src/lib");
  }
  if (r) {
    r = Expect(Renameat2(R + "/" + lower::kXattrFile,
                         R + "/" + lower::kOwnedFile, RENAME_NOREPLACE) == -1 &&
                   errno == EEXIST,
               "RENAME_NOREPLACE onto an existing file must fail with EEXIST");
  }
  if (r) {
    r = Sys(Renameat2(R + "/" + lower::kXattrFile, R + "/xattr/moved.txt",
                      RENAME_NOREPLACE),
            "RENAME_NOREPLACE to a new name");
  }
  if (r) {
    r = Sys(
        Renameat2(R + "/hello/main.c", R + "/hello/Makefile", RENAME_EXCHANGE),
        "RENAME_EXCHANGE of two lower files");
  }
  return r;
}

AssertionResult WorkloadMetadata(const std::string& R) {
  const std::string helper = R + "/lib-moved/util/helper.txt";
  const std::string owned = R + "/" + lower::kOwnedFile;
  const timespec times[2] = {{1000000000, 111}, {1200000000, 222}};
  AssertionResult r = Sys(
      ::symlink("../lib-moved/core.txt", (R + "/new/link").c_str()), "symlink");
  if (r)
    r = Sys(::link(owned.c_str(), (R + "/owned/link.txt").c_str()), "link");
  if (r) r = Sys(::chmod(helper.c_str(), 0600), "chmod helper.txt");
  if (r) r = Sys(::chmod((R + "/lib-moved/util").c_str(), 0700), "chmod dir");
  if (r) {
    r = Sys(::chown((R + "/new/created.txt").c_str(), 4321, 8765), "chown");
  }
  if (r) r = Sys(::utimensat(AT_FDCWD, owned.c_str(), times, 0), "utimensat");
  if (r) {
    r = Sys(
        ::setxattr((R + "/xattr/moved.txt").c_str(), "user.added", "v", 1, 0),
        "setxattr user.added");
  }
  if (r) {
    r = Sys(::removexattr((R + "/xattr/moved.txt").c_str(), lower::kXattrName),
            "removexattr user.test");
  }
  if (r) {
    r = Sys(
        ::setxattr((R + "/" + lower::kEmptyDir).c_str(), "user.dir", "d", 1, 0),
        "setxattr on a lower directory");
  }
  return r;
}

AssertionResult WorkloadSpecialFiles(const std::string& R) {
  AssertionResult r = Sys(::mkfifo((R + "/new/fifo").c_str(), 0640), "mkfifo");
  if (r) {
    ScopedFd sock = BindUnixSocket(R + "/new/sock");
    r = Sys(sock.valid() ? 0 : -1, "bind unix socket new/sock");
  }
  return r;
}

}  // namespace

void MountTest::SetUp() {
  ASSERT_EQ(::geteuid(), 0u)
      << "the integration tests need root, /dev/fuse and overlayfs (as CI "
         "has); they do not skip";
  tmp_ = std::make_unique<TempDir>();
  ASSERT_FALSE(tmp_->path().empty());
  tmp_->MakeDir("home", 0755);
  lower_ = tmp_->Sub("lower");
  ASSERT_TRUE(MakeLowerRepo(lower_));
  PrepareLower(lower_);
  if (HasFatalFailure()) return;
  sandbox_ = std::make_unique<Sandbox>(lower_, Options());
  ASSERT_TRUE(sandbox_->mounted()) << sandbox_->mount_failure();
}

void MountTest::TearDown() {
  if (HasFailure() && sandbox_) {
    std::cerr << "--- " << sandbox_->log_file() << " (tail) ---\n"
              << sandbox_->DaemonLog() << "\n--- end of daemon.log ---\n";
  }
  sandbox_.reset();
  tmp_.reset();
}

SandboxOptions BothFileModes::Options() const {
  SandboxOptions o = ModeOptions();
  if (!GetParam().empty()) {
    o.extra_mount_args.push_back("-o");
    o.extra_mount_args.push_back(GetParam());
  }
  return o;
}

std::string FileModeName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "no_open" ? "HandleLess" : "Handles";
}

struct stat MountTest::StatM(const std::string& rel) {
  struct stat st {};
  EXPECT_TRUE(Lstat(M(rel), &st));
  return st;
}

struct stat MountTest::StatL(const std::string& rel) {
  struct stat st {};
  EXPECT_TRUE(Lstat(L(rel), &st));
  return st;
}

struct stat MountTest::StatU(const std::string& rel) {
  struct stat st {};
  EXPECT_TRUE(Lstat(U(rel), &st));
  return st;
}

int Renameat2(const std::string& from, const std::string& to, unsigned flags) {
  return static_cast<int>(::syscall(SYS_renameat2, AT_FDCWD, from.c_str(),
                                    AT_FDCWD, to.c_str(), flags));
}

ScopedFd BindUnixSocket(const std::string& path) {
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (!fd.valid() || path.size() >= sizeof(addr.sun_path)) {
    if (fd.valid()) errno = ENAMETOOLONG;
    return ScopedFd();
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd.get(), 4) != 0) {
    return ScopedFd();
  }
  return fd;
}

::testing::AssertionResult UnixSocketRoundTrip(int server,
                                               const std::string& path,
                                               const std::string& message) {
  ScopedFd client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(client.get(), reinterpret_cast<sockaddr*>(&addr),
                sizeof(addr)) != 0) {
    return Sys(-1, "connect " + path);
  }
  ScopedFd accepted(::accept4(server, nullptr, nullptr, SOCK_CLOEXEC));
  if (!accepted.valid()) return Sys(-1, "accept on " + path);
  if (::send(client.get(), message.data(), message.size(), 0) !=
      static_cast<ssize_t>(message.size())) {
    return Sys(-1, "send to " + path);
  }
  std::string got(message.size(), '\0');
  ssize_t n = ::recv(accepted.get(), got.data(), got.size(), MSG_WAITALL);
  if (n < 0) return Sys(-1, "recv from " + path);
  got.resize(static_cast<size_t>(n));
  return Expect(got == message, "received '" + got + "' instead of '" +
                                    message + "' through " + path);
}

::testing::AssertionResult IsWhiteout(const std::string& path) {
  struct stat st;
  if (auto r = Lstat(path, &st); !r) return r << " (expected a whiteout)";
  if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
    return AssertionSuccess();
  }
  return AssertionFailure()
         << path << " is not a 0/0 character device "
         << "(mode " << std::oct << st.st_mode << std::dec << ", rdev "
         << major(st.st_rdev) << "/" << minor(st.st_rdev) << ")";
}

CommandResult MountKernelOverlay(const std::string& lower,
                                 const std::string& upper,
                                 const std::string& work,
                                 const std::string& target) {
  const std::string options = "lowerdir=" + lower + ",upperdir=" + upper +
                              ",workdir=" + work +
                              ",index=off,redirect_dir=off,metacopy=off";
  return RunCommand(
      {"mount", "-t", "overlay", "overlay", target, "-o", options}, 30);
}

::testing::AssertionResult RunMixedWorkload(const std::string& root) {
  struct Stage {
    const char* name;
    AssertionResult (*run)(const std::string&);
  };
  const Stage kStages[] = {
      {"data", &WorkloadData},
      {"namespace", &WorkloadNamespace},
      {"renames", &WorkloadRenames},
      {"metadata", &WorkloadMetadata},
      {"special files", &WorkloadSpecialFiles},
  };
  for (const Stage& stage : kStages) {
    if (AssertionResult r = stage.run(root); !r) {
      return AssertionFailure() << "workload stage '" << stage.name << "' in "
                                << root << ": " << r.message();
    }
  }
  return AssertionSuccess();
}

std::string ChurnScript(int seconds) {
  return "end=$(($(date +%s) + " + std::to_string(seconds) + "))\n" + R"sh(i=0
while [ "$(date +%s)" -lt "$end" ]; do
  i=$((i + 1))
  mkdir -p t$i
  for f in 1 2 3 4 5; do echo $i > t$i/x$f; done
  mv t$i u$i
  rm -rf u$((i - 2))
  echo $i >> docs/a.txt
  rm -f docs/b.txt
  echo b$i > docs/b.txt
  ln -sfn docs link$((i % 3))
done
)sh";
}

ChurnRace RaceWithChurn(
    const std::string& mountpoint, int seconds,
    const std::vector<std::string>& command,
    const std::function<void(const CommandResult&)>& check) {
  ChurnRace race;
  std::thread agent([&] {
    race.churn = RunShell(ChurnScript(seconds + 1), 60 + seconds, mountpoint);
  });
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    CommandResult r = RunCommand(command, 120);
    race.runs++;
    if (r.ok())
      race.ok++;
    else
      check(r);
  }
  agent.join();
  return race;
}

CommandResult AcqfsIn(const Sandbox& s, std::vector<std::string> args,
                      int timeout) {
  std::vector<std::string> argv = {AcqfsBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--state-dir");
  argv.push_back(s.state_dir());
  return RunCommand(argv, timeout);
}

}  // namespace acqfs::test
