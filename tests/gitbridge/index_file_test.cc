// Tests of IndexFile: indexes written by git itself (versions 2, 3 and 4,
// intent-to-add and skip-worktree entries, a path longer than the 12-bit
// length field, a conflict, resolve-undo, a split index) read entry by
// entry as `git ls-files --stage` lists them, the cache tree as git keeps
// it, and damaged indexes refused without a read past their end.
#include "gitbridge/index_file.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/git_ptr.h"
#include "harness/git_env.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

using ::acqfs::test::Git;
using ::acqfs::test::MakeFile;
using ::acqfs::test::ReadFile;
using ::acqfs::test::Sh;
using ::acqfs::test::ShellQuote;
using ::acqfs::test::TempDir;

class IndexFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = tmp_.path() + "/repo";
    Sh("git init -q -b main " + ShellQuote(repo_));
    for (const char* d : {"a", "b/c", "b/d", "e"}) {
      Sh("mkdir -p " + ShellQuote(repo_ + "/" + d));
      for (int i = 0; i < 3; ++i)
        MakeFile(repo_ + "/" + d + "/f" + std::to_string(i),
                 std::string(d) + std::to_string(i) + "\n");
    }
    MakeFile(repo_ + "/top", "top\n");
    Git(repo_, "add -A");
    Git(repo_, "commit -q -m c0");
  }

  std::string Bytes() {
    std::string s;
    EXPECT_TRUE(ReadFile(repo_ + "/.git/index", &s));
    return s;
  }

  // What ForEach reads, as `git ls-files --stage` prints it.
  static std::string Listed(const IndexFile& f) {
    std::ostringstream out;
    Status s = f.ForEach([&](const IndexEntry& e) -> Status {
      char mode[16];
      std::snprintf(mode, sizeof mode, "%06o", e.mode);
      out << mode << " " << OidHex(e.id) << " " << e.stage << "\t" << e.path
          << "\n";
      return Ok();
    });
    EXPECT_TRUE(s) << s.error().Message();
    return out.str();
  }

  void ExpectListsAsGit(unsigned version) {
    Git(repo_, "update-index --index-version " + std::to_string(version));
    const std::string bytes = Bytes();
    auto f = IndexFile::Parse(bytes, "index");
    ASSERT_TRUE(f) << f.error().Message();
    EXPECT_EQ(f->version(), version);
    EXPECT_EQ(Listed(*f), Git(repo_, "ls-files --stage") + "\n");
  }

  TempDir tmp_;
  std::string repo_;
};

TEST_F(IndexFileTest, ReadsEveryVersionAsGitListsIt) {
  // A path longer than the 12-bit name length (0xfff) holds: longer than
  // any path the kernel resolves, so it is put in the index by name only.
  std::string rel;
  for (int i = 0; i < 20; ++i)
    rel += std::string(220, static_cast<char>('k' + i % 5)) + "/";
  rel += "long";
  ASSERT_GT(rel.size(), 0xfffu);
  const std::string blob = Git(repo_, "rev-parse HEAD:top");
  Git(repo_, "update-index --add --cacheinfo 100644," + blob + "," + rel);
  // Version 3 is written only with extended flags (the next test).
  for (unsigned v : {2u, 4u, 2u}) ExpectListsAsGit(v);
}

TEST_F(IndexFileTest, ReadsIntentToAddAndSkipWorktreeEntries) {
  MakeFile(repo_ + "/later", "later\n");
  Git(repo_, "add -N later");
  Git(repo_, "update-index --skip-worktree a/f1");
  const std::string bytes = Bytes();
  auto f = IndexFile::Parse(bytes, "index");
  ASSERT_TRUE(f) << f.error().Message();
  EXPECT_EQ(f->version(), 3u);  // extended flags need version 3
  std::vector<std::string> ita, skip;
  ASSERT_TRUE(f->ForEach([&](const IndexEntry& e) -> Status {
    if (e.intent_to_add) ita.emplace_back(e.path);
    if (e.skip_worktree) skip.emplace_back(e.path);
    return Ok();
  }));
  EXPECT_EQ(ita, std::vector<std::string>{"later"});
  EXPECT_EQ(skip, std::vector<std::string>{"a/f1"});
  ExpectListsAsGit(4);
}

TEST_F(IndexFileTest, TheCacheTreeIsGitsAndLosesOnlyTheChangedDirectories) {
  Git(repo_, "read-tree HEAD");  // a whole cache tree
  auto f = IndexFile::Parse(Bytes(), "index");
  ASSERT_TRUE(f) << f.error().Message();
  ASSERT_FALSE(f->cache_tree().empty());
  EXPECT_EQ(f->cache_tree()[0].path, "");
  EXPECT_TRUE(f->cache_tree()[0].valid);
  EXPECT_EQ(OidHex(f->cache_tree()[0].id), Git(repo_, "rev-parse HEAD^{tree}"));
  for (const CacheTreeNode& n : f->cache_tree()) {
    EXPECT_TRUE(n.valid) << n.path;
    EXPECT_EQ(OidHex(n.id), Git(repo_, "rev-parse HEAD:" + n.path)) << n.path;
  }
  MakeFile(repo_ + "/b/c/f0", "changed\n");
  Git(repo_, "add b/c/f0");
  const std::string bytes = Bytes();
  auto g = IndexFile::Parse(bytes, "index");
  ASSERT_TRUE(g) << g.error().Message();
  std::vector<std::string> invalid;
  for (const CacheTreeNode& n : g->cache_tree())
    if (!n.valid) invalid.push_back(n.path);
  EXPECT_EQ(invalid, (std::vector<std::string>{"", "b", "b/c"}));
}

TEST_F(IndexFileTest, ReadsAConflictsStagesAndResolveUndo) {
  Git(repo_, "checkout -q -b other");
  MakeFile(repo_ + "/top", "other\n");
  Git(repo_, "commit -q -am other");
  Git(repo_, "checkout -q main");
  MakeFile(repo_ + "/top", "main\n");
  Git(repo_, "commit -q -am main");
  Sh("cd " + ShellQuote(repo_) + " && ! git merge -q other >/dev/null 2>&1");
  {
    const std::string bytes = Bytes();
    auto f = IndexFile::Parse(bytes, "index");
    ASSERT_TRUE(f) << f.error().Message();
    EXPECT_EQ(Listed(*f), Git(repo_, "ls-files --stage") + "\n");
  }
  MakeFile(repo_ + "/top", "resolved\n");
  Git(repo_, "add top");
  const std::string bytes = Bytes();
  auto f = IndexFile::Parse(bytes, "index");
  ASSERT_TRUE(f) << f.error().Message();
  std::vector<std::string> reuc;
  for (const git_oid& id : f->resolve_undo()) reuc.push_back(OidHex(id));
  EXPECT_EQ(reuc,
            (std::vector<std::string>{Git(repo_, "rev-parse HEAD~1:top"),
                                      Git(repo_, "rev-parse HEAD:top"),
                                      Git(repo_, "rev-parse other:top")}));
}

TEST_F(IndexFileTest, SaysWhenTheIndexIsSplit) {
  Git(repo_, "update-index --split-index");
  auto f = IndexFile::Parse(Bytes(), "index");
  ASSERT_TRUE(f) << f.error().Message();
  EXPECT_TRUE(f->split());
  Git(repo_, "update-index --no-split-index");
  auto g = IndexFile::Parse(Bytes(), "index");
  ASSERT_TRUE(g) << g.error().Message();
  EXPECT_FALSE(g->split());
}

// Every prefix of an index, and indexes with bytes changed at random, are
// read or refused (EINVAL naming the file), never read past their end
// (the sanitizers, or a crash, would say so).
TEST_F(IndexFileTest, ADamagedIndexIsRefusedNeverOverread) {
  for (unsigned v : {2u, 4u}) {
    Git(repo_, "update-index --index-version " + std::to_string(v));
    const std::string whole = Bytes();
    for (size_t n = 0; n < whole.size(); ++n) {
      // A copy of exactly n bytes, so that a read past it is caught.
      std::vector<char> cut(whole.begin(), whole.begin() + n);
      auto f = IndexFile::Parse({cut.data(), cut.size()}, "cut");
      if (!f) {
        EXPECT_EQ(f.err(), EINVAL);
        EXPECT_NE(f.error().Message().find("cut"), std::string::npos);
        continue;
      }
      (void)f->ForEach([](const IndexEntry&) { return Ok(); });
    }
    std::mt19937 rng(v);
    for (int round = 0; round < 3000; ++round) {
      std::vector<char> bad(whole.begin(), whole.end());
      for (int k = 0; k < 4; ++k)
        bad[rng() % bad.size()] = static_cast<char>(rng());
      auto f = IndexFile::Parse({bad.data(), bad.size()}, "bad");
      if (!f) {
        EXPECT_EQ(f.err(), EINVAL);
        continue;
      }
      (void)f->ForEach([](const IndexEntry&) { return Ok(); });
    }
  }
  const std::string v5 =
      std::string("DIRC\0\0\0\x05\0\0\0\0", 12) + std::string(20, '\0');
  auto f = IndexFile::Parse(v5, "v5");
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().Message().find("version 5"), std::string::npos);
}

}  // namespace
}  // namespace acqfs::gitbridge
