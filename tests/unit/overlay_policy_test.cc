// The policy inside the engine, without FUSE: hidden lower objects, EROFS
// for read-only paths, and the quota's charges and refunds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "fs/change_scan.h"
#include "fs/overlay.h"
#include "fs/policy.h"
#include "fs/quota.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs_test::Exists;
using acqfs_test::ListDir;
using acqfs_test::MakeDir;
using acqfs_test::ReadFile;
using acqfs_test::Snapshot;
using acqfs_test::WriteFile;
using Strings = std::vector<std::string>;

std::shared_ptr<const Policy> MakePolicy(const Strings& hide,
                                         const Strings& read_only,
                                         uint64_t quota) {
  auto p = Policy::Make(hide, read_only, quota);
  EXPECT_TRUE(p.ok());
  return p ? std::make_shared<Policy>(std::move(*p)) : nullptr;
}

class OverlayPolicy : public acqfs_test::OverlayTest {};

TEST_F(OverlayPolicy, HiddenLowerObjectsAreAbsent) {
  WriteFile(t_.L(".env"), "secret");
  MakeDir(t_.L("keys"));
  WriteFile(t_.L("keys/a"), "secret");
  WriteFile(t_.L("ok.txt"), "ok");
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
  WriteFile(t_.L("Makefile"), "all:");
  MakeDir(t_.L("vendor"));
  WriteFile(t_.L("vendor/x.c"), "x");
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

TEST_F(OverlayPolicy, QuotaChargesCopyUpsAndRefundsRemovals) {
  WriteFile(t_.L("a"), std::string(80, 'a'));
  WriteFile(t_.L("b"), std::string(30, 'b'));
  WriteFile(t_.U("existing"), std::string(10, 'e'));  // counted at start
  ASSERT_NO_FATAL_FAILURE(
      Start(XattrNamespace::kUser, MakePolicy({}, {}, 100)));
  ASSERT_NE(ov_->quota(), nullptr);
  EXPECT_EQ(ov_->quota()->used(), 10u);
  ASSERT_OK_AND_ASSIGN(Node * a, ov_->Lookup(root(), "a"));
  ASSERT_OK_AND_ASSIGN(Node * b, ov_->Lookup(root(), "b"));
  ASSERT_OK(ov_->CopyUp(a));
  EXPECT_EQ(ov_->quota()->used(), 90u);
  Status full = ov_->CopyUp(b);
  EXPECT_EQ(full.err(), EDQUOT);
  EXPECT_FALSE(Exists(t_.U("b")));
  EXPECT_EQ(ov_->quota()->used(), 90u);
  // Truncating gives bytes back, through the same charge.
  SetAttrRequest shrink;
  shrink.set_size = true;
  shrink.size = 20;
  ASSERT_OK(ov_->SetAttr(a, shrink, -1));
  EXPECT_EQ(ov_->quota()->used(), 30u);
  ASSERT_OK(ov_->Unlink(root(), "a"));
  EXPECT_EQ(ov_->quota()->used(), 10u);
  ASSERT_OK(ov_->CopyUp(b));
  EXPECT_EQ(ov_->quota()->used(), 40u);
  // A symlink's target counts.
  ASSERT_OK_AND_ASSIGN(Node * l, ov_->Symlink(root(), "l", std::string(55, 't'),
                                              Creds{::getuid(), ::getgid()}));
  (void)l;
  EXPECT_EQ(ov_->quota()->used(), 40u + 55u);
  EXPECT_EQ(
      ov_->Symlink(root(), "l2", "sixsix", Creds{::getuid(), ::getgid()}).err(),
      EDQUOT);
}

TEST(QuotaCharged, SettlesToTheRealGrowth) {
  acqfs_test::TempTree t;
  std::string path = t.upper() + "/f";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  Quota q(1000, 0);
  // A write that grows the file less than its end (a hole, then data).
  ASSERT_OK_AND_ASSIGN(
      int64_t r,
      q.Charged(
          &q, fd, 600, [&]() -> int64_t { return ::pwrite(fd, "xy", 2, 598); },
          path));
  EXPECT_EQ(r, 2);
  EXPECT_EQ(q.used(), 600u);
  // A write past the limit is refused before it runs.
  bool ran = false;
  auto refused = q.Charged(
      &q, fd, 1200,
      [&]() -> int64_t {
        ran = true;
        return 0;
      },
      path);
  EXPECT_EQ(refused.err(), EDQUOT);
  EXPECT_FALSE(ran);
  // A failed write gives its reservation back.
  ASSERT_OK_AND_ASSIGN(
      int64_t e, q.Charged(
                     &q, fd, 900, []() -> int64_t { return -EIO; }, path));
  EXPECT_EQ(e, -EIO);
  EXPECT_EQ(q.used(), 600u);
  ::close(fd);
}

}  // namespace
}  // namespace acqfs
