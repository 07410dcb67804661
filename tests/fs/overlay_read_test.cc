// Tests of the Overlay engine's reading side: Lookup, GetAttr, Open, ReadDir,
// ReadLink, and the copy-up that a writable Open triggers.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "fs/copy_up.h"
#include "fs/overlay.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs::test::Exists;
using acqfs::test::ListDir;
using acqfs::test::Lstat;
using acqfs::test::MakeDeviceWhiteout;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::MakeSymlink;
using acqfs::test::ReadFile;
using acqfs::test::SetTimes;
using Strings = std::vector<std::string>;

class OverlayLookup : public acqfs::test::OverlayTest {};
class OverlayGetAttr : public acqfs::test::OverlayTest {};
class OverlayOpen : public acqfs::test::OverlayTest {};
class OverlayReadDir : public acqfs::test::OverlayTest {};
class OverlayReadLink : public acqfs::test::OverlayTest {};

TEST_F(OverlayLookup, FindsLowerFile) {
  MakeFile(t_.L("f"), "lower");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * n, ov_->Lookup(root(), "f"));
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->ino, Lstat(t_.L("f")).st_ino);
  EXPECT_EQ(n->type, static_cast<mode_t>(S_IFREG));
  EXPECT_FALSE(n->upper.load());
  EXPECT_EQ(ov_->PathOf(n), "f");
  ASSERT_OK_AND_ASSIGN(Node * again, ov_->Lookup(root(), "f"));
  EXPECT_EQ(again, n);
  EXPECT_TRUE(ListDir(t_.upper()).empty());  // a lookup writes nothing
}

TEST_F(OverlayLookup, FindsNestedLowerFile) {
  MakeDir(t_.L("a"));
  MakeDir(t_.L("a/b"));
  MakeFile(t_.L("a/b/c"), "deep");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * n, Walk("a/b/c"));
  EXPECT_EQ(ov_->PathOf(n), "a/b/c");
  EXPECT_EQ(n->ino, Lstat(t_.L("a/b/c")).st_ino);
  ASSERT_OK_AND_ASSIGN(Node * b, Walk("a/b"));
  EXPECT_TRUE(b->is_dir());
  EXPECT_TRUE(b->merged());
}

TEST_F(OverlayLookup, MissingNameIsENOENT) {
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "nope"));
}

TEST_F(OverlayLookup, WhiteoutInUpperHidesLowerFile) {
  MakeFile(t_.L("f"), "lower");
  MakeDeviceWhiteout(t_.U("f"));
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_ERRNO(ENOENT, ov_->Lookup(root(), "f"));
}

TEST_F(OverlayLookup, LookupBelowFileIsENOTDIR) {
  MakeFile(t_.L("f"), "lower");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  EXPECT_ERRNO(ENOTDIR, ov_->Lookup(f, "x"));
}

TEST_F(OverlayLookup, UpperFileShadowsLowerFile) {
  MakeFile(t_.L("f"), "lower");
  MakeFile(t_.U("f"), "upper!");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  EXPECT_TRUE(f->upper.load());
  EXPECT_EQ(ReadVia(f), "upper!");
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(f));
  EXPECT_EQ(st.st_size, 6);
}

TEST_F(OverlayGetAttr, ReportsLowerAttributesForUnchangedFile) {
  MakeFile(t_.L("f"), "twelve bytes", 0640);
  SetTimes(t_.L("f"), 1000000000, 42);
  ASSERT_NO_FATAL_FAILURE(Start());
  struct stat lst = Lstat(t_.L("f"));
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(f));
  EXPECT_EQ(st.st_ino, lst.st_ino);
  EXPECT_EQ(st.st_size, 12);
  EXPECT_EQ(st.st_mode, lst.st_mode);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 42);
  EXPECT_EQ(st.st_uid, lst.st_uid);
  EXPECT_FALSE(Exists(t_.U("f")));
}

TEST_F(OverlayGetAttr, RootReportsLowerRootInoAndOneLink) {
  MakeDir(t_.L("sub"));  // would give the lower root st_nlink 3
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(root()));
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_ino, Lstat(t_.lower()).st_ino);
  EXPECT_EQ(st.st_nlink, 1u);  // merged directories: link count unknown
}

TEST_F(OverlayOpen, ReadOnlyOpenReadsLowerWithoutCopyUp) {
  MakeFile(t_.L("f"), "lower data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  bool from_lower = false;
  EXPECT_EQ(ReadVia(f, &from_lower), "lower data");
  EXPECT_TRUE(from_lower);
  EXPECT_FALSE(f->upper.load());
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

TEST_F(OverlayOpen, ReadWriteOpenCopiesUpAndInoStaysTheSame) {
  MakeFile(t_.L("f"), "lower data", 0644);
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  ASSERT_OK_AND_ASSIGN(struct stat before, ov_->GetAttr(f));
  bool from_lower = true;
  ASSERT_OK_AND_ASSIGN(FileLease fd, OpenVia(f, O_RDWR, &from_lower));
  EXPECT_FALSE(from_lower);
  EXPECT_TRUE(f->upper.load());
  EXPECT_EQ(ReadFile(t_.U("f")), "lower data");
  ASSERT_EQ(::pwrite(fd.get(), "UPPER", 5, 0), 5);
  ov_->ReleaseOpen(f);
  EXPECT_EQ(ReadFile(t_.U("f")), "UPPER data");
  EXPECT_EQ(ReadFile(t_.L("f")), "lower data");
  ASSERT_OK_AND_ASSIGN(struct stat after, ov_->GetAttr(f));
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_ino, Lstat(t_.L("f")).st_ino);
  EXPECT_NE(Lstat(t_.U("f")).st_ino, after.st_ino);
  EXPECT_EQ(ReadVia(f), "UPPER data");
}

TEST_F(OverlayOpen, WriteOnlyOpenOfNestedFileCopiesUpParents) {
  MakeDir(t_.L("a"), 0711);
  MakeDir(t_.L("a/b"), 0750);
  MakeFile(t_.L("a/b/f"), "x");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, Walk("a/b/f"));
  bool from_lower = true;
  ASSERT_OK_AND_ASSIGN(FileLease fd, OpenVia(f, O_WRONLY, &from_lower));
  ov_->ReleaseOpen(f);
  EXPECT_EQ(Lstat(t_.U("a")).st_mode & 07777, 0711u);
  EXPECT_EQ(Lstat(t_.U("a/b")).st_mode & 07777, 0750u);
  EXPECT_EQ(ReadFile(t_.U("a/b/f")), "x");
  // The copied-up parents still merge with the lower.
  MakeFile(t_.L("a/b/late"), "");
  ASSERT_OK_AND_ASSIGN(Node * b, Walk("a/b"));
  EXPECT_EQ(ReadDirNames(b), (Strings{"f", "late"}));
}

TEST_F(OverlayOpen, TruncOpenCopiesUpAndTruncates) {
  MakeFile(t_.L("f"), "lower data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  bool from_lower = true;
  ASSERT_OK_AND_ASSIGN(FileLease fd,
                       OpenVia(f, O_WRONLY | O_TRUNC, &from_lower));
  ov_->ReleaseOpen(f);
  EXPECT_EQ(Lstat(t_.U("f")).st_size, 0);
  EXPECT_EQ(ReadFile(t_.L("f")), "lower data");
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(f));
  EXPECT_EQ(st.st_size, 0);
}

TEST_F(OverlayOpen, InterruptedCopyUpFailsOpenAndLeavesNoUpperFile) {
  MakeFile(t_.L("f"), "lower data");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * f, ov_->Lookup(root(), "f"));
  SetCopyUpHookForTesting(
      [](const std::string&) -> Status { return Error::Of(EIO, "hook", ""); });
  bool from_lower = false;
  auto fd = OpenVia(f, O_RDWR, &from_lower);
  SetCopyUpHookForTesting(nullptr);
  EXPECT_ERRNO(EIO, fd);
  EXPECT_FALSE(f->upper.load());
  EXPECT_FALSE(Exists(t_.U("f")));
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
  // The engine is still usable and the next attempt succeeds.
  ASSERT_OK_AND_ASSIGN(FileLease fd2, OpenVia(f, O_RDWR, &from_lower));
  ov_->ReleaseOpen(f);
  EXPECT_EQ(ReadFile(t_.U("f")), "lower data");
}

TEST_F(OverlayReadDir, ListsMergedRootWithLowerInos) {
  MakeFile(t_.L("a"), "");
  MakeDir(t_.L("d"));
  MakeFile(t_.U("u"), "");
  MakeDeviceWhiteout(t_.U("gone"));
  MakeFile(t_.L("gone"), "");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(auto entries, ov_->ReadDir(root()));
  std::map<std::string, ListedEntry> m;
  for (const auto& e : entries) m.emplace(e.name, e);
  ASSERT_EQ(m.size(), 3u);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(m.at("a").ino, Lstat(t_.L("a")).st_ino);
  EXPECT_EQ(m.at("a").type, DT_REG);
  EXPECT_EQ(m.at("d").ino, Lstat(t_.L("d")).st_ino);
  EXPECT_EQ(m.at("d").type, DT_DIR);
  EXPECT_EQ(m.at("u").type, DT_REG);
  EXPECT_EQ(m.count("gone"), 0u);
}

TEST_F(OverlayReadDir, InosMatchGetAttr) {
  MakeFile(t_.L("a"), "");
  MakeFile(t_.U("u"), "");
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(auto entries, ov_->ReadDir(root()));
  ASSERT_EQ(entries.size(), 2u);
  for (const auto& e : entries) {
    ASSERT_OK_AND_ASSIGN(Node * n, ov_->Lookup(root(), e.name));
    ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(n));
    EXPECT_EQ(st.st_ino, e.ino) << e.name;
  }
}

TEST_F(OverlayReadLink, ReadsLowerSymlinkTarget) {
  MakeSymlink("target/path", t_.L("ln"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(Node * ln, ov_->Lookup(root(), "ln"));
  EXPECT_EQ(ln->type, static_cast<mode_t>(S_IFLNK));
  ASSERT_OK_AND_ASSIGN(std::string target, ov_->ReadLink(ln));
  EXPECT_EQ(target, "target/path");
}

}  // namespace
}  // namespace acqfs
