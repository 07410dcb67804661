// Kept data (fs/kept_data.h): a file that loses its last name while the
// kernel may still use it keeps its data until the kernel forgets it and
// releases its handles, in both file modes: any node the kernel still knows
// may be open, or be opened (a reopen through /proc/PID/fd), and in the
// handles mode a counted open (Open/AddOpen) keeps it past the FORGET.
// The data is kept by a descriptor within the budget and under acqfs-tmp
// beyond it, so the descriptors held never pass the budget; a lower file is
// kept by its path until something changes it, then copied. The tests run
// every way a file loses its name: unlink, rename over it, a whiteout over a
// copied-up file, and the removal of its directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "fs/overlay.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs::test::Exists;
using acqfs::test::ListDir;
using acqfs::test::MakeDir;
using acqfs::test::ReadFile;

class OverlayUnlinked : public acqfs::test::OverlayTest {
 protected:
  // Starts the engine with `kept` descriptors for kept data.
  void StartHandleLess(size_t kept) {
    ASSERT_NO_FATAL_FAILURE(Start());
    ov_->SetDescriptorBudget(64, kept);
  }
  // Creates `name` in `dir` with `data`, looked up once, the CREATE's
  // handle released (as the kernel holds a file after `echo > name`).
  Node* MakeFile(Node* dir, const std::string& name, const std::string& data) {
    auto made =
        ov_->Create(dir, name, 0644, O_WRONLY, Creds{::getuid(), ::getgid()});
    EXPECT_TRUE(made.ok()) << made.error().Message();
    if (!made) return nullptr;
    EXPECT_EQ(::pwrite(made->second.get(), data.data(), data.size(), 0),
              static_cast<ssize_t>(data.size()));
    ov_->ReleaseOpen(made->first);
    return made->first;
  }
  // What the kernel's READ of the node returns: the file cache's descriptor,
  // evicted first so the data is reached afresh from the node.
  std::string ReadNow(Node* node) {
    ov_->ShrinkFiles(0);
    auto f = ov_->FileFor(node, false);
    EXPECT_TRUE(f.ok()) << f.error().Message();
    if (!f) return "";
    return ReadAll(f->get());
  }
  Status WriteNow(Node* node, const std::string& data, off_t off) {
    ov_->ShrinkFiles(0);
    auto f = ov_->FileFor(node, true);
    if (!f) return f.error();
    if (::pwrite(f->get(), data.data(), data.size(), off) !=
        static_cast<ssize_t>(data.size()))
      return Error::Errno("pwrite", "test");
    return Ok();
  }
  size_t TmpEntries() { return ListDir(t_.tmp()).size(); }
};

TEST_F(OverlayUnlinked, WithinTheBudgetADescriptorKeepsTheData) {
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(4));
  Node* f = MakeFile(root(), "f", "kept data");
  ASSERT_NE(f, nullptr);
  ASSERT_OK(ov_->Unlink(root(), "f"));
  EXPECT_FALSE(Exists(t_.U("f")));
  EXPECT_EQ(TmpEntries(), 0u);  // nothing parked
  EXPECT_EQ(ov_->kept_descriptors(), 1u);
  EXPECT_EQ(ReadNow(f), "kept data");
  ASSERT_OK(WriteNow(f, "K", 0));
  EXPECT_EQ(ReadNow(f), "Kept data");
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(f));
  EXPECT_EQ(st.st_size, 9);
  ov_->Forget(f, 1);
  EXPECT_EQ(ov_->kept_descriptors(), 0u);
}

TEST_F(OverlayUnlinked, BeyondTheBudgetTheDataIsParkedInAcqfsTmp) {
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(1));
  Node* a = MakeFile(root(), "a", "first");
  Node* b = MakeFile(root(), "b", "second");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK(ov_->Unlink(root(), "a"));  // takes the one descriptor
  ASSERT_OK(ov_->Unlink(root(), "b"));  // parked
  EXPECT_EQ(TmpEntries(), 1u);
  EXPECT_EQ(ov_->kept_descriptors(), 1u);
  EXPECT_EQ(ReadNow(a), "first");
  EXPECT_EQ(ReadNow(b), "second");
  // FORGET frees both: the parked copy goes, and the descriptor budget
  // comes back for the next file.
  ov_->Forget(b, 1);
  ov_->Forget(a, 1);
  EXPECT_EQ(TmpEntries(), 0u);
  Node* c = MakeFile(root(), "c", "third");
  ASSERT_NE(c, nullptr);
  ASSERT_OK(ov_->Unlink(root(), "c"));
  EXPECT_EQ(TmpEntries(), 0u);
  EXPECT_EQ(ReadNow(c), "third");
  ov_->Forget(c, 1);
}

// Many more unlinked-but-held files than the budget: the descriptors held
// stay at the budget and every file keeps its own data.
TEST_F(OverlayUnlinked, DescriptorsNeverPassTheBudget) {
  constexpr size_t kBudget = 8;
  constexpr int kFiles = 200;
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(kBudget));
  std::vector<Node*> nodes;
  for (int i = 0; i < kFiles; i++) {
    std::string name = "f" + std::to_string(i);
    nodes.push_back(MakeFile(root(), name, "data " + std::to_string(i)));
    ASSERT_NE(nodes.back(), nullptr);
    ASSERT_OK(ov_->Unlink(root(), name));
    EXPECT_LE(ov_->kept_descriptors(), kBudget);
  }
  EXPECT_EQ(TmpEntries(), kFiles - kBudget);
  for (int i = 0; i < kFiles; i++)
    EXPECT_EQ(ReadNow(nodes[i]), "data " + std::to_string(i));
  for (Node* n : nodes) ov_->Forget(n, 1);
  EXPECT_EQ(TmpEntries(), 0u);
  EXPECT_EQ(ov_->kept_descriptors(), 0u);
}

TEST_F(OverlayUnlinked, FileRenamedOverKeepsItsData) {
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(0));  // kept in acqfs-tmp
  Node* old_file = MakeFile(root(), "tool", "old build");
  Node* fresh = MakeFile(root(), "tool.tmp", "new build");
  ASSERT_NE(old_file, nullptr);
  ASSERT_NE(fresh, nullptr);
  ASSERT_OK(ov_->Rename(root(), "tool.tmp", root(), "tool", 0));
  EXPECT_EQ(ReadFile(t_.U("tool")), "new build");
  EXPECT_EQ(ReadNow(old_file), "old build");
  ASSERT_OK(WriteNow(old_file, "OLD", 0));
  EXPECT_EQ(ReadNow(old_file), "OLD build");
  EXPECT_EQ(ReadFile(t_.U("tool")), "new build");
  ov_->Forget(old_file, 1);
  EXPECT_EQ(TmpEntries(), 0u);
}

TEST_F(OverlayUnlinked, CopiedUpFileUnderAWhiteoutKeepsItsData) {
  acqfs::test::MakeFile(t_.L("c"), "lower");
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(4));
  ASSERT_OK_AND_ASSIGN(Node * c, ov_->Lookup(root(), "c"));
  ASSERT_OK(WriteNow(c, "UPPER", 0));  // copies it up
  ASSERT_OK(ov_->Unlink(root(), "c"));
  EXPECT_TRUE(S_ISCHR(acqfs::test::Lstat(t_.U("c")).st_mode));  // a whiteout
  EXPECT_EQ(ReadNow(c), "UPPER");
  EXPECT_EQ(ReadFile(t_.L("c")), "lower");
  ov_->Forget(c, 1);
}

// A lower file the kernel holds is kept by its path; the first change makes
// a copy in acqfs-tmp (the host's file is never written), and reads follow
// the copy. This used to fail with ESTALE.
TEST_F(OverlayUnlinked, LowerFileDeletedThenWrittenGetsACopyOfItsOwn) {
  acqfs::test::MakeFile(t_.L("l"), "lower bytes");
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(4));
  ASSERT_OK_AND_ASSIGN(Node * l, ov_->Lookup(root(), "l"));
  EXPECT_EQ(ReadNow(l), "lower bytes");
  ASSERT_OK(ov_->Unlink(root(), "l"));
  EXPECT_EQ(TmpEntries(), 0u);  // nothing copied yet
  EXPECT_EQ(ReadNow(l), "lower bytes");
  // A reader that opened the lower before the write sees it too.
  ASSERT_OK_AND_ASSIGN(FileLease before, ov_->FileFor(l, false));
  EXPECT_TRUE(before->from_lower);
  ASSERT_OK(WriteNow(l, "LOWER", 0));
  EXPECT_EQ(TmpEntries(), 1u);
  ASSERT_OK_AND_ASSIGN(FileLease after, ov_->FileFor(l, false));
  EXPECT_FALSE(after->from_lower);
  EXPECT_EQ(ReadAll(after.get()), "LOWER bytes");
  EXPECT_EQ(ReadFile(t_.L("l")), "lower bytes");
  before.reset();
  after.reset();
  ov_->Forget(l, 1);
  EXPECT_EQ(TmpEntries(), 0u);
}

// Within the budget a kept lower file is held by its inode: the host
// deleting or replacing the file meanwhile does not change what the
// sandbox's open file reads, nor the copy its first write makes.
TEST_F(OverlayUnlinked, KeptLowerFileSurvivesTheHostReplacingIt) {
  acqfs::test::MakeFile(t_.L("h"), "original");
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(4));
  ASSERT_OK_AND_ASSIGN(Node * h, ov_->Lookup(root(), "h"));
  ASSERT_OK(ov_->Unlink(root(), "h"));
  EXPECT_EQ(ov_->kept_descriptors(), 1u);
  // The host replaces its file (as git checkout does: a new inode).
  acqfs::test::MakeFile(t_.L("h.new"), "replaced by the host");
  ASSERT_EQ(::rename(t_.L("h.new").c_str(), t_.L("h").c_str()), 0);
  EXPECT_EQ(ReadNow(h), "original");
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(h));
  EXPECT_EQ(st.st_size, 8);
  ASSERT_OK(WriteNow(h, "O", 0));
  EXPECT_EQ(ReadNow(h), "Original");
  EXPECT_EQ(ReadFile(t_.L("h")), "replaced by the host");
  ov_->Forget(h, 1);
  EXPECT_EQ(ov_->kept_descriptors(), 0u);
  EXPECT_EQ(TmpEntries(), 0u);
}

TEST_F(OverlayUnlinked, MetadataOfAnUnlinkedFileChangesItsKeptCopyOnly) {
  acqfs::test::MakeFile(t_.L("m"), "lower", 0644);
  acqfs::test::SetXattr(t_.L("m"), "user.from", "lower");
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(4));
  ASSERT_OK_AND_ASSIGN(Node * m, ov_->Lookup(root(), "m"));
  ASSERT_OK(ov_->Unlink(root(), "m"));
  SetAttrRequest chmod;
  chmod.set_mode = true;
  chmod.mode = 0600;
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->SetAttr(m, chmod, -1));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  SetAttrRequest trunc;
  trunc.set_size = true;
  trunc.size = 2;
  ASSERT_OK(ov_->SetAttr(m, trunc, -1));
  ASSERT_OK(ov_->SetXattr(m, "user.k", "v", 0));
  ASSERT_OK_AND_ASSIGN(std::string v, ov_->GetXattr(m, "user.k"));
  EXPECT_EQ(v, "v");
  ASSERT_OK_AND_ASSIGN(std::string from, ov_->GetXattr(m, "user.from"));
  EXPECT_EQ(from, "lower") << "the copy keeps the lower file's xattrs";
  EXPECT_EQ(ReadNow(m), "lo");
  EXPECT_EQ(acqfs::test::Lstat(t_.L("m")).st_mode & 07777, 0644u);
  EXPECT_EQ(ReadFile(t_.L("m")), "lower");
  EXPECT_FALSE(acqfs::test::GetXattr(t_.L("m"), "user.k").has_value());
  ov_->Forget(m, 1);
}

TEST_F(OverlayUnlinked, FileOfARemovedDirectoryKeepsItsData) {
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(0));
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Mkdir(root(), "d", 0755, Creds{}));
  Node* f = MakeFile(d, "f", "in d");
  ASSERT_NE(f, nullptr);
  ASSERT_OK(ov_->Unlink(d, "f"));
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  EXPECT_FALSE(Exists(t_.U("d")));
  EXPECT_EQ(ReadNow(f), "in d");
  ov_->Forget(f, 1);
  ov_->Forget(d, 1);
  EXPECT_EQ(TmpEntries(), 0u);
}

// A file the kernel no longer knows goes at once (no descriptor, nothing in
// acqfs-tmp); one it knows keeps its data until its FORGET, and one with a
// counted open until the RELEASE after that.
TEST_F(OverlayUnlinked, OnlyFilesTheKernelKnowsOrHoldsOpenAreKept) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ov_->SetDescriptorBudget(64, 0);
  Node* open = MakeFile(root(), "open", "held");
  Node* known = MakeFile(root(), "known", "looked up");
  Node* forgotten = MakeFile(root(), "forgotten", "not held");
  ASSERT_NE(open, nullptr);
  ASSERT_NE(known, nullptr);
  ASSERT_NE(forgotten, nullptr);
  ov_->Forget(forgotten, 1);
  ASSERT_OK_AND_ASSIGN(FileLease held, ov_->Open(open, O_RDONLY));
  held.reset();
  ASSERT_OK(ov_->Unlink(root(), "forgotten"));
  EXPECT_EQ(TmpEntries(), 0u);
  ASSERT_OK(ov_->Unlink(root(), "known"));
  EXPECT_EQ(TmpEntries(), 1u);
  // Opened only now, as a reopen through /proc/PID/fd makes the kernel do.
  ASSERT_OK_AND_ASSIGN(FileLease late, ov_->Open(known, O_RDWR));
  late.reset();
  EXPECT_EQ(ReadNow(known), "looked up");
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(known));
  EXPECT_EQ(st.st_nlink, 0u);
  ov_->ReleaseOpen(known);
  ov_->Forget(known, 1);
  EXPECT_EQ(TmpEntries(), 0u);
  ASSERT_OK(ov_->Unlink(root(), "open"));
  EXPECT_EQ(TmpEntries(), 1u);
  ov_->Forget(open, 1);  // the FORGET first: the handle still holds it
  EXPECT_EQ(TmpEntries(), 1u);
  EXPECT_EQ(ReadNow(open), "held");
  ov_->ReleaseOpen(open);
  EXPECT_EQ(TmpEntries(), 0u);
}

// The file cache holds at most its capacity; an evicted node is opened
// again by its path, wherever it was renamed meanwhile.
TEST_F(OverlayUnlinked, FileCacheStaysWithinItsCapacity) {
  ASSERT_NO_FATAL_FAILURE(StartHandleLess(4));
  ov_->SetDescriptorBudget(3, 4);
  std::vector<Node*> nodes;
  for (int i = 0; i < 20; i++) {
    nodes.push_back(MakeFile(root(), "n" + std::to_string(i),
                             "content " + std::to_string(i)));
    ASSERT_NE(nodes.back(), nullptr);
    EXPECT_LE(ov_->cached_files(), 3u);
  }
  ASSERT_OK(ov_->Rename(root(), "n0", root(), "renamed", 0));
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 20; i++) {
      ASSERT_OK_AND_ASSIGN(FileLease f, ov_->FileFor(nodes[i], false));
      EXPECT_EQ(ReadAll(f.get()), "content " + std::to_string(i));
      EXPECT_LE(ov_->cached_files(), 3u);
    }
  }
  for (Node* n : nodes) ov_->Forget(n, 1);
  EXPECT_EQ(ov_->cached_files(), 0u);
}

// Kept data counts against the quota until it goes, then is given back.
TEST_F(OverlayUnlinked, KeptDataIsChargedUntilItGoes) {
  ASSERT_OK_AND_ASSIGN(Policy p, Policy::Make({}, {}, 1 << 20));
  ASSERT_NO_FATAL_FAILURE(
      Start(XattrNamespace::kUser, std::make_shared<const Policy>(p)));
  ov_->SetDescriptorBudget(64, 4);
  const uint64_t empty = ov_->quota()->used();
  Node* f = MakeFile(root(), "f", "");
  ASSERT_NE(f, nullptr);
  // A write as the FUSE adapter makes it, through the quota.
  std::string data(100000, 'x');
  ASSERT_OK_AND_ASSIGN(FileLease w, ov_->FileFor(f, true));
  ASSERT_OK(ov_->quota()->Charged(
      &f->charged, w.get(), Quota::Charge::Span(0, data.size()),
      [&]() -> int64_t {
        return ::pwrite(w.get(), data.data(), data.size(), 0);
      },
      "f"));
  struct stat st;
  ASSERT_EQ(::fstat(w.get(), &st), 0);
  w.reset();
  const uint64_t blocks = Quota::Bytes(st);
  EXPECT_GE(blocks, data.size());
  uint64_t before = ov_->quota()->used();
  EXPECT_GE(before, empty + blocks);
  ASSERT_OK(ov_->Unlink(root(), "f"));
  EXPECT_EQ(ov_->quota()->used(), before);  // the kernel may still hold it
  ov_->Forget(f, 1);
  EXPECT_EQ(ov_->quota()->used(), before - blocks);
}

}  // namespace
}  // namespace acqfs
