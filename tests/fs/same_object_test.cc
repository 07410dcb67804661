// Tests of ObjectComparer (fs/same_object.h): each kind of difference between
// an upper object and the lower object at the same path, what the caller
// asks to read, and objects that vanish while compared.
#include "fs/same_object.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

#include "common/handle.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFifo;
using acqfs::test::MakeFile;
using acqfs::test::MakeSymlink;
using acqfs::test::SetXattr;

// "type content perm exec owner xattrs vanished" for the fields set, or
// "same".
std::string Show(const ObjectDiff& d) {
  std::string s;
  auto add = [&](bool on, const char* n) {
    if (on) s += (s.empty() ? "" : " ") + std::string(n);
  };
  add(d.type, "type");
  add(d.content, "content");
  add(d.perm, "perm");
  add(d.exec, "exec");
  add(d.owner, "owner");
  add(d.xattrs, "xattrs");
  add(d.vanished, "vanished");
  return s.empty() ? "same" : s;
}

class SameObjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(layers_, acqfs::test::OpenLayers(t_));
  }

  // Compares `name` of the two layer roots.
  std::string Diff(const std::string& name,
                   unsigned what = ObjectComparer::kAll) {
    return DiffWith(name, Lstat(t_.U(name)), Lstat(t_.L(name)), what);
  }
  std::string DiffWith(const std::string& name, const struct stat& up,
                       const struct stat& lo,
                       unsigned what = ObjectComparer::kAll) {
    ObjectComparer c(layers_);
    auto r = c.Compare(layers_.upper.root(), layers_.lower.root(), name, name,
                       up, lo, what);
    if (!r.ok()) return "error: " + r.error().Message();
    return Show(*r);
  }

  acqfs::test::TempTree t_;
  Layers layers_;
};

TEST_F(SameObjectTest, AnEqualCopyIsTheSame) {
  for (const char* root : {"lower", "upper"}) {
    const std::string r = t_.root() + "/" + root + "/";
    MakeFile(r + "f", std::string(700 * 1024, 'x'), 0640);  // 3 chunks
    SetXattr(r + "f", "user.tag", "v");
    MakeFile(r + "empty", "");
    MakeSymlink("f", r + "link");
    MakeDir(r + "d", 0750);
    MakeFifo(r + "fifo");
  }
  for (const char* n : {"f", "empty", "link", "d", "fifo"})
    EXPECT_EQ(Diff(n), "same") << n;
}

TEST_F(SameObjectTest, TypeAloneWhenTheTypesDiffer) {
  MakeFile(t_.L("f"), "abc", 0644);
  MakeSymlink("abc", t_.U("f"));  // same size, other type
  MakeDir(t_.L("d"));
  MakeFile(t_.U("d"), "x", 0600);
  EXPECT_EQ(Diff("f"), "type");
  EXPECT_EQ(Diff("d"), "type");
}

TEST_F(SameObjectTest, ContentOfFilesLinksAndDevices) {
  MakeFile(t_.L("size"), "abc");
  MakeFile(t_.U("size"), "abcd");
  std::string big(600 * 1024, 'q');
  MakeFile(t_.L("last"), big);
  big.back() = 'r';  // past the first chunks
  MakeFile(t_.U("last"), big);
  MakeSymlink("a", t_.L("link"));
  MakeSymlink("b", t_.U("link"));
  EXPECT_EQ(Diff("size"), "content");
  EXPECT_EQ(Diff("last"), "content");
  EXPECT_EQ(Diff("link"), "content");
  // Not asked for: not read.
  EXPECT_EQ(Diff("last", ObjectComparer::kXattrs), "same");
  if (acqfs::test::IsRoot()) {
    ASSERT_EQ(::mknod(t_.L("dev").c_str(), S_IFCHR | 0600, makedev(1, 3)), 0);
    ASSERT_EQ(::mknod(t_.U("dev").c_str(), S_IFCHR | 0600, makedev(1, 5)), 0);
    EXPECT_EQ(Diff("dev"), "content");
  }
}

TEST_F(SameObjectTest, PermissionBitsAndTheExecutableBit) {
  MakeFile(t_.L("tool"), "x", 0644);
  MakeFile(t_.U("tool"), "x", 0744);
  MakeFile(t_.L("private"), "x", 0644);
  MakeFile(t_.U("private"), "x", 0600);
  MakeFile(t_.L("group_x"), "x", 0644);
  MakeFile(t_.U("group_x"), "x", 0654);  // not the owner's bit
  MakeDir(t_.L("d"), 0755);
  MakeDir(t_.U("d"), 0644);  // directories have no exec bit of git's
  EXPECT_EQ(Diff("tool"), "perm exec");
  EXPECT_EQ(Diff("private"), "perm");
  EXPECT_EQ(Diff("group_x"), "perm");
  EXPECT_EQ(Diff("d"), "perm");
}

TEST_F(SameObjectTest, Owner) {
  ASSERT_TRUE(acqfs::test::IsRoot())
      << "chown needs root (the tests run as root, as CI does)";
  MakeFile(t_.L("f"), "x");
  MakeFile(t_.U("f"), "x");
  ASSERT_EQ(::lchown(t_.U("f").c_str(), 1234, 5678), 0);
  EXPECT_EQ(Diff("f"), "owner");
}

TEST_F(SameObjectTest, XattrsWithoutTheFormatsMarkers) {
  for (const char* n : {"changed", "added", "removed", "markers"}) {
    MakeFile(t_.L(n), "x");
    SetXattr(t_.L(n), "user.a", "1");
    MakeFile(t_.U(n), "x");
  }
  SetXattr(t_.U("changed"), "user.a", "2");
  SetXattr(t_.U("added"), "user.a", "1");
  SetXattr(t_.U("added"), "user.b", "1");
  SetXattr(t_.U("markers"), "user.a", "1");
  SetXattr(t_.U("markers"), "user.overlay.acqfs.origin", "7");
  SetXattr(t_.U("markers"), "user.overlay.opaque", "y");
  if (acqfs::test::IsRoot())
    SetXattr(t_.U("markers"), "trusted.overlay.origin", "kernel");
  EXPECT_EQ(Diff("changed"), "xattrs");
  EXPECT_EQ(Diff("added"), "xattrs");
  EXPECT_EQ(Diff("removed"), "xattrs");
  EXPECT_EQ(Diff("markers"), "same");
  EXPECT_EQ(Diff("changed", ObjectComparer::kContent), "same");
}

// An object removed between its stat and the comparison is `vanished`, not
// an error (the layers may be in use while a scan runs).
TEST_F(SameObjectTest, AnObjectGoneWhileComparedHasVanished) {
  for (const char* n : {"up", "low", "link", "x"}) {
    MakeFile(t_.L(n), "same");
    MakeFile(t_.U(n), "same");
  }
  MakeSymlink("t", t_.L("sym"));
  MakeSymlink("t", t_.U("sym"));
  const struct stat up = Lstat(t_.U("up")), low = Lstat(t_.L("low"));
  const struct stat sym_u = Lstat(t_.U("sym")), sym_l = Lstat(t_.L("sym"));
  const struct stat x_u = Lstat(t_.U("x")), x_l = Lstat(t_.L("x"));
  ASSERT_EQ(::unlink(t_.U("up").c_str()), 0);
  ASSERT_EQ(::unlink(t_.L("low").c_str()), 0);
  ASSERT_EQ(::unlink(t_.U("sym").c_str()), 0);
  ASSERT_EQ(::unlink(t_.L("x").c_str()), 0);
  EXPECT_EQ(DiffWith("up", up, Lstat(t_.L("up"))), "vanished");
  EXPECT_EQ(DiffWith("low", Lstat(t_.U("low")), low), "vanished");
  EXPECT_EQ(DiffWith("sym", sym_u, sym_l), "vanished");
  EXPECT_EQ(DiffWith("x", x_u, x_l, ObjectComparer::kXattrs), "vanished");
}

TEST_F(SameObjectTest, OtherFailuresNameTheLayerPath) {
  MakeFile(t_.L("f"), "same");
  MakeFile(t_.U("f"), "same");
  const struct stat up = Lstat(t_.U("f")), lo = Lstat(t_.L("f"));
  // The upper object turned into a directory after its stat: reading it as
  // a file fails, naming the upper path.
  ASSERT_EQ(::unlink(t_.U("f").c_str()), 0);
  MakeDir(t_.U("f"));
  std::string got = DiffWith("f", up, lo);
  EXPECT_NE(got.find(t_.U("f")), std::string::npos) << got;
}

}  // namespace
}  // namespace acqfs
