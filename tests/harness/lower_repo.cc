#include "harness/lower_repo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <iterator>

#include "harness/fs_util.h"

namespace acqfs::test {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

constexpr char kReadmeCommitted[] = "# demo repository\n";
constexpr int kBackdateSeconds = 3600;

struct PlainFile {
  const char* path;
  const char* content;
  mode_t mode;
};

const PlainFile kCommittedFiles[] = {
    {".gitignore", "/build/\n*.o\n*.log\n/large.bin\n/hello/hello\n", 0644},
    {lower::kReadme, kReadmeCommitted, 0644},
    {lower::kEmptyFile, "", 0644},
    {"src/top.txt", "top\n", 0644},
    {"src/lib/core.txt", "core\n", 0644},
    {"src/lib/.hidden", "hidden\n", 0644},
    {"src/lib/util/helper.txt", "helper\n", 0644},
    {lower::kDeepFile, lower::kDeepFileContent, 0644},
    {lower::kFileA, lower::kFileAContent, 0644},
    {lower::kFileB, lower::kFileBContent, 0644},
    {lower::kReadOnlyFile, "read only\n", 0444},
    {lower::kPrivateFile, "private\n", 0600},
    {lower::kHardLinkA, lower::kHardLinkContent, 0644},
    {lower::kXattrFile, "tagged\n", 0644},
    {lower::kOwnedFile, "owned by someone else\n", 0644},
    {lower::kScript, "#!/bin/sh\necho script-ok\n", 0755},
    {"hello/main.c",
     "#include <stdio.h>\n\nint main(void) {\n"
     "  fputs(\"hello from acqfs\\n\", stdout);\n  return 0;\n}\n",
     0644},
    {"hello/Makefile", "hello: main.c\n\t$(CC) -O0 -o hello main.c\n", 0644},
};

const PlainFile kIgnoredFiles[] = {
    {"build/out.o", "not really an object file\n", 0644},
    {"debug.log", "log line\n", 0644},
};

std::string ParentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

AssertionResult MakeDirs(const std::string& path) {
  if (path.empty() || path == "." || Exists(path)) return AssertionSuccess();
  if (auto r = MakeDirs(ParentOf(path)); !r) return r;
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return AssertionFailure() << "mkdir: " << path << ": " << ErrnoName(errno);
  }
  return AssertionSuccess();
}

AssertionResult WritePlainFiles(const std::string& dir, const PlainFile* files,
                                size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const std::string path = dir + "/" + files[i].path;
    if (auto r = MakeDirs(ParentOf(path)); !r) return r;
    if (auto r = WriteFile(path, files[i].content, files[i].mode); !r) return r;
    if (::chmod(path.c_str(), files[i].mode) != 0) {
      return AssertionFailure()
             << "chmod: " << path << ": " << ErrnoName(errno);
    }
  }
  return AssertionSuccess();
}

// Runs one syscall-style step; `rc` -1 means failure with errno.
AssertionResult Step(long rc, const std::string& what) {
  if (rc != -1) return AssertionSuccess();
  return AssertionFailure() << what << ": " << ErrnoName(errno);
}

struct SymlinkSpec {
  const char* path;
  const char* target;
};

const SymlinkSpec kSymlinks[] = {
    {lower::kLinkToFile, lower::kLinkToFileTarget},
    {lower::kDanglingLink, lower::kDanglingLinkTarget},
    {lower::kLinkToDir, "../src/lib"},
};

AssertionResult MakeSymlinks(const std::string& dir) {
  for (const auto& link : kSymlinks) {
    const std::string path = dir + "/" + link.path;
    if (auto r = MakeDirs(ParentOf(path)); !r) return r;
    if (auto r = Step(::symlink(link.target, path.c_str()), "symlink " + path);
        !r) {
      return r;
    }
  }
  return AssertionSuccess();
}

// Hard links, a fifo, an xattr, a foreign owner and an empty directory.
AssertionResult MakeSpecialEntries(const std::string& dir) {
  const std::string d = dir + "/";
  const std::string a = d + lower::kHardLinkA, b = d + lower::kHardLinkB;
  const std::string fifo = d + lower::kFifo, tagged = d + lower::kXattrFile;
  const std::string owned = d + lower::kOwnedFile;
  AssertionResult r = MakeSymlinks(dir);
  if (r) r = MakeDirs(d + lower::kEmptyDir);
  if (r) r = MakeDirs(ParentOf(fifo));
  if (r) r = Step(::link(a.c_str(), b.c_str()), "link " + b);
  if (r) r = Step(::mkfifo(fifo.c_str(), 0644), "mkfifo " + fifo);
  if (r) {
    r = Step(::lsetxattr(tagged.c_str(), lower::kXattrName, lower::kXattrValue,
                         sizeof(lower::kXattrValue) - 1, 0),
             "lsetxattr user.test " + tagged);
  }
  if (r && ::geteuid() == 0) {
    r = Step(::lchown(owned.c_str(), lower::kOwnedUid, lower::kOwnedGid),
             "lchown " + owned);
  }
  return r;
}

// 100 MiB: a hole-y file with a 4 KiB patterned block at every MiB and a
// non-zero last byte, written in a few milliseconds.
AssertionResult MakeLargeFile(const std::string& dir) {
  const std::string path = dir + "/" + lower::kLargeFile;
  ScopedFd fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return Step(-1, "open " + path);
  if (::ftruncate(fd.get(), lower::kLargeFileSize) != 0) {
    return Step(-1, "ftruncate " + path);
  }
  std::string block(4096, '\0');
  for (uint64_t mib = 0; mib < (lower::kLargeFileSize >> 20); ++mib) {
    for (size_t i = 0; i < block.size(); ++i) {
      block[i] = static_cast<char>((mib * 131 + i * 7 + 1) & 0xff);
    }
    if (::pwrite(fd.get(), block.data(), block.size(), mib << 20) !=
        static_cast<ssize_t>(block.size())) {
      return Step(-1, "pwrite " + path);
    }
  }
  if (::pwrite(fd.get(), "E", 1, lower::kLargeFileSize - 1) != 1) {
    return Step(-1, "pwrite " + path);
  }
  return Step(fd.Close(), "close " + path);
}

AssertionResult Git(const std::string& dir,
                    const std::vector<std::string>& args,
                    CommandResult* out = nullptr) {
  CommandResult r = RunGit(dir, args, "/nonexistent");
  if (out) *out = r;
  if (r.ok()) return AssertionSuccess();
  return AssertionFailure() << r.Describe();
}

AssertionResult CommitAll(const std::string& dir) {
  AssertionResult r = Git(dir, {"init", "-q", "-b", "main"});
  if (r) r = Git(dir, {"config", "user.name", "acqfs test"});
  if (r) r = Git(dir, {"config", "user.email", "test@acqfs.invalid"});
  if (r) r = Git(dir, {"add", "-A"});
  if (r) r = Git(dir, {"commit", "-q", "-m", "initial"});
  return r;
}

AssertionResult SetTimes(const std::string& path, time_t when) {
  const timespec times[2] = {{when, 0}, {when, 0}};
  return Step(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW),
              "utimensat " + path);
}

// Back-dates every entry outside .git; directories after their children.
AssertionResult Backdate(const std::string& path, time_t when) {
  struct stat st;
  if (auto r = Lstat(path, &st); !r) return r;
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> names;
    if (auto r = ListDir(path, &names); !r) return r;
    for (const auto& name : names) {
      if (name == ".git") continue;
      if (auto r = Backdate(path + "/" + name, when); !r) return r;
    }
  }
  return SetTimes(path, when);
}

// Makes the checkout dirty, back-dates it and refreshes the index.
AssertionResult DirtyAndRefresh(const std::string& dir) {
  AssertionResult r =
      WriteFile(dir + "/" + lower::kReadme, lower::kReadmeContent);
  if (r) r = WriteFile(dir + "/" + lower::kUntracked, "scratch\n");
  if (r) r = WritePlainFiles(dir, kIgnoredFiles, std::size(kIgnoredFiles));
  if (r) r = MakeLargeFile(dir);
  if (r) r = Backdate(dir, ::time(nullptr) - kBackdateSeconds);
  CommandResult status;
  if (r) r = Git(dir, {"status", "--porcelain"}, &status);
  if (r && status.out != lower::kGitStatus) {
    r = AssertionFailure() << "unexpected git status in " << dir << ":\n"
                           << status.out;
  }
  return r;
}

}  // namespace

EnvAdditions GitEnv(const std::string& home) {
  return {{"HOME", home},
          {"GIT_CONFIG_NOSYSTEM", "1"},
          {"GIT_CONFIG_GLOBAL", "/dev/null"},
          {"GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z"},
          {"GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z"},
          {"LC_ALL", "C"}};
}

CommandResult RunGit(const std::string& repo,
                     const std::vector<std::string>& args,
                     const std::string& home, int timeout_seconds) {
  std::vector<std::string> argv = {"git", "-c", "safe.directory=*"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout_seconds, repo, GitEnv(home));
}

::testing::AssertionResult MakeLowerRepo(const std::string& dir) {
  AssertionResult r = MakeDirs(dir);
  if (r) r = WritePlainFiles(dir, kCommittedFiles, std::size(kCommittedFiles));
  if (r) r = MakeSpecialEntries(dir);
  // Old mtimes before `git add`, so that no index entry is racily clean (an
  // entry as new as the index makes every `git status` rewrite the index).
  if (r) r = Backdate(dir, ::time(nullptr) - kBackdateSeconds);
  if (r) r = CommitAll(dir);
  if (r) r = DirtyAndRefresh(dir);
  if (r) return r;
  return AssertionFailure() << "MakeLowerRepo(" << dir << "): " << r.message();
}

::testing::AssertionResult ChownTree(const std::string& dir, uid_t uid,
                                     gid_t gid) {
  struct stat st;
  if (auto r = Lstat(dir, &st); !r) return r;
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> names;
    if (auto r = ListDir(dir, &names); !r) return r;
    for (const auto& name : names) {
      if (auto r = ChownTree(dir + "/" + name, uid, gid); !r) return r;
    }
  }
  return Step(::lchown(dir.c_str(), uid, gid), "lchown " + dir);
}

}  // namespace acqfs::test
