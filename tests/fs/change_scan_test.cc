// Tests of ScanChanges: what `acqfs status` and `acqfs diff` report, built
// from lower/upper trees laid down with plain syscalls in the kernel
// overlayfs format (user.overlay.* xattrs, so they also run unprivileged;
// the owner test needs root, as CI has).
#include "fs/change_scan.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "harness/deep_tree.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::MakeDeviceWhiteout;
using acqfs::test::MakeDir;
using acqfs::test::MakeFifo;
using acqfs::test::MakeFile;
using acqfs::test::MakeSymlink;
using acqfs::test::SetXattr;
using Strings = std::vector<std::string>;

constexpr char kOpaque[] = "user.overlay.opaque";
constexpr char kOrigin[] = "user.overlay.acqfs.origin";

// "<code> <path>", then " [mode,owner,xattrs]" for the metadata bits set.
std::string Describe(const PathChange& c) {
  std::string s = std::string(1, ChangeCode(c.kind)) + " " + c.path;
  Strings bits;
  if (c.meta & PathChange::kMode) bits.push_back("mode");
  if (c.meta & PathChange::kOwner) bits.push_back("owner");
  if (c.meta & PathChange::kXattrs) bits.push_back("xattrs");
  for (size_t i = 0; i < bits.size(); ++i)
    s += (i == 0 ? " [" : ",") + bits[i] + (i + 1 == bits.size() ? "]" : "");
  return s;
}

class ChangeScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(layers_, acqfs::test::OpenLayers(t_));
  }

  // The scan's changes, failing the test when it fails.
  std::vector<PathChange> Scan(const ChangeScanOptions& options = {}) {
    auto r = ScanChanges(layers_, options);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    return r.ok() ? *r : std::vector<PathChange>{};
  }
  Strings Summary(const ChangeScanOptions& options = {}) {
    Strings out;
    for (const PathChange& c : Scan(options)) out.push_back(Describe(c));
    return out;
  }
  Strings Filtered(Strings paths) {
    ChangeScanOptions o;
    o.paths = std::move(paths);
    return Summary(o);
  }

  // What a copy-up leaves: the same bytes and mode in the upper, plus the
  // origin marker.
  void CopyUpFile(const std::string& rel, const std::string& data,
                  mode_t mode = 0644) {
    MakeFile(t_.U(rel), data, mode);
    SetXattr(t_.U(rel), kOrigin, "1");
  }
  void CopyUpDir(const std::string& rel, mode_t mode = 0755) {
    MakeDir(t_.U(rel), mode);
    SetXattr(t_.U(rel), kOrigin, "2");
  }

  acqfs::test::TempTree t_;
  Layers layers_;
};

TEST(ChangeScanCodes, LettersAndNames) {
  EXPECT_EQ(ChangeCode(PathChange::kAdded), 'A');
  EXPECT_EQ(ChangeCode(PathChange::kModified), 'M');
  EXPECT_EQ(ChangeCode(PathChange::kDeleted), 'D');
  EXPECT_EQ(ChangeCode(PathChange::kTypeChanged), 'T');
  EXPECT_EQ(ChangeCode(PathChange::kMetadata), 'm');
  EXPECT_STREQ(ChangeKindName(PathChange::kAdded), "added");
  EXPECT_STREQ(ChangeKindName(PathChange::kModified), "modified");
  EXPECT_STREQ(ChangeKindName(PathChange::kDeleted), "deleted");
  EXPECT_STREQ(ChangeKindName(PathChange::kTypeChanged), "type-changed");
  EXPECT_STREQ(ChangeKindName(PathChange::kMetadata), "metadata");
}

TEST_F(ChangeScanTest, EmptyUpperReportsNothing) {
  MakeFile(t_.L("f"), "x");
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/g"), "y");
  EXPECT_EQ(Summary(), Strings{});
}

TEST_F(ChangeScanTest, UnchangedCopyUpsAreNotReported) {
  MakeFile(t_.L("f"), "same bytes", 0640);
  SetXattr(t_.L("f"), "user.tag", "v");
  MakeDir(t_.L("d"), 0750);
  MakeFile(t_.L("d/g"), std::string(600 * 1024, 'z'));  // several chunks
  MakeSymlink("d/g", t_.L("link"));
  MakeFile(t_.L("empty"), "");
  CopyUpFile("f", "same bytes", 0640);
  SetXattr(t_.U("f"), "user.tag", "v");
  CopyUpDir("d", 0750);
  CopyUpFile("d/g", std::string(600 * 1024, 'z'));
  MakeSymlink("d/g", t_.U("link"));
  CopyUpFile("empty", "");
  EXPECT_EQ(Summary(), Strings{});
}

TEST_F(ChangeScanTest, AddedObjectsAndEverythingBelowANewDirectory) {
  MakeFile(t_.L("old"), "x");
  MakeFile(t_.U("new.txt"), "hello", 0600);
  MakeDir(t_.U("newdir"));
  MakeDir(t_.U("newdir/sub"));
  MakeFile(t_.U("newdir/sub/x"), "x");
  MakeDeviceWhiteout(t_.U("newdir/ghost"));  // hides nothing: no change
  MakeSymlink("new.txt", t_.U("newlink"));
  MakeFifo(t_.U("pipe"));
  EXPECT_EQ(Summary(), (Strings{"A new.txt", "A newdir", "A newdir/sub",
                                "A newdir/sub/x", "A newlink", "A pipe"}));
  std::vector<PathChange> v = Scan();
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0].old_mode, 0u);
  EXPECT_EQ(v[0].new_mode, S_IFREG | 0600u);
  EXPECT_EQ(v[0].old_size, 0u);
  EXPECT_EQ(v[0].new_size, 5u);
  EXPECT_EQ(v[0].meta, 0u);
  EXPECT_TRUE(S_ISDIR(v[1].new_mode));
  EXPECT_TRUE(S_ISLNK(v[4].new_mode));
  EXPECT_TRUE(S_ISFIFO(v[5].new_mode));
}

TEST_F(ChangeScanTest, ModifiedContentOfEqualOrOtherSize) {
  MakeFile(t_.L("same_size"), "abc");
  MakeFile(t_.L("longer"), "abc");
  // Differs only in the last byte, past the first 256 KiB chunk.
  std::string big(700 * 1024, 'q');
  MakeFile(t_.L("big"), big);
  CopyUpFile("same_size", "abd");
  CopyUpFile("longer", "abcd");
  big.back() = 'r';
  CopyUpFile("big", big);
  EXPECT_EQ(Summary(), (Strings{"M big", "M longer", "M same_size"}));
  std::vector<PathChange> v = Scan();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[1].old_size, 3u);
  EXPECT_EQ(v[1].new_size, 4u);
  EXPECT_EQ(v[1].old_mode, S_IFREG | 0644u);
  EXPECT_EQ(v[1].new_mode, S_IFREG | 0644u);
}

TEST_F(ChangeScanTest, ModeChangeIsMetadataAndRidesAlongWithModified) {
  MakeFile(t_.L("tool"), "#!/bin/sh\n");
  MakeFile(t_.L("edited"), "one\n");
  MakeDir(t_.L("d"), 0755);
  CopyUpFile("tool", "#!/bin/sh\n", 0755);
  CopyUpFile("edited", "two\n", 0600);
  CopyUpDir("d", 0700);
  EXPECT_EQ(Summary(),
            (Strings{"m d [mode]", "M edited [mode]", "m tool [mode]"}));
  std::vector<PathChange> v = Scan();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[2].kind, PathChange::kMetadata);
  EXPECT_EQ(v[2].old_mode, S_IFREG | 0644u);
  EXPECT_EQ(v[2].new_mode, S_IFREG | 0755u);
  EXPECT_EQ(v[0].old_mode, S_IFDIR | 0755u);
  EXPECT_EQ(v[0].new_mode, S_IFDIR | 0700u);
}

TEST_F(ChangeScanTest, XattrChangesAreMetadataButOverlayMarkersAreNot) {
  for (const char* n : {"changed", "added", "removed", "markers"}) {
    MakeFile(t_.L(n), "x");
    SetXattr(t_.L(n), "user.a", "1");
    CopyUpFile(n, "x");
  }
  SetXattr(t_.U("changed"), "user.a", "2");
  SetXattr(t_.U("added"), "user.a", "1");
  SetXattr(t_.U("added"), "user.b", "1");
  // "removed" has no user.a in the upper.
  SetXattr(t_.U("markers"), "user.a", "1");
  SetXattr(t_.U("markers"), "user.overlay.other", "whatever");
  if (acqfs::test::IsRoot())
    SetXattr(t_.U("markers"), "trusted.overlay.origin", "kernel");
  EXPECT_EQ(Summary(), (Strings{"m added [xattrs]", "m changed [xattrs]",
                                "m removed [xattrs]"}));
}

TEST_F(ChangeScanTest, OwnerChangeIsMetadata) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "chown needs root (the tests run as root, as CI does)";
  MakeFile(t_.L("owned"), "x");
  MakeFile(t_.L("group"), "x");
  CopyUpFile("owned", "x");
  CopyUpFile("group", "x");
  ASSERT_EQ(::lchown(t_.U("owned").c_str(), 1234, -1), 0);
  ASSERT_EQ(::lchown(t_.U("group").c_str(), -1, 5678), 0);
  EXPECT_EQ(Summary(), (Strings{"m group [owner]", "m owned [owner]"}));
}

TEST_F(ChangeScanTest, SymlinkTargetIsContent) {
  MakeSymlink("a", t_.L("link"));
  MakeSymlink("same", t_.L("kept"));
  MakeSymlink("b", t_.U("link"));
  MakeSymlink("same", t_.U("kept"));
  EXPECT_EQ(Summary(), (Strings{"M link"}));
}

TEST_F(ChangeScanTest, DeviceNumberIsContent) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "mknod needs root (the tests run as root, as CI does)";
  for (const std::string& p : {t_.L("dev"), t_.L("same"), t_.U("same")})
    ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | 0600, makedev(1, 3)), 0) << p;
  ASSERT_EQ(::mknod(t_.U("dev").c_str(), S_IFCHR | 0600, makedev(1, 5)), 0);
  EXPECT_EQ(Summary(), (Strings{"M dev"}));
}

TEST_F(ChangeScanTest, FileBecomesDirectory) {
  MakeFile(t_.L("f"), "was a file");
  MakeDir(t_.U("f"));
  SetXattr(t_.U("f"), kOpaque, "y");  // mkdir over a whiteout
  MakeFile(t_.U("f/inside"), "x");
  EXPECT_EQ(Summary(), (Strings{"T f", "A f/inside"}));
  std::vector<PathChange> v = Scan();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(S_ISREG(v[0].old_mode));
  EXPECT_TRUE(S_ISDIR(v[0].new_mode));
  EXPECT_EQ(v[0].old_size, 10u);
}

TEST_F(ChangeScanTest, DirectoryBecomesFileAndItsContentIsDeleted) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/a"), "a");
  MakeDir(t_.L("d/sub"));
  MakeFile(t_.L("d/sub/b"), "b");
  MakeFile(t_.L("f"), "file");
  MakeFile(t_.U("d"), "now a file");
  MakeSymlink("d", t_.U("f"));
  EXPECT_EQ(Summary(),
            (Strings{"T d", "D d/a", "D d/sub", "D d/sub/b", "T f"}));
}

TEST_F(ChangeScanTest, WhiteoutsDeleteAndListEverythingBelow) {
  MakeDir(t_.L("docs"));
  MakeFile(t_.L("docs/a"), "a");
  MakeDir(t_.L("docs/sub"));
  MakeFile(t_.L("docs/sub/b"), "bb");
  MakeDir(t_.L("docs/sub/empty"));
  MakeFile(t_.L("gone.txt"), "x");
  MakeDeviceWhiteout(t_.U("docs"));
  MakeDeviceWhiteout(t_.U("gone.txt"));
  MakeDeviceWhiteout(t_.U("never_existed"));  // not a change
  EXPECT_EQ(Summary(),
            (Strings{"D docs", "D docs/a", "D docs/sub", "D docs/sub/b",
                     "D docs/sub/empty", "D gone.txt"}));
  std::vector<PathChange> v = Scan();
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[3].old_mode, S_IFREG | 0644u);
  EXPECT_EQ(v[3].old_size, 2u);
  EXPECT_EQ(v[3].new_mode, 0u);
  EXPECT_EQ(v[3].new_size, 0u);
}

TEST_F(ChangeScanTest, XattrWhiteoutsInAMarkedDirectory) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/a"), "a");
  MakeFile(t_.L("d/b"), "b");
  CopyUpDir("d");
  SetXattr(t_.U("d"), kOpaque, "x");
  MakeFile(t_.U("d/a"), "");
  SetXattr(t_.U("d/a"), "user.overlay.whiteout", "");
  MakeFile(t_.U("d/c"), "");  // an empty new file, no whiteout xattr
  EXPECT_EQ(Summary(), (Strings{"D d/a", "A d/c"}));
}

TEST_F(ChangeScanTest, OpaqueDirectoryComparesByPathAndDeletesTheRest) {
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/same"), "kept");
  MakeFile(t_.L("d/edited"), "old");
  MakeFile(t_.L("d/dropped"), "x");
  MakeDir(t_.L("d/sub"));
  MakeFile(t_.L("d/sub/c"), "c");
  MakeFile(t_.L("d/sub/c2"), "c2");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), kOpaque, "y");
  MakeFile(t_.U("d/same"), "kept");  // made again, equal: no change
  MakeFile(t_.U("d/edited"), "new");
  MakeFile(t_.U("d/new"), "n");
  MakeDir(t_.U("d/sub"));  // not marked, but opaque below an opaque parent
  MakeFile(t_.U("d/sub/c2"), "c2");
  MakeDeviceWhiteout(t_.U("d/sub/ghost"));
  EXPECT_EQ(Summary(),
            (Strings{"D d/dropped", "M d/edited", "A d/new", "D d/sub/c"}));
}

TEST_F(ChangeScanTest, OpaqueRootDeletesEveryLowerNameItLacks) {
  MakeFile(t_.L("a"), "a");
  MakeDir(t_.L("dir"));
  MakeFile(t_.L("dir/x"), "x");
  MakeDir(t_.L(".git"));
  MakeFile(t_.L(".git/HEAD"), "ref");
  MakeFile(t_.L("kept"), "k");
  SetXattr(t_.upper(), kOpaque, "y");
  MakeFile(t_.U("kept"), "k");
  EXPECT_EQ(Summary(), (Strings{"D a", "D dir", "D dir/x"}));
  ChangeScanOptions with_git;
  with_git.include_git_dir = true;
  EXPECT_EQ(Summary(with_git),
            (Strings{"D .git", "D .git/HEAD", "D a", "D dir", "D dir/x"}));
}

// Every .git is git's own data (docs/changes.md): a nested repository's is
// left out like the top-level one, its working files are not. (Before, only
// the top-level .git was left out.)
TEST_F(ChangeScanTest, GitDirsAtAnyDepthAreSkippedUnlessAsked) {
  MakeDir(t_.L(".git"));
  MakeFile(t_.L(".git/index"), "old index");
  MakeDir(t_.L("sub"));
  MakeDir(t_.L("sub/.git"));
  MakeFile(t_.L("sub/.git/config"), "a");
  CopyUpDir(".git");
  CopyUpFile(".git/index", "new index");
  MakeFile(t_.U(".git/ORIG_HEAD"), "x");
  CopyUpDir("sub");
  CopyUpDir("sub/.git");
  CopyUpFile("sub/.git/config", "b");
  MakeFile(t_.U("sub/work.c"), "int x;\n");
  MakeDeviceWhiteout(t_.U("sub/.gitmodules"));  // not .git: reported
  MakeFile(t_.L("sub/.gitmodules"), "m");
  MakeDir(t_.L("gone"));
  MakeDir(t_.L("gone/.git"));
  MakeFile(t_.L("gone/.git/HEAD"), "ref");
  MakeFile(t_.L("gone/f"), "f");
  MakeDeviceWhiteout(t_.U("gone"));  // a nested repository removed
  EXPECT_EQ(Summary(), (Strings{"D gone", "D gone/f", "D sub/.gitmodules",
                                "A sub/work.c"}));
  ChangeScanOptions with_git;
  with_git.include_git_dir = true;
  EXPECT_EQ(
      Summary(with_git),
      (Strings{"A .git/ORIG_HEAD", "M .git/index", "D gone", "D gone/.git",
               "D gone/.git/HEAD", "D gone/f", "M sub/.git/config",
               "D sub/.gitmodules", "A sub/work.c"}));
}

TEST_F(ChangeScanTest, PathFilterSelectsAPathAndWhatIsBelowIt) {
  MakeDir(t_.L("docs"));
  MakeFile(t_.L("docs/a.txt"), "a");
  MakeFile(t_.L("docs/b.txt"), "b");
  MakeDir(t_.L("src"));
  MakeDir(t_.L("src/lib"));
  MakeFile(t_.L("src/lib/x"), "x");
  MakeFile(t_.L("src/lib/y"), "y");
  MakeFile(t_.L("docsx"), "d");
  MakeDeviceWhiteout(t_.U("docs"));
  CopyUpDir("src");
  CopyUpDir("src/lib");
  CopyUpFile("src/lib/x", "x2");
  CopyUpFile("src/lib/y", "y2");
  MakeFile(t_.U("src/new"), "n");
  CopyUpFile("docsx", "d2");
  EXPECT_EQ(Filtered({"docs"}),
            (Strings{"D docs", "D docs/a.txt", "D docs/b.txt"}));
  EXPECT_EQ(Filtered({"docs/"}), Filtered({"docs"}));
  // A path inside a deleted directory is reported by itself.
  EXPECT_EQ(Filtered({"docs/b.txt"}), (Strings{"D docs/b.txt"}));
  EXPECT_EQ(Filtered({"src/lib/y", "docsx"}),
            (Strings{"M docsx", "M src/lib/y"}));
  EXPECT_EQ(Filtered({"src"}),
            (Strings{"M src/lib/x", "M src/lib/y", "A src/new"}));
  EXPECT_EQ(Filtered({"nowhere"}), Strings{});
  EXPECT_EQ(Filtered({"src/new/below"}), Strings{});
  EXPECT_EQ(Filtered({"."}).size(), 7u);
}

TEST_F(ChangeScanTest, SortedByPathBytesWithADirectoryBeforeItsContent) {
  MakeDir(t_.U("a"));
  MakeFile(t_.U("a/z"), "1");
  MakeFile(t_.U("a-b"), "1");
  MakeFile(t_.U("a.txt"), "1");
  MakeFile(t_.U("B"), "1");
  MakeFile(t_.U("_"), "1");
  MakeDir(t_.U("a/b"));
  MakeFile(t_.U("a/b/c"), "1");
  EXPECT_EQ(Summary(), (Strings{"A B", "A _", "A a", "A a-b", "A a.txt",
                                "A a/b", "A a/b/c", "A a/z"}));
}

TEST_F(ChangeScanTest, ReportsProgressEveryThousandUpperEntries) {
  MakeDir(t_.U("many"));
  for (int i = 0; i < 2500; ++i)
    MakeFile(t_.U("many/f" + std::to_string(i)), "");
  std::vector<uint64_t> seen;
  ChangeScanOptions o;
  o.progress = [&](uint64_t n) { seen.push_back(n); };
  EXPECT_EQ(Scan(o).size(), 2501u);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1000, 2000, 2501}));
}

TEST_F(ChangeScanTest, TrustedNamespaceMarkersAsRoot) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "trusted.* needs root (the tests run as root, as CI does)";
  ASSERT_OK_AND_ASSIGN(
      Layers trusted,
      Layers::OpenForReading(t_.lower(), t_.upper(), XattrNamespace::kTrusted));
  MakeDir(t_.L("d"));
  MakeFile(t_.L("d/a"), "a");
  MakeFile(t_.L("f"), "x");
  MakeDir(t_.U("d"));
  SetXattr(t_.U("d"), "trusted.overlay.opaque", "y");
  MakeFile(t_.U("f"), "x");
  SetXattr(t_.U("f"), "trusted.overlay.acqfs.origin", "7");
  auto r = ScanChanges(trusted);
  ASSERT_OK(r);
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(Describe((*r)[0]), "D d/a");
  // Read in the other namespace the directory is merged again.
  EXPECT_EQ(Summary(), Strings{});
}

// Runs ScanChanges(layers) in a child process as `nobody` (root reads
// everything) and returns "ok" or "<errno>|<op>|<path>".
std::string ScanAsNobody(const Layers& layers) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    if (::geteuid() == 0 && (::setresgid(65534, 65534, 65534) != 0 ||
                             ::setresuid(65534, 65534, 65534) != 0))
      ::_exit(2);
    ::prctl(PR_SET_DUMPABLE, 1);  // keep /proc/self/fd usable
    auto r = ScanChanges(layers);
    std::string msg = r.ok() ? "ok"
                             : std::to_string(r.err()) + "|" + r.error().op +
                                   "|" + r.error().path;
    bool written = ::write(fds[1], msg.data(), msg.size()) ==
                   static_cast<ssize_t>(msg.size());
    ::_exit(written ? 0 : 3);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    got.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "child failed: status " + std::to_string(status);
  return got;
}

TEST_F(ChangeScanTest, ErrorsNameTheOperationAndThePath) {
  MakeDir(t_.U("locked"));
  MakeFile(t_.U("locked/f"), "x");
  ASSERT_EQ(::chmod(t_.U("locked").c_str(), 0), 0);
  std::string got = ScanAsNobody(layers_);
  ::chmod(t_.U("locked").c_str(), 0755);  // so that TempTree removes it
  size_t bar = got.find('|');
  ASSERT_NE(bar, std::string::npos) << got;
  EXPECT_EQ(got.substr(0, bar), std::to_string(EACCES)) << got;
  size_t bar2 = got.find('|', bar + 1);
  ASSERT_NE(bar2, std::string::npos) << got;
  EXPECT_GT(bar2, bar + 1) << "no operation named: " << got;
  EXPECT_EQ(got.substr(bar2 + 1), t_.U("locked")) << got;
}

// ---------------------------------------------------------------------------
// Trees deeper than PATH_MAX (issue 13): the walk holds a bounded number of
// descriptors and no C++ stack in proportion to the depth. The scans run
// with the open-files limit lowered to 64 above what the test holds, so a
// walk holding a descriptor per level fails with EMFILE; the old recursion
// (some 600 bytes of stack per level) overflowed the 8 MB stack long before
// 30,000 levels.

TEST_F(ChangeScanTest, AChainOf30000CopiedUpDirectoriesIsScannedInBoundedFds) {
  constexpr size_t kDepth = 30000;
  // The lower chain, and the same directories copied up (equal metadata),
  // with the file at the bottom changed.
  ASSERT_EQ(acqfs::test::MakeChain(t_.lower(), "d", kDepth,
                                   [](int fd, size_t level) -> std::string {
                                     if (level != kDepth) return "";
                                     return acqfs::test::WriteAt(fd, "f",
                                                                 "old\n");
                                   }),
            "");
  ASSERT_EQ(acqfs::test::MakeChain(t_.upper(), "d", kDepth,
                                   [](int fd, size_t level) -> std::string {
                                     if (level != kDepth) return "";
                                     return acqfs::test::WriteAt(fd, "f",
                                                                 "new\n");
                                   }),
            "");
  std::vector<PathChange> changes;
  {
    acqfs::test::FdLimit limit(64);
    ASSERT_TRUE(limit.ok());
    auto start = std::chrono::steady_clock::now();
    auto r = ScanChanges(layers_);
    double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    ASSERT_TRUE(r.ok()) << r.error().Message();
    changes = std::move(*r);
    EXPECT_LT(secs, 60.0);
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, PathChange::kModified);
  EXPECT_EQ(changes[0].path, acqfs::test::ChainPath("d", kDepth, "f"));
  EXPECT_EQ(acqfs::test::RemoveDeep(t_.L("d")), "");
  EXPECT_EQ(acqfs::test::RemoveDeep(t_.U("d")), "");
}

TEST_F(ChangeScanTest, ALowerTreeDeeperThanPathMaxDeletedIsListedInBoundedFds) {
  constexpr size_t kDepth = 2050;  // "d/" x 2050: 4,100 bytes
  ASSERT_EQ(acqfs::test::MakeChain(t_.lower(), "d", kDepth,
                                   [](int fd, size_t level) -> std::string {
                                     if (level != kDepth) return "";
                                     return acqfs::test::WriteAt(fd, "f", "x");
                                   }),
            "");
  MakeDeviceWhiteout(t_.U("d"));
  std::vector<PathChange> changes;
  {
    acqfs::test::FdLimit limit(64);
    ASSERT_TRUE(limit.ok());
    auto r = ScanChanges(layers_);
    ASSERT_TRUE(r.ok()) << r.error().Message();
    changes = std::move(*r);
  }
  // Every directory of the chain, then the file.
  ASSERT_EQ(changes.size(), kDepth + 1);
  for (size_t i = 0; i < kDepth; ++i) {
    EXPECT_EQ(changes[i].kind, PathChange::kDeleted);
    EXPECT_EQ(changes[i].path, acqfs::test::ChainPath("d", i + 1));
  }
  EXPECT_EQ(changes.back().path, acqfs::test::ChainPath("d", kDepth, "f"));
  EXPECT_TRUE(S_ISREG(changes.back().old_mode));
  EXPECT_EQ(acqfs::test::RemoveDeep(t_.L("d")), "");
}

TEST_F(ChangeScanTest, NamesOfAnAddedTreeDeeperThanPathMaxAreReported) {
  // 24 nested directories of 200-byte names and a file: 4,834 bytes.
  const std::string name(200, 'n');
  ASSERT_EQ(acqfs::test::MakeChain(t_.upper(), name, 24,
                                   [](int fd, size_t level) -> std::string {
                                     if (level != 24) return "";
                                     return acqfs::test::WriteAt(
                                         fd, "bottom.txt", "bottom\n");
                                   }),
            "");
  acqfs::test::FdLimit limit(64);
  ASSERT_TRUE(limit.ok());
  Strings want;
  for (size_t i = 1; i <= 24; ++i)
    want.push_back("A " + acqfs::test::ChainPath(name, i));
  want.push_back("A " + acqfs::test::ChainPath(name, 24, "bottom.txt"));
  EXPECT_EQ(Summary(), want);
  ChangeScanOptions only;
  only.paths = {acqfs::test::ChainPath(name, 24, "bottom.txt")};
  EXPECT_EQ(Summary(only), Strings{want.back()});
  EXPECT_EQ(acqfs::test::RemoveDeep(t_.U(name)), "");
}

}  // namespace
}  // namespace acqfs
