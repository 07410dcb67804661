#include "harness/clone_oracle.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/command.h"
#include "harness/lower_repo.h"

namespace acqfs::test {
namespace fs = std::filesystem;

std::string MergeOutcome::Describe() const {
  std::ostringstream o;
  o << "conflict: " << (conflict ? "yes" : "no") << "\nstatus:\n"
    << status << "files:\n";
  for (const auto& [path, content] : files)
    o << "  " << path << ": " << content.size() << " bytes\n";
  return o.str();
}

::testing::AssertionResult RunIn(const std::string& dir,
                                 const std::string& script,
                                 const std::string& home, std::string* out) {
  EnvAdditions env = GitEnv(home);
  for (const char* k : {"GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"})
    env.emplace_back(k, "Test");
  for (const char* k : {"GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"})
    env.emplace_back(k, "test@example.com");
  CommandResult r = RunShell(script, 120, dir, env);
  if (out) *out = r.out;
  if (!r.ok())
    return ::testing::AssertionFailure() << "in " << dir << ":\n"
                                         << script << "\n"
                                         << r.Describe();
  return ::testing::AssertionSuccess();
}

std::map<std::string, std::string> TreeFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    if (p.filename() == ".git") {
      if (it->is_directory(ec) && !it->is_symlink(ec))
        it.disable_recursion_pending();
      continue;
    }
    std::string rel = fs::relative(p, dir, ec).string();
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      files[rel] = "->" + fs::read_symlink(p, ec).string();
    } else if (S_ISREG(st.st_mode)) {
      std::ifstream in(p, std::ios::binary);
      std::string content((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
      if (st.st_mode & S_IXUSR) content += "\n<executable>";
      files[rel] = content;
    }
  }
  return files;
}

::testing::AssertionResult CloneWorld::Make(const std::string& host,
                                            const std::string& dir,
                                            const std::string& home,
                                            CloneWorld* out) {
  CloneWorld w;
  w.dir_ = dir;
  w.home_ = home;
  w.host_ = dir + "/host";
  w.clone_ = dir + "/clone";
  w.start_ = dir + "/start";
  std::string script =
      "mkdir -p " + ShellQuote(dir) + "\ncp -a " + ShellQuote(host) + " " +
      ShellQuote(w.host_) + "\ncd " + ShellQuote(w.host_) +
      // A copy's files have other inodes than its index recorded.
      "\ngit update-index -q --refresh || true"
      "\nbranch=$(git symbolic-ref -q --short HEAD || true)\n"
      "if [ -n \"$branch\" ]; then git clone -q -b \"$branch\" . " +
      ShellQuote(w.clone_) + "; else git clone -q . " + ShellQuote(w.clone_) +
      "; git -C " + ShellQuote(w.clone_) +
      " checkout -q --detach \"$(git rev-parse HEAD)\"; fi\n"
      // The host's objects (its staged blobs among them) stay readable.
      "echo " +
      ShellQuote(w.host_ + "/.git/objects") + " > " +
      ShellQuote(w.clone_ + "/.git/objects/info/alternates") +
      "\n"
      // Its uncommitted and untracked (not ignored) files, its deletions
      // and its index.
      "git ls-files -z -c -o --exclude-standard | "
      "xargs -0 -r cp -a --parents -t " +
      ShellQuote(w.clone_) +
      "\n"
      "git ls-files -z -d | (cd " +
      ShellQuote(w.clone_) +
      " && xargs -0 -r rm -f --)\n"
      "cp .git/index " +
      ShellQuote(w.clone_ + "/.git/index") +
      "\n"
      "git -C " +
      ShellQuote(w.clone_) +
      " update-index -q --refresh || true\n"
      "mkdir " +
      ShellQuote(w.start_) +
      "\n"
      "tar -C " +
      ShellQuote(w.clone_) + " --exclude=./.git -cf - . | tar -C " +
      ShellQuote(w.start_) +
      " -xf -\n"
      "git rev-parse HEAD\n";
  std::string head;
  auto r = RunIn("/", script, home, &head);
  if (!r) return r;
  while (!head.empty() && head.back() == '\n') head.pop_back();
  w.base_ = head;
  *out = std::move(w);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CloneWorld::Export() {
  auto start = TreeFiles(start_);
  auto now = TreeFiles(clone_);
  std::vector<std::string> changed;
  for (const auto& [path, content] : now) {
    auto s = start.find(path);
    if (s == start.end() || s->second != content) changed.push_back(path);
  }
  for (const auto& [path, content] : start)
    if (!now.count(path)) changed.push_back(path);
  std::string script =
      "export GIT_INDEX_FILE=" + ShellQuote(dir_ + "/worktree-index") +
      "\nrm -f \"$GIT_INDEX_FILE\"\ngit read-tree HEAD\n";
  for (const std::string& p : changed) {
    const std::string q = ShellQuote(p);
    if (now.count(p))
      script += "if git cat-file -e HEAD:" + q +
                " 2>/dev/null || ! git check-ignore -q -- " + q +
                "; then git update-index --add -- " + q + "; fi\n";
    else
      script += "git update-index --force-remove -- " + q + "\n";
  }
  script +=
      "tree=$(git write-tree)\n"
      "w=$(git commit-tree \"$tree\" -p HEAD -m 'clone working tree')\n"
      "git update-ref refs/acqfs/worktree \"$w\"\n"
      "unset GIT_INDEX_FILE\n"
      "git -C " +
      ShellQuote(host_) + " fetch -q " + ShellQuote(clone_) +
      " '+refs/heads/*:refs/remotes/clone/*' "
      "'+refs/acqfs/worktree:refs/remotes/clone/acqfs-worktree'\n";
  return RunIn(clone_, script, home_);
}

MergeOutcome MergeInto(const std::string& host, const std::string& ref,
                       const std::string& home) {
  MergeOutcome m;
  std::string out;
  const std::string script =
      "stashed=0\n"
      "if [ -n \"$(git status --porcelain)\" ]; then git stash push -u -q; "
      "stashed=1; fi\n"
      "conflict=0\n"
      "git merge -q --no-edit " +
      ShellQuote(ref) +
      " >/dev/null 2>&1 || conflict=1\n"
      "if [ $conflict = 0 ] && [ $stashed = 1 ]; then "
      "git stash pop -q >/dev/null 2>&1 || conflict=1; fi\n"
      "echo $conflict\n";
  EXPECT_TRUE(RunIn(host, script, home, &out));
  m.conflict = out.find('1') != std::string::npos;
  EXPECT_TRUE(RunIn(host, "git status --porcelain", home, &m.status));
  m.files = TreeFiles(host);
  return m;
}

}  // namespace acqfs::test
