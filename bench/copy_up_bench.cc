// Copy-up cost (fs/copy_up.h CopyUp), without a mount: copying a lower file
// of 4 KiB, 1 MiB and 256 MiB into an empty upper layer, as the first write
// to a lower file does. Each iteration copies up a file that is not in the
// upper yet: the lower holds several copies of each size (up to 64 MiB or
// 1,000 files' worth), iteration i copies up copy i, and once every copy
// has been used the timer is paused while a fresh upper and work directory
// replace the old ones. Reported: time per copy-up (wall clock) and
// bytes_per_second. The lower files hold random bytes (no holes) and are in
// the page cache (just written). CopyUp fsyncs each copy before publishing
// it, so the time includes writing it to disk: for small files the fsync
// (a journal commit on ext4) is most of it, and it varies with what else
// the machine writes.
//
// CopyData tries FICLONE first, then copy_file_range, then read/write; the
// counter `ficlone` says whether FICLONE works between these directories
// (1) or not (0: on ext4 copy_file_range copies the bytes in the kernel).
// The trees live in $TMPDIR (default /tmp), which decides the filesystem,
// and are removed when the program exits.
//
//   cmake --build build -j2 --target acqfs_copy_up_bench
//   build/bin/acqfs_copy_up_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer.h"

namespace acqfs {
namespace {

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "copy_up_bench: %s failed\n", what.c_str());
    std::exit(1);
  }
}

// prefix + n. (Not "literal" + std::to_string(n): GCC 12 warns wrongly,
// -Wrestrict, on that form once inlined.)
std::string Numbered(const char* prefix, int64_t n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

constexpr int64_t kMaxCopyBytes = 64ll << 20;  // lower copies of one size
constexpr int kMaxCopies = 1000;

int CopiesOf(int64_t size) {
  return static_cast<int>(
      std::clamp<int64_t>(kMaxCopyBytes / size, 1, kMaxCopies));
}

std::string FileName(int64_t size, int copy) {
  return Numbered("f", size) + Numbered("-", copy);
}

// Writes `size` random bytes to `path`.
void WriteRandom(const std::string& path, int64_t size, std::mt19937_64* rng) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  Check(fd >= 0, "create " + path);
  std::vector<uint64_t> buf(1 << 17);  // 1 MiB
  for (int64_t off = 0; off < size;) {
    for (auto& w : buf) w = (*rng)();
    size_t n = static_cast<size_t>(
        std::min<int64_t>(size - off, buf.size() * sizeof(uint64_t)));
    Check(::write(fd, buf.data(), n) == static_cast<ssize_t>(n),
          "write " + path);
    off += n;
  }
  ::close(fd);
}

// The directory holding lower/ (made once per process) and the uppers.
class Bench {
 public:
  static Bench& Get() {
    static Bench b;
    return b;
  }
  ~Bench() { (void)sys::RemoveTree(AT_FDCWD, root_, root_); }

  // The lower with CopiesOf(size) files of `size` bytes (made on first use).
  void EnsureFiles(int64_t size) {
    if (std::find(made_.begin(), made_.end(), size) != made_.end()) return;
    std::mt19937_64 rng(size);
    for (int c = 0; c < CopiesOf(size); c++)
      WriteRandom(root_ + "/lower/" + FileName(size, c), size, &rng);
    made_.push_back(size);
  }

  // Fresh, empty upper and work directories, the previous ones removed.
  Layers FreshLayers() {
    if (!upper_.empty()) {
      Check(sys::RemoveTree(AT_FDCWD, upper_, upper_).ok(), "remove upper");
      Check(sys::RemoveTree(AT_FDCWD, work_, work_).ok(), "remove work");
    }
    std::string n = std::to_string(generation_++);
    upper_ = root_ + "/upper" + n;
    work_ = root_ + "/work" + n;
    Check(::mkdir(upper_.c_str(), 0755) == 0, "mkdir " + upper_);
    Check(::mkdir(work_.c_str(), 0755) == 0, "mkdir " + work_);
    auto l =
        Layers::Open(root_ + "/lower", upper_, work_, XattrNamespace::kUser);
    Check(l.ok(), "open the layers");
    return std::move(*l);
  }

  // Does FICLONE work from the lower to the upper?
  bool Ficlone(int64_t size) {
    std::string dst = root_ + "/ficlone-probe";
    int in = ::open((root_ + "/lower/" + FileName(size, 0)).c_str(),
                    O_RDONLY | O_CLOEXEC);
    int out =
        ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = in >= 0 && out >= 0 && ::ioctl(out, FICLONE, in) == 0;
    ::close(in);
    ::close(out);
    ::unlink(dst.c_str());
    return ok;
  }

 private:
  Bench() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(t && *t ? t : "/tmp") + "/acqfs-copy-up-bench-XXXXXX";
    Check(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp " + tmpl);
    root_ = tmpl;
    Check(::mkdir((root_ + "/lower").c_str(), 0755) == 0, "mkdir lower");
  }

  std::string root_, upper_, work_;
  std::vector<int64_t> made_;
  int generation_ = 0;
};

void BM_CopyUp(benchmark::State& state) {
  const int64_t size = state.range(0);
  Bench& b = Bench::Get();
  b.EnsureFiles(size);
  const int copies = CopiesOf(size);
  Layers layers = b.FreshLayers();
  int next = 0;
  for (auto _ : state) {
    if (next == copies) {
      state.PauseTiming();
      layers = b.FreshLayers();
      next = 0;
      state.ResumeTiming();
    }
    Status s = CopyUp(layers, FileName(size, next++));
    if (!s) {
      state.SkipWithError(s.error().Message().c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * size);
  state.counters["ficlone"] = b.Ficlone(size) ? 1 : 0;
}
BENCHMARK(BM_CopyUp)
    ->Arg(4 << 10)
    ->Arg(1 << 20)
    ->Arg(256 << 20)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace acqfs

BENCHMARK_MAIN();
