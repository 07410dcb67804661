// Tests of ScanChanges over a stack of layers: the host, 0 to 3 frozen
// layers and the upper, laid down by hand in the kernel overlayfs format
// (0/0 whiteouts, xattr whiteouts, user.overlay.opaque). Each case is checked
// twice: against the changes written in the table, and against THE ORACLE,
// the kernel's own overlayfs mounted read-only over the same layers (the
// upper as the topmost lowerdir), whose merged tree is copied out and
// compared with the host tree by the definitions of docs/changes.md. The
// oracle needs `unshare -rm` and overlayfs with userxattr (CI runs as root
// on such a kernel); when it cannot mount the test fails, it never skips.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fs/change_scan.h"
#include "fs/layer.h"
#include "harness/deep_tree.h"
#include "harness/fs_util.h"
#include "harness/result_assert.h"
#include "harness/temp_dir.h"

namespace acqfs {
namespace {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

// The layers of one case: 0 the host, 1..frozen the frozen layers, frozen + 1
// the upper (the Layers::At numbers).
class Stack {
 public:
  Stack(const std::string& root, unsigned frozen)
      : root_(root), frozen_(frozen) {
    for (unsigned i = 0; i <= frozen_ + 1; ++i) fs::create_directory(Dir(i));
  }
  unsigned frozen() const { return frozen_; }
  unsigned upper() const { return frozen_ + 1; }
  std::string Dir(unsigned layer) const {
    if (layer == 0) return root_ + "/host";
    if (layer == upper()) return root_ + "/upper";
    return root_ + "/l" + std::to_string(layer);
  }
  std::string P(unsigned layer, const std::string& rel) const {
    return Dir(layer) + "/" + rel;
  }

  void File(unsigned layer, const std::string& rel, const std::string& data,
            mode_t mode = 0644) {
    Parents(layer, rel);
    test::MakeFile(P(layer, rel), data, mode);
  }
  void MkDir(unsigned layer, const std::string& rel, mode_t mode = 0755) {
    Parents(layer, rel);
    test::MakeDir(P(layer, rel), mode);
  }
  // A directory marked opaque ("y").
  void Opaque(unsigned layer, const std::string& rel, mode_t mode = 0755) {
    MkDir(layer, rel, mode);
    test::SetXattr(P(layer, rel), "user.overlay.opaque", "y");
  }
  void Whiteout(unsigned layer, const std::string& rel) {
    Parents(layer, rel);
    test::MakeDeviceWhiteout(P(layer, rel));
  }
  // An xattr whiteout, its directory marked "x" (made if missing).
  void XattrWhiteout(unsigned layer, const std::string& rel) {
    Parents(layer, rel);
    const std::string dir = fs::path(P(layer, rel)).parent_path();
    test::SetXattr(dir, "user.overlay.opaque", "x");
    test::MakeFile(P(layer, rel), "", 0644);
    test::SetXattr(P(layer, rel), "user.overlay.whiteout", "");
  }
  void Link(unsigned layer, const std::string& target, const std::string& rel) {
    Parents(layer, rel);
    test::MakeSymlink(target, P(layer, rel));
  }
  void HardLink(unsigned layer, const std::string& from,
                const std::string& rel) {
    Parents(layer, rel);
    ASSERT_EQ(::link(P(layer, from).c_str(), P(layer, rel).c_str()), 0)
        << rel << ": " << strerror(errno);
  }

 private:
  // Missing parents, 0755 (as a copy-up of the host's 0755 directories).
  void Parents(unsigned layer, const std::string& rel) {
    fs::path parent = fs::path(P(layer, rel)).parent_path();
    std::error_code ec;
    fs::create_directories(parent, ec);
    ASSERT_FALSE(ec) << parent << ": " << ec.message();
  }

  std::string root_;
  unsigned frozen_;
};

struct Case {
  const char* name;
  unsigned frozen;
  std::function<void(Stack&)> build;
  Strings expected;  // "<code> <path>", sorted
};

// What one object of a tree is, as the definitions compare it.
struct Obj {
  mode_t mode = 0;  // type and 07777
  uid_t uid = 0;
  gid_t gid = 0;
  std::string content;                        // bytes, link target, rdev
  std::map<std::string, std::string> xattrs;  // without user.overlay.*
};

std::map<std::string, std::string> Xattrs(const std::string& path) {
  std::map<std::string, std::string> out;
  std::vector<char> names(65536);
  ssize_t n = ::llistxattr(path.c_str(), names.data(), names.size());
  EXPECT_GE(n, 0) << "llistxattr " << path << ": " << strerror(errno);
  for (ssize_t i = 0; i < n;) {
    std::string key(names.data() + i);
    i += static_cast<ssize_t>(key.size()) + 1;
    if (key.starts_with("user.overlay.") || key.starts_with("trusted.overlay."))
      continue;
    std::vector<char> v(65536);
    ssize_t m = ::lgetxattr(path.c_str(), key.c_str(), v.data(), v.size());
    EXPECT_GE(m, 0) << "lgetxattr " << path << " " << key;
    out[key] = std::string(v.data(), m < 0 ? 0 : static_cast<size_t>(m));
  }
  return out;
}

// Every object below `root` (the root itself left out), by relative path.
std::map<std::string, Obj> Tree(const std::string& root) {
  std::map<std::string, Obj> out;
  for (auto it = fs::recursive_directory_iterator(root);
       it != fs::recursive_directory_iterator(); ++it) {
    const std::string path = it->path().string();
    struct stat st;
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    Obj o;
    o.mode = st.st_mode & (S_IFMT | 07777);
    o.uid = st.st_uid;
    o.gid = st.st_gid;
    if (S_ISREG(st.st_mode)) o.content = test::ReadFile(path);
    if (S_ISLNK(st.st_mode)) o.content = fs::read_symlink(path).string();
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
      o.content = std::to_string(st.st_rdev);
    o.xattrs = Xattrs(path);
    out[path.substr(root.size() + 1)] = std::move(o);
  }
  return out;
}

// The changes from `host` to `merged` by the definitions of docs/changes.md
// (A, D, T, M, m), sorted by path.
Strings Differences(const std::map<std::string, Obj>& host,
                    const std::map<std::string, Obj>& merged) {
  std::map<std::string, char> codes;
  for (const auto& [path, h] : host)
    if (!merged.count(path)) codes[path] = 'D';
  for (const auto& [path, m] : merged) {
    auto h = host.find(path);
    if (h == host.end()) {
      codes[path] = 'A';
    } else if ((h->second.mode & S_IFMT) != (m.mode & S_IFMT)) {
      codes[path] = 'T';
    } else if (h->second.content != m.content) {
      codes[path] = 'M';
    } else if (h->second.mode != m.mode || h->second.uid != m.uid ||
               h->second.gid != m.gid || h->second.xattrs != m.xattrs) {
      codes[path] = 'm';
    }
  }
  Strings out;
  for (const auto& [path, code] : codes)
    out.push_back(std::string(1, code) + " " + path);
  return out;
}

// Runs `cmd` with /bin/sh; its exit status (-1: not run).
int Shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  if (rc == -1 || !WIFEXITED(rc)) return -1;
  return WEXITSTATUS(rc);
}

// The kernel's merged view of `stack`: overlayfs mounted read-only (lowerdir
// top first: the upper, the frozen layers from the top, the host) in a
// private user and mount namespace, copied out to `out` with cp -a.
void KernelMerged(const Stack& stack, const std::string& scratch,
                  std::string* out) {
  const std::string mnt = scratch + "/mnt";
  *out = scratch + "/merged";
  fs::create_directory(mnt);
  fs::create_directory(*out);
  std::string lowerdir;
  for (unsigned i = stack.upper() + 1; i-- > 0;)
    lowerdir += stack.Dir(i) + (i > 0 ? ":" : "");
  const std::string cmd =
      "unshare -rm sh -c 'mount -t overlay overlay -o "
      "lowerdir=" +
      lowerdir + ",userxattr " + mnt + " && cp -a " + mnt + "/. " + *out +
      "/' 2>" + scratch + "/oracle.err";
  int rc = Shell(cmd);
  ASSERT_EQ(rc, 0) << "THE ORACLE could not run (needs unshare -rm and the "
                      "kernel overlayfs with userxattr; this test must not "
                      "be skipped): "
                   << cmd << "\n"
                   << test::ReadFile(scratch + "/oracle.err");
}

std::string Describe(const PathChange& c) {
  return std::string(1, ChangeCode(c.kind)) + " " + c.path;
}

// gtest prints a case by its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class StackScanTest : public ::testing::TestWithParam<Case> {};

TEST_P(StackScanTest, ScanChangesReportsWhatTheKernelsMergedViewChanged) {
  const Case& c = GetParam();
  test::TempDir tmp;
  Stack stack(tmp.path(), c.frozen);
  c.build(stack);
  ASSERT_FALSE(HasFatalFailure());

  std::vector<std::string> frozen;
  for (unsigned i = 1; i <= c.frozen; ++i) frozen.push_back(stack.Dir(i));
  ASSERT_OK_AND_ASSIGN(
      Layers layers,
      Layers::OpenForReading(stack.Dir(0), stack.Dir(stack.upper()),
                             XattrNamespace::kUser, frozen));
  auto changes = ScanChanges(layers);
  ASSERT_TRUE(changes.ok()) << changes.error().Message();
  Strings got;
  for (const PathChange& pc : *changes) got.push_back(Describe(pc));

  // The table.
  EXPECT_EQ(got, c.expected) << "ScanChanges against the table";

  // THE ORACLE.
  std::string merged;
  KernelMerged(stack, tmp.path(), &merged);
  ASSERT_FALSE(HasFatalFailure());
  const Strings oracle = Differences(Tree(stack.Dir(0)), Tree(merged));
  EXPECT_EQ(got, oracle) << "ScanChanges against the kernel's overlayfs";
  EXPECT_EQ(c.expected, oracle) << "the table against the kernel's overlayfs";

  // Every change's new object is where PathChange::layer says, as the
  // merged view shows it.
  for (const PathChange& pc : *changes) {
    if (pc.new_mode == 0) continue;
    ASSERT_GE(pc.layer, 1u) << pc.path;
    ASSERT_LE(pc.layer, stack.upper()) << pc.path;
    struct stat st;
    const std::string at = stack.P(pc.layer, pc.path);
    ASSERT_EQ(::lstat(at.c_str(), &st), 0) << at;
    EXPECT_EQ(st.st_mode, pc.new_mode) << at;
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), pc.new_size) << at;
    struct stat mst;
    const std::string in_merged = merged + "/" + pc.path;
    ASSERT_EQ(::lstat(in_merged.c_str(), &mst), 0) << in_merged;
    EXPECT_EQ(mst.st_mode, pc.new_mode) << in_merged;
    if (S_ISREG(st.st_mode)) {
      EXPECT_EQ(test::ReadFile(at), test::ReadFile(in_merged)) << pc.path;
    }
  }

  // each_upper sees the upper layer's own entries only (acqfs ls measures
  // the upper's disk use), every one of them once, the root first.
  uint64_t upper_entries = 0;
  for (auto it = fs::recursive_directory_iterator(stack.Dir(stack.upper()));
       it != fs::recursive_directory_iterator(); ++it)
    ++upper_entries;
  uint64_t measured = 0;
  ChangeScanOptions o;
  o.each_upper = [&](const struct stat&) { ++measured; };
  ASSERT_TRUE(ScanChanges(layers, o).ok());
  EXPECT_EQ(measured, upper_entries + 1);
}

const Case kCases[] = {
    {"SingleUpperAsBefore",
     0,
     [](Stack& s) {
       s.File(0, "a", "host a\n");
       s.File(0, "d/x", "x\n");
       s.File(1, "a", "new a\n");
       s.Whiteout(1, "d");
       s.File(1, "n", "new\n");
     },
     {"M a", "D d", "D d/x", "A n"}},

    {"DirDeletedInL1RecreatedInL2",
     2,
     [](Stack& s) {
       s.File(0, "d/a", "a\n");
       s.File(0, "d/b", "b\n");
       s.File(0, "d/sub/c", "c\n");
       s.Whiteout(1, "d");
       s.File(2, "d/a", "a\n");  // the host's bytes again: no change
       s.File(2, "d/new", "n\n");
     },
     {"D d/b", "A d/new", "D d/sub", "D d/sub/c"}},

    {"FileChangedInL1AndChangedBackInTheUpper",
     1,
     [](Stack& s) {
       s.File(0, "f", "host\n");
       s.File(0, "g", "host g\n");
       s.File(1, "f", "frozen\n");
       s.File(1, "g", "frozen g\n");
       s.File(2, "f", "host\n");
     },
     {"M g"}},

    {"DeletionUndoneByIdenticalContentAndModeChangeInL1Only",
     2,
     [](Stack& s) {
       s.File(0, "f", "same\n");
       s.File(0, "h", "h\n", 0644);
       s.File(0, "k/x", "x\n");
       s.Whiteout(1, "f");
       s.File(2, "f", "same\n");
       s.File(1, "h", "h\n", 0755);
       s.Whiteout(1, "k");
       s.File(2, "k/x", "x\n");  // a directory deleted, made again the same
     },
     {"m h"}},

    {"ChainOfRenamesMaterialisedAsOpaqueDirectories",
     3,
     [](Stack& s) {
       s.File(0, "a/x", "x\n");
       s.File(0, "a/y", "y\n");
       // a -> b in L1, b -> c in L2, c/y edited in L3, c/z in the upper.
       s.Whiteout(1, "a");
       s.Opaque(1, "b");
       s.File(1, "b/x", "x\n");
       s.File(1, "b/y", "y\n");
       s.Whiteout(2, "b");
       s.Opaque(2, "c");
       s.File(2, "c/x", "x\n");
       s.File(2, "c/y", "y\n");
       s.File(3, "c/y", "y edited\n");
       s.File(4, "c/z", "z\n");
     },
     {"D a", "D a/x", "D a/y", "A c", "A c/x", "A c/y", "A c/z"}},

    {"RenameBackOverTheHostDirectory",
     2,
     [](Stack& s) {
       s.File(0, "a/x", "x\n");
       s.File(0, "a/y", "y\n");
       s.Whiteout(1, "a");
       s.Opaque(1, "b");
       s.File(1, "b/x", "x\n");
       s.File(1, "b/y", "y\n");
       // b -> a again in the upper (opaque: the host's a is hidden), with
       // y gone.
       s.Whiteout(3, "b");
       s.Opaque(3, "a");
       s.File(3, "a/x", "x\n");
     },
     {"D a/y"}},

    {"Symlinks",
     2,
     [](Stack& s) {
       s.Link(0, "t1", "s");
       s.Link(0, "a", "k");
       s.Link(0, "same", "u");
       s.Link(1, "t2", "s");
       s.Link(3, "t1", "s");  // back to the host's target
       s.Link(1, "x", "n");
       s.File(2, "k", "a file now\n");
       s.Link(1, "other", "u");
     },
     {"T k", "A n", "M u"}},

    {"HardLinks",
     1,
     [](Stack& s) {
       s.File(0, "e", "host e\n");
       s.File(0, "f", "f\n");
       s.File(1, "h1", "linked\n");
       s.HardLink(1, "h1", "h2");
       s.HardLink(1, "h1", "e");  // a host name made a link to other bytes
       s.File(2, "f", "f\n");
       s.HardLink(2, "f", "f2");  // the host's bytes under a second name
     },
     {"M e", "A f2", "A h1", "A h2"}},

    {"WhiteoutInTheUpperOfNamesOnlyL1Has",
     1,
     [](Stack& s) {
       s.File(0, "keep", "k\n");
       s.File(1, "only1", "o\n");
       s.File(1, "onlydir/a", "a\n");
       s.File(1, "onlydir/b/c", "c\n");
       s.Whiteout(2, "only1");
       s.Whiteout(2, "onlydir");
     },
     {}},

    {"OpaqueInL1MergesWithDirectoriesAbove",
     2,
     [](Stack& s) {
       s.File(0, "o/p", "p\n");
       s.File(0, "o/q", "q\n");
       s.Opaque(1, "o");
       s.File(1, "o/p", "p edited\n");
       s.File(2, "o/r", "r\n");  // not opaque: merges with L1's o
       s.File(3, "o/s", "s\n");
     },
     {"M o/p", "D o/q", "A o/r", "A o/s"}},

    {"NonOpaqueDirectoriesMergeDownToTheHost",
     2,
     [](Stack& s) {
       s.File(0, "m/a", "a\n");
       s.File(0, "m/keep", "k\n");
       s.File(1, "m/b", "b\n");
       s.File(2, "m/c", "c\n");
       s.Whiteout(3, "m/a");
       s.Whiteout(3, "m/b");
     },
     {"D m/a", "A m/c"}},

    {"NonDirectoryInL1StopsTheChain",
     2,
     [](Stack& s) {
       s.File(0, "n/a", "a\n");
       s.File(0, "n/b", "b\n");
       s.File(1, "n", "a file\n");
       s.File(2, "n/a", "a\n");  // a plain directory again, not opaque
     },
     {"D n/b"}},

    {"XattrWhiteoutInAFrozenLayer",
     1,
     [](Stack& s) {
       s.File(0, "w/a", "a\n");
       s.File(0, "w/b", "b\n");
       s.XattrWhiteout(1, "w/a");
       s.File(1, "w/c", "c\n");
     },
     {"D w/a", "A w/c"}},

    {"MetadataInFrozenLayers",
     3,
     [](Stack& s) {
       s.MkDir(0, "dd", 0755);
       s.File(0, "dd/f", "f\n");
       s.File(0, "x", "x\n");
       s.File(0, "same", "s\n");
       s.MkDir(1, "dd", 0700);
       s.File(2, "x", "x\n");
       test::SetXattr(s.P(2, "x"), "user.note", "v");
       s.File(1, "same", "s\n");
       test::SetXattr(s.P(1, "same"), "user.note", "v");
       s.File(3, "same", "s\n");  // the xattr dropped again above
     },
     {"m dd", "m x"}},

    {"EveryLayerEditsOneFile",
     3,
     [](Stack& s) {
       s.File(0, "f", "0\n");
       s.File(1, "f", "1\n");
       s.File(2, "f", "22\n");
       s.File(3, "f", "333\n");
       s.File(1, "g", "1\n");
       s.File(2, "g", "2\n");
       s.File(3, "g", "3\n");
       s.File(4, "g", "4\n");
     },
     {"M f", "A g"}},

    {"UpperNonDirectoryOverAFrozenDirectory",
     1,
     [](Stack& s) {
       s.File(0, "h/x", "x\n");
       s.File(1, "nd/x", "x\n");
       s.File(1, "h/y", "y\n");
       s.File(2, "nd", "file\n");
       s.File(2, "h", "file over the host dir\n");
     },
     {"T h", "D h/x", "A nd"}},

    {"UpperOpaqueOverFrozenAndHost",
     1,
     [](Stack& s) {
       s.File(0, "q/1", "1\n");
       s.File(0, "q/3", "3\n");
       s.File(1, "q/2", "2\n");
       s.Opaque(2, "q");
       s.File(2, "q/3", "3\n");
       s.File(2, "q/4", "4\n");
     },
     {"D q/1", "A q/4"}},

    {"WhiteoutInL2OfAFileL1Added",
     2,
     [](Stack& s) {
       s.File(0, "keep", "k\n");
       s.File(1, "d/tmp", "t\n");
       s.Whiteout(2, "d/tmp");
       s.File(3, "d/kept", "k\n");
     },
     {"A d", "A d/kept"}},
};

INSTANTIATE_TEST_SUITE_P(Cases, StackScanTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// A chain of directories deeper than PATH_MAX in the host, three frozen
// layers and the upper is walked in a bounded number of descriptors
// (LayerStack::kOpenPerLayer per layer), with the changes at the bottom
// read from the layer that holds each.
TEST(StackScanDeep, AChainDeeperThanPathMaxInEveryLayerIsScannedInBoundedFds) {
  constexpr size_t kDepth = 3000;  // "d/" x 3000: 6,000 bytes
  test::TempDir tmp;
  Stack stack(tmp.path(), 3);
  auto at_bottom = [](std::function<std::string(int)> make) {
    return [make](int fd, size_t level) -> std::string {
      return level == kDepth ? make(fd) : "";
    };
  };
  auto whiteout = [](const char* name) {
    return [name](int fd) -> std::string {
      return ::mknodat(fd, name, S_IFCHR | 0, 0) == 0 ? "" : "mknodat";
    };
  };
  ASSERT_EQ(test::MakeChain(stack.Dir(0), "d", kDepth, at_bottom([](int fd) {
                              std::string e = test::WriteAt(fd, "f", "old\n");
                              return e.empty() ? test::WriteAt(fd, "h", "h\n")
                                               : e;
                            })),
            "");
  ASSERT_EQ(test::MakeChain(stack.Dir(1), "d", kDepth, at_bottom([](int fd) {
                              return test::WriteAt(fd, "f", "new\n");
                            })),
            "");
  ASSERT_EQ(test::MakeChain(stack.Dir(2), "d", kDepth, at_bottom([](int fd) {
                              return test::WriteAt(fd, "g", "g\n");
                            })),
            "");
  ASSERT_EQ(test::MakeChain(stack.Dir(3), "d", kDepth / 2), "");
  ASSERT_EQ(
      test::MakeChain(stack.Dir(4), "d", kDepth, at_bottom(whiteout("h"))), "");
  ASSERT_OK_AND_ASSIGN(
      Layers layers,
      Layers::OpenForReading(stack.Dir(0), stack.Dir(4), XattrNamespace::kUser,
                             {stack.Dir(1), stack.Dir(2), stack.Dir(3)}));
  std::vector<PathChange> changes;
  {
    test::FdLimit limit(64);
    ASSERT_TRUE(limit.ok());
    auto r = ScanChanges(layers);
    ASSERT_TRUE(r.ok()) << r.error().Message();
    changes = std::move(*r);
  }
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(Describe(changes[0]), "M " + test::ChainPath("d", kDepth, "f"));
  EXPECT_EQ(changes[0].layer, 1u);
  EXPECT_EQ(Describe(changes[1]), "A " + test::ChainPath("d", kDepth, "g"));
  EXPECT_EQ(changes[1].layer, 2u);
  EXPECT_EQ(Describe(changes[2]), "D " + test::ChainPath("d", kDepth, "h"));
  for (unsigned i = 0; i <= 4; ++i)
    EXPECT_EQ(test::RemoveDeep(stack.P(i, "d")), "");
}

}  // namespace
}  // namespace acqfs
