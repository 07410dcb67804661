// Status (fs/change_scan.h) and export (gitbridge/delta_scan.h) read one walk
// and one comparison; these tests hold them to docs/changes.md on the same
// layers: they agree on what git can record, and only status sees metadata.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fs/change_scan.h"
#include "gitbridge/delta_scan.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using V = std::vector<std::string>;

class ScansAgreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/acqfs-agree-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directory(root_ + "/lower");
    fs::create_directory(root_ + "/upper");
    auto l = Layers::OpenForReading(root_ + "/lower", root_ + "/upper",
                                    XattrNamespace::kUser);
    ASSERT_TRUE(l.ok()) << l.error().Message();
    layers_ = std::move(*l);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string L(const std::string& rel) { return root_ + "/lower/" + rel; }
  std::string U(const std::string& rel) { return root_ + "/upper/" + rel; }
  static void Write(const std::string& path, const std::string& data,
                    mode_t mode = 0644) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << data;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
  }
  // Both layers hold `rel` with `data`: a copy-up left as it was.
  void Both(const std::string& rel, const std::string& data,
            mode_t mode = 0644) {
    Write(L(rel), data, mode);
    Write(U(rel), data, mode);
  }
  // "<code> path" per status change.
  V Status(bool include_git = false) {
    ChangeScanOptions o;
    o.include_git_dir = include_git;
    auto r = ScanChanges(layers_, o);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    V out;
    if (r.ok())
      for (const PathChange& c : *r)
        out.push_back(std::string(1, ChangeCode(c.kind)) + " " + c.path);
    return out;
  }
  // "D path" / "U path" / "X path" per export change.
  V Export() {
    auto r = ScanUpper(layers_);
    EXPECT_TRUE(r.ok()) << r.error().Message();
    V out;
    if (r.ok())
      for (const Change& c : *r)
        out.push_back(std::string(c.kind == Change::kDelete   ? "D "
                                  : c.kind == Change::kUpsert ? "U "
                                                              : "X ") +
                      c.path);
    return out;
  }

  std::string root_;
  Layers layers_;
};

TEST_F(ScansAgreeTest, ACopyUpEqualToTheLowerIsUnchangedForBoth) {
  Both("f", "same bytes");
  Both("d/tool", "#!/bin/sh\n", 0755);
  fs::create_directories(L("l"));
  fs::create_directories(U("l"));
  ASSERT_EQ(::symlink("f", L("l/link").c_str()), 0);
  ASSERT_EQ(::symlink("f", U("l/link").c_str()), 0);
  EXPECT_EQ(Status(), V{});
  EXPECT_EQ(Export(), V{});
}

TEST_F(ScansAgreeTest, AnExecBitChangeIsAChangeForBoth) {
  Write(L("run.sh"), "echo\n", 0644);
  Write(U("run.sh"), "echo\n", 0755);
  EXPECT_EQ(Status(), V{"m run.sh"});
  EXPECT_EQ(Export(), V{"U run.sh"});
}

TEST_F(ScansAgreeTest, OwnerXattrsAndOtherModeBitsAreStatusOnly) {
  ASSERT_EQ(::geteuid(), 0u) << "chown needs root (as CI runs the tests)";
  Both("owned", "x");
  ASSERT_EQ(::lchown(U("owned").c_str(), 1234, 1234), 0);
  Both("tagged", "x");
  ASSERT_EQ(::setxattr(U("tagged").c_str(), "user.tag", "v", 1, 0), 0);
  Write(L("private"), "x", 0644);
  Write(U("private"), "x", 0600);
  EXPECT_EQ(Status(), (V{"m owned", "m private", "m tagged"}));
  EXPECT_EQ(Export(), V{});
}

TEST_F(ScansAgreeTest, ContentAndTypeChangesAreChangesForBoth) {
  Write(L("f"), "old");
  Write(U("f"), "new");
  Write(L("t"), "abc");
  ASSERT_EQ(::symlink("abc", U("t").c_str()), 0);
  EXPECT_EQ(Status(), (V{"M f", "T t"}));
  EXPECT_EQ(Export(), (V{"U f", "U t"}));
}

// A directory removed and made again (opaque) holding a file equal to the
// lower one: no change for either (export used to upsert every file of an
// opaque directory).
TEST_F(ScansAgreeTest, AFileMadeAgainInAnOpaqueDirectoryEqualToTheLower) {
  Both("d/same", "same");
  Write(L("d/gone"), "x");
  ASSERT_EQ(::setxattr(U("d").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  EXPECT_EQ(Status(), V{"D d/gone"});
  EXPECT_EQ(Export(), V{"D d/gone"});
}

// `.git` at any depth is git's own data, left out of both by default
// (docs/changes.md); status shows every one with --git-dir.
TEST_F(ScansAgreeTest, GitDirectoriesAtAnyDepthAreLeftOut) {
  Write(L(".git/index"), "old");
  Write(U(".git/index"), "new");
  Write(L("nested/.git/index"), "old");
  Write(U("nested/.git/index"), "new");
  Write(U("nested/.git/ORIG_HEAD"), "x");
  Write(U("sub/.git"), "gitdir: ../.git/modules/sub\n");
  Write(U("nested/work.c"), "int x;\n");
  EXPECT_EQ(Status(), (V{"A nested/work.c", "A sub"}));
  EXPECT_EQ(Export(), V{"U nested/work.c"});
  EXPECT_EQ(Status(true),
            (V{"M .git/index", "A nested/.git/ORIG_HEAD", "M nested/.git/index",
               "A nested/work.c", "A sub", "A sub/.git"}));
}

}  // namespace
}  // namespace acqfs::gitbridge
