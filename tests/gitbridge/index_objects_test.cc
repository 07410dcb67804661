// Tests of KeepIndexObjects: what the base's copy of the host's index names
// beyond HEAD (staged blobs, a conflict's stages, resolve-undo) is copied
// into the upper's .git/objects as loose objects git reads, and survives the
// host's unstaging and `git gc --prune=now`; a directory whose cache tree is
// HEAD's is never looked into; a second run copies nothing; an object the
// host lost is named, not invented.
#include "gitbridge/index_objects.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "common/git_ptr.h"
#include "harness/git_env.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

using ::acqfs::test::Git;
using ::acqfs::test::MakeFile;
using ::acqfs::test::Sh;
using ::acqfs::test::ShellQuote;
using ::acqfs::test::TempDir;

class IndexObjectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = tmp_.path() + "/host";
    upper_ = tmp_.path() + "/upper";
    work_ = tmp_.path() + "/work";
    Sh("git init -q -b main " + ShellQuote(host_) + " && mkdir -p " +
       ShellQuote(upper_ + "/.git") + " " + ShellQuote(work_));
    // 40 directories of 5 files each, and one file at the top.
    Sh("cd " + ShellQuote(host_) +
       " && for d in $(seq 10 49); do mkdir d$d; for f in 1 2 3 4 5; do "
       "echo $d-$f > d$d/f$f; done; done && echo top > top");
  }

  void Commit() {
    Git(host_, "add -A");
    Git(host_, "commit -q -m c0");
    head_ = Git(host_, "rev-parse HEAD");
  }

  // The sandbox's copy of the host's index, as the daemon makes it.
  void CopyIndex() {
    Sh("cp " + ShellQuote(host_ + "/.git/index") + " " +
       ShellQuote(upper_ + "/.git/index"));
  }

  Result<IndexObjectsKept> Keep() {
    auto layers = Layers::OpenForReading(host_, upper_, XattrNamespace::kUser);
    if (!layers) return layers.error();
    return KeepIndexObjects(*layers, host_, head_, work_);
  }

  // The host loses everything its refs do not reach.
  void HostUnstagesAndPrunes() {
    Git(host_, "reset -q --hard");
    Git(host_, "clean -qfd");
    Git(host_, "reflog expire --expire=now --all");
    Git(host_, "gc -q --prune=now");
  }

  // `git cat-file -p` of `id` from the upper's objects (and the host's as
  // an alternate, as the sandbox sees both).
  std::string CatFromUpper(const std::string& id) {
    std::string out =
        Sh("GIT_OBJECT_DIRECTORY=" + ShellQuote(upper_ + "/.git/objects") +
           " GIT_ALTERNATE_OBJECT_DIRECTORIES=" +
           ShellQuote(host_ + "/.git/objects") + " git -C " +
           ShellQuote(host_) + " cat-file -p " + id);
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  TempDir tmp_;
  std::string host_, upper_, work_, head_;
};

TEST_F(IndexObjectsTest, StagedBlobsAreCopiedAndOutliveTheHostsGc) {
  Commit();
  MakeFile(host_ + "/d20/f3", "staged change\n");
  MakeFile(host_ + "/d20/new", "staged new\n");
  MakeFile(host_ + "/later", "intent only\n");
  Git(host_, "add d20/f3 d20/new");
  Git(host_, "add -N later");
  MakeFile(host_ + "/d20/f3", "unstaged on top\n");
  const std::string changed = Git(host_, "rev-parse :d20/f3");
  const std::string added = Git(host_, "rev-parse :d20/new");
  CopyIndex();
  auto kept = Keep();
  ASSERT_TRUE(kept) << kept.error().Message();
  EXPECT_EQ(kept->entries, 203u);
  EXPECT_EQ(kept->named, 2u);
  EXPECT_EQ(kept->copied, 2u);
  EXPECT_GT(kept->bytes, 0u);
  EXPECT_TRUE(kept->not_kept.empty());
  // Only d20 and the top level were compared entry by entry: the other 39
  // directories' cache trees are HEAD's.
  EXPECT_LE(kept->checked, 8u);
  struct stat st;
  const std::string loose =
      upper_ + "/.git/objects/" + added.substr(0, 2) + "/" + added.substr(2);
  ASSERT_EQ(::stat(loose.c_str(), &st), 0) << loose;
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  HostUnstagesAndPrunes();
  EXPECT_NE(std::system(("git -C " + ShellQuote(host_) + " cat-file -e " +
                         added + " 2>/dev/null")
                            .c_str()),
            0)
      << "the host still has it: the test proves nothing";
  EXPECT_EQ(CatFromUpper(changed), "staged change");
  EXPECT_EQ(CatFromUpper(added), "staged new");
  // Again: nothing new to copy.
  auto again = Keep();
  ASSERT_TRUE(again) << again.error().Message();
  EXPECT_EQ(again->named, 2u);
  EXPECT_EQ(again->copied, 0u);
}

TEST_F(IndexObjectsTest, NothingStagedCopiesNothingAndReadsNoTree) {
  Commit();
  CopyIndex();
  auto kept = Keep();
  ASSERT_TRUE(kept) << kept.error().Message();
  EXPECT_EQ(kept->checked, 0u);
  EXPECT_EQ(kept->named, 0u);
  EXPECT_FALSE(::access((upper_ + "/.git/objects").c_str(), F_OK) == 0)
      << "made the objects directory for nothing";
}

TEST_F(IndexObjectsTest, AnUnbornHeadKeepsEveryStagedBlob) {
  Git(host_, "add -A");
  CopyIndex();
  auto kept = Keep();
  ASSERT_TRUE(kept) << kept.error().Message();
  EXPECT_EQ(kept->named, 201u);
  EXPECT_EQ(kept->copied, 201u);
  const std::string top = Git(host_, "rev-parse :top");
  Sh("rm -rf " + ShellQuote(host_ + "/.git/objects") + " && mkdir -p " +
     ShellQuote(host_ + "/.git/objects/pack") + " " +
     ShellQuote(host_ + "/.git/objects/info"));
  EXPECT_EQ(CatFromUpper(top), "top");
}

TEST_F(IndexObjectsTest, AConflictsStagesAndResolveUndoAreKept) {
  Commit();
  Git(host_, "checkout -q -b other");
  MakeFile(host_ + "/top", "other\n");
  Git(host_, "commit -q -am other");
  Git(host_, "checkout -q main");
  MakeFile(host_ + "/top", "main\n");
  Git(host_, "commit -q -am main");
  head_ = Git(host_, "rev-parse HEAD");
  Sh("cd " + ShellQuote(host_) + " && ! git merge -q other >/dev/null 2>&1");
  MakeFile(host_ + "/d11/f1", "resolved elsewhere\n");
  const std::string theirs = Git(host_, "rev-parse other:top");
  CopyIndex();
  auto kept = Keep();
  ASSERT_TRUE(kept) << kept.error().Message();
  // Stage 1 (the merge base's) and stage 3 (other's); stage 2 is HEAD's.
  EXPECT_EQ(kept->named, 2u);
  Git(host_, "merge --abort");
  Git(host_, "branch -q -D other");
  HostUnstagesAndPrunes();
  EXPECT_EQ(CatFromUpper(theirs), "other");
}

TEST_F(IndexObjectsTest, AnObjectTheHostLostIsNamedNotInvented) {
  Commit();
  MakeFile(host_ + "/d30/f1", "lost\n");
  Git(host_, "add d30/f1");
  const std::string id = Git(host_, "rev-parse :d30/f1");
  CopyIndex();
  Sh("rm -f " + ShellQuote(host_ + "/.git/objects/" + id.substr(0, 2) + "/" +
                           id.substr(2)));
  auto kept = Keep();
  ASSERT_TRUE(kept) << kept.error().Message();
  EXPECT_EQ(kept->named, 1u);
  EXPECT_EQ(kept->copied, 0u);
  ASSERT_EQ(kept->not_kept.size(), 1u);
  EXPECT_EQ(kept->not_kept[0].rfind(id, 0), 0u) << kept->not_kept[0];
}

TEST_F(IndexObjectsTest, ADamagedIndexIsRefusedNamingIt) {
  Commit();
  Sh("head -c 100 " + ShellQuote(host_ + "/.git/index") + " > " +
     ShellQuote(upper_ + "/.git/index"));
  auto kept = Keep();
  ASSERT_FALSE(kept);
  EXPECT_EQ(kept.err(), EINVAL);
  EXPECT_NE(kept.error().Message().find(".git/index"), std::string::npos)
      << kept.error().Message();
}

}  // namespace
}  // namespace acqfs::gitbridge
