// Tests of SandboxRepo: the sandbox's refs and objects read from hand-built
// layers (lower = a real checkout, upper = what git in the sandbox would
// leave: loose refs, whiteouts, packed-refs, loose objects and packs), with
// whiteouts and opaque directories honoured and no symlink followed.
#include "gitbridge/sandbox_repo.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "gitbridge/bridge_repo.h"
#include "harness/git_env.h"
#include "harness/git_test_util.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::Git;
using ::acqfs::test::MakeFile;
using ::acqfs::test::MakeOpaqueDir;
using ::acqfs::test::MakeWhiteoutAt;
using ::acqfs::test::Oid;
using ::acqfs::test::ReadFile;
using ::acqfs::test::Sh;
using ::acqfs::test::ShellQuote;
using ::acqfs::test::TempDir;

std::string Hex(const git_oid& id) { return OidHex(id); }

std::string LooseObjectPath(const std::string& objects, const std::string& h) {
  return objects + "/" + h.substr(0, 2) + "/" + h.substr(2);
}

class SandboxRepoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    lower_ = root_ + "/lower";
    upper_ = root_ + "/upper";
    scratch_ = root_ + "/scratch";
    MakeLower();
    fs::create_directories(upper_);
  }

  // main, packedonly, feat in packed-refs; gone loose; all at c1.
  void MakeLower() {
    Sh("git init -q -b main " + ShellQuote(lower_));
    MakeFile(lower_ + "/a.txt", "a\n");
    Git(lower_, "add a.txt");
    Git(lower_, "commit -q -m c1");
    Git(lower_, "branch packedonly");
    Git(lower_, "branch feat");
    Git(lower_, "pack-refs --all");
    Git(lower_, "branch gone");
    c1_ = Git(lower_, "rev-parse HEAD");
  }

  // In a clone of the lower: c2 (branch agent) and c3 (branch featx), both
  // on c1. Their new objects are copied into upper/.git/objects as loose
  // objects when `copy_loose`.
  void MakeSandboxCommits(bool copy_loose) {
    Sh("git clone -q --no-hardlinks " + ShellQuote(lower_) + " " +
       ShellQuote(scratch_));
    Git(scratch_, "checkout -q -b agent");
    MakeFile(scratch_ + "/b.txt", "b\n");
    Git(scratch_, "add b.txt");
    Git(scratch_, "commit -q -m c2");
    c2_ = Git(scratch_, "rev-parse HEAD");
    Git(scratch_, "checkout -q -b featx main");
    MakeFile(scratch_ + "/dir/c.txt", "c\n");
    Git(scratch_, "add dir");
    Git(scratch_, "commit -q -m c3");
    c3_ = Git(scratch_, "rev-parse HEAD");
    if (!copy_loose) return;
    std::istringstream objs(Git(
        scratch_, "rev-list --objects " + c2_ + " " + c3_ + " --not " + c1_));
    std::string line;
    while (std::getline(objs, line)) {
      std::string h = line.substr(0, 40);
      std::string to = LooseObjectPath(upper_ + "/.git/objects", h);
      fs::create_directories(fs::path(to).parent_path());
      fs::copy_file(LooseObjectPath(scratch_ + "/.git/objects", h), to);
    }
  }

  // The usual upper: HEAD -> agent (loose, c2), feat loose (c3) over its
  // packed c1, gone whited out, an upper packed-refs adding newpacked.
  void MakeUpper() {
    MakeSandboxCommits(true);
    std::string heads = upper_ + "/.git/refs/heads";
    fs::create_directories(heads);
    MakeFile(heads + "/agent", c2_ + "\n");
    MakeFile(heads + "/feat", c3_ + "\n");
    MakeWhiteoutAt(heads + "/gone");
    MakeFile(upper_ + "/.git/packed-refs",
             "# pack-refs with: peeled fully-peeled sorted \n" + c1_ +
                 " refs/heads/feat\n" + c1_ + " refs/heads/main\n" + c2_ +
                 " refs/heads/newpacked\n" + c1_ + " refs/heads/packedonly\n" +
                 c3_ + " refs/tags/v1\n^" + c1_ + "\n");
    MakeFile(upper_ + "/.git/HEAD", "ref: refs/heads/agent\n");
  }

  Layers OpenLayers() {
    auto l = Layers::OpenForReading(lower_, upper_, XattrNamespace::kUser);
    EXPECT_TRUE(l.ok()) << l.error().Message();
    return std::move(*l);
  }

  std::map<std::string, std::string> BranchHexes(const SandboxRepo& repo) {
    std::map<std::string, std::string> out;
    auto b = repo.Branches();
    EXPECT_TRUE(b.ok()) << b.error().Message();
    if (!b.ok()) return out;
    for (const auto& [name, id] : *b) out[name] = Hex(id);
    return out;
  }

  bool HasCommit(const SandboxRepo& repo, const std::string& hex) {
    git_commit* raw = nullptr;
    git_oid id = Oid(hex);
    int rc = git_commit_lookup(&raw, repo.repo(), &id);
    GitCommit c(raw);
    return rc == 0;
  }

  TempDir tmp_;
  std::string root_, lower_, upper_, scratch_;
  std::string c1_, c2_, c3_;
};

TEST_F(SandboxRepoTest, LowerOnlyShowsTheCheckoutsRefs) {
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  std::map<std::string, std::string> want = {
      {"feat", c1_}, {"gone", c1_}, {"main", c1_}, {"packedonly", c1_}};
  EXPECT_EQ(BranchHexes(repo), want);
  ASSERT_OK_AND_ASSIGN(auto head, repo.Head());
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(Hex(*head), c1_);
  ASSERT_OK_AND_ASSIGN(auto branch, repo.HeadBranch());
  EXPECT_EQ(branch, "main");
  EXPECT_TRUE(HasCommit(repo, c1_));
}

TEST_F(SandboxRepoTest, LooseRefsWinWhiteoutsDeleteUpperPackedRefsShows) {
  MakeUpper();
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  std::map<std::string, std::string> want = {{"agent", c2_},
                                             {"feat", c3_},
                                             {"main", c1_},
                                             {"newpacked", c2_},
                                             {"packedonly", c1_}};
  EXPECT_EQ(BranchHexes(repo), want);
}

TEST_F(SandboxRepoTest, HeadFollowsTheSymbolicRefIntoTheUpper) {
  MakeUpper();
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  ASSERT_OK_AND_ASSIGN(auto head, repo.Head());
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(Hex(*head), c2_);
  ASSERT_OK_AND_ASSIGN(auto branch, repo.HeadBranch());
  EXPECT_EQ(branch, "agent");
}

TEST_F(SandboxRepoTest, ObjectsComeFromBothLayers) {
  MakeUpper();
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  EXPECT_TRUE(HasCommit(repo, c1_));
  EXPECT_TRUE(HasCommit(repo, c2_));
  EXPECT_TRUE(HasCommit(repo, c3_));
  // The whole history of c3 is readable, trees and blobs included.
  git_object* raw = nullptr;
  ASSERT_EQ(
      git_revparse_single(&raw, repo.repo(), (c3_ + ":dir/c.txt").c_str()), 0);
  GitObject blob(raw);
  EXPECT_EQ(git_object_type(blob.get()), GIT_OBJECT_BLOB);
  // The repository has no refs or config of its own.
  EXPECT_NE(git_revparse_single(&raw, repo.repo(), "HEAD"), 0);
}

TEST_F(SandboxRepoTest, NestedLooseBranchesAreListed) {
  MakeUpper();
  MakeFile(upper_ + "/.git/refs/heads/topic/deep/x", c3_ + "\n");
  MakeFile(upper_ + "/.git/refs/heads/topic/y.lock", c3_ + "\n");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  auto b = BranchHexes(repo);
  EXPECT_EQ(b["topic/deep/x"], c3_);
  EXPECT_EQ(b.count("topic/y.lock"), 0u);
}

TEST_F(SandboxRepoTest, OpaqueRefsDirectoryHidesLowerLooseRefs) {
  MakeSandboxCommits(true);
  std::string heads = upper_ + "/.git/refs/heads";
  fs::create_directories(heads);
  MakeOpaqueDir(heads);
  MakeFile(heads + "/solo", c2_ + "\n");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  // "gone" was a lower loose ref; the lower packed-refs still shows through.
  std::map<std::string, std::string> want = {
      {"feat", c1_}, {"main", c1_}, {"packedonly", c1_}, {"solo", c2_}};
  EXPECT_EQ(BranchHexes(repo), want);
}

TEST_F(SandboxRepoTest, WhitedOutPackedRefsHidesPackedBranches) {
  MakeWhiteoutAt(upper_ + "/.git/packed-refs");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  std::map<std::string, std::string> want = {{"gone", c1_}};
  EXPECT_EQ(BranchHexes(repo), want);
  ASSERT_OK_AND_ASSIGN(auto head, repo.Head());  // main was only packed
  EXPECT_FALSE(head.has_value());
  ASSERT_OK_AND_ASSIGN(auto branch, repo.HeadBranch());
  EXPECT_EQ(branch, "");
}

TEST_F(SandboxRepoTest, SymlinksAreNeverFollowed) {
  MakeFile(root_ + "/outside/ref", c1_ + "\n");
  MakeFile(root_ + "/outside/HEAD", "ref: refs/heads/main\n");
  std::string heads = upper_ + "/.git/refs/heads";
  fs::create_directories(heads);
  fs::create_symlink(root_ + "/outside/ref", heads + "/evil");
  fs::create_symlink(root_ + "/outside/HEAD", upper_ + "/.git/HEAD");
  fs::create_symlink(root_ + "/outside", heads + "/evildir");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  auto b = BranchHexes(repo);
  EXPECT_EQ(b.count("evil"), 0u);
  EXPECT_EQ(b.count("evildir/ref"), 0u);
  EXPECT_EQ(b.count("main"), 1u);
  ASSERT_OK_AND_ASSIGN(auto head, repo.Head());
  EXPECT_FALSE(head.has_value());
}

TEST_F(SandboxRepoTest, SymlinkedRefsDirectoryShadowsTheLowerOne) {
  MakeFile(root_ + "/outside/heads/evil", c1_ + "\n");
  fs::create_directories(upper_ + "/.git");
  fs::create_symlink(root_ + "/outside", upper_ + "/.git/refs");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  std::map<std::string, std::string> want = {
      {"feat", c1_}, {"main", c1_}, {"packedonly", c1_}};
  EXPECT_EQ(BranchHexes(repo), want);
}

TEST_F(SandboxRepoTest, DetachedHead) {
  MakeUpper();
  MakeFile(upper_ + "/.git/HEAD", c3_ + "\n");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  ASSERT_OK_AND_ASSIGN(auto head, repo.Head());
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(Hex(*head), c3_);
  ASSERT_OK_AND_ASSIGN(auto branch, repo.HeadBranch());
  EXPECT_EQ(branch, "");
}

TEST_F(SandboxRepoTest, UnbornHead) {
  MakeFile(upper_ + "/.git/HEAD", "ref: refs/heads/nothing\n");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  ASSERT_OK_AND_ASSIGN(auto head, repo.Head());
  EXPECT_FALSE(head.has_value());
  ASSERT_OK_AND_ASSIGN(auto branch, repo.HeadBranch());
  EXPECT_EQ(branch, "");
}

TEST_F(SandboxRepoTest, SymbolicRefLoopIsAnErrorAndNotABranch) {
  std::string heads = upper_ + "/.git/refs/heads";
  MakeFile(heads + "/a", "ref: refs/heads/b\n");
  MakeFile(heads + "/b", "ref: refs/heads/a\n");
  MakeFile(upper_ + "/.git/HEAD", "ref: refs/heads/a\n");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  auto head = repo.Head();
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.err(), ELOOP);
  auto b = BranchHexes(repo);
  EXPECT_EQ(b.count("a"), 0u);
  EXPECT_EQ(b.count("b"), 0u);
}

TEST_F(SandboxRepoTest, HeadCannotLeaveTheRefsNamespace) {
  MakeFile(root_ + "/outside", c1_ + "\n");
  MakeFile(upper_ + "/.git/HEAD", "ref: refs/../../../outside\n");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  auto head = repo.Head();
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.err(), EINVAL);
  MakeFile(upper_ + "/.git/HEAD", "ref: config\n");
  head = repo.Head();
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.err(), EINVAL);
}

TEST_F(SandboxRepoTest, PacksInTheUpperAfterGcWithLowerObjectsWhitedOut) {
  MakeSandboxCommits(false);
  Git(scratch_, "gc -q");
  std::string packs = upper_ + "/.git/objects/pack";
  fs::create_directories(packs);
  for (const auto& e : fs::directory_iterator(scratch_ + "/.git/objects/pack"))
    fs::copy_file(e.path(), packs + "/" + e.path().filename().string());
  // gc in the sandbox deletes the lower's loose objects: whiteouts.
  for (const auto& d : fs::directory_iterator(lower_ + "/.git/objects")) {
    std::string dn = d.path().filename().string();
    if (dn.size() != 2) continue;
    for (const auto& f : fs::directory_iterator(d.path()))
      MakeWhiteoutAt(upper_ + "/.git/objects/" + dn + "/" +
                     f.path().filename().string());
  }
  MakeFile(upper_ + "/.git/refs/heads/agent", c2_ + "\n");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  EXPECT_TRUE(HasCommit(repo, c1_));
  EXPECT_TRUE(HasCommit(repo, c2_));
  EXPECT_TRUE(HasCommit(repo, c3_));
  git_object* raw = nullptr;
  ASSERT_EQ(git_revparse_single(&raw, repo.repo(), (c1_ + ":a.txt").c_str()),
            0);
  GitObject blob(raw);
}

TEST_F(SandboxRepoTest, OpaqueObjectsDirectoryHidesLowerObjects) {
  MakeSandboxCommits(true);
  MakeOpaqueDir(upper_ + "/.git/objects");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  EXPECT_TRUE(HasCommit(repo, c2_));
  EXPECT_FALSE(HasCommit(repo, c1_));
}

TEST_F(SandboxRepoTest, UpperAlternatesAreNotRead) {
  MakeSandboxCommits(false);
  // The sandbox points its alternates at another repository's objects.
  MakeFile(upper_ + "/.git/objects/info/alternates",
           scratch_ + "/.git/objects\n");
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  EXPECT_TRUE(HasCommit(repo, c1_));
  EXPECT_FALSE(HasCommit(repo, c2_));
}

TEST_F(SandboxRepoTest, SymlinkInUpperObjectsIsNeverFollowed) {
  MakeSandboxCommits(false);
  fs::create_directories(upper_ + "/.git/objects");
  std::string h = c2_.substr(0, 2);
  fs::create_symlink(scratch_ + "/.git/objects/" + h,
                     upper_ + "/.git/objects/" + h);
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  EXPECT_TRUE(HasCommit(repo, c1_));  // the lower's, as before
  git_odb* raw = nullptr;
  ASSERT_EQ(git_repository_odb(&raw, repo.repo()), 0);
  GitOdb odb(raw);
  git_odb_object* obj = nullptr;
  git_oid id = Oid(c2_);
  EXPECT_LT(git_odb_read(&obj, odb.get(), &id), 0);
  git_odb_object_free(obj);
  const git_error* e = git_error_last();
  ASSERT_NE(e, nullptr);
  EXPECT_NE(std::string(e->message).find("symlink"), std::string::npos)
      << e->message;
}

// The attack of issue 12: the sandbox swaps a directory of its object store
// (or .git itself) for a symlink to another repository's, over and over,
// while the bridge reads it. No read may ever find the other repository's
// objects, however the swaps fall between a check and a use.
TEST_F(SandboxRepoTest, SwappingTheStoreForASymlinkNeverReadsAnotherRepo) {
  MakeSandboxCommits(true);
  std::string foreign = root_ + "/foreign";
  Sh("git init -q -b main " + ShellQuote(foreign));
  MakeFile(foreign + "/secret.txt", "secret\n");
  Git(foreign, "add secret.txt");
  Git(foreign, "commit -q -m secret");
  std::string f = Git(foreign, "rev-parse HEAD");
  std::string packed = root_ + "/foreign-packed";
  Sh("git clone -q --no-hardlinks " + ShellQuote(foreign) + " " +
     ShellQuote(packed));
  Git(packed, "gc -q");
  // A real directory of the fan-out name in the upper, for the swap.
  fs::create_directories(upper_ + "/.git/objects/" + f.substr(0, 2));
  fs::create_directories(upper_ + "/.git/objects/pack");
  struct Swap {
    std::string real;    // in the upper
    std::string target;  // another repository's
  };
  std::vector<Swap> swaps = {
      {upper_ + "/.git", foreign + "/.git"},
      {upper_ + "/.git/objects", foreign + "/.git/objects"},
      {upper_ + "/.git/objects/" + f.substr(0, 2),
       foreign + "/.git/objects/" + f.substr(0, 2)},
      {upper_ + "/.git/objects/pack", packed + "/.git/objects/pack"},
  };
  Layers layers = OpenLayers();
  git_oid fid = Oid(f);
  for (const Swap& sw : swaps) {
    std::string evil = sw.real + ".evil";
    fs::create_symlink(sw.target, evil);
    std::atomic<bool> stop{false};
    std::atomic<long> flips{0};
    std::thread swapper([&] {
      while (!stop) {
        // Atomic: the name is always either the directory or the link.
        if (::syscall(SYS_renameat2, AT_FDCWD, sw.real.c_str(), AT_FDCWD,
                      evil.c_str(), RENAME_EXCHANGE) == 0)
          ++flips;
      }
    });
    long reads = 0, leaks = 0, own = 0;
    auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (std::chrono::steady_clock::now() < until) {
      auto repo = SandboxRepo::Open(layers);
      if (!repo) continue;  // .git/objects was the link: the store is absent
      git_odb* raw = nullptr;
      ASSERT_EQ(git_repository_odb(&raw, repo->repo()), 0);
      GitOdb odb(raw);
      for (int i = 0; i < 20; ++i) {
        ++reads;
        if (git_odb_exists(odb.get(), &fid)) ++leaks;
        git_odb_object* obj = nullptr;
        if (git_odb_read(&obj, odb.get(), &fid) == 0) ++leaks;
        git_odb_object_free(obj);
        git_oid c2 = Oid(c2_);
        if (git_odb_read(&obj, odb.get(), &c2) == 0) ++own;
        git_odb_object_free(obj);
      }
    }
    stop = true;
    swapper.join();
    // Put the directory back in its place.
    struct stat st;
    ASSERT_EQ(::lstat(sw.real.c_str(), &st), 0);
    if (S_ISLNK(st.st_mode)) {
      ASSERT_EQ(::syscall(SYS_renameat2, AT_FDCWD, sw.real.c_str(), AT_FDCWD,
                          evil.c_str(), RENAME_EXCHANGE),
                0);
    }
    fs::remove(evil);
    EXPECT_EQ(leaks, 0) << sw.real << ": " << reads << " reads, " << flips
                        << " swaps";
    EXPECT_GT(flips, 100) << sw.real;
    EXPECT_GT(own, 0) << sw.real << ": the sandbox's own objects never read";
  }
}

// Damaged, planted and lying loose objects: each reads as missing or as an
// error naming the file, never hangs, never returns bytes that are not the
// object.
TEST_F(SandboxRepoTest, MalformedLooseObjectsAreRefused) {
  MakeSandboxCommits(true);
  std::string objects = upper_ + "/.git/objects";
  std::string good = ReadFile(LooseObjectPath(objects, c2_));
  struct Case {
    std::string name;
    std::function<void(const std::string& path)> make;
  };
  auto deflate = [&](const std::string& raw) {
    std::string in = root_ + "/raw", out = root_ + "/deflated";
    MakeFile(in, raw);
    Sh("python3 -c 'import sys,zlib; sys.stdout.buffer.write(zlib.compress("
       "open(sys.argv[1],\"rb\").read()))' " +
       ShellQuote(in) + " > " + ShellQuote(out));
    return ReadFile(out);
  };
  std::vector<Case> cases = {
      {"empty", [&](const std::string& p) { MakeFile(p, ""); }},
      {"truncated",
       [&](const std::string& p) {
         MakeFile(p, good.substr(0, good.size() / 2));
       }},
      {"garbage",
       [&](const std::string& p) { MakeFile(p, "not zlib at all"); }},
      {"fifo",
       [&](const std::string& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0); }},
      {"whiteout", [&](const std::string& p) { MakeWhiteoutAt(p); }},
      {"directory", [&](const std::string& p) { fs::create_directory(p); }},
      {"bad type",
       [&](const std::string& p) {
         MakeFile(p, deflate(std::string("blab 1\0x", 8)));
       }},
      {"size too small",
       [&](const std::string& p) {
         MakeFile(p, deflate(std::string("blob 1\0xy", 9)));
       }},
      {"size too large",
       [&](const std::string& p) {
         MakeFile(p, deflate(std::string("blob 3\0xy", 9)));
       }},
      {"huge size",
       [&](const std::string& p) {
         MakeFile(p, deflate(std::string("blob 99999999999999\0xy", 22)));
       }},
      {"leading zero",
       [&](const std::string& p) {
         MakeFile(p, deflate(std::string("blob 01\0x", 9)));
       }},
      {"another object's bytes",
       [&](const std::string& p) {
         MakeFile(p, deflate(std::string("blob 1\0x", 8)));
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string path = LooseObjectPath(objects, c2_);
    fs::remove_all(path);
    c.make(path);
    Layers layers = OpenLayers();
    ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
    git_odb* raw = nullptr;
    ASSERT_EQ(git_repository_odb(&raw, repo.repo()), 0);
    GitOdb odb(raw);
    git_oid id = Oid(c2_);
    git_odb_object* obj = nullptr;
    EXPECT_LT(git_odb_read(&obj, odb.get(), &id), 0);
    git_odb_object_free(obj);
    size_t len = 0;
    git_object_t type;
    int hrc = git_odb_read_header(&len, &type, odb.get(), &id);
    if (c.name == "another object's bytes" || c.name == "size too small" ||
        c.name == "size too large" || c.name == "truncated")
      EXPECT_EQ(hrc, 0);  // the header alone looks fine
    else
      EXPECT_LT(hrc, 0);
    EXPECT_FALSE(HasCommit(repo, c2_));
    EXPECT_TRUE(HasCommit(repo, c3_));
  }
  // And the real bytes read again.
  std::string path = LooseObjectPath(objects, c2_);
  fs::remove_all(path);
  MakeFile(path, good);
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  EXPECT_TRUE(HasCommit(repo, c2_));
}

TEST_F(SandboxRepoTest, SymlinkedPackFilesAreNotRead) {
  MakeSandboxCommits(false);
  Git(scratch_, "gc -q");
  std::string packs = upper_ + "/.git/objects/pack";
  fs::create_directories(packs);
  for (const auto& e : fs::directory_iterator(scratch_ + "/.git/objects/pack"))
    fs::create_symlink(e.path(), packs + "/" + e.path().filename().string());
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  EXPECT_FALSE(HasCommit(repo, c2_));
  EXPECT_TRUE(HasCommit(repo, c1_));
}

// A pack the sandbox truncates while libgit2 has it mapped raises SIGBUS:
// the process says so and exits 2, instead of dying of the signal unnamed.
TEST_F(SandboxRepoTest, APackShrunkWhileMappedEndsWithAMessage) {
  MakeSandboxCommits(false);
  Git(scratch_, "gc -q");
  std::string packs = upper_ + "/.git/objects/pack";
  fs::create_directories(packs);
  std::string pack_file;
  for (const auto& e :
       fs::directory_iterator(scratch_ + "/.git/objects/pack")) {
    std::string to = packs + "/" + e.path().filename().string();
    fs::copy_file(e.path(), to);
    if (e.path().extension() == ".pack") pack_file = to;
  }
  ASSERT_FALSE(pack_file.empty());
  EXPECT_EXIT(
      {
        // The forked child dies without cleaning up: its link directory
        // goes under the test's root, which the parent removes.
        ::setenv("TMPDIR", root_.c_str(), 1);
        Layers layers = OpenLayers();
        auto repo = SandboxRepo::Open(layers);
        if (!repo || !HasCommit(*repo, c2_)) std::_Exit(10);
        if (::truncate(pack_file.c_str(), 0) != 0) std::_Exit(11);
        git_odb* raw = nullptr;
        if (git_repository_odb(&raw, repo->repo()) != 0) std::_Exit(12);
        git_oid id = Oid(c3_);
        git_odb_object* obj = nullptr;
        int rc = git_odb_read(&obj, raw, &id);
        std::_Exit(rc == 0 ? 13 : 14);  // not reached: SIGBUS
      },
      ::testing::ExitedWithCode(2), "shrank while it was read");
}

// The private link directory goes when the object database does; one that
// a killed export left behind is removed by the next one, and a live
// process's is left alone.
TEST_F(SandboxRepoTest, PackLinkDirectoriesDoNotOutliveTheirExport) {
  MakeSandboxCommits(false);
  Git(scratch_, "gc -q");
  std::string packs = upper_ + "/.git/objects/pack";
  fs::create_directories(packs);
  for (const auto& e : fs::directory_iterator(scratch_ + "/.git/objects/pack"))
    fs::copy_file(e.path(), packs + "/" + e.path().filename().string());
  std::string tmp = root_ + "/tmp";
  // Beyond any pid_max: never a live process.
  std::string stale = tmp + "/acqfs-packs-4194305-abc";
  std::string live = tmp + "/acqfs-packs-" + std::to_string(::getpid()) + "-x";
  fs::create_directories(stale + "/pack");
  fs::create_directories(live);
  fs::create_symlink("/proc/self/fd/3", stale + "/pack/pack-1.idx");
  const char* old = ::getenv("TMPDIR");
  std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  {
    Layers layers = OpenLayers();
    ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
    EXPECT_TRUE(HasCommit(repo, c2_));
    EXPECT_FALSE(fs::exists(stale));
    EXPECT_TRUE(fs::exists(live));
    size_t ours = 0;
    for (const auto& e : fs::directory_iterator(tmp)) ours += e.path() != live;
    EXPECT_EQ(ours, 1u);  // this open's own
  }
  if (old)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp))
    left.push_back(e.path().string());
  EXPECT_EQ(left, std::vector<std::string>{live});
}

TEST_F(SandboxRepoTest, CorruptUpperObjectIsNotRead) {
  MakeSandboxCommits(true);
  // c2's object file now holds c3's bytes: hash verification refuses it.
  std::string to = LooseObjectPath(upper_ + "/.git/objects", c2_);
  fs::permissions(to, fs::perms::owner_write, fs::perm_options::add);
  fs::copy_file(LooseObjectPath(upper_ + "/.git/objects", c3_), to,
                fs::copy_options::overwrite_existing);
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  EXPECT_FALSE(HasCommit(repo, c2_));
  EXPECT_TRUE(HasCommit(repo, c3_));
}

TEST_F(SandboxRepoTest, BridgeCopiesTheSandboxsNewCommits) {
  MakeUpper();
  Layers layers = OpenLayers();
  ASSERT_OK_AND_ASSIGN(auto repo, SandboxRepo::Open(layers));
  ASSERT_OK_AND_ASSIGN(auto bridge,
                       BridgeRepo::OpenOrCreate(root_ + "/bridge.git",
                                                lower_ + "/.git/objects"));
  Status s =
      bridge.CopyReachable(repo.repo(), {Oid(c2_), Oid(c3_)}, {Oid(c1_)});
  ASSERT_TRUE(s.ok()) << s.error().Message();
  git_commit* raw = nullptr;
  git_oid c3 = Oid(c3_);
  ASSERT_EQ(git_commit_lookup(&raw, bridge.repo(), &c3), 0);
  GitCommit c(raw);
  Git(root_ + "/bridge.git", "fsck --strict --no-dangling " + c2_ + " " + c3_);
}

}  // namespace
}  // namespace acqfs::gitbridge
