// Objects the host removes or replaces in the lower while the kernel still
// holds their nodes: the sandbox must be able to create at those names, and
// lookups must find what is there now.
//
// Found with git: a large commit on the host makes git auto-gc in the
// background, whose prune-packed removes the loose-object directories
// (.git/objects/ec) while a sandbox over the same checkout runs
// `git add`. The sandbox's git creates .git/objects/ec/tmp_obj_* (ENOENT:
// the directory is gone), then mkdir(".git/objects/ec"): the kernel
// revalidates "ec", the daemon says it is gone, and MKDIR reached the
// daemon while its node table still bound "ec" to the old node (the kernel
// had not sent, or the daemon had not yet served, its FORGET). The daemon
// made the directory, replied with the old node, whose stat failed, and
// mkdir returned ENOENT ("unable to create temporary file").
//
// Whether FORGET comes before MKDIR is a race between the daemon's worker
// threads. These tests keep the kernel holding the old nodes (an open
// descriptor of each, as any process's cwd or open directory would), which
// makes the failing order certain.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "harness/command.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

std::string ModeName(const ::testing::TestParamInfo<const char*>& i) {
  return i.param[0] ? "Handles" : "HandleLess";
}

// A child process maps each of `paths` (`size` bytes each, at most 8) and
// reads its first page; then `meanwhile` runs here; then the child reads
// every page and compares it with `wants`. Returns "" when it read them
// all right, else how it failed (killed by SIGBUS, wrong bytes, ...).
std::string MappingsSurvive(const std::vector<std::string>& paths,
                            const std::vector<std::string>& wants, size_t size,
                            const std::function<void()>& meanwhile) {
  int go[2], ready[2];
  if (::pipe(go) != 0 || ::pipe(ready) != 0) return "pipe failed";
  pid_t child = ::fork();
  if (child < 0) return std::string("fork: ") + std::strerror(errno);
  if (child == 0) {  // only async-signal-safe calls from here
    const char* maps[8];
    if (paths.size() > 8) ::_exit(9);
    for (size_t i = 0; i < paths.size(); ++i) {
      int fd = ::open(paths[i].c_str(), O_RDONLY);
      if (fd < 0) ::_exit(10);
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      ::close(fd);
      if (p == MAP_FAILED) ::_exit(11);
      maps[i] = static_cast<const char*>(p);
      volatile char first = maps[i][0];
      (void)first;
    }
    char c = 1;
    if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(12);
    for (size_t i = 0; i < paths.size(); ++i)
      if (std::memcmp(maps[i], wants[i].data(), size) != 0) ::_exit(13);
    ::_exit(0);
  }
  char c = 1;
  if (::read(ready[0], &c, 1) == 1) meanwhile();
  (void)!::write(go[1], &c, 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (int fd : {go[0], go[1], ready[0], ready[1]}) ::close(fd);
  if (WIFSIGNALED(status))
    return std::string("killed by ") + ::strsignal(WTERMSIG(status));
  if (WEXITSTATUS(status) != 0)
    return "exit " + std::to_string(WEXITSTATUS(status)) +
           (WEXITSTATUS(status) == 13 ? " (wrong bytes)" : "");
  return "";
}

// Both file modes: handle-less (the default) and `-o handles`; the default
// cache timeouts (60 s), so the kernel's dentries stay valid throughout.
class HostRemoved : public MountTest,
                    public ::testing::WithParamInterface<const char*> {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    if (GetParam()[0]) o.extra_mount_args = {"-o", GetParam()};
    return o;
  }
};

// The lower directory the kernel holds is removed by the host; the sandbox
// creates it again the way git makes a loose-object directory.
TEST_P(HostRemoved, MkdirWhereTheHostRemovedADirectoryTheKernelHolds) {
  ASSERT_EQ(::mkdir(L("objs").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir(L("objs/ec").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_TRUE(WriteFile(L("objs/ec/loose"), "loose object\n"));
  // The kernel looks both up and keeps them (its node for the directory and
  // for a file in it).
  ScopedFd dir(::open(M("objs/ec").c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(dir.valid()) << std::strerror(errno);
  ScopedFd file(::open(M("objs/ec/loose").c_str(), O_RDONLY));
  ASSERT_TRUE(file.valid()) << std::strerror(errno);
  // The host prunes them (git prune-packed).
  ASSERT_EQ(::unlink(L("objs/ec/loose").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::rmdir(L("objs/ec").c_str()), 0) << std::strerror(errno);

  // git's create_tmpfile: the temporary file first, which fails as the
  // directory is gone...
  const std::string tmp = M("objs/ec/tmp_obj_1");
  errno = 0;
  ScopedFd fail(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL, 0444));
  EXPECT_FALSE(fail.valid());
  EXPECT_EQ(errno, ENOENT) << std::strerror(errno);
  // ...then the directory, then the temporary file again.
  ASSERT_EQ(::mkdir(M("objs/ec").c_str(), 0777), 0) << std::strerror(errno);
  struct stat st = StatM("objs/ec");
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  {
    ScopedFd t(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL, 0444));
    ASSERT_TRUE(t.valid()) << std::strerror(errno);
    ASSERT_EQ(::write(t.get(), "blob", 4), 4) << std::strerror(errno);
  }
  ASSERT_EQ(::link(tmp.c_str(), M("objs/ec/obj").c_str()), 0)
      << std::strerror(errno);
  ASSERT_EQ(::unlink(tmp.c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(ContentOf(M("objs/ec/obj")), "blob");
  EXPECT_EQ(ContentOf(U("objs/ec/obj")), "blob");
  // The pruned file stays gone, and the new directory holds only the new
  // object.
  EXPECT_EQ(LstatErrno(M("objs/ec/loose")), ENOENT);
  EXPECT_EQ(LstatErrno(M("objs/ec/tmp_obj_1")), ENOENT);
  EXPECT_FALSE(Exists(L("objs/ec")));

  // The descriptor of the removed directory reaches no directory any more:
  // nothing can be made through it, least of all somewhere else.
  errno = 0;
  ScopedFd stray(
      ::openat(dir.get(), "stray", O_WRONLY | O_CREAT | O_EXCL, 0644));
  EXPECT_FALSE(stray.valid());
  EXPECT_EQ(errno, ENOENT) << std::strerror(errno);
  EXPECT_NE(::mkdirat(dir.get(), "stray-dir", 0755), 0);
  for (const char* where : {"stray", "stray-dir", "objs/stray", "objs/ec/stray",
                            "objs/stray-dir", "objs/ec/stray-dir"}) {
    EXPECT_EQ(LstatErrno(M(where)), ENOENT) << where;
    EXPECT_FALSE(Exists(U(where))) << where;
  }
  EXPECT_EQ(ContentOf(L("README.md")), ContentOf(M("README.md")));
}

// A lower checkout whose objects are loose (auto-gc off), which the host
// packs while the sandbox holds its loose-object directories; then
// `git add` of 2,000 new files in the sandbox.
TEST_P(HostRemoved, GitAddAfterTheHostPackedTheLooseObjectDirectories) {
  CommandResult made = RunShell(
      "cd " + ShellQuote(lower()) +
          " && mkdir -p host && for i in $(seq 1 1500); do echo \"host $i\" > "
          "host/f$i.txt; done && git -c safe.directory=* add -A && "
          "git -c safe.directory=* -c gc.auto=0 commit -q -m host",
      120, "", GitEnv(home()));
  ASSERT_TRUE(made.ok()) << made.Describe();
  // The loose-object directories, seen through the mount and held.
  std::vector<ScopedFd> held;
  {
    DIR* d = ::opendir(L(".git/objects").c_str());
    ASSERT_NE(d, nullptr) << std::strerror(errno);
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() != 2 || n == "..") continue;
      ScopedFd fd(
          ::open(M(".git/objects/" + n).c_str(), O_RDONLY | O_DIRECTORY));
      EXPECT_TRUE(fd.valid()) << n << ": " << std::strerror(errno);
      held.push_back(std::move(fd));
    }
    ::closedir(d);
  }
  ASSERT_GT(held.size(), 200u);

  CommandResult branch =
      RunGit(sandbox().mountpoint(), {"checkout", "-q", "-b", "agent"}, home());
  ASSERT_TRUE(branch.ok()) << branch.Describe();
  CommandResult files = RunShell(
      "cd " + ShellQuote(sandbox().mountpoint()) +
          " && mkdir -p new && for i in $(seq 1 2000); do echo \"agent $i\" > "
          "new/a$i.txt; done",
      120);
  ASSERT_TRUE(files.ok()) << files.Describe();
  // The host packs its objects and prunes the loose ones, directories and
  // all, as its background auto-gc does.
  CommandResult gc =
      RunGit(lower(), {"-c", "gc.autoDetach=false", "gc", "-q"}, home(), 120);
  ASSERT_TRUE(gc.ok()) << gc.Describe();
  CommandResult left = RunShell("ls " + ShellQuote(L(".git/objects")), 10);
  ASSERT_TRUE(left.ok()) << left.Describe();
  ASSERT_EQ(left.out, "info\npack\n");

  CommandResult add =
      RunGit(sandbox().mountpoint(), {"add", "-A"}, home(), 240);
  ASSERT_TRUE(add.ok()) << add.Describe();
  CommandResult commit =
      RunGit(sandbox().mountpoint(),
             {"-c", "gc.auto=0", "commit", "-q", "-m", "agent"}, home(), 120);
  ASSERT_TRUE(commit.ok()) << commit.Describe();
  CommandResult count = RunShell("git -c safe.directory=* -C " +
                                     ShellQuote(sandbox().mountpoint()) +
                                     " ls-tree -r --name-only HEAD new | wc -l",
                                 60, "", GitEnv(home()));
  ASSERT_TRUE(count.ok()) << count.Describe();
  EXPECT_EQ(count.out, "2000\n");
  CommandResult fsck =
      RunGit(sandbox().mountpoint(), {"fsck", "--no-progress"}, home(), 240);
  EXPECT_TRUE(fsck.ok()) << fsck.Describe();
}

// Files of the host's object store that git maps for as long as it runs
// (packs, their indexes, commit graphs), deleted by the host's gc while a
// sandbox's git has them mapped and reads more of them: a `git fsck` in a
// sandbox died of SIGBUS while the host repacked. A process keeps a
// deleted file's data on ext4 and on the kernel overlayfs; the kernel
// reads a FUSE mapping's pages through the node, so the daemon must still
// reach the data after the host's unlink, however many other files the
// sandbox read in between (its file cache holds 512).
TEST_P(HostRemoved, MappedObjectStoreFilesTheHostDeletesStayReadable) {
  const std::vector<std::string> mapped = {
      ".git/objects/pack/pack-acqfstest.pack",
      ".git/objects/pack/pack-acqfstest.idx",
      ".git/objects/info/commit-graphs/graph-acqfstest.graph",
  };
  ASSERT_EQ(::mkdir(L(".git/objects/info/commit-graphs").c_str(), 0755), 0)
      << std::strerror(errno);
  constexpr size_t kSize = 4 << 20;
  auto text_of = [&](size_t which) {
    std::string t(kSize, '\0');
    uint32_t x = 2463534242u + static_cast<uint32_t>(which);
    for (char& c : t) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      c = static_cast<char>(x);
    }
    return t;
  };
  std::vector<std::string> wants, paths;  // made before the fork
  for (size_t i = 0; i < mapped.size(); ++i) {
    wants.push_back(text_of(i));
    paths.push_back(M(mapped[i]));
    ASSERT_TRUE(WriteFile(L(mapped[i]), wants.back()));
  }
  ASSERT_EQ(::mkdir(L("many").c_str(), 0755), 0) << std::strerror(errno);
  constexpr int kOthers = 700;  // more than the file cache holds
  for (int i = 0; i < kOthers; ++i)
    ASSERT_TRUE(WriteFile(L("many/f" + std::to_string(i)), "x\n"));

  // A child maps each file and reads its first page, the parent then reads
  // the other files, the host deletes the mapped ones, and the child reads
  // every page: SIGBUS, or wrong bytes, fail it.
  EXPECT_EQ(MappingsSurvive(paths, wants, kSize,
                            [&] {
                              for (int i = 0; i < kOthers; ++i)
                                ASSERT_EQ(
                                    ContentOf(M("many/f" + std::to_string(i))),
                                    "x\n");
                              for (const auto& rel : mapped)
                                ASSERT_SYS_OK(::unlink(L(rel).c_str()));
                            }),
            "");
}

// The host's gc deletes loose objects (prune-packed) and old packs while
// the sandbox's git has looked them up: git stats an object's path before
// it reads it, and on a disk an open after the unlink fails with ENOENT,
// after which git looks in the packs. In the handle-less mode an open
// never reaches the daemon, so a name the kernel still cached opened, and
// the read then failed (a mapping's read: SIGBUS). And a file git opened
// just before the unlink keeps its data, as on ext4.
TEST_P(HostRemoved, ObjectStoreFilesTheHostDeletesAreGoneOrWhole) {
  std::vector<std::string> rels;
  for (int i = 0; i < 40; ++i) {
    char dir[8];
    std::snprintf(dir, sizeof dir, "%02x", 0x10 + i % 8);
    std::string d = ".git/objects/" + std::string(dir);
    ::mkdir(L(d).c_str(), 0755);
    rels.push_back(d + "/obj" + std::to_string(i));
    ASSERT_TRUE(WriteFile(L(rels.back()), "object " + std::to_string(i)));
  }
  rels.push_back(".git/objects/pack/pack-gone.pack");
  ASSERT_TRUE(WriteFile(L(rels.back()), "a pack"));
  // The first half is looked up only (git's stat), the second half opened.
  const size_t half = rels.size() / 2;
  std::vector<ScopedFd> held;
  for (size_t i = 0; i < rels.size(); ++i) {
    if (i < half) {
      StatM(rels[i]);
    } else {
      held.emplace_back(::open(M(rels[i]).c_str(), O_RDONLY));
      ASSERT_TRUE(held.back().valid())
          << rels[i] << ": " << std::strerror(errno);
    }
  }
  for (const auto& rel : rels) ASSERT_SYS_OK(::unlink(L(rel).c_str()));
  for (size_t i = 0; i < half; ++i) {
    errno = 0;
    ScopedFd fd(::open(M(rels[i]).c_str(), O_RDONLY));
    EXPECT_FALSE(fd.valid()) << rels[i] << " opened after the host's unlink";
    EXPECT_EQ(errno, ENOENT) << rels[i];
  }
  for (size_t i = half; i < rels.size(); ++i) {
    char buf[64];
    ssize_t n = ::pread(held[i - half].get(), buf, sizeof buf, 0);
    ASSERT_GE(n, 0) << rels[i] << ": " << std::strerror(errno);
    std::string want =
        i + 1 == rels.size() ? "a pack" : "object " + std::to_string(i);
    EXPECT_EQ(std::string(buf, n), want) << rels[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, HostRemoved, ::testing::Values("", "handles"),
                         ModeName);

// Lookups after the host replaced what the kernel holds: mounted with
// `-o timeout=1`, so the kernel asks again once a second has passed.
class HostReplaced : public MountTest,
                     public ::testing::WithParamInterface<const char*> {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"-o", "timeout=1"};
    if (GetParam()[0]) {
      o.extra_mount_args.push_back("-o");
      o.extra_mount_args.push_back(GetParam());
    }
    return o;
  }
};

TEST_P(HostReplaced, AFileTheKernelHoldsReplacedByADirectoryShowsAsOne) {
  ASSERT_TRUE(WriteFile(L("swap"), "a file\n"));
  ScopedFd file(::open(M("swap").c_str(), O_RDONLY));
  ASSERT_TRUE(file.valid()) << std::strerror(errno);
  ASSERT_EQ(::unlink(L("swap").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir(L("swap").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_TRUE(WriteFile(L("swap/inner"), "inside\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  struct stat st = StatM("swap");
  EXPECT_TRUE(S_ISDIR(st.st_mode)) << std::oct << st.st_mode;
  EXPECT_EQ(ContentOf(M("swap/inner")), "inside\n");
}

// A host file replaced by a rename over it (git's lock-file writes, sed -i,
// most editors) once the timeout has passed: its stat and its data come
// from the one inode now at the path, whatever the sandbox read before
// (git hashes as many bytes as stat says, and failed with "short read"
// when the daemon kept reading the inode it first opened). A process that
// held the old file open keeps reading and fstat-ing the old file, as on
// ext4: the name gets a new node, the old node keeps the old data.
TEST_P(HostReplaced, AFileReplacedByRenameIsOneFileStatAndData) {
  std::string old_text;
  for (int i = 1; i <= 10; ++i) old_text += "b" + std::to_string(i) + "\n";
  ASSERT_TRUE(WriteFile(L("b.txt"), old_text));
  std::string before = old_text;
  for (int round = 0; round < 3; ++round) {
    ScopedFd held(::open(M("b.txt").c_str(), O_RDONLY));
    ASSERT_TRUE(held.valid()) << std::strerror(errno);
    EXPECT_EQ(ContentOf(M("b.txt")), before) << round;
    const ino_t held_ino = StatM("b.txt").st_ino;
    std::string text = before;
    text.replace(text.find("b5"), 2,
                 "b5-host-replaced-" + std::to_string(round));
    ASSERT_TRUE(WriteFile(L("b.txt.new"), text));
    ASSERT_SYS_OK(::rename(L("b.txt.new").c_str(), L("b.txt").c_str()));
    std::this_thread::sleep_for(std::chrono::milliseconds(1600));
    struct stat st = StatM("b.txt");
    EXPECT_EQ(st.st_size, static_cast<off_t>(text.size())) << round;
    EXPECT_NE(st.st_ino, held_ino) << round;
    EXPECT_EQ(ContentOf(M("b.txt")), text) << round;
    // The held descriptor: the old file, as ext4 keeps it.
    std::string via(before.size() + 64, '\0');
    ssize_t n = ::pread(held.get(), via.data(), via.size(), 0);
    ASSERT_GE(n, 0) << std::strerror(errno);
    via.resize(n);
    EXPECT_EQ(via, before) << "a descriptor held over the rename, round "
                           << round;
    // Its fstat, once the cached attributes are gone too (the kernel then
    // asks the daemon, without a handle): the old file's.
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    struct stat hst;
    ASSERT_SYS_OK(::fstat(held.get(), &hst));
    EXPECT_EQ(hst.st_size, static_cast<off_t>(before.size())) << round;
    EXPECT_EQ(hst.st_ino, held_ino) << round;
    EXPECT_EQ(hst.st_nlink, 0u) << round;
    before = text;
  }
}

// A file mapped in the sandbox that the host replaces by a rename over it
// while the sandbox looks the name up again: git's gc rewrites
// objects/info/commit-graph so under a running `git fsck`, and the next git
// in the sandbox looks it up. The mapping keeps the old file's pages, as on
// ext4; the new lookup sees the new file. (When the daemon let the node
// follow the new inode, the kernel cut the mapping to the new, shorter
// size, and the mapping process died of SIGBUS.)
TEST_P(HostReplaced, AMappedFileTheHostReplacesKeepsItsPages) {
  const std::vector<std::string> rels = {".git/objects/info/commit-graph",
                                         "plain.bin"};
  constexpr size_t kSize = 2 << 20;
  std::vector<std::string> wants, paths;  // made before the fork
  for (size_t i = 0; i < rels.size(); ++i) {
    std::string t(kSize, '\0');
    for (size_t j = 0; j < kSize; ++j)
      t[j] = static_cast<char>((j * 131 + i * 7 + (j >> 12)) & 0xff);
    wants.push_back(t);
    paths.push_back(M(rels[i]));
    ASSERT_TRUE(WriteFile(L(rels[i]), t));
  }
  EXPECT_EQ(
      MappingsSurvive(
          paths, wants, kSize,
          [&] {
            for (const auto& rel : rels) {
              ASSERT_TRUE(WriteFile(L(rel + ".lock"), "new and short\n"));
              ASSERT_SYS_OK(::rename(L(rel + ".lock").c_str(), L(rel).c_str()));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1600));
            for (const auto& rel : rels) {
              EXPECT_EQ(StatM(rel).st_size, 14) << rel;
              EXPECT_EQ(ContentOf(M(rel)), "new and short\n") << rel;
            }
          }),
      "");
}

INSTANTIATE_TEST_SUITE_P(Modes, HostReplaced, ::testing::Values("", "handles"),
                         ModeName);

// The same with the kernel caching names and attributes for 30 seconds,
// and no watch of the host (`-o nohost_watch`, as where inotify does not
// reach): what the sandbox sees of a host file replaced by rename before
// the timeout passed.
class HostReplacedCached : public MountTest,
                           public ::testing::WithParamInterface<const char*> {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"-o", "timeout=30", "-o", "nohost_watch"};
    if (GetParam()[0]) {
      o.extra_mount_args.push_back("-o");
      o.extra_mount_args.push_back(GetParam());
    }
    return o;
  }
};

// A host file the sandbox has looked up (the warm walk, a `stat`, a `git
// status`) but never read, which the host then replaces by a rename over
// it (`sed -i`, an editor, `git checkout` of another branch): the next
// open and read in the sandbox, while the kernel still caches the name
// and the old size, get the whole new file, as an open on ext4 after the
// rename does. (The daemon answered ESTALE to the read, so `cat` failed
// with "Stale file handle" for up to the timeout after every host edit
// of that kind; and before that, the read was cut at the old size.)
TEST_P(HostReplacedCached, AFileLookedUpButNeverReadReadsAsTheNewFile) {
  const std::vector<std::string> texts = {
      "short\n",
      std::string(5000, 'L') + "\n",
      "mid-sized text\n",
      std::string(70000, 'x') + "end\n",
      "",
      std::string(300, 'g') + "\n",  // grown, within the page read
      "THE FIRST VERSION OF F6\n"};  // the same size
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string name = "f" + std::to_string(i);
    ASSERT_TRUE(WriteFile(L(name), "the first version of " + name + "\n"));
    struct stat before = StatM(name);  // a lookup: the node, never opened
    ASSERT_TRUE(WriteFile(L(name + ".new"), texts[i]));
    ASSERT_SYS_OK(::rename(L(name + ".new").c_str(), L(name).c_str()));
    EXPECT_EQ(ContentOf(M(name)), texts[i]) << name;
    struct stat after = StatM(name);
    EXPECT_EQ(after.st_size, static_cast<off_t>(texts[i].size())) << name;
    EXPECT_EQ(after.st_ino, before.st_ino) << name << ": the same node";
    // Read again through a new descriptor, and as git reads: as many
    // bytes as stat said.
    ScopedFd fd(::open(M(name).c_str(), O_RDONLY));
    ASSERT_TRUE(fd.valid()) << std::strerror(errno);
    struct stat fst;
    ASSERT_SYS_OK(::fstat(fd.get(), &fst));
    std::string got(static_cast<size_t>(fst.st_size), '\0');
    ssize_t n = ::pread(fd.get(), got.data(), got.size(), 0);
    ASSERT_EQ(n, static_cast<ssize_t>(texts[i].size())) << name;
    EXPECT_EQ(got, texts[i]) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, HostReplacedCached,
                         ::testing::Values("", "handles"), ModeName);

// The host's edits with the kernel caching names and attributes for the
// default 60 seconds: the daemon watches the host's tree (fs/host_watch.h)
// and drops what the kernel caches of each change as it lands, so the
// sandbox sees the host as it is, as a bind mount would, instead of after
// the timeout. The lower has two branches whose files differ in size.
// (HostRemoved's mount: both modes, the default timeout.)
class HostWatched : public HostRemoved {
 protected:
  void PrepareLower(const std::string& lower) override {
    std::string script = "cd " + ShellQuote(lower) + "\nmkdir -p w\n";
    for (int i = 0; i < 40; ++i)
      script += "seq 1 " + std::to_string(20 + i * 7) + " > w/f" +
                std::to_string(i) + "\n";
    const std::string commit = "git -c user.name=t -c user.email=t@t commit";
    script +=
        "git add -A && " + commit + " -qm sizes && git checkout -qb other\n";
    // On `other`, even files grow and odd ones shrink.
    for (int i = 0; i < 40; ++i)
      script += "seq 1 " + std::to_string(i % 2 ? 3 + i : 200 + i * 11) +
                " > w/f" + std::to_string(i) + "\n";
    script += commit + " -qam other && git checkout -q -\n";
    Sh(script);
  }
  // Waits (up to 3 s) until `pred` holds.
  static bool Soon(const std::function<bool()>& pred) {
    for (int i = 0; i < 300; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
  }
  bool Exists(const std::string& p) {
    struct stat st;
    return ::lstat(p.c_str(), &st) == 0;
  }
};

TEST_P(HostWatched, HostEditsShowAtOnceNotAfterTheTimeout) {
  ASSERT_TRUE(WriteFile(L("r.txt"), std::string(5000, 'r')));
  ASSERT_TRUE(WriteFile(L("w.txt"), "written in place, first\n"));
  ASSERT_SYS_OK(::mkdir(L("dd").c_str(), 0755));
  ASSERT_TRUE(WriteFile(L("dd/x"), "x\n"));
  // Let the watch reach the new directory (it walks the tree once mounted).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // What the kernel now caches: names, sizes, pages, a missing name.
  EXPECT_EQ(StatM("r.txt").st_size, 5000);
  EXPECT_EQ(ContentOf(M("w.txt")), "written in place, first\n");
  EXPECT_FALSE(Exists(M("new.txt")));
  EXPECT_EQ(ContentOf(M("dd/x")), "x\n");
  // The host: a rename over r.txt (shorter), w.txt rewritten in place
  // (same size), a new file, a directory moved.
  ASSERT_TRUE(WriteFile(L("r.txt.new"), "short now\n"));
  ASSERT_SYS_OK(::rename(L("r.txt.new").c_str(), L("r.txt").c_str()));
  ASSERT_TRUE(WriteFile(L("w.txt"), "written in place, again\n"));
  ASSERT_TRUE(WriteFile(L("new.txt"), "made by the host\n"));
  ASSERT_SYS_OK(::rename(L("dd").c_str(), L("dd2").c_str()));
  EXPECT_TRUE(Soon([&] { return StatM("r.txt").st_size == 10; }));
  EXPECT_EQ(ContentOf(M("r.txt")), "short now\n");
  EXPECT_TRUE(Soon(
      [&] { return ContentOf(M("w.txt")) == "written in place, again\n"; }));
  EXPECT_TRUE(Soon([&] { return Exists(M("new.txt")); }));
  EXPECT_TRUE(Soon([&] { return !Exists(M("dd")) && Exists(M("dd2/x")); }));
}

// The host switches between two branches whose files grow and shrink, and
// right after each switch the sandbox reads the files and runs `git
// status`. With the sizes the kernel cached for a minute, the sandbox went
// on seeing the old branch's files (or their new bytes cut at the old
// size), and git read fewer bytes than it had been told ("short read while
// indexing") or mapped them and died of SIGBUS. Now the sandbox's files are
// the host's within moments of each switch, and git sees them as they are:
// every file changed from its index on `other`, none on the first branch.
TEST_P(HostWatched, GitStatusRightAfterEachHostBranchSwitchSeesTheHost) {
  const std::string mnt = ShellQuote(sandbox().mountpoint());
  for (int i = 0; i < 8; ++i) {
    const bool other = i % 2 == 0;
    CommandResult co = RunShell("git -C " + ShellQuote(lower()) +
                                    " checkout -q " + (other ? "other" : "-"),
                                30);
    ASSERT_TRUE(co.ok()) << co.Describe();
    for (int f = 0; f < 40; ++f) {
      const std::string rel = "w/f" + std::to_string(f);
      const std::string want = ContentOf(L(rel));
      EXPECT_TRUE(Soon([&] { return ContentOf(M(rel)) == want; }))
          << rel << " after switch " << i << " has " << ContentOf(M(rel)).size()
          << " bytes, the host's " << want.size();
    }
    CommandResult st = RunShell("git -C " + mnt + " status --porcelain w", 60);
    ASSERT_TRUE(st.ok()) << "switch " << i << ": " << st.Describe();
    size_t listed = 0;
    for (size_t p = st.out.find(" M w/f"); p != std::string::npos;
         p = st.out.find(" M w/f", p + 1))
      ++listed;
    EXPECT_EQ(listed, other ? 40u : 0u) << "switch " << i << ":\n" << st.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, HostWatched, ::testing::Values("", "handles"),
                         ModeName);

}  // namespace
}  // namespace acqfs::test
