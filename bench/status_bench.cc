// Status-scan cost (fs/change_scan.h ScanChanges, behind `acqfs status`,
// `acqfs diff` and the change count of `acqfs ls`), without a mount: a
// scan of an upper layer holding 1, 100 or 10,000 changed files over a
// 100,000-file lower (1,000 directories of 100 small files). The lower is
// made once per process; each benchmark makes its upper once, before the
// timed loop (changed file i is d<i mod dirs>/f<i div dirs>.txt with other
// bytes, so the changes spread over the directories), and every iteration
// scans it from scratch and checks it found exactly the changed files. The
// scan reads the upper and only the lower paths the upper names, so its
// time should follow the change, not the lower's size. Warm cache.
//
//   cmake --build build -j2 --target acqfs_status_bench
//   build/bin/acqfs_status_bench [--benchmark_filter=...]
//   ACQFS_BENCH_FILES=100000 (default) sets the lower's size; the changed
//   counts are capped at it.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/sys.h"
#include "fs/change_scan.h"
#include "fs/layer.h"

namespace acqfs {
namespace {

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "status_bench: %s failed\n", what.c_str());
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

void Write(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  Check(fd >= 0, "create " + path);
  Check(::write(fd, content.data(), content.size()) ==
            static_cast<ssize_t>(content.size()),
        "write " + path);
  ::close(fd);
}

int FileCount() {
  const char* e = std::getenv("ACQFS_BENCH_FILES");
  return e ? std::max(1, std::atoi(e)) : 100000;
}
int DirCount() { return (FileCount() + 99) / 100; }

std::string FilePath(int i) {
  return Numbered("d", i % DirCount()) + Numbered("/f", i / DirCount()) +
         ".txt";
}

// The lower: FileCount() files, 100 per directory, in a directory removed
// when the process exits.
class Tree {
 public:
  static Tree& Get() {
    static Tree t;
    return t;
  }
  ~Tree() { (void)sys::RemoveTree(AT_FDCWD, root_, root_); }
  const std::string& root() const { return root_; }

 private:
  Tree() {
    char tmpl[] = "/tmp/acqfs-status-bench-XXXXXX";
    Check(::mkdtemp(tmpl) != nullptr, "mkdtemp");
    root_ = tmpl;
    std::string lower = root_ + "/lower";
    Check(::mkdir(lower.c_str(), 0755) == 0, "mkdir " + lower);
    for (int d = 0; d < DirCount(); d++)
      Check(::mkdir((lower + "/d" + std::to_string(d)).c_str(), 0755) == 0,
            "mkdir");
    for (int i = 0; i < FileCount(); i++)
      Write(lower + "/" + FilePath(i), "file " + std::to_string(i) + "\n");
  }
  std::string root_;
};

void BM_ScanChanges(benchmark::State& state) {
  const int changed =
      static_cast<int>(std::min<int64_t>(state.range(0), FileCount()));
  Tree& t = Tree::Get();
  std::string upper = t.root() + "/upper" + std::to_string(changed);
  Check(::mkdir(upper.c_str(), 0755) == 0 || errno == EEXIST, "mkdir upper");
  for (int i = 0; i < changed; i++) {
    std::string path = FilePath(i);
    ::mkdir((upper + "/" + sys::Dirname(path)).c_str(), 0755);
    Write(upper + "/" + path, "changed " + std::to_string(i) + "\n");
  }
  auto layers =
      Layers::OpenForReading(t.root() + "/lower", upper, XattrNamespace::kUser);
  Check(layers.ok(), "open the layers");
  for (auto _ : state) {
    auto r = ScanChanges(*layers);
    if (!r) {
      state.SkipWithError(r.error().Message().c_str());
      break;
    }
    if (r->size() != static_cast<size_t>(changed)) {
      state.SkipWithError("unexpected number of changes");
      break;
    }
  }
  state.counters["changed_files"] = changed;
  state.counters["lower_files"] = FileCount();
}
BENCHMARK(BM_ScanChanges)
    ->Arg(1)
    ->Arg(100)
    ->Arg(10000)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace acqfs

BENCHMARK_MAIN();
