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
#include <string>

#include "common/sys.h"
#include "deep_tree.h"
#include "fs/copy_up.h"
#include "fs/layer.h"
#include "fs/quota.h"
#include "unit_test_util.h"

namespace acqfs {
namespace {

using acqfs_test::Exists;
using acqfs_test::ListDir;
using acqfs_test::MakeDir;
using acqfs_test::TempTree;
using acqfs_test::WriteFile;

size_t OpenFds() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (d && ::readdir(d)) n++;
  if (d) ::closedir(d);
  return n - 3;  // ".", ".." and the DIR's own descriptor
}

// Lowers the soft open-files limit to what the process uses plus `room`
// for the life of the object.
class FdLimit {
 public:
  explicit FdLimit(size_t room) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    struct rlimit low = saved_;
    low.rlim_cur = OpenFds() + room;
    ok_ = ::setrlimit(RLIMIT_NOFILE, &low) == 0;
  }
  ~FdLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  bool ok() const { return ok_; }

 private:
  struct rlimit saved_;
  bool ok_ = false;
};

// `depth` nested directories "d" below `root`, each also holding a file.
void MakeDeep(const std::string& root, int depth) {
  std::string p = root;
  for (int i = 0; i < depth; i++) {
    p += "/d";
    MakeDir(p);
    WriteFile(p + "/f", "x");
  }
}

// `n` sibling directories below `root`, each holding a file.
void MakeWide(const std::string& root, int n) {
  for (int i = 0; i < n; i++) {
    std::string d = root + "/w" + std::to_string(i);
    MakeDir(d);
    WriteFile(d + "/f", "yy");
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
  EXPECT_EQ(*used, acqfs_test::DiskUsage(t.upper()));
  EXPECT_GE(*used, (800u * 2 + 200u * 2) * 4096);  // a block each
}

TEST(DirWalk, MaterialisingADeepTreeNeedsFewDescriptors) {
  TempTree t;
  MakeDir(t.L("top"));
  MakeDeep(t.L("top"), 150);
  MakeWide(t.L("top"), 100);
  auto layers = acqfs_test::OpenLayers(t);
  ASSERT_TRUE(layers.ok());
  DirView top;
  top.path = "top";
  top.merged = true;
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
TEST(DirWalk, RemoveTreeOfAChainOf100000DirectoriesIsLinear) {
  TempTree t;
  ASSERT_EQ(deep_test::MakeChain(t.root(), "d", 100000), "");
  FdLimit limit(32);
  ASSERT_TRUE(limit.ok());
  auto start = std::chrono::steady_clock::now();
  Status s = sys::RemoveTree(AT_FDCWD, t.root() + "/d", t.root() + "/d");
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(s.ok()) << s.error().Message();
  EXPECT_FALSE(Exists(t.root() + "/d"));
  EXPECT_LT(secs, 30.0);
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
