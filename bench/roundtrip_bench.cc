// The cost of one request through the kernel and back (issue 35): an acqfs
// mount of an empty lower, made with mount.fuse.acqfs and `-o timeout=0`
// (so the kernel caches no attribute or name and asks the daemon each
// time), and the calls that cost a known number of round trips:
//   - Getattr: stat(2) of the mount's root, one GETATTR;
//   - LookupGetattr: stat(2) of a lower file, two: the LOOKUP that
//     revalidates its name, and a GETATTR;
//   - CreateUnlink: open(O_CREAT|O_EXCL) + close + unlink of a new file,
//     the per-file requests of W5 (LOOKUP, CREATE, then UNLINK; and in the
//     handles mode a RELEASE, in the default mode a FLUSH answered ENOSYS
//     once).
// Each is run in both file modes (the default, and `-o handles`; the first
// argument) and on both FUSE transports (the second: 0 is /dev/fuse, `-o
// nouring`; 1 is FUSE over io_uring, for which the benchmark sets
// /sys/module/fuse/parameters/enable_uring to Y while it runs, and puts
// back the value it found at exit). Reported: time per call (wall clock:
// the round trip includes the daemon's CPU).
//
// Needs root (or /dev/fuse usable and fusermount3) and the helper:
//   cmake --build build -j2 --target acqfs_roundtrip_bench mount.fuse.acqfs
//   build/bin/acqfs_roundtrip_bench [--benchmark_filter=...]
// ACQFS_MOUNT_HELPER names another helper binary. The trees live in
// $TMPDIR (default /tmp) and are unmounted and removed when it exits.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#ifndef ACQFS_BENCH_MOUNT_HELPER
#error "ACQFS_BENCH_MOUNT_HELPER must be defined by the build"
#endif

namespace acqfs {
namespace {

// Runs argv, waits; true when it exited 0.
bool Run(const std::vector<std::string>& argv) {
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A mount of an empty lower (one file, "f") in a temporary tree, unmounted
// and removed by the destructor.
class BenchMount {
 public:
  static std::unique_ptr<BenchMount> Make(const std::string& mode) {
    const char* tmp = std::getenv("TMPDIR");
    std::string root = std::string(tmp ? tmp : "/tmp") + "/acqfs-rt.XXXXXX";
    if (::mkdtemp(root.data()) == nullptr) return nullptr;
    auto m = std::unique_ptr<BenchMount>(new BenchMount(root));
    for (const char* d : {"/lower", "/upper", "/work", "/mnt"})
      if (::mkdir((root + d).c_str(), 0755) != 0) return nullptr;
    int fd = ::open((root + "/lower/f").c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) return nullptr;
    ::close(fd);
    const char* env = std::getenv("ACQFS_MOUNT_HELPER");
    std::string opts = "lowerdir=" + root + "/lower,upperdir=" + root +
                       "/upper,workdir=" + root + "/work,timeout=0,nowarm," +
                       mode;
    if (!Run({env ? env : ACQFS_BENCH_MOUNT_HELPER, "acqfs-bench",
              root + "/mnt", "-o", opts}))
      return nullptr;
    m->mounted_ = true;
    return m;
  }
  ~BenchMount() {
    if (mounted_ && !Run({"fusermount3", "-u", root_ + "/mnt"}))
      (void)Run({"umount", "-l", root_ + "/mnt"});
    (void)Run({"rm", "-rf", root_});
  }
  std::string Path(const std::string& rel) const {
    return root_ + "/mnt" + (rel.empty() ? "" : "/" + rel);
  }

 private:
  explicit BenchMount(std::string root) : root_(std::move(root)) {}
  std::string root_;
  bool mounted_ = false;
};

constexpr char kEnableUring[] = "/sys/module/fuse/parameters/enable_uring";

// The parameter's value before the benchmark set it ("" until then).
std::string& FoundEnableUring() {
  static std::string found;
  return found;
}

void RestoreEnableUring() {
  if (FoundEnableUring().empty()) return;
  if (FILE* f = std::fopen(kEnableUring, "w")) {
    std::fputs(FoundEnableUring().c_str(), f);
    std::fclose(f);
  }
}

// Lets the kernel offer FUSE over io_uring to the mounts made from now on.
bool EnableUring() {
  if (!FoundEnableUring().empty()) return true;
  FILE* f = std::fopen(kEnableUring, "r");
  if (f == nullptr) return false;
  char v[8] = {0};
  bool read = std::fgets(v, sizeof v, f) != nullptr;
  std::fclose(f);
  if (!read) return false;
  FoundEnableUring() = std::string(1, v[0]);
  std::atexit(RestoreEnableUring);
  f = std::fopen(kEnableUring, "w");
  if (f == nullptr) return false;
  bool ok = std::fputs("Y", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

// One mount per file mode and transport for the whole run (made on first
// use).
BenchMount* MountFor(const benchmark::State& state) {
  static std::unique_ptr<BenchMount> mounts[2][2];
  const bool handles = state.range(0) != 0, uring = state.range(1) != 0;
  std::unique_ptr<BenchMount>& m = mounts[handles][uring];
  if (!m) {
    if (uring && !EnableUring()) return nullptr;
    std::string opts = uring ? "uring" : "nouring";
    if (handles) opts += ",handles";
    m = BenchMount::Make(opts);
  }
  return m.get();
}

void BM_Getattr(benchmark::State& state) {
  BenchMount* m = MountFor(state);
  if (m == nullptr)
    return state.SkipWithError("mount failed (root? io_uring: Linux 6.14+)");
  const std::string p = m->Path("");
  struct stat st;
  for (auto _ : state)
    if (::stat(p.c_str(), &st) != 0) return state.SkipWithError("stat");
}

void BM_LookupGetattr(benchmark::State& state) {
  BenchMount* m = MountFor(state);
  if (m == nullptr)
    return state.SkipWithError("mount failed (root? io_uring: Linux 6.14+)");
  const std::string p = m->Path("f");
  struct stat st;
  for (auto _ : state)
    if (::stat(p.c_str(), &st) != 0) return state.SkipWithError("stat");
}

void BM_CreateUnlink(benchmark::State& state) {
  BenchMount* m = MountFor(state);
  if (m == nullptr)
    return state.SkipWithError("mount failed (root? io_uring: Linux 6.14+)");
  const std::string p = m->Path("new");
  for (auto _ : state) {
    int fd = ::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return state.SkipWithError("create");
    ::close(fd);
    if (::unlink(p.c_str()) != 0) return state.SkipWithError("unlink");
  }
}

// Arguments: file mode (0: the default, handle-less; 1: -o handles) and
// transport (0: /dev/fuse; 1: io_uring).
#define ACQFS_ROUNDTRIP_ARGS          \
  ArgNames({"handles", "uring"})      \
      ->ArgsProduct({{0, 1}, {0, 1}}) \
      ->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_Getattr)->ACQFS_ROUNDTRIP_ARGS;
BENCHMARK(BM_LookupGetattr)->ACQFS_ROUNDTRIP_ARGS;
BENCHMARK(BM_CreateUnlink)->ACQFS_ROUNDTRIP_ARGS;

}  // namespace
}  // namespace acqfs

BENCHMARK_MAIN();
