// Export cost (issue 3): `acqfs export` of 1, 100 and 10,000 changed files
// in a 100,000-file checkout, from the layers, without a mount. The checkout
// is made once per process (git init/add/commit of 100,000 small files in
// 1,000 directories); each benchmark run gets a fresh upper layer and bridge
// holding its changed files, so every iteration exports them from scratch.
//
//   build/bin/acqfs_export_bench [--benchmark_filter=...]
//   ACQFS_BENCH_FILES=100000 (default) sets the checkout's size.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/sys.h"
#include "gitbridge/export.h"

namespace acqfs {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "export_bench: %s failed\n", what);
    std::exit(1);
  }
}

void Write(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  Check(fd >= 0, path.c_str());
  Check(::write(fd, content.data(), content.size()) ==
            static_cast<ssize_t>(content.size()),
        path.c_str());
  ::close(fd);
}

int FileCount() {
  const char* e = std::getenv("ACQFS_BENCH_FILES");
  return e ? std::atoi(e) : 100000;
}

// The checkout: FileCount() files, 100 per directory.
const std::string& Checkout() {
  static std::string root;
  if (!root.empty()) return root;
  char tmpl[] = "/tmp/acqfs-export-bench-XXXXXX";
  root = ::mkdtemp(tmpl);
  std::string repo = root + "/repo";
  ::mkdir(repo.c_str(), 0755);
  int n = FileCount();
  for (int d = 0; d < (n + 99) / 100; d++) {
    std::string dir = repo + "/d" + std::to_string(d);
    ::mkdir(dir.c_str(), 0755);
    for (int f = 0; f < 100 && d * 100 + f < n; f++)
      Write(dir + "/f" + std::to_string(f) + ".txt",
            "file " + std::to_string(d * 100 + f) + "\n");
  }
  std::string cmd = "cd " + repo +
                    " && git init -q && git add -A && git -c user.name=b "
                    "-c user.email=b@b commit -q -m base";
  Check(std::system(cmd.c_str()) == 0, "git commit of the checkout");
  return root;
}

void BM_ExportChangedFiles(benchmark::State& state) {
  const int changed = static_cast<int>(state.range(0));
  const std::string& root = Checkout();
  int run = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::string sb = root + "/sb" + std::to_string(run++);
    std::string upper = sb + "/upper";
    ::mkdir(sb.c_str(), 0755);
    ::mkdir(upper.c_str(), 0755);
    for (int i = 0; i < changed; i++) {
      std::string dir = upper + "/d" + std::to_string(i % 1000);
      ::mkdir(dir.c_str(), 0755);
      Write(dir + "/f" + std::to_string(i / 1000) + ".txt",
            "changed " + std::to_string(i) + "\n");
    }
    gitbridge::ExportConfig c;
    c.sandbox = "bench";
    c.lower = root + "/repo";
    c.upper = upper;
    c.bridge = sb + "/bridge.git";
    state.ResumeTiming();
    auto r = gitbridge::Export(c);
    state.PauseTiming();
    if (!r) {
      state.SkipWithError(r.error().Message().c_str());
      break;
    }
    if (r->changed_paths != static_cast<uint64_t>(changed))
      state.SkipWithError("unexpected number of changed paths");
    (void)sys::RemoveTree(AT_FDCWD, sb, sb);
    state.ResumeTiming();
  }
  state.counters["changed_files"] = changed;
  state.counters["checkout_files"] = FileCount();
}
BENCHMARK(BM_ExportChangedFiles)
    ->Arg(1)
    ->Arg(100)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
}  // namespace acqfs

BENCHMARK_MAIN();
