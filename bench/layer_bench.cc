// Microbenchmarks of the layer code, without a mount: resolving a lower
// path and listing a merged directory whose entries are split over both
// layers. (The full suite arrives with issue 5.)
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "fs/copy_up.h"
#include "fs/layer.h"

namespace acqfs {
namespace {

struct Tree {
  std::string root;
  Layers layers;
};

// lower/ holds `n` files, upper/ every other one of them plus as many new.
Tree& MakeTree(int n) {
  static Tree* t = nullptr;
  if (t) return *t;
  t = new Tree;
  char tmpl[] = "/tmp/acqfs-bench-XXXXXX";
  t->root = ::mkdtemp(tmpl);
  for (const char* d : {"/lower", "/upper", "/work"})
    ::mkdir((t->root + d).c_str(), 0755);
  for (int i = 0; i < n; i++) {
    std::string name = "/f" + std::to_string(i);
    ::close(
        ::open((t->root + "/lower" + name).c_str(), O_CREAT | O_WRONLY, 0644));
    if (i % 2 == 0)
      ::close(::open((t->root + "/upper" + name + "u").c_str(),
                     O_CREAT | O_WRONLY, 0644));
  }
  auto l = Layers::Open(t->root + "/lower", t->root + "/upper",
                        t->root + "/work", XattrNamespace::kUser);
  if (!l) std::abort();
  t->layers = std::move(*l);
  return *t;
}

void BM_ResolveLowerChild(benchmark::State& state) {
  Tree& t = MakeTree(10000);
  auto root = RootView(t.layers);
  for (auto _ : state) {
    auto c = ResolveChild(t.layers, *root, "f1234");
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_ResolveLowerChild);

void BM_ListMerged10k(benchmark::State& state) {
  Tree& t = MakeTree(10000);
  auto root = RootView(t.layers);
  for (auto _ : state) {
    auto l = ListMerged(t.layers, *root);
    if (!l || l->size() != 15000) state.SkipWithError("wrong listing size");
    benchmark::DoNotOptimize(l);
  }
}
BENCHMARK(BM_ListMerged10k);

}  // namespace
}  // namespace acqfs

BENCHMARK_MAIN();
