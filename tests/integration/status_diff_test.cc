// `acqfs status` and `acqfs diff` end to end: a sandbox mounted over a
// lower directory (a plain one, or a git checkout), changes made through the
// mount with ordinary tools, then what the two commands print: the exact
// list of changes (JSON, text, -z), and a patch that GNU `patch -p1` (or
// `git apply`, for what GNU patch cannot do) turns a copy of the lower into
// the mount's tree. Both commands also work after unmounting, from the
// layers alone.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

using Strings = std::vector<std::string>;
using Json = nlohmann::json;

// One change as `acqfs status --json` must report it.
struct Want {
  std::string path;
  char code;
  bool dir;
  std::string old_mode, new_mode;  // "" for JSON null
  uint64_t old_size, new_size;
  Strings metadata;
};

Json ToJson(const Want& w) {
  static const std::map<char, std::string> kKinds = {{'A', "added"},
                                                     {'M', "modified"},
                                                     {'D', "deleted"},
                                                     {'T', "type-changed"},
                                                     {'m', "metadata"}};
  auto mode = [](const std::string& m) -> Json {
    if (m.empty()) return nullptr;
    return m;
  };
  return {{"path", w.path},
          {"kind", kKinds.at(w.code)},
          {"code", std::string(1, w.code)},
          {"dir", w.dir},
          {"old_mode", mode(w.old_mode)},
          {"new_mode", mode(w.new_mode)},
          {"old_size", w.old_size},
          {"new_size", w.new_size},
          {"metadata", w.metadata},
          // The host changed none of these paths since the base.
          {"host", nullptr}};
}

// The lines `acqfs status` prints for `want` (no path here needs quoting).
std::string TextOf(const std::vector<Want>& want) {
  std::string out;
  for (const Want& w : want)
    out += std::string(1, w.code) + " " + w.path + (w.dir ? "/" : "") + "\n";
  return out;
}

class StatusDiff : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    ::umask(022);
    tmp_.MakeDir("home", 0755);
    lower_ = tmp_.MakeDir("lower", 0755);
  }
  void TearDown() override {
    if (HasFailure() && sandbox_)
      std::cerr << "--- daemon.log ---\n" << sandbox_->DaemonLog() << "\n";
    sandbox_.reset();
  }

  // The plain (non-git) lower most tests use.
  void MakePlainLower() {
    std::string main_c;
    for (int i = 1; i <= 10; ++i) main_c += "line " + std::to_string(i) + "\n";
    Put("docs/a.txt", "alpha\n");
    Put("docs/b.txt", "bravo\n");
    Put("docs/old/x.txt", "x\n");
    Put("docs/old/deep/y.txt", "y\n");
    Put("src/main.c", main_c);
    Put("tool.sh", "#!/bin/sh\necho hi\n");
    Put("notes", "notes\n");
    Put("blob.bin", std::string("bin\0ary\1", 8));
    Put("untouched.txt", "same\n");
    Put("opened.txt", "same\n");
    Put("noeol.txt", "no newline");
    Put("empty-me.txt", "content\n");
    Put("gone.txt", "bye\n");
    Put("tolink.txt", "was a file\n");
    Put("kept.txt", "kept\n");
    Put("was-empty.txt", "");
    ASSERT_EQ(::symlink("docs/a.txt", L("link").c_str()), 0);
  }
  // Writes a lower file with `mode`, making its directories.
  void Put(const std::string& rel, const std::string& data,
           mode_t mode = 0644) {
    std::string dir = L(rel).substr(0, L(rel).rfind('/'));
    ASSERT_TRUE(RunShell("mkdir -p " + ShellQuote(dir), 30).ok());
    ASSERT_TRUE(WriteFile(L(rel), data, mode));
    ASSERT_EQ(::chmod(L(rel).c_str(), mode), 0);
  }

  void Mount() {
    sandbox_ = std::make_unique<Sandbox>(lower_);
    ASSERT_TRUE(sandbox_->mounted()) << sandbox_->mount_failure();
  }
  // A shell script run in the mount, umask 022.
  void InMount(const std::string& script) {
    CommandResult r = RunShell("umask 022\n" + script, 120,
                               sandbox_->mountpoint(), GitEnv(home()));
    ASSERT_TRUE(r.ok()) << r.Describe();
  }
  // Every kind of change `acqfs diff` can express for GNU patch.
  void MakeEditsThroughTheMount() {
    InMount(R"(
      printf 'new file\n' > added.txt
      mkdir newdir
      printf 'nested\n' > newdir/inner.txt
      printf 'alpha\nmore\n' > docs/a.txt
      sed -i 's/^line 5$/LINE FIVE/' src/main.c
      rm gone.txt
      rm -r docs/old
      chmod +x tool.sh
      ln -sfn docs/b.txt link
      printf 'bin\0ary\1new' > blob.bin
      touch untouched.txt
      printf 'same\n' 1<>opened.txt
      printf ' more' >> noeol.txt
      : > empty-me.txt
      rm tolink.txt
      ln -s kept.txt tolink.txt
      ln -s added.txt newlink
      printf 'x\n' > 'new space.txt'
      : > new-empty.txt
      rm was-empty.txt
    )");
  }
  // What MakeEditsThroughTheMount did, as status reports it (sorted).
  std::vector<Want> WantedForEdits() {
    return {
        {"added.txt", 'A', false, "", "100644", 0, 9, {}},
        {"blob.bin", 'M', false, "100644", "100644", 8, 11, {}},
        {"docs/a.txt", 'M', false, "100644", "100644", 6, 11, {}},
        {"docs/old", 'D', true, "040755", "", DirSizeL("docs/old"), 0, {}},
        {"docs/old/deep",
         'D',
         true,
         "040755",
         "",
         DirSizeL("docs/old/deep"),
         0,
         {}},
        {"docs/old/deep/y.txt", 'D', false, "100644", "", 2, 0, {}},
        {"docs/old/x.txt", 'D', false, "100644", "", 2, 0, {}},
        {"empty-me.txt", 'M', false, "100644", "100644", 8, 0, {}},
        {"gone.txt", 'D', false, "100644", "", 4, 0, {}},
        {"link", 'M', false, "120777", "120777", 10, 10, {}},
        {"new space.txt", 'A', false, "", "100644", 0, 2, {}},
        {"new-empty.txt", 'A', false, "", "100644", 0, 0, {}},
        {"newdir", 'A', true, "", "040755", 0, DirSizeU("newdir"), {}},
        {"newdir/inner.txt", 'A', false, "", "100644", 0, 7, {}},
        {"newlink", 'A', false, "", "120777", 0, 9, {}},
        {"noeol.txt", 'M', false, "100644", "100644", 10, 15, {}},
        {"src/main.c", 'M', false, "100644", "100644", 71, 74, {}},
        {"tolink.txt", 'T', false, "100644", "120777", 11, 8, {}},
        {"tool.sh", 'm', false, "100644", "100755", 18, 18, {"mode"}},
        {"was-empty.txt", 'D', false, "100644", "", 0, 0, {}},
    };
  }
  uint64_t DirSizeL(const std::string& rel) { return SizeOf(L(rel)); }
  uint64_t DirSizeU(const std::string& rel) { return SizeOf(sandbox_->U(rel)); }
  uint64_t SizeOf(const std::string& path) {
    struct stat st {};
    EXPECT_TRUE(Lstat(path, &st));
    return static_cast<uint64_t>(st.st_size);
  }

  CommandResult Acqfs(Strings args) {
    Strings argv = {AcqfsBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--state-dir");
    argv.push_back(sandbox_ ? sandbox_->state_dir() : tmp_.Sub("state"));
    return RunCommand(argv, 120);
  }
  // stdout of a command that must succeed.
  std::string Out(Strings args) {
    CommandResult r = Acqfs(std::move(args));
    EXPECT_TRUE(r.ok()) << r.Describe();
    EXPECT_EQ(r.err, "") << r.Describe();
    return r.out;
  }
  Json StatusJson() {
    std::string out = Out({"status", sandbox_->name(), "--json"});
    Json j = Json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j;
  }

  // A `cp -a` copy of the lower with `tool` ("patch" or "git") applying
  // `patch` in it; the copy's path.
  std::string ApplyToCopy(const std::string& patch, const std::string& tool) {
    std::string copy = tmp_.Sub("copy-" + tool);
    std::string file = tmp_.Sub("changes-" + tool + ".patch");
    EXPECT_TRUE(WriteFile(file, patch));
    EXPECT_TRUE(RunCommand({"cp", "-a", lower_, copy}, 60).ok());
    Strings argv = tool == "patch"
                       ? Strings{"patch", "-p1", "-s", "-i", file}
                       : Strings{"git", "apply", "--exclude=*.bin", file};
    CommandResult r = RunCommand(argv, 60, copy, GitEnv(home()));
    EXPECT_TRUE(r.ok()) << r.Describe() << "\n--- patch ---\n" << patch;
    return copy;
  }
  // Names, types, modes, bytes and symlink targets of `root`, without the
  // root itself and without `skip`.
  TreeSnapshot Tree(const std::string& root, const Strings& skip = {}) {
    SnapshotOptions o;
    o.owner = false;
    o.mtime = false;
    o.dir_times = false;
    o.xattrs = false;
    o.skip = skip;
    TreeSnapshot s = Snapshot(root, o);
    s.entries.erase(".");
    return s;
  }

  std::string home() const { return tmp_.Sub("home"); }
  std::string L(const std::string& rel) const { return lower_ + "/" + rel; }
  std::string M(const std::string& rel) const { return sandbox_->M(rel); }

  TempDir tmp_;
  std::string lower_;
  std::unique_ptr<Sandbox> sandbox_;
};

TEST_F(StatusDiff, StatusJsonListsExactlyWhatWasDone) {
  MakePlainLower();
  Mount();
  MakeEditsThroughTheMount();
  InMount("rm notes && mkdir notes && printf 'n\\n' > notes/inside");
  // The unchanged copy-ups did happen, so leaving them out means something.
  for (const char* rel : {"untouched.txt", "opened.txt", "docs", "src"})
    EXPECT_TRUE(Exists(sandbox_->U(rel))) << rel << " was not copied up";
  std::vector<Want> want = WantedForEdits();
  want.push_back(
      {"notes", 'T', true, "100644", "040755", 6, DirSizeU("notes"), {}});
  want.push_back({"notes/inside", 'A', false, "", "100644", 0, 2, {}});
  std::sort(want.begin(), want.end(),
            [](const Want& a, const Want& b) { return a.path < b.path; });
  Json expected = Json::array();
  for (const Want& w : want) expected.push_back(ToJson(w));

  Json j = StatusJson();
  EXPECT_EQ(j["sandbox"], sandbox_->name());
  EXPECT_EQ(j["lower"], lower_);
  EXPECT_EQ(j["changes"], expected) << "got:\n"
                                    << j["changes"].dump(1) << "\nwanted:\n"
                                    << expected.dump(1);
  EXPECT_EQ(j["counts"], (Json{{"added", 7},
                               {"modified", 6},
                               {"deleted", 6},
                               {"type-changed", 2},
                               {"metadata", 1}}));
  EXPECT_EQ(Out({"status", sandbox_->name()}), TextOf(want));
}

TEST_F(StatusDiff, StatusQuotesUnusualPathsLikeGitAndZPrintsThemRaw) {
  Put("docs/a.txt", "a\n");
  Mount();
  for (std::string name : {"a\tb", "quo\"te", "back\\slash", "caf\xc3\xa9",
                           "bad\xff", "new\nline"})
    ASSERT_TRUE(WriteFile(M(name), "x"));
  ASSERT_EQ(::mkdir(M("nd").c_str(), 0755), 0);
  InMount("rm -r docs");
  EXPECT_EQ(Out({"status", sandbox_->name()}),
            "A \"a\\tb\"\n"
            "A \"back\\\\slash\"\n"
            "A \"bad\\377\"\n"
            "A caf\xc3\xa9\n"
            "D docs/\n"
            "D docs/a.txt\n"
            "A nd/\n"
            "A \"new\\nline\"\n"
            "A \"quo\\\"te\"\n");
  std::string z;
  for (std::string e :
       {"A a\tb", "A back\\slash", "A bad\xff", "A caf\xc3\xa9", "D docs/",
        "D docs/a.txt", "A nd/", "A new\nline", "A quo\"te"})
    z += e + '\0';
  EXPECT_EQ(Out({"status", sandbox_->name(), "-z"}), z);
  Json j = StatusJson();
  ASSERT_EQ(j["changes"].size(), 9u) << j.dump(1);
  EXPECT_EQ(j["changes"][0]["path"], "a\tb");
  EXPECT_FALSE(j["changes"][0].contains("path_quoted"));
  // Not UTF-8: U+FFFD in "path", the exact bytes in "path_quoted".
  EXPECT_EQ(j["changes"][2]["path"], "bad\xef\xbf\xbd");
  EXPECT_EQ(j["changes"][2]["path_quoted"], "\"bad\\377\"");
  EXPECT_EQ(j["changes"][4]["path"], "docs");
  EXPECT_EQ(j["changes"][4]["dir"], true);
}

TEST_F(StatusDiff, DiffAppliedWithGnuPatchReproducesTheMount) {
  MakePlainLower();
  ASSERT_NE(RunCommand({"git", "-C", lower_, "rev-parse"}, 30).exit_code, 0)
      << "the lower must not be a git checkout here";
  Mount();
  MakeEditsThroughTheMount();
  CommandResult r = Acqfs({"diff", sandbox_->name()});
  ASSERT_TRUE(r.ok()) << r.Describe();  // 0 although there are differences
  const std::string& patch = r.out;
  EXPECT_NE(patch.find("diff --git a/blob.bin b/blob.bin\n"
                       "index 6cbdb10..0f3279e 100644\n"
                       "Binary files a/blob.bin and b/blob.bin differ\n"),
            std::string::npos)
      << patch;
  // A mode-only change: the mode lines and nothing else.
  EXPECT_NE(patch.find("\ndiff --git a/tool.sh b/tool.sh\n"
                       "old mode 100644\n"
                       "new mode 100755\n"
                       "diff --git"),
            std::string::npos)
      << patch;
  // A new symlink target, as git writes it.
  EXPECT_NE(patch.find("diff --git a/link b/link\n"
                       "index 3d64963..ed314ce 120000\n"
                       "--- a/link\n"
                       "+++ b/link\n"
                       "@@ -1 +1 @@\n"
                       "-docs/a.txt\n"
                       "\\ No newline at end of file\n"
                       "+docs/b.txt\n"
                       "\\ No newline at end of file\n"),
            std::string::npos)
      << patch;
  EXPECT_NE(patch.find("+no newline more\n\\ No newline at end of file\n"),
            std::string::npos)
      << patch;
  // Empty files: git's index lines, which GNU patch needs to delete one.
  EXPECT_NE(patch.find("diff --git a/new-empty.txt b/new-empty.txt\n"
                       "new file mode 100644\n"
                       "index 0000000..e69de29\n"
                       "diff --git"),
            std::string::npos)
      << patch;
  EXPECT_TRUE(
      patch.ends_with("diff --git a/was-empty.txt b/was-empty.txt\n"
                      "deleted file mode 100644\n"
                      "index e69de29..0000000\n"))
      << patch;
  EXPECT_EQ(patch.find("untouched.txt"), std::string::npos) << patch;
  EXPECT_EQ(patch.find("opened.txt"), std::string::npos) << patch;
  std::string copy = ApplyToCopy(patch, "patch");
  // Binary files are named in the diff and left alone by patch.
  EXPECT_TRUE(SnapshotsEqual(Tree(sandbox_->mountpoint(), {"blob.bin"}),
                             Tree(copy, {"blob.bin"})));
  // The same patch through git apply gives the same tree.
  std::string by_git = ApplyToCopy(patch, "git");
  EXPECT_TRUE(SnapshotsEqual(Tree(sandbox_->mountpoint(), {"blob.bin"}),
                             Tree(by_git, {"blob.bin"})));
}

// GNU patch 2.7 cannot turn a file into a directory or a directory into a
// file in one run (it defers deletions, then refuses the new path), not
// even with git's own diff; `git apply` can, and so must acqfs diff's.
TEST_F(StatusDiff, TypeChangesApplyWithGitApply) {
  Put("notes", "notes\n");
  Put("dir/a", "a\n");
  Put("dir/sub/b", "b\n");
  Put("plain", "plain\n", 0755);
  Mount();
  InMount(R"(
    rm notes && mkdir notes && printf 'n\n' > notes/inside
    rm -r dir && printf 'now a file\n' > dir
    rm plain && ln -s notes/inside plain
  )");
  EXPECT_EQ(Out({"status", sandbox_->name()}),
            "T dir\nD dir/a\nD dir/sub/\nD dir/sub/b\nT notes/\n"
            "A notes/inside\nT plain\n");
  std::string patch = Out({"diff", sandbox_->name()});
  // Deletions below "dir" come before the file that replaces it.
  size_t del = patch.find("diff --git a/dir/sub/b b/dir/sub/b\ndeleted");
  size_t add = patch.find("diff --git a/dir b/dir\nnew file mode 100644\n");
  ASSERT_NE(del, std::string::npos) << patch;
  ASSERT_NE(add, std::string::npos) << patch;
  EXPECT_LT(del, add) << patch;
  EXPECT_NE(patch.find("diff --git a/plain b/plain\n"
                       "deleted file mode 100755\n"),
            std::string::npos)
      << patch;
  EXPECT_NE(patch.find("diff --git a/plain b/plain\n"
                       "new file mode 120000\n"),
            std::string::npos)
      << patch;
  std::string copy = ApplyToCopy(patch, "git");
  EXPECT_TRUE(SnapshotsEqual(Tree(sandbox_->mountpoint()), Tree(copy)));
}

TEST_F(StatusDiff, StatusAndDiffWorkAfterUnmountFromTheLayersAlone) {
  MakePlainLower();
  Mount();
  MakeEditsThroughTheMount();
  std::string text = Out({"status", sandbox_->name()});
  std::string json = Out({"status", sandbox_->name(), "--json"});
  std::string patch = Out({"diff", sandbox_->name()});
  ASSERT_EQ(text, TextOf(WantedForEdits()));
  ASSERT_TRUE(sandbox_->Unmount());
  ASSERT_FALSE(FindMount(sandbox_->mountpoint()).has_value());
  EXPECT_EQ(Out({"status", sandbox_->name()}), text);
  EXPECT_EQ(Out({"status", sandbox_->name(), "--json"}), json);
  EXPECT_EQ(Out({"diff", sandbox_->name()}), patch);
  // The last mountpoint names the sandbox too.
  EXPECT_EQ(Out({"status", sandbox_->mountpoint()}), text);
}

TEST_F(StatusDiff, OverAGitCheckoutTheGitDirIsSkippedUnlessAsked) {
  ASSERT_EQ(::rmdir(lower_.c_str()), 0);
  ASSERT_TRUE(MakeLowerRepo(lower_));
  Mount();
  InMount(R"(
    printf 'sandbox line\n' >> docs/a.txt
    git add docs/a.txt
    git -c user.name=t -c user.email=t@t commit -q -m edit
  )");
  EXPECT_EQ(Out({"status", sandbox_->name()}), "M docs/a.txt\n");
  std::string with_git = Out({"status", sandbox_->name(), "--git-dir"});
  EXPECT_NE(with_git.find("M .git/index\n"), std::string::npos) << with_git;
  EXPECT_NE(with_git.find("M docs/a.txt\n"), std::string::npos) << with_git;
  for (size_t at = 0; at < with_git.size();) {
    size_t end = with_git.find('\n', at);
    std::string line = with_git.substr(at, end - at);
    EXPECT_TRUE(line == "M docs/a.txt" || line.substr(2, 5) == ".git/") << line;
    at = end + 1;
  }
  std::string patch = Out({"diff", sandbox_->name()});
  EXPECT_EQ(patch.rfind("diff --git a/docs/a.txt b/docs/a.txt\n", 0), 0u)
      << patch;
  EXPECT_EQ(patch.find("diff --git", 1), std::string::npos) << patch;
  EXPECT_NE(patch.find("+sandbox line\n"), std::string::npos) << patch;
  std::string git_patch = Out({"diff", sandbox_->name(), "--git-dir"});
  EXPECT_NE(git_patch.find("Binary files a/.git/index and b/.git/index "
                           "differ\n"),
            std::string::npos)
      << git_patch;
}

TEST_F(StatusDiff, DiffPathFilterShowsOnlyThosePaths) {
  MakePlainLower();
  Mount();
  MakeEditsThroughTheMount();
  auto files = [](const std::string& patch) {
    Strings out;
    for (size_t at = patch.find("diff --git a/"); at != std::string::npos;
         at = patch.find("\ndiff --git a/", at + 1)) {
      size_t from = patch.find("a/", at) + 2;
      out.push_back(patch.substr(from, patch.find(' ', from) - from));
    }
    return out;
  };
  EXPECT_EQ(files(Out({"diff", sandbox_->name(), "docs/a.txt"})),
            Strings{"docs/a.txt"});
  EXPECT_EQ(files(Out({"diff", sandbox_->name(), "./docs/"})),
            (Strings{"docs/a.txt", "docs/old/deep/y.txt", "docs/old/x.txt"}));
  EXPECT_EQ(files(Out({"diff", sandbox_->name(), "tool.sh", "newdir"})),
            (Strings{"newdir/inner.txt", "tool.sh"}));
  // A path inside a deleted directory.
  EXPECT_EQ(files(Out({"diff", sandbox_->name(), "docs/old/x.txt"})),
            Strings{"docs/old/x.txt"});
  EXPECT_EQ(Out({"diff", sandbox_->name(), "kept.txt"}), "");
  EXPECT_EQ(Out({"diff", sandbox_->name(), "no/such/path"}), "");
  for (std::string bad : {"/etc/passwd", "../outside", "docs/../../x"}) {
    CommandResult r = Acqfs({"diff", sandbox_->name(), bad});
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_EQ(r.out, "") << r.Describe();
    EXPECT_EQ(r.err, "acqfs: diff: " + bad +
                         ": not a path inside the sandbox (give it relative "
                         "to the sandbox root, without ..)\n")
        << r.Describe();
  }
}

TEST_F(StatusDiff, UnknownSandboxIsBadInput) {
  tmp_.MakeDir("state", 0755);
  for (std::string cmd : {"status", "diff"}) {
    CommandResult r = Acqfs({cmd, "nosuch"});
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_EQ(r.out, "") << r.Describe();
    EXPECT_EQ(r.err, "acqfs: " + cmd + ": nosuch: no such sandbox\n")
        << r.Describe();
  }
}

// A path the mounted sandbox changes between diff's scan and its read of
// the path (removed, made a whiteout, renamed away) is diffed as it is when
// diff reads it, as git diff reads each file when it comes to it: diff
// never fails because the agent is at work. (It used to fail on the first
// such path: "No such file or directory (openat2)", or ENXIO on a file that
// had just become a whiteout.)
TEST_F(StatusDiff, DiffOfASandboxChangingUnderItDiffsWhatItFinds) {
  MakePlainLower();
  Mount();
  ChurnRace race = RaceWithChurn(
      sandbox_->mountpoint(), 7,
      {AcqfsBinary(), "diff", sandbox_->name(), "--state-dir",
       sandbox_->state_dir()},
      [](const CommandResult& r) {
        // Only a path that kept changing through every attempt may be
        // left out, and then it is named.
        EXPECT_EQ(r.exit_code, 1) << r.Describe();
        EXPECT_NE(r.err.find("changed while diff read it"), std::string::npos)
            << r.Describe();
      });
  EXPECT_TRUE(race.churn.ok()) << race.churn.Describe();
  EXPECT_GT(race.ok, race.runs / 2)
      << race.ok << " of " << race.runs << " diffs succeeded";
  CommandResult quiet = Acqfs({"diff", sandbox_->name()});
  EXPECT_TRUE(quiet.ok()) << quiet.Describe();
}

}  // namespace
}  // namespace acqfs::test
