// Tests of the publish rule: each reason a path of the sandbox is not
// published, the order in which they are decided, and the branch names an
// export refuses.
#include "gitbridge/publish_rule.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/git_env.h"
#include "harness/layer_tree.h"

namespace acqfs::gitbridge {
namespace {

using ::acqfs::test::MakeFile;
using ::acqfs::test::TempTree;
using V = PublishVerdict;

constexpr mode_t kFile = S_IFREG | 0644;
constexpr mode_t kDir = S_IFDIR | 0755;
constexpr mode_t kLink = S_IFLNK | 0777;
constexpr mode_t kFifo = S_IFIFO | 0644;

TEST(EntryVerdict, GitsOwnNameSpecialFilesAndRefusedNames) {
  std::string why;
  EXPECT_EQ(EntryVerdict(".git", kDir), V::kInsideGit);
  EXPECT_EQ(EntryVerdict(".git", kFile), V::kInsideGit);
  EXPECT_EQ(EntryVerdict("pipe", kFifo), V::kSpecialFile);
  EXPECT_EQ(EntryVerdict("dev", S_IFCHR | 0600), V::kSpecialFile);
  EXPECT_EQ(EntryVerdict("sock", S_IFSOCK | 0600), V::kSpecialFile);
  // A special file is never recorded, whatever its name.
  EXPECT_EQ(EntryVerdict(".GIT", kFifo), V::kSpecialFile);
  EXPECT_EQ(EntryVerdict(".GIT", kDir, &why), V::kRefusedName);
  EXPECT_FALSE(why.empty());
  why.clear();
  EXPECT_EQ(EntryVerdict(".gitmodules", kLink, &why), V::kRefusedName);
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(EntryVerdict(".gitmodules", kFile), V::kPublished);
  EXPECT_EQ(EntryVerdict("a.txt", kFile), V::kPublished);
  EXPECT_EQ(EntryVerdict("d", kDir), V::kPublished);
  EXPECT_EQ(EntryVerdict("l", kLink), V::kPublished);
}

TEST(PolicyVerdict, HiddenBeforeReadOnlyWithTheirDirectories) {
  auto p = Policy::Make({"*.pem", "secrets/"}, {"vendor/", "/Makefile"}, 0);
  ASSERT_TRUE(p.ok()) << p.error().Message();
  const Policy* policy = &*p;
  EXPECT_EQ(PolicyVerdict(nullptr, "x.pem", kFile), V::kPublished);
  EXPECT_EQ(PolicyVerdict(policy, "a/x.pem", kFile), V::kHidden);
  EXPECT_EQ(PolicyVerdict(policy, "secrets", kDir), V::kHidden);
  EXPECT_EQ(PolicyVerdict(policy, "secrets/k", kFile), V::kHidden);
  // "secrets/" matches directories only: a file of that name is seen.
  EXPECT_EQ(PolicyVerdict(policy, "secrets", kFile), V::kPublished);
  EXPECT_EQ(PolicyVerdict(policy, "vendor/lib.c", kFile), V::kReadOnly);
  EXPECT_EQ(PolicyVerdict(policy, "Makefile", kFile), V::kReadOnly);
  EXPECT_EQ(PolicyVerdict(policy, "sub/Makefile", kFile), V::kPublished);
  EXPECT_EQ(PolicyVerdict(policy, "vendor/x.pem", kFile), V::kHidden);
  EXPECT_EQ(PolicyVerdict(policy, "src/a.c", kFile), V::kPublished);
}

TEST(RefusedBranch, ReservedAndCheckRefFormatNames) {
  EXPECT_EQ(RefusedBranch("acqfs-worktree"),
            "the name is reserved for the working tree commit");
  EXPECT_EQ(RefusedBranch("acqfs-worktree/x"),
            "the name is reserved for the working tree commit");
  EXPECT_EQ(RefusedBranch("acqfs-worktree-2"), "");
  EXPECT_NE(RefusedBranch("HEAD"), "");
  EXPECT_NE(RefusedBranch("-x"), "");
  EXPECT_NE(RefusedBranch("a..b"), "");
  EXPECT_NE(RefusedBranch("HEAD").find("git check-ref-format --branch"),
            std::string::npos);
  EXPECT_EQ(RefusedBranch("feature/x"), "");
}

class PublishRuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeFile(tree_.L(".gitignore"), "*.log\nbuild/\n");
    MakeFile(tree_.U("sub/.gitignore"), "!keep.log\n");
    auto l = Layers::OpenForReading(tree_.lower(), tree_.upper(),
                                    XattrNamespace::kUser);
    ASSERT_TRUE(l.ok()) << l.error().Message();
    auto p = Policy::Make({".env", "secrets/"}, {"vendor/"}, 0);
    ASSERT_TRUE(p.ok()) << p.error().Message();
    l->policy = std::make_shared<const Policy>(std::move(*p));
    layers_ = std::make_unique<Layers>(std::move(*l));
    rule_ = std::make_unique<PublishRule>(*layers_);
  }
  V Judge(const std::string& path, mode_t mode, BaseAt base = {},
          mode_t lower_mode = 0, std::string* why = nullptr) {
    auto v = rule_->Judge(path, mode, base, lower_mode, why);
    EXPECT_TRUE(v.ok()) << v.error().Message();
    return v.ok() ? *v : V::kPublished;
  }

  TempTree tree_;
  std::unique_ptr<Layers> layers_;
  std::unique_ptr<PublishRule> rule_;
};

TEST_F(PublishRuleTest, EachReason) {
  const BaseAt tracked{true, false};
  const BaseAt gitlink{true, true};
  std::string why;
  EXPECT_EQ(Judge("src/a.c", kFile), V::kPublished);
  EXPECT_EQ(Judge(".git/config", kFile), V::kInsideGit);
  EXPECT_EQ(Judge("nested/.git", kDir), V::kInsideGit);
  EXPECT_EQ(Judge(".env", kFile), V::kHidden);
  EXPECT_EQ(Judge("secrets/key", kFile), V::kHidden);
  EXPECT_EQ(Judge("vendor/lib.c", kFile, tracked), V::kReadOnly);
  EXPECT_EQ(Judge("mod/file", kFile, gitlink), V::kInSubmodule);
  EXPECT_EQ(Judge("pipe", kFifo), V::kSpecialFile);
  EXPECT_EQ(Judge("debug.log", kFile), V::kIgnored);
  EXPECT_EQ(Judge("build/out.o", kFile), V::kIgnored);
  EXPECT_EQ(Judge("x/.GIT/config", kFile, {}, 0, &why), V::kRefusedName);
  EXPECT_EQ(why.rfind("x/.GIT: ", 0), 0u) << why;
  for (V v : {V::kPublished, V::kInsideGit, V::kHidden, V::kReadOnly,
              V::kInSubmodule, V::kSpecialFile, V::kIgnored, V::kRefusedName})
    EXPECT_STRNE(PublishVerdictName(v), "?");
}

TEST_F(PublishRuleTest, TrackedPathsAndReincludedOnesAreNotIgnored) {
  EXPECT_EQ(Judge("debug.log", kFile, BaseAt{true, false}), V::kPublished);
  EXPECT_EQ(Judge("sub/keep.log", kFile), V::kPublished);
  EXPECT_EQ(Judge("sub/other.log", kFile), V::kIgnored);
}

TEST_F(PublishRuleTest, TheFirstReasonInTheDocumentedOrderWins) {
  // Hidden before ignored and refused; ignored before refused.
  EXPECT_EQ(Judge("secrets/x.log", kFile), V::kHidden);
  EXPECT_EQ(Judge("secrets/.GIT", kDir), V::kHidden);
  EXPECT_EQ(Judge("build/.GIT", kDir), V::kIgnored);
  EXPECT_EQ(Judge("vendor/.GIT", kDir), V::kReadOnly);
  EXPECT_EQ(Judge(".git/.GIT", kDir), V::kInsideGit);
}

TEST_F(PublishRuleTest, ADeletionIsJudgedWithTheHostObjectsType) {
  EXPECT_EQ(Judge("secrets", 0, {}, kDir), V::kHidden);
  EXPECT_EQ(Judge("secrets", 0, {}, kFile), V::kPublished);
  EXPECT_EQ(Judge("vendor/lib.c", 0, {}, kFile), V::kReadOnly);
  // An ignored or refused name is deleted all the same.
  EXPECT_EQ(Judge("debug.log", 0, {}, kFile), V::kPublished);
  EXPECT_EQ(Judge(".GIT", 0, {}, kDir), V::kPublished);
  EXPECT_EQ(Judge("mod/file", 0, BaseAt{true, true}, kFile), V::kInSubmodule);
}

}  // namespace
}  // namespace acqfs::gitbridge
