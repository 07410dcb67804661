// A sandbox's policy (docs/sandboxes.md): hidden lower paths, read-only
// paths and the quota, tried every way a process in the sandbox can, and
// what status, diff, export and the kernel overlayfs make of the layers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
#include "mount_fixture.h"

namespace acqfs::test {
namespace {

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  EXPECT_TRUE(ListDir(dir, &names)) << dir;
  return names;
}

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

CommandResult Acqfs(const Sandbox& s, std::vector<std::string> args) {
  return AcqfsIn(s, std::move(args), 60);
}

// ---------------------------------------------------------------- hide

class Hidden : public MountTest {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"--hide", ".env",   "--hide",
                          "*.pem",  "--hide", "secrets/"};
    return o;
  }
  void PrepareLower(const std::string& lower) override {
    ASSERT_TRUE(WriteFile(lower + "/.env", "TOKEN=host-secret-1\n"));
    ASSERT_SYS_OK(::mkdir((lower + "/app").c_str(), 0755));
    ASSERT_TRUE(WriteFile(lower + "/app/.env", "TOKEN=host-secret-2\n"));
    ASSERT_TRUE(WriteFile(lower + "/app/config.txt", "ok\n"));
    ASSERT_SYS_OK(::mkdir((lower + "/tls").c_str(), 0755));
    ASSERT_TRUE(WriteFile(lower + "/tls/server.pem", "host-secret-3\n"));
    ASSERT_SYS_OK(::mkdir((lower + "/secrets").c_str(), 0700));
    ASSERT_SYS_OK(::mkdir((lower + "/secrets/db").c_str(), 0700));
    ASSERT_TRUE(
        WriteFile(lower + "/secrets/db/password.txt", "host-secret-4\n"));
    // .env is tracked, as careless repositories have it.
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"add", "-f", ".env", "app/config.txt"},
          std::vector<std::string>{"commit", "-q", "-m", "env"}}) {
      CommandResult r = RunGit(lower, args, home());
      ASSERT_TRUE(r.ok()) << r.Describe();
    }
  }
  const std::vector<std::string> kHidden = {
      ".env",    "app/.env",   "tls/server.pem",
      "secrets", "secrets/db", "secrets/db/password.txt"};
};

TEST_F(Hidden, HiddenPathsDoNotExistForAnyCall) {
  for (const auto& rel : kHidden) {
    SCOPED_TRACE(rel);
    EXPECT_EQ(LstatErrno(M(rel)), ENOENT);
    EXPECT_SYS_ERRNO(::open(M(rel).c_str(), O_RDONLY), ENOENT);
    char buf[64];
    EXPECT_SYS_ERRNO(::lgetxattr(M(rel).c_str(), "user.x", buf, sizeof buf),
                     ENOENT);
    EXPECT_SYS_ERRNO(::llistxattr(M(rel).c_str(), buf, sizeof buf), ENOENT);
    EXPECT_SYS_ERRNO(::access(M(rel).c_str(), F_OK), ENOENT);
  }
  EXPECT_FALSE(Has(Names(M("")), ".env"));
  EXPECT_FALSE(Has(Names(M("")), "secrets"));
  EXPECT_EQ(Names(M("app")), std::vector<std::string>{"config.txt"});
  EXPECT_TRUE(Names(M("tls")).empty());
  // Relative to an open directory, as a racing process would try.
  int dfd = ::open(M("app").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  EXPECT_SYS_ERRNO(::openat(dfd, ".env", O_RDONLY), ENOENT);
  std::string self = "/proc/self/fd/" + std::to_string(dfd) + "/.env";
  EXPECT_SYS_ERRNO(::open(self.c_str(), O_RDONLY), ENOENT);
  ::close(dfd);
  // A link, a rename, a symlink through it.
  EXPECT_SYS_ERRNO(::link(M(".env").c_str(), M("stolen").c_str()), ENOENT);
  EXPECT_SYS_ERRNO(::rename(M(".env").c_str(), M("stolen").c_str()), ENOENT);
  ASSERT_SYS_OK(::symlink(".env", M("peek").c_str()));
  EXPECT_SYS_ERRNO(::open(M("peek").c_str(), O_RDONLY), ENOENT);
  ASSERT_SYS_OK(::symlink("../secrets/db/password.txt", M("app/peek").c_str()));
  EXPECT_SYS_ERRNO(::open(M("app/peek").c_str(), O_RDONLY), ENOENT);
  // Directory link counts do not count a hidden subdirectory.
  struct stat st;
  ASSERT_TRUE(Lstat(M(""), &st));
  EXPECT_EQ(st.st_nlink, 1u);
}

TEST_F(Hidden, FindAndGrepSeeNothingOfIt) {
  CommandResult grep = RunCommand({"grep", "-r", "host-secret", M("")}, 60);
  EXPECT_EQ(grep.exit_code, 1) << grep.Describe();  // 1: nothing found
  EXPECT_EQ(grep.out, "");
  CommandResult find = RunCommand({"find", M("")}, 60);
  ASSERT_TRUE(find.ok()) << find.Describe();
  for (const char* leak : {"/.env\n", "server.pem", "secrets", "password"})
    EXPECT_EQ(find.out.find(leak), std::string::npos) << leak;
}

TEST_F(Hidden, RenamingTheParentCarriesNoHiddenContent) {
  ASSERT_SYS_OK(::rename(M("app").c_str(), M("app2").c_str()));
  ASSERT_SYS_OK(::rename(M("tls").c_str(), M("tls2").c_str()));
  EXPECT_EQ(ContentOf(M("app2/config.txt")), "ok\n");
  EXPECT_EQ(LstatErrno(M("app2/.env")), ENOENT);
  EXPECT_TRUE(Names(M("tls2")).empty());
  CommandResult grep =
      RunCommand({"grep", "-r", "host-secret", sandbox().upper()}, 60);
  EXPECT_EQ(grep.exit_code, 1) << grep.Describe();
  EXPECT_EQ(ContentOf(L("app/.env")), "TOKEN=host-secret-2\n");
}

TEST_F(Hidden, ASandboxFileOfAHiddenNameIsItsOwn) {
  ASSERT_TRUE(WriteFile(M(".env"), "mine\n"));
  EXPECT_EQ(ContentOf(M(".env")), "mine\n");
  EXPECT_EQ(ContentOf(U(".env")), "mine\n");
  EXPECT_EQ(ContentOf(L(".env")), "TOKEN=host-secret-1\n");
  ASSERT_SYS_OK(::unlink(M(".env").c_str()));
  EXPECT_EQ(LstatErrno(M(".env")), ENOENT);
  // A directory of a hidden directory's name starts empty.
  ASSERT_SYS_OK(::mkdir(M("secrets").c_str(), 0755));
  EXPECT_TRUE(Names(M("secrets")).empty());
  ASSERT_TRUE(WriteFile(M("secrets/mine.txt"), "x"));
  EXPECT_EQ(Names(M("secrets")), std::vector<std::string>{"mine.txt"});
}

TEST_F(Hidden, KernelOverlayfsDoesNotMergeTheSandboxsOwnDirectory) {
  ASSERT_SYS_OK(::mkdir(M("secrets").c_str(), 0755));
  ASSERT_TRUE(sandbox().Unmount());
  const std::string target = tmp().MakeDir("kernel-view");
  MountGuard guard(target);
  CommandResult r = MountKernelOverlay(sandbox().lower(), sandbox().upper(),
                                       sandbox().work(), target);
  ASSERT_TRUE(r.ok()) << r.Describe();
  // Made opaque over the hidden lower directory: nothing shows through.
  EXPECT_TRUE(Names(target + "/secrets").empty());
}

TEST_F(Hidden, StatusDiffAndExportLeaveHiddenPathsOut) {
  ASSERT_TRUE(WriteFile(M(".env"), "TOKEN=sandbox-made\n"));
  ASSERT_TRUE(WriteFile(M("new.txt"), "n\n"));
  CommandResult status = Acqfs(sandbox(), {"status", sandbox().name()});
  ASSERT_TRUE(status.ok()) << status.Describe();
  EXPECT_NE(status.out.find("A new.txt\n"), std::string::npos) << status.out;
  EXPECT_EQ(status.out.find(" .env\n"), std::string::npos) << status.out;
  EXPECT_EQ(status.out.rfind("# policy: hide .env, *.pem, secrets/", 0), 0u)
      << status.out;
  CommandResult diff = Acqfs(sandbox(), {"diff", sandbox().name()});
  ASSERT_TRUE(diff.ok()) << diff.Describe();
  EXPECT_EQ(diff.out.find("host-secret"), std::string::npos) << diff.out;
  EXPECT_EQ(diff.out.find("sandbox-made"), std::string::npos) << diff.out;
  EXPECT_NE(diff.out.find("new.txt"), std::string::npos) << diff.out;

  ASSERT_TRUE(sandbox().Unmount());  // exports
  std::string remote = "sandbox-" + sandbox().name();
  CommandResult fetch = RunGit(lower(), {"fetch", "-q", remote}, home());
  ASSERT_TRUE(fetch.ok()) << fetch.Describe();
  std::string wt = remote + "/acqfs-worktree";
  CommandResult added = RunGit(lower(), {"show", wt + ":new.txt"}, home());
  ASSERT_TRUE(added.ok()) << added.Describe();
  EXPECT_EQ(added.out, "n\n");
  // The tracked .env is the host's own, untouched by the sandbox's file.
  CommandResult env = RunGit(lower(), {"show", wt + ":.env"}, home());
  ASSERT_TRUE(env.ok()) << env.Describe();
  EXPECT_EQ(env.out, "TOKEN=host-secret-1\n");
}

// A recorded policy that can no longer be built (meta.json damaged or
// edited by hand) is a refusal for everything that publishes or applies
// the sandbox's work, naming meta.json (issue 33): Sandbox::ExportConfig
// dropped it silently, so `acqfs apply` brought the work into the host
// without the policy that keeps hidden paths out (export alone checked).
TEST_F(Hidden, ADamagedRecordedPolicyPublishesAndAppliesNothing) {
  ASSERT_TRUE(WriteFile(M("new.txt"), "n\n"));
  ASSERT_TRUE(sandbox().Unmount());  // exports
  ASSERT_TRUE(WriteFile(sandbox().U("later.txt"), "later\n"));
  const std::string meta =
      sandbox().state_dir() + "/" + sandbox().name() + "/meta.json";
  std::string text;
  ASSERT_TRUE(ReadFile(meta, &text));
  nlohmann::json j = nlohmann::json::parse(text);
  j["policy"]["hide"] = {"../outside"};
  ASSERT_TRUE(WriteFile(meta, j.dump()));
  const std::string bridge =
      sandbox().state_dir() + "/" + sandbox().name() + "/bridge.git";
  auto refs = [&] {
    return RunCommand({"git", "--git-dir=" + bridge, "for-each-ref"}, 30).out;
  };
  auto host = [&] {
    return RunGit(lower(), {"status", "--porcelain", "--ignored"}, home()).out;
  };
  const std::string refs0 = refs(), host0 = host();
  for (std::vector<std::string> args :
       {std::vector<std::string>{"export", sandbox().name()},
        {"apply", sandbox().name()},
        {"rm", sandbox().name()}}) {
    CommandResult r = Acqfs(sandbox(), args);
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("meta.json"), std::string::npos) << r.Describe();
    EXPECT_NE(r.err.find("policy"), std::string::npos) << r.Describe();
  }
  EXPECT_EQ(refs(), refs0);
  EXPECT_EQ(host(), host0);
  EXPECT_FALSE(Exists(lower() + "/later.txt"));
  EXPECT_TRUE(Exists(meta)) << "rm removed the sandbox";
}

// app/.env tracked too, committed before the mount: the sandbox's base
// (docs/git-bridge.md, "The base") is the host's HEAD at the mount.
class HiddenTracked : public Hidden {
 protected:
  void PrepareLower(const std::string& lower) override {
    Hidden::PrepareLower(lower);
    if (HasFatalFailure()) return;
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"add", "-f", "app/.env"},
          std::vector<std::string>{"commit", "-q", "-m", "app env"}}) {
      CommandResult r = RunGit(lower, args, home());
      ASSERT_TRUE(r.ok()) << r.Describe();
    }
  }
};

TEST_F(HiddenTracked, RemovingADirectoryKeepsItsHiddenTrackedFilesInTheExport) {
  // app/ holds the tracked config.txt and, hidden, app/.env (tracked too).
  CommandResult rm = RunCommand({"rm", "-rf", M("app")}, 60);
  ASSERT_TRUE(rm.ok()) << rm.Describe();
  ASSERT_TRUE(sandbox().Unmount());  // exports
  std::string remote = "sandbox-" + sandbox().name();
  ASSERT_TRUE(RunGit(lower(), {"fetch", "-q", remote}, home()).ok());
  std::string wt = remote + "/acqfs-worktree";
  CommandResult tree =
      RunGit(lower(), {"ls-tree", "-r", "--name-only", wt}, home());
  ASSERT_TRUE(tree.ok()) << tree.Describe();
  EXPECT_EQ(tree.out.find("app/config.txt"), std::string::npos) << tree.out;
  EXPECT_NE(tree.out.find("app/.env\n"), std::string::npos) << tree.out;
  CommandResult env = RunGit(lower(), {"show", wt + ":app/.env"}, home());
  EXPECT_EQ(env.out, "TOKEN=host-secret-2\n");
}

TEST_F(Hidden, GitStatusInTheSandboxShowsATrackedHiddenFileAsDeleted) {
  // Documented in docs/sandboxes.md: git sees what the sandbox sees.
  CommandResult r =
      RunGit(sandbox().mountpoint(), {"status", "--porcelain"}, home());
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_NE(r.out.find(" D .env\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("app/config.txt"), std::string::npos) << r.out;
}

// ---------------------------------------------------------------- read-only

// Both file modes: handle-less (the default) and `-o handles`.
std::vector<std::string> ModeArgs(const std::string& mode) {
  if (mode.empty()) return {};
  return {"-o", mode};
}

std::string ModeName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "no_open" ? "HandleLess" : "Handles";
}

class ReadOnly : public MountTest,
                 public ::testing::WithParamInterface<std::string> {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"--read-only", "vendor/",     "--read-only",
                          "/Makefile",   "--read-only", "tree/locked/"};
    for (const auto& a : ModeArgs(GetParam())) o.extra_mount_args.push_back(a);
    return o;
  }
  void PrepareLower(const std::string& lower) override {
    ASSERT_TRUE(WriteFile(lower + "/Makefile", "all:\n"));
    ASSERT_SYS_OK(::mkdir((lower + "/vendor").c_str(), 0755));
    ASSERT_SYS_OK(::mkdir((lower + "/vendor/sub").c_str(), 0755));
    ASSERT_TRUE(WriteFile(lower + "/vendor/lib.c", "int x;\n"));
    ASSERT_SYS_OK(::mkdir((lower + "/tree").c_str(), 0755));
    ASSERT_SYS_OK(::mkdir((lower + "/tree/locked").c_str(), 0755));
    ASSERT_TRUE(WriteFile(lower + "/tree/locked/a", "a"));
    ASSERT_TRUE(WriteFile(lower + "/tree/free.txt", "f"));
  }
};

TEST_P(ReadOnly, EveryChangeFailsWithErofsAndTheUpperStaysAsItWas) {
  ASSERT_TRUE(WriteFile(M("other.txt"), "o"));
  const SnapshotOptions options = SnapshotOptions::Everything();
  TreeSnapshot before = Snapshot(sandbox().upper(), options);
  EXPECT_EQ(ContentOf(M("Makefile")), "all:\n");  // reading is fine
  EXPECT_EQ(ContentOf(M("vendor/lib.c")), "int x;\n");
  for (const char* rel : {"Makefile", "vendor/lib.c"}) {
    SCOPED_TRACE(rel);
    std::string p = M(rel);
    // The handle-less mode may let open(O_WRONLY) through; the write fails.
    int fd = ::open(p.c_str(), O_WRONLY | O_APPEND);
    if (fd >= 0) {
      EXPECT_SYS_ERRNO(::write(fd, "x", 1), EROFS);
      ::close(fd);
    } else {
      EXPECT_EQ(errno, EROFS);
    }
    EXPECT_SYS_ERRNO(::open(p.c_str(), O_WRONLY | O_TRUNC), EROFS);
    EXPECT_SYS_ERRNO(::truncate(p.c_str(), 0), EROFS);
    EXPECT_SYS_ERRNO(::chmod(p.c_str(), 0600), EROFS);
    EXPECT_SYS_ERRNO(::lchown(p.c_str(), 1, 1), EROFS);
    struct timeval tv[2] = {{1, 0}, {1, 0}};
    EXPECT_SYS_ERRNO(::utimes(p.c_str(), tv), EROFS);
    EXPECT_SYS_ERRNO(::lsetxattr(p.c_str(), "user.k", "v", 1, 0), EROFS);
    EXPECT_SYS_ERRNO(::lremovexattr(p.c_str(), "user.k"), EROFS);
    EXPECT_SYS_ERRNO(::unlink(p.c_str()), EROFS);
    EXPECT_SYS_ERRNO(::rename(p.c_str(), M("moved").c_str()), EROFS);
    EXPECT_SYS_ERRNO(::link(p.c_str(), M("linked").c_str()), EROFS);
  }
  EXPECT_SYS_ERRNO(::rename(M("other.txt").c_str(), M("Makefile").c_str()),
                   EROFS);
  EXPECT_SYS_ERRNO(::link(M("other.txt").c_str(), M("vendor/o").c_str()),
                   EROFS);
  // Below a read-only directory nothing is created or removed.
  EXPECT_SYS_ERRNO(::open(M("vendor/new.c").c_str(), O_CREAT | O_WRONLY, 0644),
                   EROFS);
  EXPECT_SYS_ERRNO(::mkdir(M("vendor/d").c_str(), 0755), EROFS);
  EXPECT_SYS_ERRNO(::symlink("x", M("vendor/l").c_str()), EROFS);
  EXPECT_SYS_ERRNO(::rmdir(M("vendor/sub").c_str()), EROFS);
  EXPECT_SYS_ERRNO(::chmod(M("vendor").c_str(), 0700), EROFS);
  EXPECT_SYS_ERRNO(::rename(M("vendor").c_str(), M("v2").c_str()), EROFS);
  // Moving a directory would move the read-only paths inside it.
  EXPECT_SYS_ERRNO(::rename(M("tree").c_str(), M("tree2").c_str()), EROFS);
  EXPECT_TRUE(SnapshotsEqual(before, Snapshot(sandbox().upper(), options)));
  // Elsewhere the sandbox writes as usual.
  ASSERT_TRUE(AppendFile(M("tree/free.txt"), "+"));
  EXPECT_EQ(ContentOf(M("tree/free.txt")), "f+");
  EXPECT_EQ(ContentOf(M("tree/locked/a")), "a");
}

// Issue 12: a shared writable mapping of a read-only file. Its writes are
// refused when the kernel writes the pages back (handle-less mode), or the
// writable open is refused (handles mode). Either way nothing reaches the
// upper, and readers, the mapping included, soon see only what is stored:
// never the refused bytes, until a remount.
TEST_P(ReadOnly, AWriteThroughAMappingIsRefusedAndItsPagesDropped) {
  const SnapshotOptions options = SnapshotOptions::Everything();
  TreeSnapshot before = Snapshot(sandbox().upper(), options);
  std::string p = M("vendor/lib.c");
  int fd = ::open(p.c_str(), O_RDWR);
  if (fd < 0) {
    EXPECT_EQ(errno, EROFS);
    EXPECT_NE(GetParam(), "no_open") << "the handle-less mode has no OPEN";
  } else {
    struct stat st;
    ASSERT_SYS_OK(::fstat(fd, &st));
    void* map =
        ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(map, MAP_FAILED) << ErrnoName(errno);
    std::memcpy(map, "EVIL", 4);
    EXPECT_SYS_ERRNO(::msync(map, st.st_size, MS_SYNC), EROFS);
    // The pages are dropped by the daemon's own thread, a moment later.
    std::string seen, mapped;
    for (int i = 0; i < 100; ++i) {
      seen = ContentOf(p);
      mapped.assign(static_cast<char*>(map), st.st_size);
      if (seen == "int x;\n" && mapped == "int x;\n") break;
      ::usleep(20000);
    }
    EXPECT_EQ(seen, "int x;\n");
    EXPECT_EQ(mapped, "int x;\n");
    ::munmap(map, st.st_size);
    ::close(fd);
  }
  EXPECT_EQ(ContentOf(p), "int x;\n");
  EXPECT_TRUE(SnapshotsEqual(before, Snapshot(sandbox().upper(), options)));
}

// ---------------------------------------------------------------- quota

class QuotaTest : public MountTest,
                  public ::testing::WithParamInterface<std::string> {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"--quota", "1M"};
    for (const auto& a : ModeArgs(GetParam())) o.extra_mount_args.push_back(a);
    return o;
  }
  void PrepareLower(const std::string& lower) override {
    ASSERT_TRUE(WriteFile(lower + "/big-lower.bin", std::string(700000, 'L')));
  }
};

TEST_P(QuotaTest, FillingPastTheQuotaFailsCleanlyAndDeletingFreesIt) {
  const std::string chunk(4096, 'q');
  ASSERT_SYS_OK(::mkdir(M("many").c_str(), 0755));
  int written = 0, err = 0;
  for (int i = 0; i < 400 && err == 0; ++i) {
    std::string p = M("many/f" + std::to_string(i));
    int fd = ::open(p.c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << p;
    if (::write(fd, chunk.data(), chunk.size()) ==
        static_cast<ssize_t>(chunk.size()))
      ++written;
    else
      err = errno;
    ::close(fd);
  }
  EXPECT_EQ(err, EDQUOT);
  // A block each, in 1 MiB with the directories' own blocks (the upper's
  // root, many/ holding the names, acqfs-tmp) counted too, and the
  // sandbox's own .git (its base: HEAD, refs, index, config, hooks; the
  // copy-up its first `git add` used to make).
  const int git_blocks = static_cast<int>(DiskUsage(U(".git")) / 4096);
  EXPECT_GT(git_blocks, 0);
  EXPECT_GE(written + git_blocks, 250);
  EXPECT_LE(written + git_blocks, 255);
  // One large write fails as a whole; a copy-up of a big lower file too.
  int fd = ::open(M("large.out").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  std::string large(2 << 20, 'B');
  EXPECT_SYS_ERRNO(::write(fd, large.data(), large.size()), EDQUOT);
  ::close(fd);
  EXPECT_SYS_ERRNO(::truncate(M("big-lower.bin").c_str(), 100), EDQUOT);
  EXPECT_FALSE(Exists(U("big-lower.bin")));
  // ls shows the use.
  CommandResult ls = Acqfs(sandbox(), {"ls", "--json"});
  ASSERT_TRUE(ls.ok()) << ls.Describe();
  auto j = nlohmann::json::parse(ls.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["policy"]["quota_bytes"], 1u << 20);
  EXPECT_LE(j[0]["quota_used_bytes"].get<uint64_t>(), 1u << 20);
  EXPECT_GE(j[0]["quota_used_bytes"].get<uint64_t>(),
            static_cast<uint64_t>(written + 3) * 4096);
  // Deleting frees quota: the copy-up fits now.
  for (int i = 0; i < 200; ++i)
    ASSERT_SYS_OK(::unlink(M("many/f" + std::to_string(i)).c_str()));
  ASSERT_SYS_OK(::truncate(M("big-lower.bin").c_str(), 100));
  EXPECT_EQ(ContentOf(M("big-lower.bin")), std::string(100, 'L'));
  ASSERT_TRUE(WriteFile(M("after.txt"), "still room\n"));
  // The kernel overlayfs mounts the layers and sees the same tree.
  const SnapshotOptions options = SnapshotOptions::MergedView();
  TreeSnapshot fuse_view = Snapshot(sandbox().mountpoint(), options);
  ASSERT_TRUE(sandbox().Unmount());
  const std::string target = tmp().MakeDir("kernel-view");
  MountGuard guard(target);
  CommandResult k = MountKernelOverlay(sandbox().lower(), sandbox().upper(),
                                       sandbox().work(), target);
  ASSERT_TRUE(k.ok()) << k.Describe();
  TreeSnapshot kernel_view = Snapshot(target, options);
  fuse_view.root = "acqfs";
  kernel_view.root = "kernel overlayfs";
  EXPECT_TRUE(SnapshotsEqual(fuse_view, kernel_view, 40));
}

INSTANTIATE_TEST_SUITE_P(Modes, ReadOnly,
                         ::testing::Values(std::string("no_open"), "handles"),
                         ModeName);
INSTANTIATE_TEST_SUITE_P(Modes, QuotaTest,
                         ::testing::Values(std::string("no_open"), "handles"),
                         ModeName);

// ---------------------------------------------------------------- refusals

class PolicyRefusal : public MountTest {};

TEST_F(PolicyRefusal, ABadPatternOrSizeMountsNothing) {
  const std::string mnt = tmp().MakeDir("refused-mnt");
  const std::string state = tmp().Sub("refused-state");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--hide", "keys[0-9"}, "'keys[0-9'"},
      {{"--read-only", "!x"}, "'!x'"},
      {{"--quota", "lots"}, "'lots'"},
      {{"--quota", "1M", "-o", "writeback"}, "writeback"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {AcqfsBinary(), "mount",  lower(),
                                     mnt,           "--name", "refused",
                                     "--state-dir", state};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CommandResult r = RunCommand(argv, 30);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.Describe();
    EXPECT_FALSE(FindMount(mnt).has_value());
    EXPECT_FALSE(Exists(state + "/refused"));
  }
}

// Every option value of mount that is empty or malformed is refused, named
// with its value, before anything exists: no state folder, no mount, no
// remote on the host.
TEST_F(PolicyRefusal, EmptyOrMalformedValuesAreRefusedBeforeAnything) {
  const std::string mnt = tmp().MakeDir("bad-mnt");
  const std::string state = tmp().Sub("bad-state");
  auto file = [&](const std::string& name, const std::string& text) {
    std::string path = tmp().Sub(name);
    EXPECT_TRUE(WriteFile(path, text));
    return path;
  };
  const std::string empty = file("empty.json", "");
  const std::string blank = file("blank.json", " \n\t\n");
  const std::string empty_quota = file("q.json", R"({"quota": ""})");
  const std::string bad_quota = file("q2.json", R"({"quota": "5 M"})");
  const std::string zero_quota = file("q3.json", R"({"quota": 0})");
  const std::string empty_glob = file("g.json", R"({"hide": [""]})");
  const std::string blank_glob =
      file("g2.json", R"({"read_only": ["*.pem "]})");
  const std::string twice =
      file("twice.json", R"({"hide": [".env"], "hide": []})");
  const std::string not_list = file("nl.json", R"({"hide": ".env"})");
  const std::string dir = tmp().MakeDir("a-directory");
  MountGuard guard(mnt);  // should an old acqfs mount one of them
  struct Case {
    std::vector<std::string> args;
    std::string says;  // the option and its value, as printed
  };
  const std::vector<Case> cases = {
      {{"--quota", ""}, "--quota ''"},
      {{"--quota="}, "--quota: 1 required"},  // CLI11: no value at all
      {{"--quota", " 5M"}, "--quota ' 5M'"},
      {{"--quota", "5M "}, "--quota '5M '"},
      {{"--quota", "1.5"}, "--quota '1.5'"},
      {{"--quota", "-1M"}, "--quota '-1M'"},
      {{"--quota", "1e9"}, "--quota '1e9'"},
      {{"--quota", "0"}, "--quota '0'"},
      {{"--quota", "0x10M"}, "--quota '0x10M'"},
      {{"--hide", ""}, "--hide ''"},
      {{"--hide", "*.pem "}, "--hide '*.pem '"},
      {{"--hide", "a\tb"}, "--hide 'a\tb'"},
      {{"--read-only", ""}, "--read-only ''"},
      {{"--read-only", "/"}, "--read-only '/'"},
      {{"--hide", ".env", "--hide", "[x"}, "--hide '[x'"},
      {{"--policy", ""}, "--policy ''"},
      {{"--policy", empty}, "--policy '" + empty + "'"},
      {{"--policy", blank}, "--policy '" + blank + "'"},
      {{"--policy", empty_quota}, "\"quota\": ''"},
      {{"--policy", bad_quota}, "\"quota\": '5 M'"},
      {{"--policy", zero_quota}, "\"quota\": '0'"},
      {{"--policy", empty_glob}, "\"hide\": ''"},
      {{"--policy", blank_glob}, "\"read_only\": '*.pem '"},
      {{"--policy", twice}, "\"hide\" twice"},
      {{"--policy", not_list}, "\"hide\" must be a list"},
      {{"--policy", dir}, "--policy '" + dir + "'"},
      {{"--policy", tmp().Sub("missing.json")}, "missing.json"},
      {{"--policy", "/dev/zero"}, "--policy '/dev/zero'"},
      // A valid --quota does not excuse a bad one in the file.
      {{"--quota", "1M", "--policy", empty_quota}, "\"quota\": ''"},
      {{"-o", "timeout="}, "timeout="},
      {{"-o", "timeout=nan"}, "timeout=nan"},
      {{"-o", "timeout=inf"}, "timeout=inf"},
      {{"-o", "timeout= 5"}, "timeout= 5"},
      {{"-o", "threads=+4"}, "threads=+4"},
      {{"-o", "threads=0x4"}, "threads=0x4"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {AcqfsBinary(), "mount",  lower(),
                                     mnt,           "--name", "bad",
                                     "--state-dir", state};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CommandResult r = RunCommand(argv, 30);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_NE(r.err.find(c.says), std::string::npos)
        << "expected " << c.says << " in: " << r.Describe();
    EXPECT_FALSE(FindMount(mnt).has_value()) << r.Describe();
    if (FindMount(mnt)) RunCommand({"fusermount3", "-u", mnt}, 30);
    EXPECT_FALSE(Exists(state + "/bad")) << r.Describe();
    CommandResult remotes = RunGit(lower(), {"remote"}, home());
    EXPECT_EQ(remotes.out.find("sandbox-bad"), std::string::npos)
        << r.Describe();
    if (Exists(state + "/bad")) {
      RunCommand({AcqfsBinary(), "rm", "--force", "bad", "--state-dir", state},
                 60);
    }
  }
}

// The well-formed neighbours of those values still mount.
TEST_F(PolicyRefusal, WellFormedValuesStillMount) {
  const std::string mnt = tmp().MakeDir("good-mnt");
  const std::string state = tmp().Sub("good-state");
  const std::string policy = tmp().Sub("good.json");
  ASSERT_TRUE(WriteFile(
      policy,
      R"({"hide": ["a\\ "], "read_only": ["docs/"], "quota": 1048576})"));
  MountGuard guard(mnt);
  CommandResult r =
      RunCommand({AcqfsBinary(), "mount", lower(), mnt, "--name", "good",
                  "--state-dir", state, "--policy", policy, "--quota", "1.5M",
                  "-o", "timeout=0.5", "-o", "threads=2"},
                 30);
  ASSERT_TRUE(r.ok()) << r.Describe();
  CommandResult ls =
      RunCommand({AcqfsBinary(), "ls", "--json", "--state-dir", state}, 30);
  ASSERT_TRUE(ls.ok()) << ls.Describe();
  auto j = nlohmann::json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(j.is_array() && j.size() == 1) << ls.out;
  EXPECT_EQ(j[0]["policy"]["quota_bytes"], 1572864u);  // --quota wins
  EXPECT_EQ(j[0]["policy"]["hide"], nlohmann::json::array({"a\\ "}));
  CommandResult un = RunCommand(
      {AcqfsBinary(), "umount", "good", "--no-export", "--state-dir", state},
      60);
  EXPECT_TRUE(un.ok()) << un.Describe();
  RunCommand({AcqfsBinary(), "rm", "--force", "good", "--state-dir", state},
             60);
}

TEST_F(PolicyRefusal, ARemountCannotChangeThePolicy) {
  const std::string mnt = tmp().MakeDir("pol-mnt");
  const std::string state = tmp().Sub("pol-state");
  auto mount = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {AcqfsBinary(), "mount",  lower(),
                                     mnt,           "--name", "pol",
                                     "--state-dir", state};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv, 30);
  };
  auto umount = [&] {
    return RunCommand(
        {AcqfsBinary(), "umount", "pol", "--no-export", "--state-dir", state},
        60);
  };
  MountGuard guard(mnt);
  CommandResult first = mount({"--hide", ".env"});
  ASSERT_TRUE(first.ok()) << first.Describe();
  ASSERT_TRUE(umount().ok());
  CommandResult changed = mount({"--hide", "*.key"});
  EXPECT_EQ(changed.exit_code, 1) << changed.Describe();
  EXPECT_NE(changed.err.find("cannot change"), std::string::npos)
      << changed.Describe();
  EXPECT_FALSE(FindMount(mnt).has_value());
  CommandResult again = mount({});  // the recorded policy applies
  ASSERT_TRUE(again.ok()) << again.Describe();
  ASSERT_TRUE(WriteFile(lower() + "/.env", "s"));
  EXPECT_EQ(LstatErrno(mnt + "/.env"), ENOENT);
  ASSERT_TRUE(umount().ok());
  RunCommand({AcqfsBinary(), "rm", "--force", "pol", "--state-dir", state}, 60);
}

TEST_F(PolicyRefusal, MountThroughTheMountHelperAppliesTheRecordedPolicy) {
  const std::string mnt = tmp().MakeDir("helper-mnt");
  const std::string state = tmp().Sub("helper-state");
  ASSERT_TRUE(WriteFile(lower() + "/.env", "TOKEN=host-secret\n"));
  MountGuard guard(mnt);
  CommandResult made =
      RunCommand({AcqfsBinary(), "mount", lower(), mnt, "--name", "hp",
                  "--state-dir", state, "--hide", ".env"},
                 30);
  ASSERT_TRUE(made.ok()) << made.Describe();
  ASSERT_TRUE(RunCommand({AcqfsBinary(), "umount", "hp", "--no-export",
                          "--state-dir", state},
                         60)
                  .ok());
  // The same layers through mount(8)'s helper, as an fstab line would.
  const std::string dir = state + "/hp";
  CommandResult helper = RunCommand(
      {MountHelperBinary(), "acqfs", mnt, "-o",
       "lowerdir=" + lower() + ",upperdir=" + SandboxUpper(state, "hp") +
           ",workdir=" + dir + "/work"},
      30);
  ASSERT_TRUE(helper.ok()) << helper.Describe();
  EXPECT_TRUE(FindMount(mnt).has_value());
  EXPECT_EQ(LstatErrno(mnt + "/.env"), ENOENT);
  EXPECT_EQ(ContentOf(mnt + "/" + lower::kFileA), lower::kFileAContent);
  CommandResult un = RunCommand({"fusermount3", "-u", mnt}, 30);
  EXPECT_TRUE(un.ok()) << un.Describe();
  // Metadata it cannot read: nothing is mounted.
  ASSERT_TRUE(WriteFile(dir + "/meta.json", "{not json"));
  CommandResult refused = RunCommand(
      {MountHelperBinary(), "acqfs", mnt, "-o",
       "lowerdir=" + lower() + ",upperdir=" + SandboxUpper(state, "hp") +
           ",workdir=" + dir + "/work"},
      30);
  EXPECT_EQ(refused.exit_code, 1) << refused.Describe();
  EXPECT_NE(refused.err.find("policy must apply"), std::string::npos)
      << refused.Describe();
  EXPECT_FALSE(FindMount(mnt).has_value());
  RunGit(lower(), {"remote", "remove", "sandbox-hp"}, home());
}

}  // namespace
}  // namespace acqfs::test
