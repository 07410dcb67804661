// Tests of the ignore rules: the parser, wildmatch, and IgnoreRules on the
// merged view, compared case by case with `git check-ignore --no-index` on
// the same tree (git is only the oracle here; the code never runs it).
#include "gitbridge/ignore.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/command.h"
#include "harness/deep_tree.h"
#include "harness/fs_util.h"
#include "harness/result_assert.h"
#include "harness/temp_dir.h"

namespace acqfs::gitbridge {
namespace {

namespace fs = std::filesystem;
using ::acqfs::test::MakeFile;
using ::acqfs::test::ReadFile;
using ::acqfs::test::RunShell;
using ::acqfs::test::TempDir;

// ---------------------------------------------------------------------------
// ParseIgnoreFile

TEST(ParseIgnoreFile, SkipsCommentsAndBlankLines) {
  auto p = ParseIgnoreFile("# comment\n\n   \n*.o\n  # not a comment\n", "");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].pattern, "*.o");
  EXPECT_EQ(p[1].pattern, "  # not a comment");
}

TEST(ParseIgnoreFile, NegationDirOnlyAndAnchoring) {
  auto p =
      ParseIgnoreFile("!keep\nbuild/\n/top\na/b\n**/x\nlogs/**\nd/\n", "sub");
  ASSERT_EQ(p.size(), 7u);
  EXPECT_TRUE(p[0].negate);
  EXPECT_EQ(p[0].pattern, "keep");
  EXPECT_FALSE(p[0].anchored);
  EXPECT_TRUE(p[1].dir_only);
  EXPECT_EQ(p[1].pattern, "build");
  EXPECT_FALSE(p[1].anchored);  // a trailing slash does not anchor
  EXPECT_TRUE(p[2].anchored);
  EXPECT_EQ(p[2].pattern, "top");
  EXPECT_TRUE(p[3].anchored);
  EXPECT_EQ(p[3].pattern, "a/b");
  EXPECT_TRUE(p[4].anchored);
  EXPECT_EQ(p[4].pattern, "**/x");
  EXPECT_TRUE(p[5].anchored);
  EXPECT_FALSE(p[5].dir_only);
  EXPECT_EQ(p[6].pattern, "d");
  for (const auto& x : p) EXPECT_EQ(x.base, "sub");
}

TEST(ParseIgnoreFile, EscapesAndTrailingSpaces) {
  auto p = ParseIgnoreFile(
      "\\!bang\n\\#hash\ntrail   \nkeep\\ \nmid dle  \nend\\\n", "");
  ASSERT_EQ(p.size(), 6u);
  EXPECT_FALSE(p[0].negate);
  EXPECT_EQ(p[0].pattern, "\\!bang");
  EXPECT_TRUE(WildMatch(p[0].pattern, "!bang"));
  EXPECT_EQ(p[1].pattern, "\\#hash");
  EXPECT_TRUE(WildMatch(p[1].pattern, "#hash"));
  EXPECT_EQ(p[2].pattern, "trail");
  EXPECT_EQ(p[3].pattern, "keep\\ ");
  EXPECT_TRUE(WildMatch(p[3].pattern, "keep "));
  EXPECT_EQ(p[4].pattern, "mid dle");
  EXPECT_EQ(p[5].pattern, "end\\");
}

TEST(ParseIgnoreFile, CrLfAndBomAndLastLineWithoutNewline) {
  auto p = ParseIgnoreFile("\xEF\xBB\xBF*.a\r\n*.b\r\n*.c", "");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].pattern, "*.a");
  EXPECT_EQ(p[1].pattern, "*.b");
  EXPECT_EQ(p[2].pattern, "*.c");
}

TEST(ParseIgnoreFile, LonePunctuationHoldsNoPattern) {
  EXPECT_TRUE(ParseIgnoreFile("!\n/\n!/\n", "").empty());
}

// ---------------------------------------------------------------------------
// WildMatch

struct WildCase {
  const char* pattern;
  const char* text;
  bool match;
};

TEST(WildMatch, Table) {
  const WildCase cases[] = {
      {"foo", "foo", true},         {"foo", "fo", false},
      {"foo", "foobar", false},     {"*", "anything", true},
      {"*", "a/b", false},          {"*.c", "x.c", true},
      {"*.c", "dir/x.c", false},    {"f?o", "foo", true},
      {"f?o", "f/o", false},        {"a/*/c", "a/b/c", true},
      {"a/*/c", "a/b/x/c", false},  {"**", "a/b/c", true},
      {"**/c", "c", true},          {"**/c", "a/b/c", true},
      {"**/c", "a/bc", false},      {"a/**", "a/b/c", true},
      {"a/**", "a", false},         {"a/**/c", "a/c", true},
      {"a/**/c", "a/b/c", true},    {"a/**/c", "a/b/d/c", true},
      {"a/**/c", "a/b/d/e", false}, {"a**b", "axxb", true},
      {"a**b", "a/b", false},  // "**" inside a component is "*"
      {"**x", "a/x", false},        {"x**/y", "xa/y", true},
      {"x**/y", "x/a/y", false},    {"[abc]", "b", true},
      {"[abc]", "d", false},        {"[!abc]", "d", true},
      {"[^abc]", "a", false},       {"[a-c]x", "bx", true},
      {"[a-c]x", "dx", false},      {"[]]", "]", true},
      {"[!]]", "]", false},         {"[a-]", "-", true},
      {"[[:digit:]]", "7", true},   {"[[:digit:]]", "x", false},
      {"[[:upper:]x]", "Q", true},  {"[[:upper:]x]", "x", true},
      {"[[:nope:]]", "n", false},   {"[/]", "/", false},
      {"[abc", "a", false},  // unterminated class matches nothing
      {"\\*", "*", true},           {"\\*", "x", false},
      {"\\[a]", "[a]", true},       {"a\\", "a", false},
      {"*a*b*c*", "xaybzc", true},  {"*a*b*c*", "xaybz/c", false},
      {"**/**/z", "z", true},       {"**/**/z", "a/b/z", true},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(WildMatch(c.pattern, c.text), c.match)
        << "pattern " << c.pattern << " text " << c.text;
  }
}

TEST(WildMatch, LongTextWithManyStarsIsFast) {
  std::string text(2000, 'a');
  EXPECT_FALSE(WildMatch("*a*a*a*a*a*a*a*a*b", text));
  EXPECT_TRUE(WildMatch("**/*a*a*a*a", text));
}

// ---------------------------------------------------------------------------
// IgnoreRules compared with git

// A checkout in a temporary directory: the lower layer is a real git
// repository (so git can judge the same tree), the upper starts empty.
class IgnoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path();
    fs::create_directory(Lower());
    fs::create_directory(root_ + "/upper");
    ASSERT_EQ(Run("git init -q " + Lower()), 0);
    auto l = Layers::OpenForReading(Lower(), root_ + "/upper",
                                    XattrNamespace::kUser);
    ASSERT_TRUE(l.ok()) << l.error().Message();
    layers_ = std::move(*l);
  }

  std::string Lower() const { return root_ + "/lower"; }
  std::string L(const std::string& rel) const { return Lower() + "/" + rel; }
  std::string U(const std::string& rel) const {
    return root_ + "/upper/" + rel;
  }
  // Runs `cmd` in a shell with no git configuration; its exit status.
  static int Run(const std::string& cmd) {
    return RunShell(cmd, 300, "",
                    {{"GIT_CONFIG_NOSYSTEM", "1"},
                     {"GIT_CONFIG_GLOBAL", "/dev/null"},
                     {"HOME", "/nonexistent"}})
        .exit_code;
  }

  // Writes `files` into the lower, creates every query path (a trailing "/"
  // makes a directory), and returns git's verdict on each query.
  std::set<std::string> GitIgnored(
      const std::map<std::string, std::string>& files,
      const std::vector<std::string>& queries) {
    for (const auto& [path, data] : files) MakeFile(L(path), data);
    std::string input;
    for (std::string q : queries) {
      bool dir = q.back() == '/';
      if (dir) q.pop_back();
      if (dir) {
        fs::create_directories(L(q));
      } else if (!fs::exists(fs::symlink_status(L(q)))) {
        MakeFile(L(q), "");
      }
      input += q;
      input.push_back('\0');
    }
    MakeFile(root_ + "/queries", input);
    // git warns on stderr about a symlinked .gitignore: kept out of the log.
    int rc =
        Run("cd " + Lower() + " && git check-ignore --no-index --stdin -z < " +
            root_ + "/queries > " + root_ + "/answers 2> " + root_ + "/stderr");
    EXPECT_TRUE(rc == 0 || rc == 1) << "git check-ignore exited " << rc << ": "
                                    << ReadFile(root_ + "/stderr");
    std::set<std::string> out;
    std::string all = ReadFile(root_ + "/answers"), cur;
    for (char c : all) {
      if (c == '\0') {
        out.insert(cur);
        cur.clear();
      } else {
        cur.push_back(c);
      }
    }
    return out;
  }

  // Compares IgnoreRules with git on every query; returns the ignored set.
  std::set<std::string> CompareWithGit(
      const std::map<std::string, std::string>& files,
      const std::vector<std::string>& queries) {
    std::set<std::string> git = GitIgnored(files, queries);
    MergedTree tree(layers_);
    IgnoreRules rules(tree);
    for (std::string q : queries) {
      if (q.back() == '/') q.pop_back();
      struct stat st;
      EXPECT_EQ(::lstat(L(q).c_str(), &st), 0) << q;
      auto r = rules.IsIgnored(q, S_ISDIR(st.st_mode));
      EXPECT_TRUE(r.ok()) << q << ": " << r.error().Message();
      if (!r.ok()) continue;
      EXPECT_EQ(*r, git.count(q) == 1) << "path '" << q << "': git says "
                                       << (git.count(q) ? "ignored" : "not");
    }
    // The table must exercise both answers.
    EXPECT_GT(git.size(), 0u);
    EXPECT_LT(git.size(), queries.size());
    return git;
  }

  TempDir tmp_;
  std::string root_;
  Layers layers_;
};

TEST_F(IgnoreTest, RootPatternsMatchGit) {
  std::map<std::string, std::string> files = {
      {".gitignore",
       "# comment\n"
       "*.o\n"
       "!keep.o\n"
       "build/\n"
       "/rootonly\n"
       "doc/*.txt\n"
       "\\#hash\n"
       "\\!bang\n"
       "trailing   \n"
       "escaped\\ \n"
       "*.[ch]\n"
       "foo?bar\n"
       "[!x]y\n"},
  };
  auto ignored = CompareWithGit(files, {"x.o",
                                        "keep.o",
                                        "sub/y.o",
                                        "sub/keep.o",
                                        "build/",
                                        "build/f",
                                        "sub/build/",
                                        "sub/build/f",
                                        "other/build",
                                        "rootonly",
                                        "sub/rootonly",
                                        "doc/a.txt",
                                        "doc/sub/b.txt",
                                        "sub/doc/a.txt",
                                        "#hash",
                                        "!bang",
                                        "hash",
                                        "trailing",
                                        "escaped ",
                                        "escaped",
                                        "f.c",
                                        "f.h",
                                        "f.x",
                                        "fooxbar",
                                        "foo/bar",
                                        "ay",
                                        "xy",
                                        "dir.o/",
                                        "dir.o/inner"});
  // A few answers spelled out, so a broken oracle cannot pass unnoticed.
  EXPECT_TRUE(ignored.count("build/f"));
  EXPECT_FALSE(ignored.count("keep.o"));
  EXPECT_FALSE(ignored.count("other/build"));
  EXPECT_FALSE(ignored.count("sub/rootonly"));
}

TEST_F(IgnoreTest, DoubleStarPatternsMatchGit) {
  std::map<std::string, std::string> files = {
      {".gitignore",
       "**/foo\n"
       "bar/**\n"
       "a/**/b\n"
       "x**y\n"
       "**z\n"
       "/top/**/leaf\n"
       "mid/**/\n"},
  };
  CompareWithGit(
      files, {"foo",          "d/foo",      "d/e/foo", "bar/",    "bar/1",
              "bar/2/3",      "a/b",        "a/x/b",   "a/x/y/b", "ab/b",
              "xqy",          "x/y",        "az",      "d/qz",    "top/leaf",
              "top/m/n/leaf", "s/top/leaf", "mid/",    "mid/x/",  "mid/file",
              "mid/x/f"});
}

TEST_F(IgnoreTest, CharacterClassesMatchGit) {
  std::map<std::string, std::string> files = {
      {".gitignore",
       "[[:digit:]]*.dat\n"
       "[a-c]x\n"
       "\\*star\n"
       "q[]]r\n"
       "[!abc]neg\n"
       "[^abc]caret\n"
       "*.[oa]\n"
       "mixed[[:upper:]x]\n"},
  };
  CompareWithGit(files, {"1a.dat", "a1.dat", "ax", "dx", "*star", "xstar",
                         "q]r", "qr", "dneg", "aneg", "dcaret", "bcaret",
                         "lib.a", "f.o", "f.c", "mixedQ", "mixedx", "mixedq"});
}

TEST_F(IgnoreTest, NestedFilesNegationAndExcludeMatchGit) {
  std::map<std::string, std::string> files = {
      {".git/info/exclude", "*.log\n!important.log\nexcluded\n"},
      {".gitignore", "*.tmp\n!sub/keep.tmp\nignored_dir/\n"},
      {"sub/.gitignore", "!*.log\n/local\nnested/*.bin\n!excluded\n"},
      {"ignored_dir/.gitignore", "!*\n"},
  };
  auto ignored = CompareWithGit(
      files,
      {"a.log", "important.log", "sub/a.log", "sub/deep/b.log", "a.tmp",
       "sub/keep.tmp", "sub/other.tmp", "ignored_dir/x", "ignored_dir/y.tmp",
       "sub/local", "sub/deeper/local", "local", "sub/nested/a.bin",
       "sub/x/nested/a.bin", "nested/a.bin", "excluded", "sub/excluded"});
  EXPECT_TRUE(ignored.count("ignored_dir/x"));  // no re-include below it
  EXPECT_FALSE(ignored.count("sub/a.log"));     // deeper file wins
}

TEST_F(IgnoreTest, ParentDirectoryExclusionMatchesGit) {
  std::map<std::string, std::string> files = {
      {".gitignore",
       "dir/*\n!dir/keep\n"
       "dir2/\n!dir2/keep\n"
       "/*.cfg\n!/main.cfg\n"
       "vendor/**\n!vendor/**/\n!vendor/**/*.go\n"},
  };
  CompareWithGit(files, {"dir/keep", "dir/other", "dir2/keep", "dir2/other",
                         "a.cfg", "main.cfg", "sub/a.cfg", "vendor/x.c",
                         "vendor/m/y.go", "vendor/m/y.c"});
}

TEST_F(IgnoreTest, SymlinkedGitignoreIsNotFollowed) {
  MakeFile(L("rules"), "*.c\n");
  ASSERT_EQ(::symlink("rules", L(".gitignore").c_str()), 0);
  CompareWithGit({{"sub/.gitignore", "*.h\n"}}, {"x.c", "sub/x.c", "sub/y.h"});
}

// ---------------------------------------------------------------------------
// IgnoreRules on the merged view

TEST_F(IgnoreTest, UpperGitignoreReplacesTheLowerOne) {
  MakeFile(L(".gitignore"), "*.a\n");
  MakeFile(U(".gitignore"), "*.b\n");
  MergedTree tree(layers_);
  IgnoreRules rules(tree);
  ASSERT_OK_AND_ASSIGN(auto a, rules.IsIgnored("x.a", false));
  EXPECT_FALSE(a);
  ASSERT_OK_AND_ASSIGN(auto b, rules.IsIgnored("d/x.b", false));
  EXPECT_TRUE(b);
}

TEST_F(IgnoreTest, WhiteoutOfGitignoreDropsItsRules) {
  MakeFile(L("sub/.gitignore"), "*.a\n");
  fs::create_directory(U("sub"));
  ASSERT_EQ(::mknod(U("sub/.gitignore").c_str(), S_IFCHR | 0, 0), 0);
  MergedTree tree(layers_);
  IgnoreRules rules(tree);
  ASSERT_OK_AND_ASSIGN(auto a, rules.IsIgnored("sub/x.a", false));
  EXPECT_FALSE(a);
}

TEST_F(IgnoreTest, ExcludeFileIsReadFromTheMergedView) {
  MakeFile(U(".git/info/exclude"), "secret\n");
  MergedTree tree(layers_);
  IgnoreRules rules(tree);
  ASSERT_OK_AND_ASSIGN(auto s, rules.IsIgnored("d/secret", false));
  EXPECT_TRUE(s);
  ASSERT_OK_AND_ASSIGN(auto o, rules.IsIgnored("d/other", false));
  EXPECT_FALSE(o);
}

TEST_F(IgnoreTest, DirOnlyPatternNeedsIsDir) {
  MakeFile(L(".gitignore"), "out/\n");
  MergedTree tree(layers_);
  IgnoreRules rules(tree);
  ASSERT_OK_AND_ASSIGN(auto dir, rules.IsIgnored("out", true));
  EXPECT_TRUE(dir);
  ASSERT_OK_AND_ASSIGN(auto file, rules.IsIgnored("out", false));
  EXPECT_FALSE(file);
  ASSERT_OK_AND_ASSIGN(auto below, rules.IsIgnored("a/out/f", false));
  EXPECT_TRUE(below);
}

TEST_F(IgnoreTest, GitignoreBelowAnIgnoredDirectoryIsNotConsulted) {
  MakeFile(L(".gitignore"), "gen/\n");
  MakeFile(L("gen/.gitignore"), "!*\n");
  MergedTree tree(layers_);
  IgnoreRules rules(tree);
  ASSERT_OK_AND_ASSIGN(auto f, rules.IsIgnored("gen/f", false));
  EXPECT_TRUE(f);
}

// A path deeper than PATH_MAX (issue 13), with .gitignore files along it.
// Each is read once, relative to its parent directory (the old rules
// resolved every ancestor's .gitignore from the layer root for every
// prefix: O(depth^3), minutes at this depth), with a bounded number of
// descriptors. git itself cannot judge these paths (check-ignore stats full
// paths), so the answers are spelled out.
TEST_F(IgnoreTest, RulesAlongAPathDeeperThanPathMaxApplyInBoundedTime) {
  constexpr size_t kDepth = 2050;  // "d/" x 2050: 4,100 bytes
  MakeFile(L(".gitignore"), "*.log\n");
  ASSERT_EQ(acqfs::test::MakeChain(
                Lower(), "d", kDepth,
                [](int fd, size_t level) -> std::string {
                  if (level == 1000)
                    return acqfs::test::WriteAt(fd, ".gitignore",
                                                "!keep.log\nsecret\n");
                  if (level == 2000)
                    return acqfs::test::WriteAt(fd, ".gitignore", "build/\n");
                  return "";
                }),
            "");
  auto chain = [](size_t depth, const std::string& leaf) {
    return acqfs::test::ChainPath("d", depth, leaf);
  };
  const std::vector<std::pair<std::string, bool>> want = {
      {chain(kDepth, "plain.txt"), false},
      {chain(kDepth, "x.log"), true},      // the root's *.log
      {chain(kDepth, "keep.log"), false},  // re-included at level 1000
      {chain(999, "keep.log"), true},      // above that .gitignore
      {chain(999, "secret"), false},
      {chain(1500, "secret"), true},
      {chain(2001, "build/f"), true},  // below a directory ignored at 2000
      {chain(kDepth, "build/sub/f"), true},
      {chain(1999, "build/f"), false},
      {chain(kDepth, "plain2.txt"), false},
  };
  acqfs::test::FdLimit limit(64);
  ASSERT_TRUE(limit.ok());
  MergedTree tree(layers_);
  IgnoreRules rules(tree);
  auto start = std::chrono::steady_clock::now();
  for (const auto& [path, ignored] : want) {
    auto r = rules.IsIgnored(path, false);
    ASSERT_TRUE(r.ok()) << r.error().Message();
    EXPECT_EQ(*r, ignored) << path.size() << " bytes: ..."
                           << path.substr(path.size() - 20);
  }
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_LT(secs, 10.0);
  EXPECT_EQ(acqfs::test::RemoveDeep(L("d")), "");
}

}  // namespace
}  // namespace acqfs::gitbridge
