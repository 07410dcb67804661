// Microbenchmarks of the layer code (fs/layer.h), without a mount:
//   BM_ResolveLowerChild      one ResolveChild of a lower name in a
//                             15,000-entry merged directory;
//   BM_ListMerged10k          ListMerged of that directory (10,000 lower
//                             files, every other one shadowed by an upper
//                             file, plus 5,000 upper-only files: 15,000);
//   BM_ResolveLowerPath/N     the lookup of a lower file N components deep
//                             (ResolveChild per component, as FUSE LOOKUPs
//                             walk a path), its directories only in the lower;
//   BM_ResolveMergedPath/N    the same where every directory on the path
//                             also exists in the upper (as after a write
//                             below it), so each step checks both layers;
//   BM_ResolveLowerChildHidingSecrets
//                             BM_ResolveLowerChild with the --hide-secrets
//                             policy: the cost of the hide rule per lookup;
//   BM_ListMergedSplit10k     ListMerged of a directory of exactly 10,000
//                             entries: 5,000 only in the lower, 2,500 in
//                             both (upper shadows lower), 2,500 only upper.
// The trees are made once per process in /tmp and removed when it exits; the
// timed loops only resolve and list, with a warm dentry cache.
//
//   cmake --build build -j2 --target acqfs_layer_bench
//   build/bin/acqfs_layer_bench [--benchmark_filter=Path]
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer.h"

namespace acqfs {
namespace {

// prefix + n. (Not "literal" + std::to_string(n): GCC 12 warns wrongly,
// -Wrestrict, on that form once inlined.)
std::string Numbered(const char* prefix, int64_t n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

struct Tree {
  std::string root;
  Layers layers;
};

void Touch(const std::string& path) {
  ::close(::open(path.c_str(), O_CREAT | O_WRONLY, 0644));
}

// Removes the trees when the process exits.
struct Roots {
  std::vector<std::string> paths;
  ~Roots() {
    for (const auto& p : paths) (void)sys::RemoveTree(AT_FDCWD, p, p);
  }
};
Roots g_roots;

std::string MakeRoot() {
  char tmpl[] = "/tmp/acqfs-layer-bench-XXXXXX";
  std::string root = ::mkdtemp(tmpl);
  g_roots.paths.push_back(root);
  for (const char* d : {"/lower", "/upper", "/work"})
    ::mkdir((root + d).c_str(), 0755);
  return root;
}

void OpenLayers(Tree* t) {
  auto l = Layers::Open(t->root + "/lower", t->root + "/upper",
                        t->root + "/work", XattrNamespace::kUser);
  if (!l) std::abort();
  t->layers = std::move(*l);
}

// lower/ holds `n` files, upper/ every other one of them plus as many new.
Tree& MakeTree(int n) {
  static Tree* t = nullptr;
  if (t) return *t;
  t = new Tree;
  t->root = MakeRoot();
  for (int i = 0; i < n; i++) {
    std::string name = Numbered("/f", i);
    Touch(t->root + "/lower" + name);
    if (i % 2 == 0) Touch(t->root + "/upper" + name + "u");
  }
  OpenLayers(t);
  return *t;
}

constexpr int kMaxDepth = 8;
constexpr int kSiblings = 50;  // other entries in each directory on the paths
constexpr int kSplitEntries = 10000;

// Two chains of kMaxDepth - 1 directories ending in a file, lower/lo/... and
// lower/mg/..., each directory with kSiblings other files; upper/mg/...
// repeats the mg directories (without the files). And lower/split,
// upper/split as described for BM_ListMergedSplit10k.
Tree& MakePathTree() {
  static Tree* t = nullptr;
  if (t) return *t;
  t = new Tree;
  t->root = MakeRoot();
  for (const char* top : {"lo", "mg"}) {
    // Directories top, top/c1, ..., top/c1/.../c6: with leaf.txt, a path of
    // kMaxDepth components.
    std::string rel = top;
    for (int d = 1; d < kMaxDepth; d++) {
      std::string lower = t->root + "/lower/" + rel;
      ::mkdir(lower.c_str(), 0755);
      if (top[0] == 'm') ::mkdir((t->root + "/upper/" + rel).c_str(), 0755);
      for (int s = 0; s < kSiblings; s++) Touch(lower + Numbered("/s", s));
      if (d == kMaxDepth - 1) Touch(lower + "/leaf.txt");
      rel += Numbered("/c", d);
    }
  }
  std::string lower = t->root + "/lower/split/",
              upper = t->root + "/upper/split/";
  ::mkdir(lower.c_str(), 0755);
  ::mkdir(upper.c_str(), 0755);
  for (int i = 0; i < kSplitEntries; i++) {
    std::string name = Numbered("e", i);
    if (i < kSplitEntries * 3 / 4) Touch(lower + name);
    if (i >= kSplitEntries / 2) Touch(upper + name);
  }
  OpenLayers(t);
  return *t;
}

// The components of the path to the leaf `depth` components deep below
// `top` (1 = the top directory's own sibling file, kMaxDepth = leaf.txt).
std::vector<std::string> PathTo(const std::string& top, int depth) {
  std::vector<std::string> parts = {top};
  for (int d = 1; d < depth - 1; d++) parts.push_back(Numbered("c", d));
  parts.push_back(depth == kMaxDepth ? "leaf.txt" : "s0");
  return parts;
}

// Resolves `parts` from the root as the FUSE LOOKUPs of a path would.
bool Walk(const Layers& layers, const std::vector<std::string>& parts) {
  auto root = RootView(layers);
  if (!root) return false;
  DirView dir = *root;
  std::string path;
  for (size_t i = 0; i < parts.size(); i++) {
    auto c = ResolveChild(layers, dir, parts[i]);
    if (!c || !c->exists) return false;
    path = sys::Join(path, parts[i]);
    if (i + 1 < parts.size()) dir = c->AsDir(path);
  }
  return true;
}

void ResolvePath(benchmark::State& state, const char* top) {
  Tree& t = MakePathTree();
  const int depth = static_cast<int>(state.range(0));
  auto parts = PathTo(top, depth);
  if (!Walk(t.layers, parts)) state.SkipWithError("path not found");
  for (auto _ : state) benchmark::DoNotOptimize(Walk(t.layers, parts));
  state.counters["components"] = static_cast<double>(parts.size());
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

void BM_ResolveLowerChildHidingSecrets(benchmark::State& state) {
  Tree& t = MakeTree(10000);
  auto policy = Policy::Make(Policy::SecretPatterns(), {}, 0);
  if (!policy) {
    state.SkipWithError("secret patterns do not parse");
    return;
  }
  t.layers.policy = std::make_shared<Policy>(std::move(*policy));
  auto root = RootView(t.layers);
  for (auto _ : state) {
    auto c = ResolveChild(t.layers, *root, "f1234");
    benchmark::DoNotOptimize(c);
  }
  t.layers.policy.reset();
}
BENCHMARK(BM_ResolveLowerChildHidingSecrets);

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

void BM_ResolveLowerPath(benchmark::State& state) { ResolvePath(state, "lo"); }
BENCHMARK(BM_ResolveLowerPath)->Arg(2)->Arg(4)->Arg(kMaxDepth);

void BM_ResolveMergedPath(benchmark::State& state) { ResolvePath(state, "mg"); }
BENCHMARK(BM_ResolveMergedPath)->Arg(2)->Arg(4)->Arg(kMaxDepth);

void BM_ListMergedSplit10k(benchmark::State& state) {
  Tree& t = MakePathTree();
  auto root = RootView(t.layers);
  auto c = ResolveChild(t.layers, *root, "split");
  if (!c || !c->exists) {
    state.SkipWithError("no split directory");
    return;
  }
  DirView dir = c->AsDir("split");
  for (auto _ : state) {
    auto l = ListMerged(t.layers, dir);
    if (!l || l->size() != kSplitEntries)
      state.SkipWithError("wrong listing size");
    benchmark::DoNotOptimize(l);
  }
  state.SetItemsProcessed(state.iterations() * kSplitEntries);
}
BENCHMARK(BM_ListMergedSplit10k)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace acqfs

BENCHMARK_MAIN();
