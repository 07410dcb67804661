// The FUSE transports end to end (fuse/uring_transport.h).
//
// EnableUring.*: the steps of the CTest fixtures around the uring variant of
// the mounted tests (tests/CMakeLists.txt), each a test of its own: Off sets
// /sys/module/fuse/parameters/enable_uring to N (keeping the value the run
// found) and checks the daemon falls back to /dev/fuse and says why; On sets
// it to Y and checks the ring takes over, with its workers pinned one set per
// CPU, and that -o nouring still keeps to /dev/fuse; Restore puts the value
// found back.
//
// TransportAttack.*: attacks, run on each transport (the uring variant sets
// ACQFS_TEST_TRANSPORT=uring): a flood from 64 threads, an unmount while
// every worker is busy, kill -9 of the daemon mid-request.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/fs_util.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

constexpr char kParameter[] = "/sys/module/fuse/parameters/enable_uring";
// The value the run found, kept by Off for Restore (root's /run: gone at
// reboot, when the parameter is back to its default too).
constexpr char kSaved[] = "/run/acqfs-test-enable_uring.saved";

std::string ReadParameter() {
  std::ifstream in(kParameter);
  std::string v;
  std::getline(in, v);
  return v;
}

::testing::AssertionResult WriteParameter(const std::string& v) {
  std::ofstream out(kParameter);
  out << v << "\n";
  out.close();
  if (!out) return ::testing::AssertionFailure() << "write " << kParameter;
  if (ReadParameter() != v)
    return ::testing::AssertionFailure()
           << kParameter << " reads " << ReadParameter() << ", not " << v;
  return ::testing::AssertionSuccess();
}

// The daemon log's "fuse transport: ..." line of the mount `sb`.
std::string TransportLine(const Sandbox& sb) {
  std::string line;
  auto said = sb.WaitForWarmWalk(30, 0, &line, "fuse transport: ");
  EXPECT_TRUE(said) << said.message();
  return line;
}

// Lines of the files in /proc/PID/task/*/comm equal to `comm`: their tids.
std::vector<std::string> ThreadsNamed(pid_t pid, const std::string& comm) {
  std::vector<std::string> tids;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return tids;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name + "/comm");
    std::string name;
    std::getline(in, name);
    if (name == comm) tids.push_back(e->d_name);
  }
  ::closedir(d);
  return tids;
}

std::string StatusField(const std::string& status_path,
                        const std::string& field) {
  std::ifstream in(status_path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) {
      std::string v = line.substr(field.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

size_t PossibleCpuCount() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string text;
  std::getline(in, text);
  size_t n = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    std::string r = text.substr(
        at, comma == std::string::npos ? std::string::npos : comma - at);
    size_t dash = r.find('-');
    n += dash == std::string::npos
             ? 1
             : std::stoul(r.substr(dash + 1)) - std::stoul(r) + 1;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return n;
}

// A sandbox of a fresh standard lower repo in `tmp`, on `transport`.
std::unique_ptr<Sandbox> MountOn(TempDir& tmp, const std::string& transport,
                                 std::vector<std::string> args = {}) {
  std::string lower = tmp.MakeDir("lower");
  EXPECT_TRUE(MakeLowerRepo(lower));
  SandboxOptions o;
  o.transport = transport;
  o.extra_mount_args = std::move(args);
  return std::make_unique<Sandbox>(lower, o);
}

// A change and its reading back through the mount.
void WriteAndRead(const Sandbox& sb) {
  ASSERT_TRUE(WriteFile(sb.M("transport.txt"), "through the mount\n"));
  std::string back;
  ASSERT_TRUE(ReadFile(sb.M("transport.txt"), &back));
  EXPECT_EQ(back, "through the mount\n");
}

TEST(EnableUring, Off) {
  const std::string found = ReadParameter();
  ASSERT_TRUE(found == "Y" || found == "N")
      << kParameter << " reads '" << found
      << "': this kernel has no FUSE over io_uring (Linux 6.14+)";
  struct stat st;
  if (::stat(kSaved, &st) != 0) ASSERT_TRUE(WriteFile(kSaved, found));
  ASSERT_TRUE(WriteParameter("N"));
  TempDir tmp;
  auto sb = MountOn(tmp, "auto");
  ASSERT_TRUE(sb->mounted()) << sb->mount_failure();
  EXPECT_NE(TransportLine(*sb).find(
                "fuse transport: /dev/fuse (the kernel offers no ring: "
                "/sys/module/fuse/parameters/enable_uring is N)"),
            std::string::npos)
      << sb->DaemonLog();
  EXPECT_TRUE(ThreadsNamed(sb->daemon_pid(), "acqfs-ring").empty());
  WriteAndRead(*sb);
  // -o uring asks for the ring: refused before anything is made, naming
  // the option and the parameter, by both ways of mounting.
  const std::string mnt = tmp.MakeDir("refused-mnt");
  const std::string state = tmp.Sub("refused-state");
  CommandResult r =
      RunCommand({AcqfsBinary(), "mount", sb->lower(), mnt, "--name", "x",
                  "--state-dir", state, "-o", "uring"},
                 30);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("-o uring"), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("enable_uring at Y; it reads N"), std::string::npos)
      << r.Describe();
  EXPECT_FALSE(FindMount(mnt).has_value());
  EXPECT_FALSE(Exists(state));
  const std::string u = tmp.MakeDir("h-upper"), w = tmp.MakeDir("h-work");
  r = RunCommand({MountHelperBinary(), sb->lower(), mnt, "-o",
                  "lowerdir=" + sb->lower() + ",upperdir=" + u +
                      ",workdir=" + w + ",uring"},
                 30);
  EXPECT_NE(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.err.find("enable_uring at Y; it reads N"), std::string::npos)
      << r.Describe();
  EXPECT_FALSE(FindMount(mnt).has_value());
  if (FindMount(mnt)) RunCommand({"umount", "-l", mnt}, 30);
}

TEST(EnableUring, On) {
  ASSERT_TRUE(WriteParameter("Y"));
  TempDir tmp;
  {
    auto sb = MountOn(tmp, "auto");
    ASSERT_TRUE(sb->mounted()) << sb->mount_failure();
    const std::string line = TransportLine(*sb);
    EXPECT_NE(line.find("fuse transport: io_uring ("), std::string::npos)
        << sb->DaemonLog();
    // One set of workers per CPU the kernel may run, each pinned to its
    // CPU: the queue the kernel picks for a caller is its CPU's.
    const size_t cpus = PossibleCpuCount();
    auto ring = ThreadsNamed(sb->daemon_pid(), "acqfs-ring");
    ASSERT_GE(ring.size(), cpus);
    EXPECT_EQ(ring.size() % cpus, 0u);
    std::map<std::string, int> per_cpu;
    for (const auto& tid : ring)
      ++per_cpu[StatusField("/proc/" + std::to_string(sb->daemon_pid()) +
                                "/task/" + tid + "/status",
                            "Cpus_allowed_list")];
    EXPECT_EQ(per_cpu.size(), cpus);
    for (const auto& [cpu, n] : per_cpu)
      EXPECT_EQ(static_cast<size_t>(n), ring.size() / cpus) << "CPU " << cpu;
    WriteAndRead(*sb);
  }
  {
    TempDir tmp2;
    auto sb = MountOn(tmp2, "auto", {"-o", "nouring"});
    ASSERT_TRUE(sb->mounted()) << sb->mount_failure();
    EXPECT_NE(TransportLine(*sb).find("fuse transport: /dev/fuse (-o nouring)"),
              std::string::npos);
    EXPECT_TRUE(ThreadsNamed(sb->daemon_pid(), "acqfs-ring").empty());
    WriteAndRead(*sb);
  }
}

TEST(EnableUring, Restore) {
  std::string saved;
  ASSERT_TRUE(ReadFile(kSaved, &saved)) << "Off kept no value to restore";
  while (!saved.empty() && saved.back() == '\n') saved.pop_back();
  ASSERT_TRUE(saved == "Y" || saved == "N") << saved;
  ASSERT_TRUE(WriteParameter(saved));
  EXPECT_EQ(::unlink(kSaved), 0);
}

// -------------------------------------------------------------- attacks

class TransportAttack : public MountTest {};

// 64 threads create, write, read back, rename and remove files for a few
// seconds: every byte read is the byte written, no call fails, and the
// daemon's descriptors stay within its plan.
TEST_F(TransportAttack, FloodFromSixtyFourThreads) {
  MakeDir(M("flood"));
  std::atomic<int> failures{0};
  std::atomic<long> rounds{0};
  std::string first_failure;
  std::mutex mu;
  auto fail = [&](const std::string& what) {
    if (failures.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> l(mu);
      first_failure = what + ": " + std::strerror(errno);
    }
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 64; ++t)
    threads.emplace_back([&, t] {
      for (int n = 0; std::chrono::steady_clock::now() < until; ++n) {
        const std::string a =
            M("flood/t" + std::to_string(t) + "-" + std::to_string(n));
        const std::string b = a + ".renamed";
        const std::string body(100 + (t * 37 + n) % 5000,
                               static_cast<char>('a' + (t + n) % 26));
        int fd = ::open(a.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) return fail("create " + a);
        if (::write(fd, body.data(), body.size()) !=
            static_cast<ssize_t>(body.size()))
          fail("write " + a);
        ::close(fd);
        if (::rename(a.c_str(), b.c_str()) != 0) fail("rename " + a);
        std::string back(body.size() + 1, '\0');
        fd = ::open(b.c_str(), O_RDONLY);
        if (fd < 0) return fail("open " + b);
        ssize_t got = ::read(fd, back.data(), back.size());
        ::close(fd);
        if (got != static_cast<ssize_t>(body.size()) ||
            back.compare(0, body.size(), body) != 0) {
          errno = EIO;
          fail("read back " + b);
        }
        struct stat st;
        if (::stat(b.c_str(), &st) != 0 ||
            st.st_size != static_cast<off_t>(body.size()))
          fail("stat " + b);
        if (::unlink(b.c_str()) != 0) fail("unlink " + b);
        rounds.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_GT(rounds.load(), 64);
  // Nothing left, and the daemon alive with its descriptors bounded.
  auto left = RunShell("ls -A " + ShellQuote(M("flood")) + " | wc -l", 30);
  EXPECT_EQ(left.out, "0\n") << left.Describe();
  auto fds = RunShell(
      "ls /proc/" + std::to_string(sandbox().daemon_pid()) + "/fd | wc -l", 30);
  ASSERT_TRUE(fds.ok()) << fds.Describe();
  EXPECT_LT(std::stoul(fds.out), 3200u) << "the daemon's descriptors";
}

// Lower files big enough that their copy-ups keep every worker busy.
void MakeBigLowerFiles(const std::string& lower, int count) {
  auto made = RunShell("mkdir -p " + ShellQuote(lower + "/big") +
                           " && for i in $(seq 1 " + std::to_string(count) +
                           "); do head -c 16M /dev/urandom > " +
                           ShellQuote(lower + "/big") + "/f$i; done",
                       120);
  ASSERT_TRUE(made.ok()) << made.Describe();
}

// A script that starts 8 writers, each copying up lower files one after
// the other (a 1-byte append), runs `then` once they are busy, and waits
// for them: every writer ends, whatever its outcome ("done N" lines).
std::string BusyWritersThen(const std::string& mnt, const std::string& then) {
  return "cd " + ShellQuote(mnt) +
         "/big || exit 1\n"
         "for w in 1 2 3 4 5 6 7 8; do\n"
         "  ( n=0; for i in $(seq $w 8 64); do echo x >> f$i 2>/dev/null && "
         "n=$((n+1)); done; echo done $n ) &\n"
         "done\n"
         "sleep 0.3\n" +
         then +
         "\n"
         "wait\n";
}

// The "done N" lines BusyWritersThen's writers print as they end.
size_t WritersEnded(const std::string& out) {
  size_t ends = 0;
  for (size_t at = 0; (at = out.find("done ", at)) != std::string::npos; ++at)
    ++ends;
  return ends;
}

class TransportBusy : public MountTest {
 protected:
  void PrepareLower(const std::string& lower) override {
    MakeBigLowerFiles(lower, 64);
  }
};

// A lazy unmount while eight copy-ups are in flight on every worker: the
// writers all end (their open files keep working or fail, none hangs), and
// the daemon exits once the last file closes.
TEST_F(TransportBusy, UnmountWhileEveryWorkerIsBusy) {
  auto r = RunShell(
      BusyWritersThen(sandbox().mountpoint(),
                      "umount -l " + ShellQuote(sandbox().mountpoint())),
      120);
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(WritersEnded(r.out), 8u) << r.out;
  EXPECT_TRUE(sandbox().UnmountedElsewhere(60));
}

// kill -9 of the daemon while eight copy-ups are in flight: every caller
// gets an error back (the kernel aborts the connection), none hangs; the
// dead mount then answers ENOTCONN and `acqfs umount` cleans it up; the
// upper holds no partial copy.
TEST_F(TransportBusy, KillNineMidRequest) {
  const pid_t pid = sandbox().daemon_pid();
  ASSERT_GT(pid, 0);
  auto r = RunShell(
      BusyWritersThen(sandbox().mountpoint(), "kill -9 " + std::to_string(pid)),
      120);
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(WritersEnded(r.out), 8u) << r.out;
  struct stat st;
  EXPECT_NE(::stat(M("big/f1").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOTCONN);
  // Every copy-up in the upper is whole: 16 MiB, with the line appended
  // or (killed between the copy-up and the write) without.
  auto sizes = RunShell("find " + ShellQuote(sandbox().upper()) +
                            "/big -type f -printf '%s\\n' 2>/dev/null | sort "
                            "-u",
                        30);
  for (size_t at = 0; at < sizes.out.size();) {
    size_t nl = sizes.out.find('\n', at);
    std::string size = sizes.out.substr(at, nl - at);
    EXPECT_TRUE(size == std::to_string(16 * 1024 * 1024) ||
                size == std::to_string(16 * 1024 * 1024 + 2))
        << sizes.out;
    at = nl + 1;
  }
  EXPECT_TRUE(sandbox().Unmount());
}

}  // namespace
}  // namespace acqfs::test
