// The policy's patterns and sizes (fs/policy), without any layer.
#include "fs/policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace acqfs {
namespace {

PathGlob Glob(const std::string& text) {
  auto g = PathGlob::Parse(text);
  EXPECT_TRUE(g.ok()) << text << ": " << (g ? "" : g.error().Message());
  return g ? *g : PathGlob();
}

TEST(PathGlob, NameWithoutSlashMatchesAtAnyDepth) {
  PathGlob g = Glob(".env");
  EXPECT_TRUE(g.Matches(".env", false));
  EXPECT_TRUE(g.Matches("app/.env", false));
  EXPECT_TRUE(g.Matches("a/b/c/.env", true));
  EXPECT_FALSE(g.Matches(".env.local", false));
  EXPECT_FALSE(g.Matches("x.env", false));
  EXPECT_FALSE(g.Matches(".env/x", false));  // the name, not a prefix
}

TEST(PathGlob, StarsAndClassesStayInsideOneName) {
  PathGlob pem = Glob("*.pem");
  EXPECT_TRUE(pem.Matches("server.pem", false));
  EXPECT_TRUE(pem.Matches("certs/.hidden.pem", false));
  EXPECT_FALSE(pem.Matches("server.pem.bak", false));
  PathGlob anchored = Glob("certs/*.pem");
  EXPECT_TRUE(anchored.Matches("certs/a.pem", false));
  EXPECT_FALSE(anchored.Matches("certs/sub/a.pem", false));
  EXPECT_FALSE(anchored.Matches("x/certs/a.pem", false));
  PathGlob cls = Glob("key[0-9]");
  EXPECT_TRUE(cls.Matches("d/key7", false));
  EXPECT_FALSE(cls.Matches("d/keyx", false));
  PathGlob q = Glob("id_?sa");
  EXPECT_TRUE(q.Matches("id_rsa", false));
  EXPECT_FALSE(q.Matches("id_ecdsa", false));
}

TEST(PathGlob, SlashAnchorsAtTheRoot) {
  PathGlob g = Glob("/build");
  EXPECT_TRUE(g.Matches("build", true));
  EXPECT_FALSE(g.Matches("src/build", true));
  PathGlob h = Glob("config/prod.json");
  EXPECT_TRUE(h.Matches("config/prod.json", false));
  EXPECT_FALSE(h.Matches("app/config/prod.json", false));
}

TEST(PathGlob, TrailingSlashMatchesDirectoriesOnly) {
  PathGlob g = Glob(".ssh/");
  EXPECT_TRUE(g.Matches(".ssh", true));
  EXPECT_TRUE(g.Matches("home/.ssh", true));
  EXPECT_FALSE(g.Matches(".ssh", false));
}

TEST(PathGlob, DoubleStarSpansComponents) {
  PathGlob lead = Glob("**/secrets.json");
  EXPECT_TRUE(lead.Matches("secrets.json", false));
  EXPECT_TRUE(lead.Matches("a/b/secrets.json", false));
  PathGlob mid = Glob("a/**/b");
  EXPECT_TRUE(mid.Matches("a/b", true));
  EXPECT_TRUE(mid.Matches("a/x/y/b", true));
  EXPECT_FALSE(mid.Matches("a/x/y/c", true));
  PathGlob tail = Glob("vault/**");
  EXPECT_TRUE(tail.Matches("vault/x", false));
  EXPECT_TRUE(tail.Matches("vault/x/y", false));
}

TEST(PathGlob, BackslashQuotes) {
  PathGlob g = Glob("\\!important");
  EXPECT_TRUE(g.Matches("!important", false));
  PathGlob star = Glob("a\\*b");
  EXPECT_TRUE(star.Matches("a*b", false));
  EXPECT_FALSE(star.Matches("axb", false));
}

TEST(PathGlob, UnparseablePatternsAreRefusedByName) {
  for (std::string bad : std::vector<std::string>{
           "", "!negated", "a/../b", "./x", "key[0-9", "trailing\\", "a//b",
           "/", "a\nb", "a\tb", std::string("a\0b", 3), "a\x7f", "*.pem ",
           ".env  ", "a\\\\ ", " "}) {
    auto g = PathGlob::Parse(bad);
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_EQ(g.err(), EINVAL);
    EXPECT_NE(g.error().Message().find("'" + bad + "'"), std::string::npos)
        << g.error().Message();
  }
}

// A space gitignore would keep: escaped, or not at the end.
TEST(PathGlob, EscapedOrInnerSpacesAreFine) {
  for (const char* ok : {"a\\ ", "my file.txt", " lead", "a\\  b"}) {
    auto g = PathGlob::Parse(ok);
    EXPECT_TRUE(g.ok()) << ok << ": " << g.error().Message();
  }
  auto g = PathGlob::Parse("name\\ ");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->Matches("name ", false));
  EXPECT_FALSE(g->Matches("name", false));
}

TEST(Policy, AHiddenDirectoryHidesEverythingBelowIt) {
  auto p = Policy::Make({".ssh/", "*.pem"}, {}, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->HidesLower(".ssh", true));
  EXPECT_FALSE(p->HidesLower(".ssh/config", false));  // only the object
  EXPECT_TRUE(p->HiddenPath(".ssh/config", false));   // through its parent
  EXPECT_TRUE(p->HiddenPath("deep/.ssh/keys/id", false));
  EXPECT_TRUE(p->HiddenPath("certs/a.pem", false));
  EXPECT_FALSE(p->HiddenPath("certs/a.txt", false));
  EXPECT_FALSE(p->HiddenPath(".sshd/config", false));
  EXPECT_TRUE(p->hides_anything());
  EXPECT_FALSE(p->has_read_only());
}

TEST(Policy, ReadOnlyCoversTheSubtree) {
  auto p = Policy::Make({}, {"vendor/", "/Makefile"}, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->ReadOnly("vendor", true));
  EXPECT_TRUE(p->ReadOnly("vendor/lib/x.c", false));
  EXPECT_TRUE(p->ReadOnly("Makefile", false));
  EXPECT_FALSE(p->ReadOnly("src/Makefile", false));
  EXPECT_FALSE(p->ReadOnly("vendorx", true));
  EXPECT_FALSE(p->HiddenPath("vendor/lib/x.c", false));
}

TEST(Policy, MakeNamesTheBadPattern) {
  auto p = Policy::Make({"ok", "bad["}, {}, 0);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().Message().find("'bad['"), std::string::npos);
  auto r = Policy::Make({}, {"!x"}, 0);
  ASSERT_FALSE(r.ok());
}

TEST(Policy, SecretPatternsAllParseAndCoverTheCommonFiles) {
  auto p = Policy::Make(Policy::SecretPatterns(), {}, 0);
  ASSERT_TRUE(p.ok()) << p.error().Message();
  for (const char* f :
       {".env", "app/.env.production", "tls/server.key", "ca.pem", "id_rsa",
        "home/id_ed25519.pub", ".npmrc", ".netrc", ".git-credentials"})
    EXPECT_TRUE(p->HiddenPath(f, false)) << f;
  for (const char* d : {".aws/credentials", ".ssh/id_rsa", "x/.gnupg/k"})
    EXPECT_TRUE(p->HiddenPath(d, false)) << d;
  for (const char* f :
       {"README.md", "src/main.c", "environment.txt", "keys.go", "Makefile"})
    EXPECT_FALSE(p->HiddenPath(f, false)) << f;
}

TEST(ParseSize, UnitsArePowersOf1024) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("10K"), 10240u);
  EXPECT_EQ(*ParseSize("500M"), 500ull << 20);
  EXPECT_EQ(*ParseSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseSize("1.5g"), 3ull << 29);
  EXPECT_EQ(*ParseSize("1T"), 1ull << 40);
  EXPECT_EQ(*ParseSize("7B"), 7u);
}

TEST(ParseSize, BadSizesAreRefused) {
  for (const char* bad : {"",    "0",    "M",   "-5M", "5X",  "5MM", "1.2.3G",
                          "0.1", " 5M",  "5M ", "5 M", "+5M", "1e9", "0x10",
                          "1.5", "1.5B", ".",   "inf", "nan", "5\nM"}) {
    auto s = ParseSize(bad);
    EXPECT_FALSE(s.ok()) << bad;
    if (!s.ok()) {
      EXPECT_EQ(s.err(), EINVAL);
    }
  }
}

}  // namespace
}  // namespace acqfs

// ---------------------------------------------------------------- own git

namespace acqfs {
namespace {

// An own-git sandbox (docs/git-bridge.md, "The base") hides every entry of
// the host's top-level .git but its shared object stores, and nothing else.
TEST(OwnGit, HidesTheHostsMutableGitFilesOnly) {
  for (const char* hidden :
       {".git/HEAD", ".git/index", ".git/refs", ".git/packed-refs", ".git/logs",
        ".git/config", ".git/MERGE_HEAD", ".git/index.lock",
        ".git/rebase-merge", ".git/ORIG_HEAD", ".git/hooks"})
    EXPECT_TRUE(Policy::OwnGitHides(hidden)) << hidden;
  for (const char* shown :
       {".git", ".git/objects", ".git/lfs", ".git/modules", ".git/objects/ab",
        ".git/refs/heads/main", "src/.git/HEAD", "HEAD", ".gitignore",
        ".git-blame-ignore-revs", "a/.git/index", ".git/"})
    EXPECT_FALSE(Policy::OwnGitHides(shown)) << shown;
}

// The submodules' repositories the first mount copied are the sandbox's
// own likewise: every entry of each but its object stores; the directories
// between them (a submodule name with slashes) and anything else stay.
TEST(OwnGit, HidesTheSubmodulesMutableGitFilesOnly) {
  auto own = Policy::Make({}, {}, 0, /*own_git=*/true,
                          {".git/modules/sub/lib", ".git/modules/x"});
  ASSERT_TRUE(own.ok()) << own.error().Message();
  for (const char* hidden :
       {".git/modules/sub/lib/HEAD", ".git/modules/sub/lib/index",
        ".git/modules/sub/lib/refs", ".git/modules/sub/lib/packed-refs",
        ".git/modules/sub/lib/MERGE_HEAD", ".git/modules/x/config",
        ".git/modules/x/ORIG_HEAD"})
    EXPECT_TRUE(own->HidesLower(hidden, false)) << hidden;
  for (const char* shown :
       {".git/modules", ".git/modules/sub", ".git/modules/sub/lib",
        ".git/modules/sub/lib/objects", ".git/modules/sub/lib/lfs",
        ".git/modules/sub/lib/modules", ".git/modules/sub/lib/objects/pack",
        ".git/modules/sub/lib/refs/heads", ".git/modules/sub/HEAD",
        ".git/modules/y/HEAD", "sub/lib/HEAD"})
    EXPECT_FALSE(own->HidesLower(shown, false)) << shown;
  // Not without the own-git rule; a path that is no submodule's is refused.
  auto plain = Policy::Make({}, {}, 0, false, {".git/modules/x"});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->HidesLower(".git/modules/x/HEAD", false));
  for (const char* bad : {"sub/lib", ".git/modules/x/", ".git//modules/x"}) {
    auto r = Policy::Make({}, {}, 0, true, {bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.err(), EINVAL);
  }
}

TEST(OwnGit, OnlyAPolicyThatAsksForItHidesThem) {
  auto plain = Policy::Make({}, {}, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->HidesLower(".git/HEAD", false));
  EXPECT_TRUE(plain->empty());
  auto own = Policy::Make({}, {}, 0, /*own_git=*/true);
  ASSERT_TRUE(own.ok());
  EXPECT_TRUE(own->HidesLower(".git/HEAD", false));
  EXPECT_TRUE(own->HidesLower(".git/refs", true));
  EXPECT_FALSE(own->HidesLower(".git/objects", true));
  // It hides lower objects only: no path is hidden for status or export.
  EXPECT_FALSE(own->HiddenPath(".git/HEAD", false));
  EXPECT_TRUE(own->hides_anything());
  EXPECT_FALSE(own->hides_patterns());
  EXPECT_FALSE(own->empty());
}

}  // namespace
}  // namespace acqfs
