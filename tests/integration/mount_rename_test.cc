// rename(2) and renameat2(2) through the mount: lower files and directories,
// merged directories, RENAME_NOREPLACE, RENAME_EXCHANGE, and never EXDEV.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

using Rename = MountTest;
using Names = std::vector<std::string>;

Names ListOf(const std::string& dir) {
  Names names;
  EXPECT_TRUE(ListDir(dir, &names));
  return names;
}

// What a moved tree must keep: everything but ctime/atime and inode data.
SnapshotOptions MovedTreeOptions() {
  SnapshotOptions o;
  o.dir_times = false;  // renaming changes the parents' times
  return o;
}

int RenamePaths(const std::string& from, const std::string& to) {
  return ::rename(from.c_str(), to.c_str());
}

TEST_F(Rename, LowerFileToNewName) {
  ASSERT_SYS_OK(RenamePaths(M(lower::kFileA), M("docs/renamed.txt")));
  EXPECT_EQ(ContentOf(M("docs/renamed.txt")), lower::kFileAContent);
  EXPECT_EQ(LstatErrno(M(lower::kFileA)), ENOENT);
  EXPECT_EQ(ListOf(M(lower::kDocsDir)),
            (Names{"b.txt", "private.txt", "readonly.txt", "renamed.txt"}));
  EXPECT_TRUE(IsWhiteout(U(lower::kFileA)));
  EXPECT_EQ(ContentOf(L(lower::kFileA)), lower::kFileAContent);
}

TEST_F(Rename, LowerFileKeepsModeOwnerXattrsAndMtime) {
  const struct stat before = StatM(lower::kOwnedFile);
  ASSERT_SYS_OK(RenamePaths(M(lower::kOwnedFile), M("moved-owned.txt")));
  const struct stat after = StatM("moved-owned.txt");
  EXPECT_EQ(after.st_uid, lower::kOwnedUid);
  EXPECT_EQ(after.st_gid, lower::kOwnedGid);
  EXPECT_EQ(after.st_mode, before.st_mode);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  ASSERT_SYS_OK(RenamePaths(M(lower::kXattrFile), M("moved-tagged.txt")));
  std::string value;
  EXPECT_TRUE(GetXattr(M("moved-tagged.txt"), lower::kXattrName, &value));
  EXPECT_EQ(value, lower::kXattrValue);
}

TEST_F(Rename, LowerFileOverExistingLowerFile) {
  ASSERT_SYS_OK(RenamePaths(M(lower::kFileA), M(lower::kFileB)));
  EXPECT_EQ(ContentOf(M(lower::kFileB)), lower::kFileAContent);
  EXPECT_EQ(LstatErrno(M(lower::kFileA)), ENOENT);
  EXPECT_EQ(ListOf(M(lower::kDocsDir)),
            (Names{"b.txt", "private.txt", "readonly.txt"}));
  EXPECT_EQ(ContentOf(L(lower::kFileB)), lower::kFileBContent);
}

TEST_F(Rename, LowerDirectoryWithChildren) {
  TreeSnapshot before = Snapshot(sandbox().mountpoint(), MovedTreeOptions());
  ASSERT_SYS_OK(RenamePaths(M(lower::kLibDir), M("lib-moved")));
  TreeSnapshot after = Snapshot(sandbox().mountpoint(), MovedTreeOptions());
  EXPECT_TRUE(SnapshotsEqual(Subtree(before, lower::kLibDir),
                             Subtree(after, "lib-moved")));
  EXPECT_EQ(LstatErrno(M(lower::kLibDir)), ENOENT);
  EXPECT_EQ(ListOf(M("src")), Names{"top.txt"});
  EXPECT_EQ(ContentOf(M("lib-moved/util/deep/leaf.txt")),
            lower::kDeepFileContent);
  // The moved tree is fully usable: new files, deletions.
  ASSERT_TRUE(WriteFile(M("lib-moved/util/new.txt"), "n"));
  ASSERT_SYS_OK(::unlink(M("lib-moved/core.txt").c_str()));
  EXPECT_EQ(ListOf(M("lib-moved")), (Names{".hidden", "util"}));
  EXPECT_TRUE(Exists(L("src/lib/core.txt")));
}

TEST_F(Rename, MergedDirectoryCarriesWhiteoutsAndNewFiles) {
  ASSERT_SYS_OK(::unlink(M("src/lib/core.txt").c_str()));
  ASSERT_TRUE(WriteFile(M("src/lib/new.txt"), "new\n"));
  ASSERT_TRUE(AppendFile(M("src/lib/util/helper.txt"), "more\n"));
  ASSERT_SYS_OK(RenamePaths(M(lower::kLibDir), M("lib2")));
  EXPECT_EQ(ListOf(M("lib2")), (Names{".hidden", "new.txt", "util"}));
  EXPECT_EQ(ContentOf(M("lib2/util/helper.txt")), "helper\nmore\n");
  EXPECT_EQ(ContentOf(M("lib2/util/deep/leaf.txt")), lower::kDeepFileContent);
  ASSERT_TRUE(sandbox().Unmount());
  ASSERT_TRUE(sandbox().Remount());
  EXPECT_EQ(ListOf(M("lib2")), (Names{".hidden", "new.txt", "util"}));
  EXPECT_EQ(LstatErrno(M(lower::kLibDir)), ENOENT);
}

TEST_F(Rename, LowerDirectoryOverEmptyLowerDirectory) {
  ASSERT_SYS_OK(RenamePaths(M(lower::kLibDir), M(lower::kEmptyDir)));
  EXPECT_EQ(ListOf(M(lower::kEmptyDir)),
            (Names{".hidden", "core.txt", "util"}));
  EXPECT_EQ(LstatErrno(M(lower::kLibDir)), ENOENT);
}

TEST_F(Rename, DirectoryOntoNonEmptyDirectoryFails) {
  EXPECT_SYS_ERRNO(RenamePaths(M(lower::kLibDir), M(lower::kDocsDir)),
                   ENOTEMPTY);
  EXPECT_EQ(ListOf(M(lower::kLibDir)), (Names{".hidden", "core.txt", "util"}));
}

TEST_F(Rename, FileOntoDirectoryFailsWithEisdir) {
  EXPECT_SYS_ERRNO(RenamePaths(M(lower::kFileA), M(lower::kEmptyDir)), EISDIR);
  EXPECT_EQ(ContentOf(M(lower::kFileA)), lower::kFileAContent);
}

TEST_F(Rename, NoReplaceFailsWithEexistOnAnExistingName) {
  EXPECT_SYS_ERRNO(
      Renameat2(M(lower::kFileA), M(lower::kFileB), RENAME_NOREPLACE), EEXIST);
  EXPECT_EQ(ContentOf(M(lower::kFileA)), lower::kFileAContent);
  EXPECT_EQ(ContentOf(M(lower::kFileB)), lower::kFileBContent);
  EXPECT_SYS_ERRNO(
      Renameat2(M(lower::kLibDir), M(lower::kEmptyDir), RENAME_NOREPLACE),
      EEXIST);
}

TEST_F(Rename, NoReplaceSucceedsOverADeletedLowerName) {
  ASSERT_SYS_OK(::unlink(M(lower::kFileB).c_str()));
  ASSERT_SYS_OK(
      Renameat2(M(lower::kFileA), M(lower::kFileB), RENAME_NOREPLACE));
  EXPECT_EQ(ContentOf(M(lower::kFileB)), lower::kFileAContent);
  EXPECT_EQ(LstatErrno(M(lower::kFileA)), ENOENT);
}

TEST_F(Rename, ExchangeSwapsTwoLowerFiles) {
  ASSERT_SYS_OK(Renameat2(M(lower::kFileA), M(lower::kFileB), RENAME_EXCHANGE));
  EXPECT_EQ(ContentOf(M(lower::kFileA)), lower::kFileBContent);
  EXPECT_EQ(ContentOf(M(lower::kFileB)), lower::kFileAContent);
  EXPECT_EQ(ContentOf(L(lower::kFileA)), lower::kFileAContent);
}

TEST_F(Rename, ExchangeLowerFileWithLowerDirectory) {
  ASSERT_SYS_OK(
      Renameat2(M(lower::kFileA), M(lower::kLibDir), RENAME_EXCHANGE));
  EXPECT_EQ(ContentOf(M(lower::kLibDir)), lower::kFileAContent);
  EXPECT_EQ(ListOf(M(lower::kFileA)), (Names{".hidden", "core.txt", "util"}));
  EXPECT_EQ(ContentOf(M("docs/a.txt/util/deep/leaf.txt")),
            lower::kDeepFileContent);
}

TEST_F(Rename, ExchangeWithMissingNameFailsWithEnoent) {
  EXPECT_SYS_ERRNO(
      Renameat2(M(lower::kFileA), M("docs/missing"), RENAME_EXCHANGE), ENOENT);
}

TEST_F(Rename, NeverReturnsExdev) {
  struct Move {
    const char* from;
    const char* to;
  };
  const Move kMoves[] = {
      {"src", "docs/src-moved"},          // lower dir into another lower dir
      {"links", "emptydir/links"},        // dir holding symlinks
      {"special", "special2"},            // dir holding a fifo
      {lower::kHardLinkA, "one-moved"},   // one name of a hard-linked pair
      {"hello", "docs/src-moved/hello"},  // into a just-moved directory
      {".git", "git-moved"},              // a big directory tree
  };
  for (const Move& m : kMoves) {
    int rc = RenamePaths(M(m.from), M(m.to));
    int err = rc == 0 ? 0 : errno;
    EXPECT_EQ(rc, 0) << m.from << " -> " << m.to << ": " << ErrnoName(err);
  }
  EXPECT_EQ(ContentOf(M("docs/src-moved/lib/util/deep/leaf.txt")),
            lower::kDeepFileContent);
  EXPECT_EQ(ReadLink(M("emptydir/links/to_file")), lower::kLinkToFileTarget);
  EXPECT_EQ(ContentOf(M("docs/src-moved/hello/main.c")).substr(0, 8),
            "#include");
  EXPECT_EQ(ContentOf(M("one-moved")), lower::kHardLinkContent);
  EXPECT_TRUE(Exists(M("git-moved/index")));
}

}  // namespace
}  // namespace acqfs::test
