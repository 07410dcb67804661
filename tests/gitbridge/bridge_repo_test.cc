// Tests of BridgeRepo and CheckTreeEntry: the bridge is created bare, without
// hooks, with the protect settings and the host's objects as alternates;
// CopyReachable copies exactly the objects the bridge lacks, verifies them
// and refuses unsafe trees without writing them; refs are plain refs;
// VerifyPublished finds damaged, missing and wrong objects of the bridge's
// own, and reads none of the host's.
#include "gitbridge/bridge_repo.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "harness/git_env.h"
#include "harness/git_test_util.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::Git;
using ::acqfs::test::Lines;
using ::acqfs::test::LooseObjects;
using ::acqfs::test::MakeFile;
using ::acqfs::test::Oid;
using ::acqfs::test::ReadFile;
using ::acqfs::test::Sh;
using ::acqfs::test::ShellQuote;
using ::acqfs::test::TempDir;

// path -> (size, mtime) of every entry below `root`, for "not touched".
std::map<std::string, std::pair<uintmax_t, int64_t>> Times(
    const std::string& root) {
  std::map<std::string, std::pair<uintmax_t, int64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) != 0) continue;
    out[e.path().string()] = {
        static_cast<uintmax_t>(st.st_size),
        int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
  }
  return out;
}

// A raw tree: entries (mode, name, id) serialized exactly as given.
std::string RawTree(
    const std::vector<std::tuple<std::string, std::string, git_oid>>& ents) {
  std::string out;
  for (const auto& [mode, name, id] : ents) {
    out += mode + " " + name;
    out.push_back('\0');
    out.append(reinterpret_cast<const char*>(id.id), GIT_OID_RAWSZ);
  }
  return out;
}

class BridgeRepoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    host_ = root_ + "/host";
    scratch_ = root_ + "/scratch";
    bridge_path_ = root_ + "/state/bridge.git";
    Sh("git init -q -b main " + ShellQuote(host_));
    MakeFile(host_ + "/dir/a.txt", "a\n");
    MakeFile(host_ + "/b.txt", "b\n");
    Git(host_, "add -A");
    Git(host_, "commit -q -m base");
    base_ = Git(host_, "rev-parse HEAD");
    Sh("git clone -q --no-hardlinks " + ShellQuote(host_) + " " +
       ShellQuote(scratch_));
    int rc = git_repository_open(&source_raw_, scratch_.c_str());
    ASSERT_EQ(rc, 0);
    source_.reset(source_raw_);
    auto b = BridgeRepo::OpenOrCreate(bridge_path_, host_ + "/.git/objects");
    ASSERT_TRUE(b.ok()) << b.error().Message();
    bridge_.emplace(std::move(*b));
  }
  void TearDown() override {
    bridge_.reset();
    source_.reset();
  }

  // Two commits on branch "work" in the scratch clone.
  std::string MakeWork() {
    Git(scratch_, "checkout -q -b work");
    MakeFile(scratch_ + "/dir/a.txt", "a changed\n");
    MakeFile(scratch_ + "/new/deep/c.txt", "c\n");
    Git(scratch_, "add -A");
    Git(scratch_, "commit -q -m one");
    MakeFile(scratch_ + "/d.txt", "d\n");
    Git(scratch_, "add -A");
    Git(scratch_, "commit -q -m two");
    return Git(scratch_, "rev-parse HEAD");
  }

  git_oid WriteObject(git_repository* repo, const std::string& data,
                      git_object_t type) {
    git_odb* raw = nullptr;
    EXPECT_EQ(git_repository_odb(&raw, repo), 0);
    GitOdb odb(raw);
    git_oid id{};
    EXPECT_EQ(git_odb_write(&id, odb.get(), data.data(), data.size(), type), 0);
    return id;
  }

  // A commit on base_ in the scratch clone whose root tree is `tree_bytes`.
  git_oid CommitRawTree(const std::string& tree_bytes) {
    git_oid tree = WriteObject(source_.get(), tree_bytes, GIT_OBJECT_TREE);
    std::string commit = "tree " + OidHex(tree) + "\nparent " + base_ +
                         "\nauthor T <t@t> 0 +0000\n"
                         "committer T <t@t> 0 +0000\n\nraw\n";
    return WriteObject(source_.get(), commit, GIT_OBJECT_COMMIT);
  }

  bool BridgeHas(const git_oid& id) {
    git_odb* raw = nullptr;
    EXPECT_EQ(git_repository_odb(&raw, bridge_->repo()), 0);
    GitOdb odb(raw);
    return git_odb_exists(odb.get(), &id) == 1;
  }

  std::string BridgeObjects() const { return bridge_path_ + "/objects"; }

  TempDir tmp_;
  std::string root_, host_, scratch_, bridge_path_, base_;
  git_repository* source_raw_ = nullptr;
  GitRepository source_;
  std::optional<BridgeRepo> bridge_;
};

TEST_F(BridgeRepoTest, CreatesABareRepositoryWithoutHooks) {
  EXPECT_TRUE(git_repository_is_bare(bridge_->repo()));
  EXPECT_EQ(bridge_->path(), bridge_path_);
  if (fs::exists(bridge_path_ + "/hooks")) {
    EXPECT_TRUE(fs::is_empty(bridge_path_ + "/hooks"));
  }
  EXPECT_EQ(ReadFile(bridge_path_ + "/objects/info/alternates"),
            host_ + "/.git/objects\n");
  EXPECT_TRUE(LooseObjects(BridgeObjects()).empty());
}

TEST_F(BridgeRepoTest, HasTheProtectSettings) {
  git_config* raw = nullptr;
  ASSERT_EQ(git_config_open_ondisk(&raw, (bridge_path_ + "/config").c_str()),
            0);
  GitConfig cfg(raw);
  for (const char* key :
       {"core.protectHFS", "core.protectNTFS", "core.logAllRefUpdates"}) {
    int v = 0;
    ASSERT_EQ(git_config_get_bool(&v, cfg.get(), key), 0) << key;
    EXPECT_TRUE(v) << key;
  }
  int32_t gc = 1;
  ASSERT_EQ(git_config_get_int32(&gc, cfg.get(), "gc.auto"), 0);
  EXPECT_EQ(gc, 0);
  EXPECT_EQ(Git(bridge_path_, "config core.protectNTFS"), "true");
}

TEST_F(BridgeRepoTest, ReopensAndRewritesAlternates) {
  bridge_.reset();
  std::string other = root_ + "/other/objects";
  fs::create_directories(other);
  ASSERT_OK_AND_ASSIGN(auto b, BridgeRepo::OpenOrCreate(bridge_path_, other));
  EXPECT_EQ(ReadFile(bridge_path_ + "/objects/info/alternates"), other + "\n");
  ASSERT_OK_AND_ASSIGN(auto b2, BridgeRepo::OpenOrCreate(bridge_path_, ""));
  EXPECT_EQ(ReadFile(bridge_path_ + "/objects/info/alternates"), other + "\n");
  ASSERT_OK(BridgeRepo::Open(bridge_path_));
}

TEST_F(BridgeRepoTest, OpenWithoutABridgeIsENOENT) {
  auto b = BridgeRepo::Open(root_ + "/nothing.git");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.err(), ENOENT);
}

TEST_F(BridgeRepoTest, RelativeAlternatesAreRefused) {
  auto b = BridgeRepo::OpenOrCreate(root_ + "/b2.git", "host/.git/objects");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.err(), EINVAL);
}

TEST_F(BridgeRepoTest, ReadsHostObjectsThroughAlternates) {
  git_commit* raw = nullptr;
  git_oid base = Oid(base_);
  ASSERT_EQ(git_commit_lookup(&raw, bridge_->repo(), &base), 0);
  GitCommit c(raw);
}

TEST_F(BridgeRepoTest, CopiesExactlyTheObjectsTheHostLacks) {
  std::string work = MakeWork();
  std::set<std::string> want;
  for (const auto& line :
       Lines(Git(scratch_, "rev-list --objects work --not main")))
    want.insert(line.substr(0, GIT_OID_HEXSZ));
  // 2 commits; trees /, dir, new, new/deep, then / again; blobs a, c, d.
  ASSERT_EQ(want.size(), 10u);
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {Oid(base_)}));
  EXPECT_EQ(LooseObjects(BridgeObjects()), want);
  // Nothing more on a second copy, and without the hint the host's objects
  // are still found through the alternates.
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  EXPECT_EQ(LooseObjects(BridgeObjects()), want);
  Git(bridge_path_, "fsck --strict --no-dangling " + work);
}

TEST_F(BridgeRepoTest, CopyWithoutHideStopsAtHostObjects) {
  std::string work = MakeWork();
  std::set<std::string> want;
  for (const auto& line :
       Lines(Git(scratch_, "rev-list --objects work --not main")))
    want.insert(line.substr(0, GIT_OID_HEXSZ));
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  EXPECT_EQ(LooseObjects(BridgeObjects()), want);
}

TEST_F(BridgeRepoTest, CopyingNeverTouchesTheHost) {
  std::string work = MakeWork();
  auto before = Times(host_ + "/.git");
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  // Writing an object the host has must not "freshen" the host's copy.
  std::string host_blob = Git(host_, "rev-parse HEAD:b.txt");
  git_oid written = WriteObject(bridge_->repo(), "b\n", GIT_OBJECT_BLOB);
  EXPECT_EQ(OidHex(written), host_blob);
  EXPECT_EQ(LooseObjects(BridgeObjects()).count(host_blob), 0u);
  EXPECT_EQ(Times(host_ + "/.git"), before);
}

struct Refusal {
  std::string mode;
  std::string name;
};

class BridgeRefusalTest : public BridgeRepoTest,
                          public ::testing::WithParamInterface<Refusal> {};

TEST_P(BridgeRefusalTest, UnsafeTreeIsRefusedAndNothingOfItWritten) {
  git_oid blob = WriteObject(source_.get(), "x\n", GIT_OBJECT_BLOB);
  git_oid tree = WriteObject(
      source_.get(), RawTree({{GetParam().mode, GetParam().name, blob}}),
      GIT_OBJECT_TREE);
  // The bad tree sits one level down: the refusal names the path.
  git_oid top = WriteObject(source_.get(), RawTree({{"40000", "sub", tree}}),
                            GIT_OBJECT_TREE);
  std::string commit = "tree " + OidHex(top) + "\nparent " + base_ +
                       "\nauthor T <t@t> 0 +0000\n"
                       "committer T <t@t> 0 +0000\n\nraw\n";
  git_oid id = WriteObject(source_.get(), commit, GIT_OBJECT_COMMIT);
  Status s = bridge_->CopyReachable(source_.get(), {id}, {Oid(base_)});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EPERM);
  EXPECT_NE(s.error().op.find("refused tree entry"), std::string::npos)
      << s.error().Message();
  EXPECT_NE(s.error().path.find(OidHex(id) + ":sub/"), std::string::npos)
      << s.error().Message();
  EXPECT_FALSE(BridgeHas(id));
  EXPECT_FALSE(BridgeHas(top));
  EXPECT_FALSE(BridgeHas(tree));
  EXPECT_FALSE(BridgeHas(blob));
}

INSTANTIATE_TEST_SUITE_P(
    Names, BridgeRefusalTest,
    ::testing::Values(
        Refusal{"100644", ".git"}, Refusal{"40000", ".git"},
        Refusal{"100644", ".GIT"}, Refusal{"100644", "git~1"},
        Refusal{"100644", "GIT~1"}, Refusal{"100644", ".git. "},
        Refusal{"100644", ".git::$INDEX_ALLOCATION"},
        Refusal{"100644", ".g\xE2\x80\x8Cit"},
        Refusal{"100644", "\xEF\xBB\xBF.git"}, Refusal{"120000", ".gitmodules"},
        Refusal{"120000", ".GitModules"}, Refusal{"120000", "gitmod~1"},
        Refusal{"120000", ".gitmodules "}, Refusal{"100644", ".."},
        Refusal{"100644", "."},
        // The rest of git fsck's rules (git_names.h).
        Refusal{"120000", "GITMOD~1 ."}, Refusal{"120000", "~1234567"},
        Refusal{"120000", "a\\.gitmodules"}, Refusal{"100644", "a\\.git"},
        Refusal{"120000", ".gitignore"}, Refusal{"120000", "gi7d29~1"},
        Refusal{"120000", ".MAILMAP."}, Refusal{"40000", ".gitmodules"},
        Refusal{"160000", ".gitattributes"}, Refusal{"120755", "link"},
        Refusal{"100600", "f"}, Refusal{"0100644", "padded"}));

TEST_F(BridgeRepoTest, SafeLookalikesAreCopied) {
  git_oid blob = WriteObject(source_.get(), "x\n", GIT_OBJECT_BLOB);
  git_oid link = WriteObject(source_.get(), "target", GIT_OBJECT_BLOB);
  git_oid id = CommitRawTree(RawTree({{"100644", ".github", blob},
                                      {"100644", ".gitmodules", blob},
                                      {"100644", "a:b", blob},
                                      {"120000", "gitattr", link},
                                      {"100644", "git~2", blob}}));
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {id}, {Oid(base_)}));
  EXPECT_TRUE(BridgeHas(id));
}

TEST_F(BridgeRepoTest, CorruptSourceObjectIsRefused) {
  Git(scratch_, "checkout -q -b work");
  MakeFile(scratch_ + "/n1.txt", "one\n");
  MakeFile(scratch_ + "/n2.txt", "two\n");
  Git(scratch_, "add -A");
  Git(scratch_, "commit -q -m corrupt");
  std::string work = Git(scratch_, "rev-parse HEAD");
  std::string n1 = Git(scratch_, "rev-parse HEAD:n1.txt");
  std::string n2 = Git(scratch_, "rev-parse HEAD:n2.txt");
  std::string tree = Git(scratch_, "rev-parse HEAD^{tree}");
  // n1's object file now holds n2's object: its name no longer matches.
  std::string objs = scratch_ + "/.git/objects/";
  std::string p1 = objs + n1.substr(0, 2) + "/" + n1.substr(2);
  fs::permissions(p1, fs::perms::owner_write, fs::perm_options::add);
  fs::copy_file(objs + n2.substr(0, 2) + "/" + n2.substr(2), p1,
                fs::copy_options::overwrite_existing);
  Status s = bridge_->CopyReachable(source_.get(), {Oid(work)}, {Oid(base_)});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EIO) << s.error().Message();
  EXPECT_NE(s.error().Message().find(n1), std::string::npos)
      << s.error().Message();
  EXPECT_FALSE(BridgeHas(Oid(work)));
  EXPECT_FALSE(BridgeHas(Oid(tree)));
  EXPECT_FALSE(BridgeHas(Oid(n1)));
}

TEST_F(BridgeRepoTest, EntryOfTheWrongTypeIsRefused) {
  git_oid blob = WriteObject(source_.get(), "x\n", GIT_OBJECT_BLOB);
  git_oid inner = WriteObject(source_.get(), RawTree({{"100644", "f", blob}}),
                              GIT_OBJECT_TREE);
  // "file" claims to be a blob but names a tree.
  git_oid id = CommitRawTree(RawTree({{"100644", "file", inner}}));
  Status s = bridge_->CopyReachable(source_.get(), {id}, {Oid(base_)});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EIO) << s.error().Message();
  EXPECT_FALSE(BridgeHas(id));
}

TEST_F(BridgeRepoTest, DuplicateEntriesAreRefused) {
  git_oid blob = WriteObject(source_.get(), "x\n", GIT_OBJECT_BLOB);
  git_oid id = CommitRawTree(
      RawTree({{"100644", "same", blob}, {"100644", "same", blob}}));
  Status s = bridge_->CopyReachable(source_.get(), {id}, {Oid(base_)});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EPERM);
}

TEST_F(BridgeRepoTest, SetListAndDeleteRefs) {
  git_oid base = Oid(base_);
  ASSERT_OK(bridge_->SetRef("refs/heads/x", base, "test"));
  ASSERT_OK(bridge_->SetRef("refs/heads/topic/y", base, "test"));
  ASSERT_OK(bridge_->SetRef("refs/acqfs/worktree", base, "test"));
  ASSERT_OK_AND_ASSIGN(auto heads, bridge_->Refs("refs/heads/"));
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_TRUE(git_oid_equal(&heads["x"], &base));
  EXPECT_TRUE(git_oid_equal(&heads["topic/y"], &base));
  ASSERT_OK_AND_ASSIGN(auto acqfs, bridge_->Refs("refs/acqfs/"));
  ASSERT_EQ(acqfs.size(), 1u);
  EXPECT_EQ(acqfs.count("worktree"), 1u);
  // Reflogs are kept (core.logAllRefUpdates).
  EXPECT_TRUE(fs::exists(bridge_path_ + "/logs/refs/heads/x"));
  // Force: moving a ref is allowed.
  std::string work = MakeWork();
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  ASSERT_OK(bridge_->SetRef("refs/heads/x", Oid(work), "test"));
  ASSERT_OK(bridge_->DeleteRef("refs/heads/topic/y"));
  ASSERT_OK(bridge_->DeleteRef("refs/heads/missing"));
  ASSERT_OK_AND_ASSIGN(auto after, bridge_->Refs("refs/heads/"));
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(OidHex(after["x"]), work);
  EXPECT_EQ(
      Git(host_, "ls-remote " + ShellQuote(bridge_path_) + " refs/heads/x"),
      work + "\trefs/heads/x");
}

// The bridge's own objects, as loose files: id -> path.
std::map<std::string, std::string> LooseFiles(const std::string& objects) {
  std::map<std::string, std::string> out;
  for (const std::string& id : LooseObjects(objects))
    out[id] = objects + "/" + id.substr(0, 2) + "/" + id.substr(2);
  return out;
}

void Truncate(const std::string& path) {
  ::chmod(path.c_str(), 0644);
  ASSERT_EQ(::truncate(path.c_str(), 0), 0) << path;
}

TEST_F(BridgeRepoTest, VerifyPublishedPassesAnIntactBridge) {
  std::string work = MakeWork();
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  ASSERT_OK(bridge_->VerifyPublished({Oid(work)}));
  ASSERT_OK(bridge_->VerifyPublished({Oid(base_)}));  // the host's own
  ASSERT_OK(bridge_->VerifyPublished({}));
}

TEST_F(BridgeRepoTest, VerifyPublishedFindsEveryDamagedLooseObject) {
  std::string work = MakeWork();
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  auto files = LooseFiles(BridgeObjects());
  ASSERT_GE(files.size(), 6u);  // 2 commits, trees, blobs
  // Each object on its own: truncated, then put back.
  for (const auto& [id, path] : files) {
    std::string saved = ReadFile(path);
    Truncate(path);
    Status s = bridge_->VerifyPublished({Oid(work)});
    EXPECT_EQ(s.err(), EIO) << id;
    if (!s.ok()) {
      EXPECT_EQ(s.error().path, bridge_path_);
      EXPECT_NE(s.error().op.find(id), std::string::npos) << s.error().op;
      EXPECT_NE(s.error().op.find("damaged bridge"), std::string::npos);
    }
    ASSERT_EQ(::unlink(path.c_str()), 0);
    MakeFile(path, saved);
  }
  ASSERT_OK(bridge_->VerifyPublished({Oid(work)}));
}

TEST_F(BridgeRepoTest, VerifyPublishedFindsMissingAndAlteredObjects) {
  std::string work = MakeWork();
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  std::string blob = Git(scratch_, "rev-parse work:d.txt");
  std::string path = LooseFiles(BridgeObjects()).at(blob);
  // Another object's valid bytes under this name: the hash check finds it.
  std::string other = LooseFiles(BridgeObjects())
                          .at(Git(scratch_, "rev-parse work:new/deep/c.txt"));
  std::string saved = ReadFile(path);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  MakeFile(path, ReadFile(other));
  Status s = bridge_->VerifyPublished({Oid(work)});
  EXPECT_EQ(s.err(), EIO);
  EXPECT_NE(s.error().op.find(blob), std::string::npos) << s.error().op;
  ASSERT_EQ(::unlink(path.c_str()), 0);
  s = bridge_->VerifyPublished({Oid(work)});
  EXPECT_EQ(s.err(), EIO);
  EXPECT_NE(s.error().op.find("missing"), std::string::npos) << s.error().op;
  MakeFile(path, saved);
  ASSERT_OK(bridge_->VerifyPublished({Oid(work)}));
  // What no published ref reaches is not looked at.
  git_oid stray = WriteObject(bridge_->repo(), "stray\n", GIT_OBJECT_BLOB);
  Truncate(LooseFiles(BridgeObjects()).at(OidHex(stray)));
  ASSERT_OK(bridge_->VerifyPublished({Oid(work)}));
}

TEST_F(BridgeRepoTest, VerifyPublishedFindsADamagedPack) {
  std::string work = MakeWork();
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  ASSERT_OK(bridge_->SetRef("refs/heads/work", Oid(work), "test"));
  // git itself packs the bridge's own objects (-l: not the alternates').
  Git(bridge_path_, "repack -q -a -d -l");
  ASSERT_TRUE(LooseObjects(BridgeObjects()).empty());
  std::string pack;
  for (const auto& e : fs::directory_iterator(BridgeObjects() + "/pack"))
    if (e.path().extension() == ".pack") pack = e.path().string();
  ASSERT_FALSE(pack.empty());
  {
    auto fresh = BridgeRepo::Open(bridge_path_);
    ASSERT_TRUE(fresh.ok());
    ASSERT_OK(fresh->VerifyPublished({Oid(work)}));
  }
  Truncate(pack);
  auto fresh = BridgeRepo::Open(bridge_path_);
  ASSERT_TRUE(fresh.ok());
  Status s = fresh->VerifyPublished({Oid(work)});
  EXPECT_EQ(s.err(), EIO);
  EXPECT_NE(s.error().op.find("damaged bridge"), std::string::npos)
      << s.error().Message();
}

// Cost: only the bridge's own objects are read; the host's are only looked
// up. With the host's objects unreadable, verification still passes.
TEST_F(BridgeRepoTest, VerifyPublishedNeverReadsTheHostsObjects) {
  std::string work = MakeWork();
  ASSERT_OK(bridge_->CopyReachable(source_.get(), {Oid(work)}, {}));
  std::vector<std::string> host_files;
  for (const auto& [id, path] : LooseFiles(host_ + "/.git/objects"))
    host_files.push_back(path);
  ASSERT_FALSE(host_files.empty());
  std::map<std::string, std::string> saved;
  for (const std::string& f : host_files) {
    saved[f] = ReadFile(f);
    Truncate(f);
  }
  auto fresh = BridgeRepo::Open(bridge_path_);
  ASSERT_TRUE(fresh.ok());
  Status s = fresh->VerifyPublished({Oid(work)});
  for (const auto& [f, data] : saved) {
    ::unlink(f.c_str());
    MakeFile(f, data);
  }
  ASSERT_OK(s);
}

TEST(CheckTreeEntry, RefusesGitDirectorySpellings) {
  for (const char* name : {".git",
                           ".GIT",
                           ".Git",
                           "git~1",
                           "GIT~1",
                           ".git.",
                           ".git. . ",
                           ".git  ",
                           ".git:",
                           ".git::$INDEX_ALLOCATION",
                           ".git:stream",
                           "\xE2\x80\x8C.git",
                           ".g\xE2\x80\x8Dit",
                           ".gi\xE2\x80\x8Et",
                           ".git\xE2\x80\x8F",
                           ".g\xE2\x80\xAAit",
                           ".g\xE2\x80\xAEit",
                           ".g\xE2\x81\xAAit",
                           ".g\xE2\x81\xAFit",
                           ".g\xEF\xBB\xBFit",
                           "",
                           ".",
                           "..",
                           "a/b"}) {
    Status s = CheckTreeEntry(name, GIT_FILEMODE_TREE, "where");
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.err(), EPERM) << name;
    EXPECT_EQ(s.error().path, "where");
  }
  EXPECT_FALSE(
      CheckTreeEntry(std::string("a\0b", 3), GIT_FILEMODE_BLOB, "w").ok());
}

TEST(CheckTreeEntry, RefusesSymlinkedGitmodules) {
  for (const char* name :
       {".gitmodules", ".GITMODULES", "gitmod~1", "GITMOD~4", "gi7eba~1",
        ".gitmodules.", ".gitmodules::$DATA", ".gitm\xE2\x80\x8Codules"}) {
    EXPECT_EQ(CheckTreeEntry(name, GIT_FILEMODE_LINK, "w").err(), EPERM)
        << name;
    EXPECT_TRUE(CheckTreeEntry(name, GIT_FILEMODE_BLOB, "w").ok()) << name;
  }
}

TEST(CheckTreeEntry, AcceptsOrdinaryNames) {
  for (const char* name : {"a", ".github", "git", "git~2", ".git~1", "a:b",
                           "x.git", ".gitx", "gitmod~5", "...", " "}) {
    EXPECT_TRUE(CheckTreeEntry(name, GIT_FILEMODE_BLOB, "w").ok()) << name;
    EXPECT_TRUE(CheckTreeEntry(name, GIT_FILEMODE_LINK, "w").ok()) << name;
  }
}

}  // namespace
}  // namespace acqfs::gitbridge
