// Tests of the bridge's one name rule set (git_names.h): the spellings git
// refuses, checked name by name and, for thousands of generated names,
// against the host's own `git fsck` (the oracle: what the host will say
// after a fetch) and against what libgit2's tree builder accepts in a
// repository configured like the bridge; raw tree objects; branch names
// against `git check-ref-format --branch`.
#include "gitbridge/git_names.h"

#include <git2.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/git_ptr.h"
#include "gitbridge/bridge_repo.h"
#include "harness/git_env.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::Git;
using ::acqfs::test::RunShell;
using ::acqfs::test::Sh;
using ::acqfs::test::ShellQuote;
using ::acqfs::test::TempDir;

bool Refused(const std::string& name, uint32_t mode) {
  return !UnsafeTreeEntry(name, mode).empty();
}

TEST(GitNames, RefusesEverySpellingOfDotGit) {
  for (const char* name :
       {".git", ".GIT", ".Git", "git~1", "GIT~1", "Git~1", ".git.", ".git. . ",
        ".git  ", ".git:", ".git::$INDEX_ALLOCATION", ".git:stream", "GIT~1 .",
        "git~1:x", "a\\.git", "a\\b\\.GIT. ", "\\.git", "x\\git~1", ".git\\x",
        "\xE2\x80\x8C.git", ".g\xE2\x80\x8Dit", ".gi\xE2\x80\x8Et",
        ".git\xE2\x80\x8F", ".g\xE2\x80\xAAit", ".g\xE2\x80\xAEit",
        ".g\xE2\x81\xAAit", ".g\xE2\x81\xAFit", ".g\xEF\xBB\xBFit",
        ".GiT\xEF\xBB\xBF\xEF\xBB\xBF",
        // Bytes that are not UTF-8 after ".git" end the name for HFS+.
        ".git\xFF", ".git\xC0\x80x"}) {
    for (uint32_t mode : {kModeTree, kModeBlob, kModeLink, kModeGitlink})
      EXPECT_TRUE(Refused(name, mode)) << PrintableName(name) << " " << mode;
  }
}

TEST(GitNames, RefusesSymlinkedDotfilesInEverySpelling) {
  for (const char* name : {".gitmodules",
                           ".GITMODULES",
                           ".gitmodules.",
                           ".gitmodules ",
                           ".gitmodules . .",
                           ".gitmodules::$DATA",
                           "gitmod~1",
                           "GITMOD~4",
                           "GITMOD~1 .",
                           "gi7eba~1",
                           "GI7EBA~9",
                           "gi7eb~12",
                           "g~123456",
                           "~1234567",
                           ".gitm\xE2\x80\x8Codules",
                           "a\\.gitmodules",
                           "a\\GITMOD~2",
                           ".gitattributes",
                           ".GitAttributes.",
                           "gitatt~1",
                           "gi7d29~3",
                           ".gitattributes:x",
                           ".gitignore",
                           ".GITIGNORE ",
                           "gitign~1",
                           "gi250a~1",
                           ".git\xE2\x80\x8Cignore",
                           ".mailmap",
                           ".MailMap..",
                           "mailma~1",
                           "maba30~1",
                           ".mail\xEF\xBB\xBFmap"}) {
    EXPECT_TRUE(Refused(name, kModeLink)) << PrintableName(name);
    EXPECT_FALSE(Refused(name, kModeBlob)) << PrintableName(name);
    EXPECT_FALSE(Refused(name, kModeExecutable)) << PrintableName(name);
  }
}

TEST(GitNames, GitmodulesAndGitattributesMustBeFiles) {
  for (const char* name : {".gitmodules", "GITMOD~1", ".gitmodules.",
                           ".gitattributes", "gi7d29~1", "a\\.gitmodules"}) {
    EXPECT_TRUE(Refused(name, kModeTree)) << name;
    EXPECT_TRUE(Refused(name, kModeGitlink)) << name;
  }
  // .gitignore and .mailmap may be directories.
  for (const char* name : {".gitignore", ".mailmap", "a\\.gitattributes"})
    EXPECT_FALSE(Refused(name, kModeTree)) << name;
}

TEST(GitNames, AcceptsOrdinaryNamesAndNearMisses) {
  for (const char* name : {"a",
                           ".github",
                           "git",
                           "git~2",
                           "git~10",
                           ".git~1",
                           "a:b",
                           "x.git",
                           ".gitx",
                           ".git-x",
                           "..git",
                           "gitmod~5",
                           "gitmod~0",
                           "gi7eba~0",
                           "Gi7EbA~12",
                           ".gitmodulesx",
                           "gitmodules",
                           "...",
                           " ",
                           "a\\b",
                           "\xE2\x80\x8C",
                           "\xFF",
                           ".g\xC3\xAF"
                           "t",
                           ".gi\xE2\x80\x8Ct~1",
                           ".mailmap~1",
                           "maba30~",
                           "mailmap",
                           ".gitmodule"}) {
    EXPECT_FALSE(Refused(name, kModeBlob)) << PrintableName(name);
    EXPECT_FALSE(Refused(name, kModeLink)) << PrintableName(name);
    EXPECT_FALSE(Refused(name, kModeTree)) << PrintableName(name);
  }
}

TEST(GitNames, RefusesWhatNoTreeMayHold) {
  for (const std::string& name :
       {std::string(), std::string("."), std::string(".."), std::string("a/b"),
        std::string("a\0b", 3)})
    EXPECT_TRUE(Refused(name, kModeBlob)) << PrintableName(name);
  EXPECT_TRUE(Refused("a", 0100600));
  EXPECT_TRUE(Refused("a", 0120755));   // git reads it as a symlink
  EXPECT_FALSE(Refused("a", 0100664));  // as fsck without --strict
}

TEST(GitNames, ReasonsNameTheFsckMessage) {
  EXPECT_NE(UnsafeTreeEntry(".GIT", kModeTree).find("hasDotgit"),
            std::string::npos);
  EXPECT_NE(UnsafeTreeEntry("GITMOD~1", kModeLink).find("gitmodulesSymlink"),
            std::string::npos);
  EXPECT_NE(UnsafeTreeEntry(".gitmodules", kModeTree).find("gitmodulesBlob"),
            std::string::npos);
  Status s = CheckTreeEntry(".git.", kModeTree, "c:sub/.git.");
  EXPECT_EQ(s.err(), EPERM);
  EXPECT_EQ(s.error().path, "c:sub/.git.");
}

TEST(GitNames, UnsafeTreePathNamesTheFirstRefusedComponent) {
  auto p = UnsafeTreePath("a/.GIT/config", kModeBlob);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->path, "a/.GIT");
  // A parent is a directory: a directory named .gitmodules is refused.
  p = UnsafeTreePath("x/.gitmodules/y", kModeBlob);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->path, "x/.gitmodules");
  p = UnsafeTreePath("sub/GITMOD~1", kModeLink);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->path, "sub/GITMOD~1");
  EXPECT_FALSE(UnsafeTreePath("sub/GITMOD~1", kModeBlob).has_value());
  EXPECT_FALSE(UnsafeTreePath("a/b/c.txt", kModeBlob).has_value());
  EXPECT_TRUE(UnsafeTreePath("a//b", kModeBlob).has_value());
}

// ---- raw trees -------------------------------------------------------------

std::string RawEntry(const std::string& mode, const std::string& name,
                     char id_byte = 1) {
  return mode + " " + name + std::string(1, '\0') + std::string(20, id_byte);
}

TEST(GitNames, RawTreesAreCheckedAsFsckChecksThem) {
  EXPECT_TRUE(CheckRawTree("", 0, "c:").ok());
  std::string ok = RawEntry("100644", "a") + RawEntry("40000", "b") +
                   RawEntry("120000", "c") + RawEntry("160000", "d");
  EXPECT_TRUE(CheckRawTree(ok.data(), ok.size(), "c:").ok());
  // A tree sorts as if its name ended in '/': "a-" comes before tree "a".
  std::string order = RawEntry("100644", "a-") + RawEntry("40000", "a");
  EXPECT_TRUE(CheckRawTree(order.data(), order.size(), "c:").ok());
  struct Bad {
    std::string raw;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {RawEntry("040000", "a"), "zeroPaddedFilemode"},
      {RawEntry("100600", "a"), "badFilemode"},
      {RawEntry("40000", ".GIT"), "hasDotgit"},
      {RawEntry("120000", ".gitmodules "), "gitmodulesSymlink"},
      {RawEntry("100644", "b") + RawEntry("100644", "a"), "treeNotSorted"},
      {RawEntry("40000", "a") + RawEntry("100644", "a-"), "treeNotSorted"},
      {RawEntry("100644", "a") + RawEntry("100644", "a"), "duplicateEntries"},
      {RawEntry("100644", "a") + RawEntry("100644", "a.txt") +
           RawEntry("40000", "a"),
       "duplicateEntries"},
      {RawEntry("100644", "a", 0), "nullSha1"},
  };
  for (const Bad& b : bad) {
    Status s = CheckRawTree(b.raw.data(), b.raw.size(), "c:sub");
    EXPECT_EQ(s.err(), EPERM) << b.says;
    if (!s.ok()) {
      EXPECT_NE(s.error().op.find(b.says), std::string::npos)
          << s.error().Message();
      EXPECT_EQ(s.error().path.rfind("c:sub/", 0), 0u) << s.error().path;
    }
  }
  for (const std::string& junk :
       {std::string("100644"), std::string("100644 a"),
        std::string("100644 a\0short", 14),
        std::string(" a\0") + std::string(20, 1),
        std::string("10x644 a\0", 9) + std::string(20, 1)})
    EXPECT_EQ(CheckRawTree(junk.data(), junk.size(), "c:").err(), EIO)
        << PrintableName(junk);
}

// ---- branch names
// ------------------------------------------------------------

TEST(GitNames, BranchNamesAsCheckRefFormatBranch) {
  std::vector<std::string> names = {"main",
                                    "feature/x",
                                    "a@b",
                                    "@",
                                    "@@",
                                    "head",
                                    "HEAD/x",
                                    "x/HEAD",
                                    "a/-b",
                                    "a{b",
                                    "\xC3\xA9t\xC3\xA9",
                                    "\xFF",
                                    "v1.2",
                                    "a.b/c.d",
                                    "HEAD",
                                    "-x",
                                    "-",
                                    "@{-1}",
                                    "a@{b",
                                    "a..b",
                                    "a.lock",
                                    "a.lock/b",
                                    "x/a.lock",
                                    ".a",
                                    "a/.b",
                                    "a/",
                                    "a//b",
                                    "/a",
                                    "a.",
                                    "x y",
                                    "a~b",
                                    "a^b",
                                    "a:b",
                                    "a?b",
                                    "a*b",
                                    "a[b",
                                    "a\\b",
                                    "a\tb",
                                    "a\x7f"
                                    "b",
                                    "",
                                    "refs/heads/x",
                                    "a/b.",
                                    "..",
                                    ".",
                                    "a/.",
                                    "lock.lock",
                                    "x.lock.y"};
  std::string dir = ::testing::TempDir();
  for (const std::string& name : names) {
    // Outside any repository, so that nothing like @{-1} is expanded.
    std::string cmd = "cd " + ShellQuote(dir) +
                      " && GIT_CEILING_DIRECTORIES=" + ShellQuote(dir) +
                      " git check-ref-format --branch " + ShellQuote(name) +
                      " >/dev/null 2>&1";
    bool git_accepts = RunShell(cmd, 60).ok();
    EXPECT_EQ(BadBranchName(name).empty(), git_accepts)
        << "'" << PrintableName(name) << "': " << BadBranchName(name);
  }
}

// ---- the oracle: the host's git fsck ---------------------------------------

// Names around every special spelling: the dotfiles and short names with
// case changes, suffixes NTFS drops, stream suffixes, backslashes, HFS+
// ignorables and bytes that are not UTF-8, and random names from the
// characters those are made of.
std::vector<std::string> GeneratedNames() {
  const std::vector<std::string> stems = {
      ".git",       "git~1",      "git~2",          ".gitmodules",  "gitmod~1",
      "gitmod~4",   "gitmod~5",   "gi7eba~1",       "gi7eba~9",     "gi7eb~12",
      "~1234567",   "g~123456",   ".gitattributes", "gitatt~1",     "gi7d29~1",
      ".gitignore", "gitign~1",   "gi250a~1",       ".mailmap",     "mailma~1",
      "maba30~1",   "gitmodules", ".gitmodule",     ".gitmodulesx", "ok"};
  const std::vector<std::string> suffixes = {
      "",     ".",        " ",   ". ",           " .",
      "..",   ":",        ":x",  "::$DATA",      "x",
      "~",    "\\",       "\\x", "\xE2\x80\x8C", "\xEF\xBB\xBF",
      "\xFF", "\xC3\xA9", "/"};
  const std::vector<std::string> prefixes = {"", "a\\", "\\", "x",
                                             "\xE2\x80\x8D"};
  std::set<std::string> out;
  auto upper = [](std::string s) {
    for (char& c : s)
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    return s;
  };
  for (const auto& stem : stems)
    for (const auto& sfx : suffixes)
      for (const auto& pfx : prefixes)
        for (const auto& s : {stem, upper(stem)}) {
          std::string n = pfx + s + sfx;
          if (n.find('/') == std::string::npos) out.insert(n);
        }
  // An HFS+ ignorable inside each stem, at each place.
  for (const auto& stem : stems)
    for (size_t at = 0; at <= stem.size(); ++at)
      out.insert(stem.substr(0, at) + "\xE2\x80\x8C" + stem.substr(at));
  std::mt19937 rng(12);  // fixed: the same names every run
  const std::string alphabet = ".gitmoduleGIT~123456789 :\\ab7e\xE2\x80\x8C";
  for (int i = 0; i < 3000; ++i) {
    std::string n;
    size_t len = 1 + rng() % 14;
    for (size_t k = 0; k < len; ++k) n += alphabet[rng() % alphabet.size()];
    if (rng() % 3 == 0) n = "." + n;
    out.insert(n);
  }
  out.erase("");
  out.erase(".");
  out.erase("..");
  return {out.begin(), out.end()};
}

class FsckOracle : public ::testing::Test {
 protected:
  void SetUp() override { root_ = tmp_.path(); }

  git_oid Write(git_odb* odb, const std::string& data, git_object_t type) {
    git_oid id;
    EXPECT_EQ(git_odb_write(&id, odb, data.data(), data.size(), type), 0);
    return id;
  }
  static std::string Raw(const git_oid& id) {
    return std::string(reinterpret_cast<const char*>(id.id), 20);
  }

  TempDir tmp_;
  std::string root_;
};

TEST_F(FsckOracle, TheRuleIsWhatTheHostsGitFsckReports) {
  const std::string repo_path = root_ + "/oracle.git";
  Git(root_, "init -q --bare " + ShellQuote(repo_path));
  git_repository* raw = nullptr;
  ASSERT_EQ(git_repository_open(&raw, repo_path.c_str()), 0);
  GitRepository repo(raw);
  git_odb* oraw = nullptr;
  ASSERT_EQ(git_repository_odb(&oraw, repo.get()), 0);
  GitOdb odb(oraw);

  const std::vector<std::string> names = GeneratedNames();
  const std::vector<std::pair<uint32_t, const char*>> modes = {
      {kModeBlob, "100644"},
      {kModeLink, "120000"},
      {kModeTree, "40000"},
      {kModeGitlink, "160000"}};
  // One tree per (name, mode), holding that entry only; its entry points at
  // an object of its own, so that every fsck message (some name the entry's
  // object, not the tree) maps back to one case.
  struct Case {
    std::string name;
    uint32_t mode;
  };
  std::map<std::string, size_t> by_oid;
  std::vector<Case> cases;
  for (const auto& name : names) {
    for (const auto& [mode, text] : modes) {
      size_t n = cases.size();
      std::string tag = std::to_string(n);
      git_oid entry;
      if (mode == kModeTree) {
        git_oid leaf = Write(odb.get(), tag, GIT_OBJECT_BLOB);
        entry = Write(odb.get(),
                      "100644 f" + tag + std::string(1, '\0') + Raw(leaf),
                      GIT_OBJECT_TREE);
      } else if (mode == kModeGitlink) {
        ASSERT_EQ(
            git_odb_hash(&entry, tag.data(), tag.size(), GIT_OBJECT_COMMIT),
            0);  // a commit nobody has, as submodules' are
      } else {
        entry = Write(odb.get(), "[core]\n# " + tag + "\n", GIT_OBJECT_BLOB);
      }
      git_oid tree = Write(
          odb.get(),
          std::string(text) + " " + name + std::string(1, '\0') + Raw(entry),
          GIT_OBJECT_TREE);
      by_oid[OidHex(tree)] = n;
      by_oid[OidHex(entry)] = n;
      cases.push_back({name, mode});
    }
  }
  // fsck's notes about symlinked .gitignore, .gitattributes and .mailmap
  // are quiet unless asked for; the bridge refuses those too.
  std::string out =
      Sh("git -C " + ShellQuote(repo_path) +
         " -c fsck.gitignoreSymlink=error -c fsck.gitattributesSymlink=error"
         " -c fsck.mailmapSymlink=error fsck --no-dangling --no-progress 2>&1;"
         " true");
  std::vector<bool> reported(cases.size(), false);
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    // "error in tree <id>: <msgId>: ..." or "warning in blob <id>: ..."
    size_t in = line.find(" in ");
    if (in == std::string::npos) continue;
    size_t sp = line.find(' ', in + 4);
    if (sp == std::string::npos || line.size() < sp + 41) continue;
    auto it = by_oid.find(line.substr(sp + 1, 40));
    if (it != by_oid.end()) reported[it->second] = true;
  }
  size_t refused = 0, mismatches = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    bool ours = Refused(cases[i].name, cases[i].mode);
    refused += ours;
    if (ours != reported[i] && ++mismatches <= 20)
      ADD_FAILURE() << "'" << PrintableName(cases[i].name) << "' mode "
                    << std::oct << cases[i].mode << std::dec
                    << ": acqfs refuses: " << ours
                    << ", git fsck reports: " << reported[i] << " ("
                    << UnsafeTreeEntry(cases[i].name, cases[i].mode) << ")";
  }
  EXPECT_EQ(mismatches, 0u);
  // The generated names do reach every rule, and many pass.
  EXPECT_GT(refused, 1000u);
  EXPECT_GT(cases.size() - refused, 4000u);
  std::cout << cases.size() << " (name, mode) cases, " << refused
            << " refused by acqfs and by git fsck alike\n";
}

// What the rule lets through, libgit2's tree builder (in a repository set
// up as the bridge is: core.protectHFS and core.protectNTFS on) accepts, so
// building the working-tree commit never fails on a name.
TEST_F(FsckOracle, LibgitTreeBuilderAcceptsWhatTheRuleAccepts) {
  auto bridge = BridgeRepo::OpenOrCreate(root_ + "/bridge.git", "");
  ASSERT_TRUE(bridge.ok()) << bridge.error().Message();
  git_oid blob;
  ASSERT_EQ(git_blob_create_from_buffer(&blob, bridge->repo(), "x", 1), 0);
  size_t accepted = 0;
  for (const std::string& name : GeneratedNames()) {
    for (uint32_t mode : {kModeBlob, kModeLink}) {
      if (Refused(name, mode)) continue;
      ++accepted;
      git_treebuilder* raw = nullptr;
      ASSERT_EQ(git_treebuilder_new(&raw, bridge->repo(), nullptr), 0);
      GitTreeBuilder bld(raw);
      int rc = git_treebuilder_insert(nullptr, bld.get(), name.c_str(), &blob,
                                      static_cast<git_filemode_t>(mode));
      EXPECT_EQ(rc, 0) << "'" << PrintableName(name) << "' mode " << std::oct
                       << mode << ": "
                       << (git_error_last() ? git_error_last()->message : "");
    }
  }
  EXPECT_GT(accepted, 2000u);
}

}  // namespace
}  // namespace acqfs::gitbridge
