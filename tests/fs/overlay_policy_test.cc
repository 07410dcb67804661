// The policy inside the engine, without FUSE: hidden lower objects, EROFS
// for read-only paths, and the quota's charges and refunds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "fs/boundary_note.h"
#include "fs/change_scan.h"
#include "fs/overlay.h"
#include "fs/policy.h"
#include "fs/quota.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs::test::DescribeTree;
using acqfs::test::Exists;
using acqfs::test::ListDir;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::ReadFile;
using Strings = std::vector<std::string>;

std::shared_ptr<const Policy> MakePolicy(const Strings& hide,
                                         const Strings& read_only,
                                         uint64_t quota) {
  auto p = Policy::Make(hide, read_only, quota);
  EXPECT_TRUE(p.ok());
  return p ? std::make_shared<Policy>(std::move(*p)) : nullptr;
}

class OverlayPolicy : public acqfs::test::OverlayTest {};

TEST_F(OverlayPolicy, HiddenLowerObjectsAreAbsent) {
  MakeFile(t_.L(".env"), "secret");
  MakeDir(t_.L("keys"));
  MakeFile(t_.L("keys/a"), "secret");
  MakeFile(t_.L("ok.txt"), "ok");
  ASSERT_NO_FATAL_FAILURE(
      Start(XattrNamespace::kUser, MakePolicy({".env", "keys/"}, {}, 0)));
  EXPECT_EQ(ov_->Lookup(root(), ".env").err(), ENOENT);
  EXPECT_EQ(ov_->Lookup(root(), "keys").err(), ENOENT);
  EXPECT_EQ(ReadDirNames(root()), Strings{"ok.txt"});
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(root()));
  EXPECT_EQ(st.st_nlink, 1u);
  // A new object of a hidden name is the sandbox's own.
  ASSERT_OK_AND_ASSIGN(auto made, ov_->Create(root(), ".env", 0600, O_WRONLY,
                                              Creds{::getuid(), ::getgid()}));
  ASSERT_EQ(::write(made.second.get(), "mine", 4), 4);
  EXPECT_EQ(ReadFile(t_.U(".env")), "mine");
  // The change scan never reports hidden paths, the sandbox's own included.
  ASSERT_OK_AND_ASSIGN(auto changes, ScanChanges(ov_->layers()));
  EXPECT_TRUE(changes.empty());
}

TEST_F(OverlayPolicy, ReadOnlyPathsRefuseChangesAndCopyNothingUp) {
  MakeFile(t_.L("Makefile"), "all:");
  MakeDir(t_.L("vendor"));
  MakeFile(t_.L("vendor/x.c"), "x");
  ASSERT_NO_FATAL_FAILURE(Start(XattrNamespace::kUser,
                                MakePolicy({}, {"/Makefile", "vendor/"}, 0)));
  ASSERT_OK_AND_ASSIGN(Node * mk, ov_->Lookup(root(), "Makefile"));
  ASSERT_OK_AND_ASSIGN(Node * vendor, ov_->Lookup(root(), "vendor"));
  SetAttrRequest chmod;
  chmod.set_mode = true;
  chmod.mode = 0600;
  EXPECT_EQ(ov_->SetAttr(mk, chmod, -1).err(), EROFS);
  EXPECT_EQ(ov_->SetXattr(mk, "user.k", "v", 0).err(), EROFS);
  bool from_lower = false;
  EXPECT_EQ(OpenVia(mk, O_WRONLY, &from_lower).err(), EROFS);
  EXPECT_EQ(ov_->CopyUp(mk).err(), EROFS);
  EXPECT_EQ(ov_->Unlink(root(), "Makefile").err(), EROFS);
  EXPECT_EQ(ov_->Rename(root(), "Makefile", root(), "M2", 0).err(), EROFS);
  EXPECT_EQ(ov_->Link(mk, root(), "M3").err(), EROFS);
  EXPECT_EQ(ov_->Mkdir(vendor, "d", 0755, Creds{::getuid(), ::getgid()}).err(),
            EROFS);
  EXPECT_EQ(ov_->Rename(root(), "vendor", root(), "v2", 0).err(), EROFS);
  // Reading still works.
  ASSERT_OK_AND_ASSIGN(FileLease fd, OpenVia(mk, O_RDONLY, &from_lower));
  EXPECT_TRUE(from_lower);
  EXPECT_TRUE(ListDir(t_.upper()).empty());
}

// Each refusal by a boundary leaves a note of which one (for the audit
// log, fs/boundary_note.h); an error that is no refusal leaves none.
TEST_F(OverlayPolicy, EachRefusalNotesItsBoundary) {
  MakeFile(t_.L(".env"), "secret");
  MakeFile(t_.L("Makefile"), "all:");
  ASSERT_NO_FATAL_FAILURE(
      Start(XattrNamespace::kUser, MakePolicy({".env"}, {"/Makefile"}, 0)));
  ClearBoundaryNote();
  EXPECT_EQ(ov_->Lookup(root(), "absent").err(), ENOENT);
  EXPECT_EQ(TakeBoundaryNote().boundary, nullptr);
  EXPECT_EQ(ov_->Lookup(root(), ".env").err(), ENOENT);
  BoundaryNote hidden = TakeBoundaryNote();
  ASSERT_NE(hidden.boundary, nullptr);
  EXPECT_STREQ(hidden.boundary, kRefusedHidden);
  EXPECT_EQ(hidden.rel, ".env");
  EXPECT_EQ(TakeBoundaryNote().boundary, nullptr) << "a note is taken once";
  ASSERT_OK_AND_ASSIGN(Node * mk, ov_->Lookup(root(), "Makefile"));
  ClearBoundaryNote();
  EXPECT_EQ(ov_->Unlink(root(), "Makefile").err(), EROFS);
  BoundaryNote ro = TakeBoundaryNote();
  ASSERT_NE(ro.boundary, nullptr);
  EXPECT_STREQ(ro.boundary, kRefusedReadOnly);
  EXPECT_EQ(ro.rel, "Makefile");
  (void)mk;
  EXPECT_EQ(
      ov_->Mknod(root(), "wh", S_IFCHR | 0600, 0, Creds{::getuid(), ::getgid()})
          .err(),
      EPERM);
  BoundaryNote special = TakeBoundaryNote();
  ASSERT_NE(special.boundary, nullptr);
  EXPECT_STREQ(special.boundary, kRefusedSpecial);
  EXPECT_EQ(special.rel, "wh");
}

class OverlayQuota : public acqfs::test::OverlayTest {
 protected:
  void StartWithQuota(uint64_t limit) {
    ASSERT_NO_FATAL_FAILURE(
        Start(XattrNamespace::kUser, MakePolicy({}, {}, limit)));
    ASSERT_NE(ov_->quota(), nullptr);
  }
  // What the upper layer and acqfs-tmp hold on disk.
  uint64_t OnDisk() {
    return acqfs::test::DiskUsage(t_.upper()) +
           acqfs::test::DiskUsage(t_.tmp());
  }
  uint64_t Used() { return ov_->quota()->used(); }
  // A data call as the FUSE adapter makes it: through Quota::Charged.
  Result<int64_t> Charged(Node* node, Quota::Charge charge,
                          const std::function<int64_t(int fd)>& op) {
    auto f = ov_->FileFor(node, true);
    if (!f) return f.error();
    int fd = f->get();
    return ov_->quota()->Charged(
        &node->charged, fd, charge, [&] { return op(fd); }, "test");
  }
  Result<int64_t> Write(Node* node, off_t off, size_t len) {
    std::string data(len, 'w');
    return Charged(node, Quota::Charge::Span(off, len), [&](int fd) {
      ssize_t n = ::pwrite(fd, data.data(), data.size(), off);
      return n < 0 ? -errno : n;
    });
  }
  Result<int64_t> Fallocate(Node* node, int mode, off_t off, off_t len) {
    return Charged(node, Quota::Charge::Span(off, len), [&](int fd) {
      return ::fallocate(fd, mode, off, len) == 0 ? 0 : -errno;
    });
  }
};

// The count is what the upper layer holds on disk (du), after every kind
// of change, and what a change would pass the quota by is refused.
TEST_F(OverlayQuota, CountsTheBlocksTheUpperHolds) {
  MakeFile(t_.L("a"), std::string(80 << 10, 'a'));
  MakeFile(t_.L("b"), std::string(320 << 10, 'b'));
  MakeDir(t_.L("tree"));
  MakeFile(t_.L("tree/f1"), std::string(40 << 10, '1'));
  MakeFile(t_.L("tree/f2"), std::string(40 << 10, '2'));
  MakeFile(t_.U("existing"), std::string(10 << 10, 'e'));  // counted at start
  ASSERT_NO_FATAL_FAILURE(StartWithQuota(400 << 10));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK_AND_ASSIGN(Node * a, ov_->Lookup(root(), "a"));
  ASSERT_OK_AND_ASSIGN(Node * b, ov_->Lookup(root(), "b"));
  ASSERT_OK(ov_->CopyUp(a));
  EXPECT_EQ(Used(), OnDisk());
  // 320 KiB more would pass 400 KiB: refused, nothing left behind.
  EXPECT_EQ(ov_->CopyUp(b).err(), EDQUOT);
  EXPECT_FALSE(Exists(t_.U("b")));
  EXPECT_EQ(Used(), OnDisk());
  // A truncate gives blocks back; one that makes a hole takes none.
  SetAttrRequest size;
  size.set_size = true;
  size.size = 20 << 10;
  ASSERT_OK(ov_->SetAttr(a, size, -1));
  EXPECT_EQ(Used(), OnDisk());
  size.size = 1 << 30;
  ASSERT_OK(ov_->SetAttr(a, size, -1));
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_LT(Used(), 100u << 10);
  // Writes and preallocation (KEEP_SIZE too) take blocks.
  ASSERT_OK_AND_ASSIGN(int64_t n, Write(a, 500 << 10, 8192));
  EXPECT_EQ(n, 8192);
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK_AND_ASSIGN(int64_t r,
                       Fallocate(a, FALLOC_FL_KEEP_SIZE, 2 << 20, 64 << 10));
  EXPECT_EQ(r, 0);
  EXPECT_EQ(Used(), OnDisk());
  uint64_t before = Used();
  EXPECT_EQ(Fallocate(a, FALLOC_FL_KEEP_SIZE, 4 << 20, 1 << 20).err(), EDQUOT);
  EXPECT_EQ(Used(), before);
  EXPECT_EQ(Used(), OnDisk());
  // Directories, long symlinks, xattrs.
  ASSERT_OK_AND_ASSIGN(Node * d, ov_->Mkdir(root(), "d", 0755, Me()));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK(ov_->Symlink(d, "l", std::string(300, 't'), Me()));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK_AND_ASSIGN(Node * e, ov_->Lookup(root(), "existing"));
  ASSERT_OK(ov_->SetXattr(e, "user.big", std::string(3000, 'x'), 0));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK(ov_->SetXattr(d, "user.big", std::string(3000, 'y'), 0));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK(ov_->RemoveXattr(e, "user.big"));
  EXPECT_EQ(Used(), OnDisk());
  // Renaming a merged directory copies what the lower holds of it (here
  // f3; f1 is in the upper already, f2 whited out) and replaces its upper
  // directory.
  MakeFile(t_.L("tree/f3"), std::string(40 << 10, '3'));
  ASSERT_OK_AND_ASSIGN(Node * f1, Walk("tree/f1"));
  ASSERT_OK(ov_->CopyUp(f1));
  ASSERT_OK_AND_ASSIGN(Node * tree, Walk("tree"));
  ASSERT_OK(ov_->Unlink(tree, "f2"));
  EXPECT_EQ(Used(), OnDisk());
  const uint64_t merged = Used();
  ASSERT_OK(ov_->Rename(root(), "tree", d, "tree2", 0));
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_GE(Used(), merged + (40u << 10));
  // Removals give back what they free, once nothing can reach the data (the
  // kernel forgets the node; until then the file cache may hold it).
  ASSERT_OK(ov_->Unlink(root(), "a"));
  ov_->Forget(a, 1);
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK_AND_ASSIGN(Node * t2, Walk("d/tree2"));
  ASSERT_OK(ov_->Unlink(t2, "f1"));
  ov_->Forget(f1, 1);
  ASSERT_OK(ov_->Unlink(t2, "f3"));
  ASSERT_OK(ov_->Rmdir(d, "tree2"));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK(ov_->CopyUp(b));  // fits now
  EXPECT_EQ(Used(), OnDisk());
  // A fresh engine measures the same.
  uint64_t kept = Used();
  ov_.reset();
  ASSERT_NO_FATAL_FAILURE(StartWithQuota(400 << 10));
  EXPECT_EQ(Used(), kept);
}

// Rename-over: the file renamed over is given back, when its data goes.
TEST_F(OverlayQuota, RenameOverGivesBackWhenTheDataGoes) {
  ASSERT_NO_FATAL_FAILURE(StartWithQuota(1 << 20));
  const uint64_t empty = Used();
  ASSERT_OK_AND_ASSIGN(auto x, ov_->Create(root(), "x", 0644, O_WRONLY, Me()));
  ASSERT_OK(Write(x.first, 0, 600 << 10));
  ASSERT_OK_AND_ASSIGN(auto y, ov_->Create(root(), "y", 0644, O_WRONLY, Me()));
  ASSERT_OK(Write(y.first, 0, 100 << 10));
  x.second.reset();
  y.second.reset();
  EXPECT_EQ(Used(), OnDisk());
  // x is still open: its data is kept, and counted.
  ASSERT_OK(ov_->Rename(root(), "y", root(), "x", 0));
  EXPECT_EQ(Used(), OnDisk() + (600u << 10));
  EXPECT_EQ(Write(y.first, 200 << 10, 400 << 10).err(), EDQUOT);
  ov_->ReleaseOpen(x.first);
  ov_->Forget(x.first, 1);  // the last holder goes
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK(Write(y.first, 200 << 10, 400 << 10));
  ov_->ReleaseOpen(y.first);
  ov_->Forget(y.first, 1);
  ASSERT_OK(ov_->Unlink(root(), "x"));
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_EQ(Used(), empty);
}

// A file with two names is counted once, and given back with its last name.
TEST_F(OverlayQuota, HardLinksCountOnceAndGoWithTheLastName) {
  ASSERT_NO_FATAL_FAILURE(StartWithQuota(1 << 20));
  const uint64_t empty = Used();
  ASSERT_OK_AND_ASSIGN(auto x, ov_->Create(root(), "x", 0644, O_WRONLY, Me()));
  ASSERT_OK(Write(x.first, 0, 300 << 10));
  x.second.reset();
  ov_->ReleaseOpen(x.first);
  ASSERT_OK(ov_->Link(x.first, root(), "y"));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK(ov_->Unlink(root(), "x"));
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_GE(Used(), empty + (300u << 10));
  ASSERT_OK(ov_->Unlink(root(), "y"));
  ov_->Forget(x.first, 2);
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_LT(Used(), empty + (300u << 10));
}

// A write into blocks the file already holds needs no room: an overwrite,
// or a write into preallocated space, works with the quota full.
TEST_F(OverlayQuota, OverwritesAndPreallocatedSpaceNeedNoRoom) {
  ASSERT_NO_FATAL_FAILURE(StartWithQuota(1 << 20));
  ASSERT_OK_AND_ASSIGN(auto f, ov_->Create(root(), "f", 0644, O_WRONLY, Me()));
  Node* n = f.first;
  f.second.reset();
  const off_t room = static_cast<off_t>((1u << 20) - Used()) / 4096 * 4096;
  ASSERT_OK(Write(n, 0, 256 << 10));
  ASSERT_OK(Fallocate(n, FALLOC_FL_KEEP_SIZE, 256 << 10, room - (256 << 10)));
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_GT(Used() + 4096, 1u << 20);
  EXPECT_EQ(Write(n, room, 4096).err(), EDQUOT);  // a new block
  ASSERT_OK(Write(n, 4096, 64 << 10));            // overwrite
  ASSERT_OK(Write(n, 300 << 10, 128 << 10));      // preallocated
  EXPECT_EQ(Used(), OnDisk());
  // Punching a hole gives room back.
  ASSERT_OK(Charged(n, Quota::Charge::Settled(), [&](int fd) {
    return ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                       128 << 10) == 0
               ? 0
               : -errno;
  }));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK(Write(n, room, 4096));
  ov_->ReleaseOpen(n);
}

// Kept data counts wherever it is kept (here in acqfs-tmp, past a budget
// of no descriptors), and is given back when the kernel forgets the node.
TEST_F(OverlayQuota, KeptDataCountsUntilTheKernelLetsGo) {
  MakeFile(t_.L("l"), std::string(100 << 10, 'l'));
  ASSERT_NO_FATAL_FAILURE(StartWithQuota(1 << 20));
  ov_->SetDescriptorBudget(64, 0);
  const uint64_t empty = Used();
  ASSERT_OK_AND_ASSIGN(auto a, ov_->Create(root(), "a", 0644, O_WRONLY, Me()));
  ASSERT_OK(Write(a.first, 0, 200 << 10));
  ASSERT_OK_AND_ASSIGN(auto b, ov_->Create(root(), "b", 0644, O_WRONLY, Me()));
  ASSERT_OK(Write(b.first, 0, 50 << 10));
  a.second.reset();
  b.second.reset();
  ov_->ReleaseOpen(a.first);
  ov_->ReleaseOpen(b.first);
  ASSERT_OK(ov_->Rename(root(), "b", root(), "a", 0));  // a: a link in tmp
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_GE(Used(), empty + (250u << 10));
  ASSERT_OK(ov_->Unlink(root(), "a"));  // b: renamed into tmp
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_GE(Used(), empty + (250u << 10));
  ov_->Forget(a.first, 1);
  ov_->Forget(b.first, 1);
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_LT(Used(), empty + (16u << 10));  // acqfs-tmp may have grown
  // A lower file unlinked while held costs nothing, until it is written:
  // then it gets a copy of its own in acqfs-tmp, charged.
  ASSERT_OK_AND_ASSIGN(Node * l, ov_->Lookup(root(), "l"));
  ASSERT_OK(ov_->Unlink(root(), "l"));
  EXPECT_EQ(Used(), OnDisk());
  ASSERT_OK(Write(l, 0, 10));
  EXPECT_EQ(Used(), OnDisk());
  EXPECT_GE(Used(), empty + (100u << 10));
  ov_->Forget(l, 1);
  EXPECT_EQ(Used(), OnDisk());
}

// Blocks the file system allocates on its own after a call (ext4 gives a
// file of many extents an extent block when it writes the data back) are
// charged when the daemon next sees the file; here, when the kernel forgets
// it. So the count never drifts from the disk.
TEST_F(OverlayQuota, GrowthBetweenCallsIsChargedWhenTheFileIsSeen) {
  ASSERT_NO_FATAL_FAILURE(StartWithQuota(4 << 20));
  ASSERT_OK_AND_ASSIGN(auto f, ov_->Create(root(), "f", 0644, O_WRONLY, Me()));
  Node* n = f.first;
  f.second.reset();
  ov_->ReleaseOpen(n);
  for (int i = 0; i < 12; i++) ASSERT_OK(Write(n, i * (64 << 10), 4096));
  EXPECT_EQ(Used(), OnDisk());
  {
    int fd = ::open(t_.U("f").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fsync(fd), 0);  // around the daemon
    ::close(fd);
  }
  const uint64_t grown = OnDisk();
  std::cout << "[ quota ] " << Used() << " counted, " << grown
            << " on disk after the write-back\n";
  ov_->Forget(n, 1);
  EXPECT_EQ(Used(), grown);
  // And a removal gives back all of it.
  ASSERT_OK(ov_->Unlink(root(), "f"));
  EXPECT_EQ(Used(), OnDisk());
}

TEST_F(OverlayQuota, AWriteItRefusesNotesTheQuota) {
  ASSERT_NO_FATAL_FAILURE(StartWithQuota(64 * 1024));
  ASSERT_OK_AND_ASSIGN(auto made, ov_->Create(root(), "big", 0600, O_WRONLY,
                                              Creds{::getuid(), ::getgid()}));
  ClearBoundaryNote();
  EXPECT_EQ(Write(made.first, 0, 1 << 20).err(), EDQUOT);
  BoundaryNote q = TakeBoundaryNote();
  ASSERT_NE(q.boundary, nullptr);
  EXPECT_STREQ(q.boundary, kRefusedQuota);
}

TEST(QuotaCharged, SettlesToTheBlocksTheCallAllocated) {
  acqfs::test::TempTree t;
  std::string path = t.upper() + "/f";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  Quota q(64 << 10, 0);
  uint64_t record = Quota::kUnseen;
  // Two bytes at 598: one block, whatever the apparent size.
  ASSERT_OK_AND_ASSIGN(
      int64_t r,
      q.Charged(
          &record, fd, Quota::Charge::Span(598, 2),
          [&]() -> int64_t { return ::pwrite(fd, "xy", 2, 598); }, path));
  EXPECT_EQ(r, 2);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(q.used(), Quota::Bytes(st));
  EXPECT_EQ(record, Quota::Bytes(st));
  // A call that may pass the limit is refused before it runs.
  bool ran = false;
  auto refused = q.Charged(
      &record, fd, Quota::Charge::Span(4096, 64 << 10),
      [&]() -> int64_t {
        ran = true;
        return 0;
      },
      path);
  EXPECT_EQ(refused.err(), EDQUOT);
  EXPECT_FALSE(ran);
  // A failed call gives its reservation back.
  ASSERT_OK_AND_ASSIGN(int64_t e,
                       q.Charged(
                           &record, fd, Quota::Charge::Span(4096, 8192),
                           []() -> int64_t { return -EIO; }, path));
  EXPECT_EQ(e, -EIO);
  EXPECT_EQ(q.used(), Quota::Bytes(st));
  // Growth the file made between calls is charged at the next one.
  ASSERT_EQ(::fallocate(fd, 0, 8192, 8192), 0);
  ASSERT_OK(q.Charged(
      &record, fd, Quota::Charge::Settled(), []() -> int64_t { return 0; },
      path));
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(q.used(), Quota::Bytes(st));
  // Its removal gives back exactly what was charged.
  q.Freed(&record, Quota::Bytes(st));
  EXPECT_EQ(q.used(), 0u);
  ::close(fd);
}

}  // namespace
}  // namespace acqfs
