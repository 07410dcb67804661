// Tests of LayerFormat, the single owner of the upper layer's on-disk form.
#include "fs/layer_format.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/handle.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::GetXattr;
using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::SetXattr;
using acqfs::test::TempTree;

UniqueFd OpenDirFd(const std::string& path) {
  return UniqueFd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
}

TEST(LayerFormat, ParseOfMakeOpaqueValueIsIdentityForEveryMark) {
  for (OpaqueMark m : {OpaqueMark::kNone, OpaqueMark::kOpaque,
                       OpaqueMark::kMayHoldXattrWhiteouts}) {
    EXPECT_EQ(LayerFormat::ParseOpaqueValue(LayerFormat::MakeOpaqueValue(m)), m)
        << "mark " << static_cast<int>(m);
  }
}

TEST(LayerFormat, OpaqueValuesAreTheKernelOnes) {
  EXPECT_EQ(LayerFormat::MakeOpaqueValue(OpaqueMark::kOpaque), "y");
  EXPECT_EQ(LayerFormat::MakeOpaqueValue(OpaqueMark::kMayHoldXattrWhiteouts),
            "x");
  EXPECT_EQ(LayerFormat::ParseOpaqueValue("y"), OpaqueMark::kOpaque);
  EXPECT_EQ(LayerFormat::ParseOpaqueValue("x"),
            OpaqueMark::kMayHoldXattrWhiteouts);
  EXPECT_EQ(LayerFormat::ParseOpaqueValue(""), OpaqueMark::kNone);
  EXPECT_EQ(LayerFormat::ParseOpaqueValue("n"), OpaqueMark::kNone);
}

TEST(LayerFormat, PrefixAndKeysForUserNamespace) {
  LayerFormat f(XattrNamespace::kUser);
  EXPECT_EQ(f.ns(), XattrNamespace::kUser);
  EXPECT_EQ(f.Prefix(), "user.overlay.");
  EXPECT_EQ(f.OpaqueKey(), "user.overlay.opaque");
  EXPECT_EQ(f.WhiteoutKey(), "user.overlay.whiteout");
}

TEST(LayerFormat, PrefixAndKeysForTrustedNamespace) {
  LayerFormat f(XattrNamespace::kTrusted);
  EXPECT_EQ(f.ns(), XattrNamespace::kTrusted);
  EXPECT_EQ(f.Prefix(), "trusted.overlay.");
  EXPECT_EQ(f.OpaqueKey(), "trusted.overlay.opaque");
  EXPECT_EQ(f.WhiteoutKey(), "trusted.overlay.whiteout");
}

TEST(LayerFormat, DefaultNamespaceIsUserWhenForcedOrUnprivileged) {
  EXPECT_EQ(LayerFormat::DefaultNamespace(true), XattrNamespace::kUser);
  EXPECT_EQ(LayerFormat::DefaultNamespace(false), acqfs::test::IsRoot()
                                                      ? XattrNamespace::kTrusted
                                                      : XattrNamespace::kUser);
}

TEST(LayerFormat, IsPrivateXattrMatchesOnlyItsOwnNamespace) {
  LayerFormat user(XattrNamespace::kUser);
  EXPECT_TRUE(user.IsPrivateXattr("user.overlay.opaque"));
  EXPECT_TRUE(user.IsPrivateXattr("user.overlay.whiteout"));
  EXPECT_TRUE(user.IsPrivateXattr("user.overlay.origin"));
  EXPECT_FALSE(user.IsPrivateXattr("user.overlayfoo"));
  EXPECT_FALSE(user.IsPrivateXattr("user.mime_type"));
  EXPECT_FALSE(user.IsPrivateXattr("trusted.overlay.opaque"));
  EXPECT_FALSE(user.IsPrivateXattr("security.selinux"));
  EXPECT_FALSE(user.IsPrivateXattr("user.overlay"));

  LayerFormat trusted(XattrNamespace::kTrusted);
  EXPECT_TRUE(trusted.IsPrivateXattr("trusted.overlay.opaque"));
  EXPECT_FALSE(trusted.IsPrivateXattr("user.overlay.opaque"));
  EXPECT_FALSE(trusted.IsPrivateXattr("trusted.other"));
}

TEST(LayerFormat, MakeWhiteoutCreatesZeroZeroCharDeviceThatIsWhiteout) {
  TempTree t;
  UniqueFd d = OpenDirFd(t.upper());
  ASSERT_TRUE(d.is_valid());
  ASSERT_OK(LayerFormat::MakeWhiteout(d.get(), "gone", t.U("gone")));
  struct stat st = Lstat(t.U("gone"));
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(major(st.st_rdev), 0u);
  EXPECT_EQ(minor(st.st_rdev), 0u);
  EXPECT_TRUE(LayerFormat::IsWhiteout(st));
  // A second whiteout of the same name is an error, not a silent success.
  EXPECT_ERRNO(EEXIST, LayerFormat::MakeWhiteout(d.get(), "gone", t.U("gone")));
}

TEST(LayerFormat, IsWhiteoutRejectsOtherObjects) {
  TempTree t;
  MakeFile(t.U("file"), "");
  MakeDir(t.U("dir"));
  EXPECT_FALSE(LayerFormat::IsWhiteout(Lstat(t.U("file"))));
  EXPECT_FALSE(LayerFormat::IsWhiteout(Lstat(t.U("dir"))));
  EXPECT_FALSE(LayerFormat::IsWhiteout(Lstat("/dev/null")));  // char 1:3
}

TEST(LayerFormat, ReadOpaqueOfUnmarkedDirectoryIsNone) {
  TempTree t;
  MakeDir(t.U("d"));
  UniqueFd d = OpenDirFd(t.upper());
  LayerFormat f(XattrNamespace::kUser);
  ASSERT_OK_AND_ASSIGN(OpaqueMark m, f.ReadOpaque(d.get(), "d", t.U("d")));
  EXPECT_EQ(m, OpaqueMark::kNone);
}

TEST(LayerFormat, SetOpaqueThenReadOpaqueRoundTrips) {
  TempTree t;
  MakeDir(t.U("d"));
  UniqueFd d = OpenDirFd(t.upper());
  LayerFormat f(XattrNamespace::kUser);
  ASSERT_OK(f.SetOpaque(d.get(), "d", t.U("d")));
  EXPECT_EQ(GetXattr(t.U("d"), "user.overlay.opaque"), "y");
  ASSERT_OK_AND_ASSIGN(OpaqueMark m, f.ReadOpaque(d.get(), "d", t.U("d")));
  EXPECT_EQ(m, OpaqueMark::kOpaque);
}

TEST(LayerFormat, ReadOpaqueSeesMarkXWrittenByHand) {
  TempTree t;
  MakeDir(t.U("d"));
  SetXattr(t.U("d"), "user.overlay.opaque", "x");
  UniqueFd d = OpenDirFd(t.upper());
  LayerFormat f(XattrNamespace::kUser);
  ASSERT_OK_AND_ASSIGN(OpaqueMark m, f.ReadOpaque(d.get(), "d", t.U("d")));
  EXPECT_EQ(m, OpaqueMark::kMayHoldXattrWhiteouts);
}

TEST(LayerFormat, ReadOpaqueIgnoresTheOtherNamespace) {
  TempTree t;
  MakeDir(t.U("d"));
  SetXattr(t.U("d"), "user.overlay.opaque", "y");
  UniqueFd d = OpenDirFd(t.upper());
  LayerFormat trusted(XattrNamespace::kTrusted);
  ASSERT_OK_AND_ASSIGN(OpaqueMark m,
                       trusted.ReadOpaque(d.get(), "d", t.U("d")));
  EXPECT_EQ(m, OpaqueMark::kNone);
}

TEST(LayerFormat, SetOpaqueThenReadOpaqueRoundTripsInTrustedNamespace) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "trusted.* needs root (the tests run as root, as CI does)";
  TempTree t;
  MakeDir(t.U("d"));
  UniqueFd d = OpenDirFd(t.upper());
  LayerFormat f(XattrNamespace::kTrusted);
  ASSERT_OK(f.SetOpaque(d.get(), "d", t.U("d")));
  EXPECT_EQ(GetXattr(t.U("d"), "trusted.overlay.opaque"), "y");
  EXPECT_EQ(GetXattr(t.U("d"), "user.overlay.opaque"), std::nullopt);
  ASSERT_OK_AND_ASSIGN(OpaqueMark m, f.ReadOpaque(d.get(), "d", t.U("d")));
  EXPECT_EQ(m, OpaqueMark::kOpaque);
}

TEST(LayerFormat, SetOpaqueOnTheRootByEmptyName) {
  TempTree t;
  UniqueFd d = OpenDirFd(t.upper());
  LayerFormat f(XattrNamespace::kUser);
  ASSERT_OK(f.SetOpaque(d.get(), "", t.upper()));
  EXPECT_EQ(GetXattr(t.upper(), "user.overlay.opaque"), "y");
  ASSERT_OK_AND_ASSIGN(OpaqueMark m, f.ReadOpaque(d.get(), "", t.upper()));
  EXPECT_EQ(m, OpaqueMark::kOpaque);
}

TEST(LayerFormat, IsXattrWhiteoutOnZeroSizeFileWithWhiteoutXattr) {
  TempTree t;
  MakeFile(t.U("wh"), "");
  SetXattr(t.U("wh"), "user.overlay.whiteout", "");
  MakeFile(t.U("plain"), "");
  UniqueFd d = OpenDirFd(t.upper());
  LayerFormat f(XattrNamespace::kUser);
  ASSERT_OK_AND_ASSIGN(bool wh, f.IsXattrWhiteout(d.get(), "wh", t.U("wh")));
  EXPECT_TRUE(wh);
  ASSERT_OK_AND_ASSIGN(bool plain,
                       f.IsXattrWhiteout(d.get(), "plain", t.U("plain")));
  EXPECT_FALSE(plain);
}

TEST(LayerFormat, TempNamesLiveInAcqfsTmp) {
  EXPECT_STREQ(LayerFormat::kTempDirName, "acqfs-tmp");
  EXPECT_STRNE(LayerFormat::kTempDirName, "work");  // the kernel's
  EXPECT_EQ(std::string(LayerFormat::kTempPrefix).rfind("#acqfs.", 0), 0u);
}

}  // namespace
}  // namespace acqfs
