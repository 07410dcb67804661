// WalkTree and DirStack (common/dir_walk.h), and the walks built on them:
// sys::RemoveTree, Quota::Measure and the materialising copy hold a bounded
// number of descriptors however deep or wide the tree is. The tests lower
// this process's open-files limit to a few dozen above what it uses and
// walk trees that would need hundreds.
#include "common/dir_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer.h"
#include "fs/quota.h"
#include "harness/deep_tree.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::Exists;
using acqfs::test::ListDir;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::TempTree;

using acqfs::test::FdLimit;

// `depth` nested directories "d" below `root`, each also holding a file.
void MakeDeep(const std::string& root, int depth) {
  std::string p = root;
  for (int i = 0; i < depth; i++) {
    p += "/d";
    MakeDir(p);
    MakeFile(p + "/f", "x");
  }
}

// `n` sibling directories below `root`, each holding a file.
void MakeWide(const std::string& root, int n) {
  for (int i = 0; i < n; i++) {
    std::string d = root + "/w" + std::to_string(i);
    MakeDir(d);
    MakeFile(d + "/f", "yy");
  }
}

TEST(DirWalk, RemoveTreeOfADeepAndWideTreeNeedsFewDescriptors) {
  TempTree t;
  MakeDir(t.root() + "/victim");
  MakeDeep(t.root() + "/victim", 300);
  MakeWide(t.root() + "/victim", 500);
  auto root = sys::OpenDirPath(t.root(), O_PATH);
  ASSERT_TRUE(root.ok());
  {
    FdLimit limit(24);
    ASSERT_TRUE(limit.ok());
    Status s = sys::RemoveTree(root->get(), "victim", t.root());
    ASSERT_TRUE(s.ok()) << s.error().Message();
  }
  EXPECT_FALSE(Exists(t.root() + "/victim"));
}

TEST(DirWalk, RemoveTreeEntersDirectoriesItMayNotRead) {
  TempTree t;
  MakeDir(t.root() + "/v");
  MakeDeep(t.root() + "/v", 3);
  ASSERT_EQ(::chmod((t.root() + "/v/d/d").c_str(), 0), 0);
  ASSERT_EQ(::chmod((t.root() + "/v/d").c_str(), 0500), 0);
  auto root = sys::OpenDirPath(t.root(), O_PATH);
  ASSERT_TRUE(root.ok());
  Status s = sys::RemoveTree(root->get(), "v", t.root());
  ASSERT_TRUE(s.ok()) << s.error().Message();
  EXPECT_FALSE(Exists(t.root() + "/v"));
}

TEST(DirWalk, QuotaMeasureOfAWideTreeNeedsFewDescriptors) {
  TempTree t;
  MakeWide(t.upper(), 800);
  MakeDeep(t.upper(), 200);
  auto up = sys::OpenDirPath(t.upper(), O_PATH);
  ASSERT_TRUE(up.ok());
  FdLimit limit(24);
  ASSERT_TRUE(limit.ok());
  auto used = Quota::Measure(up->get(), t.upper());
  ASSERT_TRUE(used.ok()) << used.error().Message();
  EXPECT_EQ(*used, acqfs::test::DiskUsage(t.upper()));
  EXPECT_GE(*used, (800u * 2 + 200u * 2) * 4096);  // a block each
}

TEST(DirWalk, MaterialisingADeepTreeNeedsFewDescriptors) {
  TempTree t;
  MakeDir(t.L("top"));
  MakeDeep(t.L("top"), 150);
  MakeWide(t.L("top"), 100);
  auto layers = acqfs::test::OpenLayers(t);
  ASSERT_TRUE(layers.ok());
  DirView top;
  top.path = "top";
  top.lower = LowerBit(0);
  {
    FdLimit limit(32);
    ASSERT_TRUE(limit.ok());
    Status s = BuildMergedCopy(*layers, top, layers->tmp.get(), "copy", 0);
    ASSERT_TRUE(s.ok()) << s.error().Message();
  }
  std::string deepest = t.tmp() + "/copy";
  for (int i = 0; i < 150; i++) deepest += "/d";
  EXPECT_TRUE(Exists(deepest + "/f"));
  EXPECT_EQ(ListDir(t.tmp() + "/copy").size(), 101u);
}

TEST(DirWalk, TheStackHoldsAtMostItsLimitOfDescriptors) {
  TempTree t;
  MakeDeep(t.root(), 10);
  auto root = sys::OpenDirPath(t.root(), O_PATH);
  ASSERT_TRUE(root.ok());
  DirStack st(root->get(), t.root(), 3);
  for (int i = 0; i < 10; i++) {
    ASSERT_TRUE(st.Push("d").ok());
    EXPECT_LE(st.open(), 3u);
  }
  for (int i = 0; i < 10; i++) {
    Status s = st.Pop();
    ASSERT_TRUE(s.ok()) << s.error().Message();
    EXPECT_LE(st.open(), 3u);
  }
  EXPECT_EQ(st.depth(), 0u);
}

// A level whose descriptor was closed is reopened through ".." and must be
// the directory the walk left: one moved meanwhile is an error.
TEST(DirWalk, ADirectoryMovedDuringTheWalkIsAnError) {
  TempTree t;
  MakeDeep(t.root(), 4);  // d/d/d/d
  MakeDir(t.root() + "/elsewhere");
  auto root = sys::OpenDirPath(t.root(), O_PATH);
  ASSERT_TRUE(root.ok());
  DirStack st(root->get(), t.root(), 1);
  for (int i = 0; i < 4; i++) ASSERT_TRUE(st.Push("d").ok());
  ASSERT_EQ(::rename((t.root() + "/d/d").c_str(),
                     (t.root() + "/elsewhere/d").c_str()),
            0);
  ASSERT_TRUE(st.Pop().ok());  // to d/d/d: its parent is still d/d (moved)
  ASSERT_TRUE(st.Pop().ok());  // to d/d, now elsewhere/d
  Status s = st.Pop();         // ".." of elsewhere/d is not the old "d"
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err(), ESTALE) << s.error().Message();
}

// GoTo moves through the shared prefix only, and a kPathOnly stack holds
// O_PATH descriptors within its limit, reopening closed parents through
// "..".
TEST(DirWalk, GoToMovesThroughTheSharedPrefix) {
  TempTree t;
  for (const char* d : {"/a", "/a/b", "/a/b/c", "/a/b/x", "/a/b/x/y", "/a/z"})
    MakeDir(t.root() + d);
  auto root = sys::OpenDirPath(t.root(), O_PATH);
  ASSERT_TRUE(root.ok());
  DirStack st(root->get(), t.root(), 2, DirStack::kPathOnly);
  auto is = [&](const std::string& rel) {
    struct stat a, b;
    EXPECT_EQ(::fstat(st.top(), &a), 0);
    EXPECT_EQ(::stat((t.root() + "/" + rel).c_str(), &b), 0) << rel;
    EXPECT_EQ(st.Shown(), rel.empty() ? t.root() : t.root() + "/" + rel);
    EXPECT_LE(st.open(), 2u);
    return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
  };
  ASSERT_TRUE(st.GoTo("a/b/c").ok());
  EXPECT_EQ(st.depth(), 3u);
  EXPECT_TRUE(is("a/b/c"));
  EXPECT_EQ(::fcntl(st.top(), F_GETFL) & O_PATH, O_PATH);
  ASSERT_TRUE(st.GoTo("a/b/x/y").ok());
  EXPECT_EQ(st.depth(), 4u);
  EXPECT_TRUE(is("a/b/x/y"));
  Status z = st.GoTo("a/z");  // up through closed parents
  ASSERT_TRUE(z.ok()) << z.error().Message();
  EXPECT_TRUE(is("a/z"));
  ASSERT_TRUE(st.GoTo("").ok());
  EXPECT_EQ(st.depth(), 0u);
  EXPECT_EQ(st.top(), root->get());
  Status missing = st.GoTo("a/missing");
  EXPECT_EQ(missing.err(), ENOENT);
  EXPECT_EQ(st.Push("..").err(), EINVAL);
}

// Each Push and Pop costs O(1), however deep the stack: a walk of a chain
// of 100,000 directories (200,000 bytes of path) is linear. The old stack
// scanned every level for the shallowest open one at each Push and rebuilt
// the shown path for every entry: O(depth^2), minutes at this depth.
// Measured in CPU time of this process (the kernel's rmdir work included),
// against a chain ten times shorter, so a busy machine does not fail it:
// linear is about 10 times the short chain's, quadratic about 100 times.
double RemoveChainCpuSeconds(const TempTree& t, const std::string& name,
                             int depth) {
  EXPECT_EQ(acqfs::test::MakeChain(t.root(), name, depth), "");
  auto cpu = [] {
    struct timespec ts;
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
  };
  const double start = cpu();
  Status s =
      sys::RemoveTree(AT_FDCWD, t.root() + "/" + name, t.root() + "/" + name);
  const double secs = cpu() - start;
  EXPECT_TRUE(s.ok()) << s.error().Message();
  EXPECT_FALSE(Exists(t.root() + "/" + name));
  return secs;
}

TEST(DirWalk, RemoveTreeOfAChainOf100000DirectoriesIsLinear) {
  TempTree t;
  FdLimit limit(32);
  ASSERT_TRUE(limit.ok());
  const double short_chain = RemoveChainCpuSeconds(t, "s", 10000);
  const double long_chain = RemoveChainCpuSeconds(t, "d", 100000);
  EXPECT_LT(long_chain, 30 * short_chain + 0.5)
      << "10,000 directories: " << short_chain
      << " s of CPU; 100,000: " << long_chain << " s";
}

// sys::OpenRelievingPressure: an open that fails with EMFILE calls the
// pressure handler, which gives descriptors back, and is tried once more;
// without a handler (or one that frees nothing) the open fails as it did.
std::vector<int>* g_spare = nullptr;
bool CloseSpares(void*) {
  if (g_spare->empty()) return false;
  for (int fd : *g_spare) ::close(fd);
  g_spare->clear();
  return true;
}

// sys::OpenBeneath of a path longer than PATH_MAX: walked a run of
// components at a time with the same rules as one openat2 (beneath the
// root, no symlink anywhere), holding one descriptor at a time.
class LongPath : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = UniqueFd(::open(tree_.root().c_str(), O_PATH | O_DIRECTORY));
    ASSERT_TRUE(root_.is_valid());
    // 30 directories of 200 bytes: 6,030 bytes with the slashes.
    UniqueFd d(::open(tree_.root().c_str(), O_PATH | O_DIRECTORY));
    for (int i = 0; i < 30; ++i) {
      std::string n = std::string(199, 'a' + i % 26) + std::to_string(i % 10);
      ASSERT_EQ(::mkdirat(d.get(), n.c_str(), 0755), 0) << i;
      d = UniqueFd(::openat(d.get(), n.c_str(), O_PATH | O_DIRECTORY));
      ASSERT_TRUE(d.is_valid());
      names_.push_back(n);
    }
    deep_ = names_[0];
    for (size_t i = 1; i < names_.size(); ++i) deep_ += "/" + names_[i];
    ASSERT_GT(deep_.size(), 6000u);
  }
  // TempTree's own removal goes by paths; take the deep tree away first.
  void TearDown() override {
    UniqueFd top(::open(tree_.root().c_str(), O_PATH | O_DIRECTORY));
    EXPECT_TRUE(sys::RemoveTree(top.get(), names_[0], "deep tree").ok());
  }
  // The first `k` directories.
  std::string Prefix(size_t k) const {
    std::string p = names_[0];
    for (size_t i = 1; i < k; ++i) p += "/" + names_[i];
    return p;
  }
  TempTree tree_;
  UniqueFd root_;
  std::vector<std::string> names_;
  std::string deep_;
};

TEST_F(LongPath, CreatesAndOpensBelowADirectoryDeeperThanPathMax) {
  auto made = sys::OpenBeneath(root_.get(), deep_ + "/file",
                               O_CREAT | O_WRONLY | O_EXCL, 0640, "file");
  ASSERT_TRUE(made.ok()) << made.error().Message();
  ASSERT_EQ(::write(made->get(), "x", 1), 1);
  auto again = sys::OpenBeneath(root_.get(), deep_ + "/file", O_RDONLY, 0, "f");
  ASSERT_TRUE(again.ok()) << again.error().Message();
  char c = 0;
  EXPECT_EQ(::read(again->get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
  auto missing =
      sys::OpenBeneath(root_.get(), deep_ + "/nothing", O_RDONLY, 0, "n");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.err(), ENOENT);
}

TEST_F(LongPath, ASymlinkAnywhereOnTheWayIsRefused) {
  // Replace a directory early on (in the first run), and one late (in a
  // later run), by a symlink to the real directory: the walk must refuse
  // both, as one openat2 with RESOLVE_NO_SYMLINKS would.
  for (size_t k : {size_t{3}, size_t{25}}) {
    // The parent of level k, reached by the walk itself (its path is long).
    auto parent = sys::OpenBeneath(root_.get(), Prefix(k - 1),
                                   O_PATH | O_DIRECTORY, 0, "parent");
    ASSERT_TRUE(parent.ok()) << k;
    const int p = parent->get();
    const std::string name = names_[k - 1], moved = name + "-real";
    ASSERT_EQ(::renameat(p, name.c_str(), p, moved.c_str()), 0) << k;
    ASSERT_EQ(::symlinkat(moved.c_str(), p, name.c_str()), 0) << k;
    auto r = sys::OpenBeneath(root_.get(), deep_, O_PATH | O_DIRECTORY, 0, "d");
    EXPECT_FALSE(r.ok()) << "followed a symlink at level " << k;
    if (!r.ok()) {
      EXPECT_EQ(r.err(), ELOOP) << k;
    }
    ASSERT_EQ(::unlinkat(p, name.c_str(), 0), 0);
    ASSERT_EQ(::renameat(p, moved.c_str(), p, name.c_str()), 0);
  }
  EXPECT_TRUE(
      sys::OpenBeneath(root_.get(), deep_, O_PATH | O_DIRECTORY, 0, "d").ok());
}

TEST_F(LongPath, DotDotCannotClimbOutOfTheRoot) {
  // ".." components that would climb above the root, placed in a later run.
  std::string up = deep_;
  for (int i = 0; i < 31; ++i) up += "/..";
  auto r = sys::OpenBeneath(root_.get(), up, O_PATH | O_DIRECTORY, 0, "up");
  EXPECT_FALSE(r.ok());
  if (!r.ok()) {
    EXPECT_EQ(r.err(), EXDEV);
  }
}

TEST_F(LongPath, OneComponentLongerThanARunIsTooLong) {
  std::string bad = deep_ + "/" + std::string(sys::kMaxPathChunk + 1, 'z');
  auto r = sys::OpenBeneath(root_.get(), bad, O_RDONLY, 0, "bad");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err(), ENAMETOOLONG);
}

TEST_F(LongPath, TheWalkHoldsOneDescriptorAtATime) {
  FdLimit limit(4);
  ASSERT_TRUE(limit.ok());
  auto r = sys::OpenBeneath(root_.get(), deep_, O_PATH | O_DIRECTORY, 0, "d");
  EXPECT_TRUE(r.ok()) << r.error().Message();
}

TEST(FdPressure, TheHandlerGivesDescriptorsBackAndTheOpenIsRetried) {
  std::vector<int> spare;
  g_spare = &spare;
  FdLimit limit(4);
  ASSERT_TRUE(limit.ok());
  for (;;) {  // use up the limit
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    spare.push_back(fd);
  }
  ASSERT_FALSE(spare.empty());
  auto open_null = [] { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); };
  EXPECT_EQ(sys::OpenRelievingPressure(open_null), -1) << "no handler yet";
  EXPECT_EQ(errno, EMFILE);
  sys::SetFdPressureHandler(&CloseSpares, nullptr);
  int fd = sys::OpenRelievingPressure(open_null);
  sys::SetFdPressureHandler(nullptr, nullptr);
  EXPECT_GE(fd, 0) << "retried after the handler freed descriptors";
  EXPECT_TRUE(spare.empty());
  if (fd >= 0) ::close(fd);
  g_spare = nullptr;
}

}  // namespace
}  // namespace acqfs
