// A sandbox's life as a user drives it with the `acqfs` binary: every mount
// refusal (bad names, bad directories, a sandbox mounted already or over
// another lower) with nothing created or changed; a daemon killed with
// SIGKILL leaving a stale mount that `acqfs ls` reports and `acqfs mount` or
// `acqfs umount` cleans up, with every file closed before the kill intact;
// SIGTERM and SIGINT ending a daemon cleanly; four sandboxes over one lower
// building the same project at once; 16 sandboxes of one checkout mounted
// and removed at once; one daemon per upper layer, however started; clean-up
// that unmounts only the sandbox's own mount, never one covering it; a
// sandbox folder only its owner reaches; and what `acqfs ls` reports.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/binaries.h"
#include "harness/mounts.h"
#include "harness/process.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

constexpr int kCommandSeconds = 120;

CommandResult Acqfs(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {AcqfsBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, kCommandSeconds);
}

// `acqfs ls --json --state-dir STATE`, parsed; a test failure when it fails.
nlohmann::json LsJson(const std::string& state) {
  CommandResult r = Acqfs({"ls", "--json", "--state-dir", state});
  EXPECT_TRUE(r.ok()) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_TRUE(j.is_array()) << r.Describe();
  return j.is_array() ? j : nlohmann::json::array();
}

// The entry `name` of `acqfs ls --json` (null when it is not listed).
nlohmann::json LsEntry(const std::string& state, const std::string& name) {
  for (const auto& e : LsJson(state))
    if (e.value("name", "") == name) return e;
  ADD_FAILURE() << "acqfs ls --json does not list " << name;
  return nlohmann::json();
}

std::string LsState(const std::string& state, const std::string& name) {
  nlohmann::json e = LsEntry(state, name);
  return e.is_object() && e["state"].is_string() ? e["state"].get<std::string>()
                                                 : "<none>";
}

// Polls `done` every 20 ms for up to `seconds`.
bool WaitUntil(double seconds, const std::function<bool()>& done) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Mounts `s`'s lower at its mountpoint again with `acqfs mount` (the same
// arguments Sandbox used), after its daemon ended behind the Sandbox's back.
CommandResult MountAgain(const Sandbox& s) {
  return Acqfs({"mount", s.lower(), s.mountpoint(), "--name", s.name(),
                "--state-dir", s.state_dir()});
}

// Is the sandbox lock on `lock` (an open file description lock) free?
bool LockIsFree(const std::string& lock) {
  ScopedFd fd(::open(lock.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno == ENOENT;
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd.get(), F_OFD_GETLK, &fl) != 0) return false;
  return fl.l_type == F_UNLCK;
}

// ---------------------------------------------------------------------------
// Refusals: exit 1, one line `acqfs: mount: ...: <reason>`, nothing mounted,
// and the state directory and the lower (with .git) as they were.

// Snapshots of some trees (a missing one counts as missing), to check
// later that none of them changed. `skip`: paths relative to any root left
// out (a running daemon's own log, which it may write at any time).
class Unchanged {
 public:
  explicit Unchanged(std::vector<std::string> roots,
                     std::vector<std::string> skip = {})
      : roots_(std::move(roots)), skip_(std::move(skip)) {
    for (const auto& r : roots_) before_.push_back(Take(r));
  }
  AssertionResult Check() const {
    for (size_t i = 0; i < roots_.size(); i++) {
      std::optional<TreeSnapshot> now = Take(roots_[i]);
      if (before_[i].has_value() != now.has_value())
        return AssertionFailure()
               << roots_[i] << (now ? " appeared" : " vanished");
      if (!now) continue;
      auto same = SnapshotsEqual(*before_[i], *now);
      if (!same)
        return AssertionFailure() << roots_[i] << ":\n" << same.message();
    }
    return AssertionSuccess();
  }

 private:
  std::optional<TreeSnapshot> Take(const std::string& root) const {
    if (!Exists(root)) return std::nullopt;
    SnapshotOptions o = SnapshotOptions::Everything();  // all but atime
    o.skip = skip_;
    return Snapshot(root, o);
  }
  std::vector<std::string> roots_;
  std::vector<std::string> skip_;
  std::vector<std::optional<TreeSnapshot>> before_;
};

// Runs `acqfs mount ARGS`; checks it was refused with exactly one line
// starting with `prefix` and that `mnt` holds no new mount.
AssertionResult RefusedWith(const std::vector<std::string>& args,
                            const std::string& prefix, const std::string& mnt) {
  const bool mounted_before = FindMount(mnt).has_value();
  std::vector<std::string> argv = {"mount"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = Acqfs(argv);
  // A mount that should not have happened is undone at once.
  if (!mounted_before && FindMount(mnt)) {
    Acqfs({"umount", mnt, "--no-export"});
    ForceUnmount(mnt);
    return AssertionFailure()
           << "mounted instead of refusing: " << r.Describe();
  }
  if (r.exit_code != 1)
    return AssertionFailure() << "exit code: " << r.Describe();
  if (r.err.rfind(prefix, 0) != 0)
    return AssertionFailure() << "expected a message starting with \"" << prefix
                              << "\": " << r.Describe();
  if (r.err.find('\n') != r.err.size() - 1)
    return AssertionFailure() << "expected one line: " << r.Describe();
  if (!r.out.empty()) return AssertionFailure() << "stdout: " << r.Describe();
  return AssertionSuccess();
}

class LifecycleRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    ASSERT_SYS_OK(::chmod(tmp_.path().c_str(), 0755));
    tmp_.MakeDir("home");
    lower_ = tmp_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(lower_));
    state_ = tmp_.MakeDir("state", 0700);
    mnt_ = tmp_.MakeDir("mnt");
    // An unrelated sandbox folder, so "unchanged" covers existing content.
    tmp_.MakeDir("state/unrelated");
    ASSERT_TRUE(WriteFile(state_ + "/unrelated/meta.json", "{}\n"));
  }
  // Refused with `prefix`, the state dir and the lower (incl. .git) intact.
  void ExpectRefused(const std::vector<std::string>& args,
                     const std::string& prefix, const std::string& mnt,
                     std::vector<std::string> also_unchanged = {}) {
    std::vector<std::string> roots = {state_, lower_};
    roots.insert(roots.end(), also_unchanged.begin(), also_unchanged.end());
    Unchanged unchanged(roots);
    EXPECT_TRUE(RefusedWith(args, prefix, mnt));
    EXPECT_TRUE(unchanged.Check()) << "after: mount " << ShellJoin(args);
  }

  // `name` refused with an existing state directory and with a missing one
  // (which is not created).
  void ExpectNameRefused(const std::string& name) {
    SCOPED_TRACE("name '" + name + "'");
    const std::string prefix = "acqfs: mount: sandbox name: '" + name + "': ";
    ExpectRefused({lower_, mnt_, "--name", name, "--state-dir", state_}, prefix,
                  mnt_);
    const std::string fresh = tmp_.Sub("fresh-state");
    ExpectRefused({lower_, mnt_, "--name", name, "--state-dir", fresh}, prefix,
                  mnt_);
    EXPECT_FALSE(Exists(fresh));
  }

  TempDir tmp_;
  std::string lower_, state_, mnt_;
};

TEST_F(LifecycleRefusal, BadNamesAreRefusedBeforeAnythingIsCreated) {
  for (const auto& name :
       {std::string("."), std::string(".."), std::string("a/b"),
        std::string(65, 'n'), std::string("a b"), std::string("\xc3\xa9")}) {
    ExpectNameRefused(name);
  }
  // The longest name allowed (64) passes; this mount is refused only by a
  // check that comes after the name's (the mountpoint is in the state dir).
  const std::string inside = state_ + "/unrelated";
  ExpectRefused(
      {lower_, inside, "--name", std::string(64, 'n'), "--state-dir", state_},
      "acqfs: mount: mountpoint: " + inside +
          ": is inside the state directory ",
      inside);
}

// `--name ""` is a bad name too, not a request for the default name. (This
// needs the CLI to tell an empty --name from none: MountArgs::name_given.)
TEST_F(LifecycleRefusal, EmptyNameIsRefused) { ExpectNameRefused(""); }

TEST_F(LifecycleRefusal, MissingLower) {
  const std::string missing = tmp_.Sub("no-such-lower");
  ExpectRefused({missing, mnt_, "--name", "x", "--state-dir", state_},
                "acqfs: mount: lower directory: " + missing +
                    ": No such file or directory",
                mnt_);
}

TEST_F(LifecycleRefusal, LowerIsAFile) {
  const std::string file = lower_ + "/" + lower::kFileA;
  ExpectRefused({file, mnt_, "--name", "x", "--state-dir", state_},
                "acqfs: mount: lower directory: " + file + ": not a directory",
                mnt_);
}

TEST_F(LifecycleRefusal, MissingMountpoint) {
  const std::string missing = tmp_.Sub("no-such-mnt");
  ExpectRefused(
      {lower_, missing, "--name", "x", "--state-dir", state_},
      "acqfs: mount: mountpoint: " + missing + ": No such file or directory",
      missing);
}

TEST_F(LifecycleRefusal, MountpointInsideTheLower) {
  const std::string inside = lower_ + "/" + lower::kDocsDir;
  ExpectRefused({lower_, inside, "--name", "x", "--state-dir", state_},
                "acqfs: mount: mountpoint: " + inside +
                    ": is inside the lower directory " + lower_,
                inside);
  ExpectRefused({lower_, lower_, "--name", "x", "--state-dir", state_},
                "acqfs: mount: mountpoint: " + lower_ +
                    ": is inside the lower directory " + lower_,
                lower_);
}

TEST_F(LifecycleRefusal, MountpointContainingTheLower) {
  ExpectRefused({lower_, tmp_.path(), "--name", "x", "--state-dir", state_},
                "acqfs: mount: mountpoint: " + tmp_.path() +
                    ": contains the lower directory " + lower_,
                tmp_.path());
}

TEST_F(LifecycleRefusal, StateDirectoryInsideTheLower) {
  // Existing or not: the sandbox would see the layers through its lower.
  for (const std::string& rel : {std::string("sb-state"), std::string("x/y")}) {
    const std::string inside = lower_ + "/" + rel;
    if (rel == "sb-state") ASSERT_SYS_OK(::mkdir(inside.c_str(), 0755));
    ExpectRefused({lower_, mnt_, "--name", "x", "--state-dir", inside},
                  "acqfs: mount: state directory: " + inside +
                      ": is inside the lower directory " + lower_,
                  mnt_);
    if (rel == "sb-state") ASSERT_SYS_OK(::rmdir(inside.c_str()));
    EXPECT_FALSE(Exists(lower_ + "/x"));
  }
}

TEST_F(LifecycleRefusal, MountpointInsideTheStateDirectory) {
  const std::string inside = tmp_.MakeDir("state/unrelated/sub");
  ExpectRefused({lower_, inside, "--name", "x", "--state-dir", state_},
                "acqfs: mount: mountpoint: " + inside +
                    ": is inside the state directory " + state_,
                inside);
}

TEST_F(LifecycleRefusal, MountpointContainingTheStateDirectory) {
  // An existing state directory below the mountpoint...
  const std::string outer = tmp_.MakeDir("outer");
  const std::string nested = tmp_.MakeDir("outer/state");
  ExpectRefused({lower_, outer, "--name", "x", "--state-dir", nested},
                "acqfs: mount: mountpoint: " + outer +
                    ": contains the state directory " + nested,
                outer, {outer});
  // ...and one that does not exist yet (it would be created there).
  const std::string future = outer + "/later/state";
  ExpectRefused({lower_, outer, "--name", "x", "--state-dir", future},
                "acqfs: mount: mountpoint: " + outer +
                    ": contains the state directory " + future,
                outer, {outer});
  EXPECT_FALSE(Exists(outer + "/later"));
}

TEST_F(LifecycleRefusal, SandboxAlreadyMountedHereOrElsewhere) {
  Sandbox s(lower_);
  ASSERT_TRUE(s.mounted()) << s.mount_failure();
  const std::string other = tmp_.MakeDir("other-mnt");
  const std::string state = s.state_dir();
  const std::string prefix = "acqfs: mount: sandbox: " + s.name() +
                             ": is already mounted at " + s.mountpoint();
  {
    // The mounted sandbox's daemon may still be logging its start.
    Unchanged unchanged({state, lower_}, {s.name() + "/daemon.log"});
    EXPECT_TRUE(
        RefusedWith({lower_, other, "--name", s.name(), "--state-dir", state},
                    prefix, other));
    EXPECT_TRUE(RefusedWith(
        {lower_, s.mountpoint(), "--name", s.name(), "--state-dir", state},
        prefix, s.mountpoint()));
    // A mountpoint holding a live acqfs mount refuses any other sandbox.
    EXPECT_TRUE(RefusedWith(
        {lower_, s.mountpoint(), "--name", "second", "--state-dir", state},
        "acqfs: mount: mountpoint: " + s.mountpoint() +
            ": already holds an acqfs mount",
        s.mountpoint()));
    EXPECT_TRUE(unchanged.Check());
  }
  EXPECT_EQ(LsState(state, s.name()), "mounted");
  EXPECT_EQ(ContentOf(s.M(lower::kFileA)), lower::kFileAContent);
}

TEST_F(LifecycleRefusal, NameExistsWithADifferentLower) {
  const std::string other_lower = tmp_.MakeDir("other-lower");
  ASSERT_TRUE(WriteFile(other_lower + "/x.txt", "x\n"));
  {
    SandboxOptions o;
    o.name = "taken";
    o.extra_umount_args = {"--no-export"};
    Sandbox s(other_lower, o);
    ASSERT_TRUE(s.mounted()) << s.mount_failure();
    ASSERT_TRUE(WriteFile(s.M("y.txt"), "y\n"));
    ASSERT_TRUE(s.Unmount());
    // Mount the same name in the same state directory over `lower_`.
    ExpectRefused(
        {lower_, mnt_, "--name", "taken", "--state-dir", s.state_dir()},
        "acqfs: mount: sandbox: taken: exists over a different "
        "lower directory (" +
            other_lower + ")",
        mnt_, {s.state_dir(), other_lower});
    // Mounted and unmounted alike: refused while it is mounted, too.
    ASSERT_TRUE(s.Remount());
    ExpectRefused(
        {lower_, mnt_, "--name", "taken", "--state-dir", s.state_dir()},
        "acqfs: mount: sandbox: taken: exists over a different "
        "lower directory (" +
            other_lower + ")",
        mnt_, {other_lower});
  }
}

// ---------------------------------------------------------------------------
// A daemon killed with SIGKILL: a stale mount, reported and cleaned up.

constexpr int kWriterFiles = 20000;

// The content of the i-th file the writer creates: 1 to 13 lines of 64 bytes.
std::string WriterContent(int i) {
  char line[80];
  std::snprintf(line, sizeof line, "file %06d: %-51s\n", i, "0123456789abcdef");
  std::string s;
  for (int k = 0; k <= i % 13; k++) s += line;
  return s;
}

std::string WriterName(int i) {
  char name[32];
  std::snprintf(name, sizeof name, "f%06d", i);
  return name;
}

// A child process that creates dir/f000000, f000001, ... (open, write,
// close each) and, once a file's close() returned 0, appends its name to
// `log` (outside the mount). It ends at the first failure or after `count`
// files.
class Writer {
 public:
  Writer(const std::string& dir, const std::string& log, int count) {
    // Everything the child needs is prepared before fork().
    for (int i = 0; i < count; i++) {
      paths_.push_back(dir + "/" + WriterName(i));
      contents_.push_back(WriterContent(i));
      lines_.push_back(WriterName(i) + "\n");
    }
    log_fd_ = ScopedFd(
        ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!log_fd_.valid()) return;
    pid_ = ::fork();
    if (pid_ == 0) Run();
  }
  ~Writer() {
    if (pid_ > 0 && !Wait(30)) {
      ::kill(pid_, SIGKILL);
      Wait(30);
    }
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  bool started() const { return pid_ > 0; }
  // Reaps the child; false when it still runs after `seconds`.
  bool Wait(double seconds) {
    if (pid_ <= 0) return true;
    bool reaped = WaitUntil(seconds, [&] {
      int status;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      return r == pid_ || (r < 0 && errno == ECHILD);
    });
    if (reaped) pid_ = 0;
    return reaped;
  }

 private:
  [[noreturn]] void Run() {
    for (size_t i = 0; i < paths_.size(); i++) {
      int fd = ::open(paths_[i].c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) ::_exit(0);
      const std::string& c = contents_[i];
      if (::write(fd, c.data(), c.size()) != static_cast<ssize_t>(c.size()))
        ::_exit(0);
      if (::close(fd) != 0) ::_exit(0);
      const std::string& l = lines_[i];
      if (::write(log_fd_.get(), l.data(), l.size()) !=
          static_cast<ssize_t>(l.size()))
        ::_exit(1);
    }
    ::_exit(0);
  }

  std::vector<std::string> paths_, contents_, lines_;
  ScopedFd log_fd_;
  pid_t pid_ = -1;
};

// Complete lines of `path`.
std::vector<std::string> ReadLines(const std::string& path) {
  std::string text = ContentOf(path);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos;
       start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  return lines;
}

class Lifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
    ASSERT_SYS_OK(::chmod(tmp_.path().c_str(), 0755));
    tmp_.MakeDir("home");
    lower_ = tmp_.Sub("lower");
    ASSERT_TRUE(MakeLowerRepo(lower_));
  }
  void Mount(SandboxOptions o = {}) {
    sandbox_ = std::make_unique<Sandbox>(lower_, o);
    ASSERT_TRUE(sandbox_->mounted()) << sandbox_->mount_failure();
  }
  void TearDown() override {
    if (HasFailure() && sandbox_)
      std::cerr << "--- daemon.log ---\n" << sandbox_->DaemonLog() << "\n";
    sandbox_.reset();
  }
  // SIGKILLs the daemon and waits until it is gone.
  void KillDaemon() {
    const pid_t pid = ReadPidFile(sandbox_->pid_file());
    ASSERT_GT(pid, 0);
    ASSERT_SYS_OK(::kill(pid, SIGKILL));
    ASSERT_TRUE(WaitForProcessExit(pid, 20)) << "daemon " << pid;
  }
  std::string lock() const { return sandbox_->layer_dir() + "/lock"; }

  TempDir tmp_;
  std::string lower_;
  std::unique_ptr<Sandbox> sandbox_;
};

using LifecycleStale = Lifecycle;
using LifecycleLs = Lifecycle;

TEST_F(LifecycleStale, SigkillLeavesAStaleMountThatMountCleansUp) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  Sandbox& s = *sandbox_;
  Unchanged lower_untouched({lower_});
  ASSERT_SYS_OK(::mkdir(s.M("out").c_str(), 0755));
  const std::string log = tmp_.Sub("closed.log");
  {
    Writer writer(s.M("out"), log, kWriterFiles);
    ASSERT_TRUE(writer.started());
    ASSERT_TRUE(WaitUntil(60, [&] { return ReadLines(log).size() >= 300; }))
        << ReadLines(log).size() << " files written";
    KillDaemon();
    EXPECT_TRUE(writer.Wait(30)) << "the writer hangs on the dead mount";
  }
  const std::vector<std::string> closed = ReadLines(log);
  ASSERT_GE(closed.size(), 300u);
  ASSERT_LT(closed.size(), static_cast<size_t>(kWriterFiles))
      << "the kill came after the last file";

  // The dead mount is still there, answering ENOTCONN (for a name not in
  // the kernel's caches): stale.
  ASSERT_TRUE(FindMount(s.mountpoint()).has_value());
  struct stat st;
  EXPECT_SYS_ERRNO(::stat(s.M("never-looked-up").c_str(), &st), ENOTCONN);
  EXPECT_EQ(LsState(s.state_dir(), s.name()), "stale");
  {
    CommandResult r = Acqfs({"ls", "--state-dir", s.state_dir()});
    EXPECT_TRUE(r.ok()) << r.Describe();
    EXPECT_NE(r.out.find(" stale "), std::string::npos) << r.Describe();
  }

  // Mounting again cleans it up, says so, and keeps the upper layer.
  CommandResult r = MountAgain(s);
  ASSERT_TRUE(r.ok()) << r.Describe() << s.DaemonLog();
  EXPECT_EQ(r.err, "acqfs: mount: " + s.mountpoint() +
                       ": cleaned up a stale mount of sandbox " + s.name() +
                       "\n");
  EXPECT_EQ(LsState(s.state_dir(), s.name()), "mounted");
  size_t bad = 0;
  for (size_t i = 0; i < closed.size(); i++) {
    ASSERT_EQ(closed[i], WriterName(static_cast<int>(i)));
    if (ContentOf(s.M("out/" + closed[i])) !=
        WriterContent(static_cast<int>(i)))
      bad++;
  }
  EXPECT_EQ(bad, 0u) << "of " << closed.size()
                     << " files closed before the kill";
  EXPECT_TRUE(lower_untouched.Check());
  // The one mount there is the new one.
  size_t mounts_there = 0;
  for (const auto& m : ReadMountInfo())
    if (m.mount_point == s.mountpoint()) mounts_there++;
  EXPECT_EQ(mounts_there, 1u);
  EXPECT_TRUE(s.Unmount());
  EXPECT_EQ(LsState(s.state_dir(), s.name()), "not-mounted");
}

TEST_F(LifecycleStale, UmountCleansUpAStaleSandboxAndExports) {
  Mount();
  Sandbox& s = *sandbox_;
  ASSERT_TRUE(WriteFile(s.M("kept.txt"), "kept\n"));
  KillDaemon();
  EXPECT_EQ(LsState(s.state_dir(), s.name()), "stale");
  // Sandbox::Unmount runs `acqfs umount NAME` and checks exit 0, the mount
  // gone and the daemon gone.
  ASSERT_TRUE(s.Unmount(/*by_name=*/true));
  EXPECT_FALSE(FindMount(s.mountpoint()).has_value());
  EXPECT_FALSE(Exists(s.pid_file()));
  EXPECT_EQ(LsState(s.state_dir(), s.name()), "not-mounted");
  // The export ran as after any umount.
  CommandResult wt = RunGit(s.layer_dir() + "/bridge.git",
                            {"rev-parse", "--verify", "refs/acqfs/worktree"},
                            tmp_.Sub("home"));
  EXPECT_TRUE(wt.ok()) << wt.Describe();
  ASSERT_TRUE(s.Remount());
  EXPECT_EQ(ContentOf(s.M("kept.txt")), "kept\n");
}

TEST_F(LifecycleStale, StaleSandboxMountedElsewhereCleansTheDeadMountFirst) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  Sandbox& s = *sandbox_;
  ASSERT_TRUE(WriteFile(s.M("kept.txt"), "kept\n"));
  KillDaemon();
  const std::string elsewhere = tmp_.MakeDir("elsewhere");
  MountGuard guard(elsewhere);
  CommandResult r = Acqfs({"mount", lower_, elsewhere, "--name", s.name(),
                           "--state-dir", s.state_dir()});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_EQ(r.err, "acqfs: mount: " + s.mountpoint() +
                       ": cleaned up a stale mount of sandbox " + s.name() +
                       "\n");
  EXPECT_FALSE(FindMount(s.mountpoint()).has_value());
  EXPECT_EQ(ContentOf(elsewhere + "/kept.txt"), "kept\n");
  nlohmann::json e = LsEntry(s.state_dir(), s.name());
  EXPECT_EQ(e["state"], "mounted");
  EXPECT_EQ(e["mountpoint"], elsewhere);
  CommandResult u =
      Acqfs({"umount", s.name(), "--state-dir", s.state_dir(), "--no-export"});
  EXPECT_TRUE(u.ok()) << u.Describe();
  EXPECT_FALSE(FindMount(elsewhere).has_value());
  // Back at the first mountpoint, so the Sandbox ends as it began.
  ASSERT_TRUE(MountAgain(s).ok());
}

// The same as an unprivileged user (no umount2: fusermount3 detaches).
TEST(LifecycleUnprivileged, StaleSandboxIsCleanedUpAsNobody) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root to set up (as CI has)";
  constexpr uid_t kNobody = 65534;
  struct stat fuse_dev;
  ASSERT_SYS_OK(::stat("/dev/fuse", &fuse_dev));
  ASSERT_SYS_OK(::chmod("/dev/fuse", 0666));  // CI may have it 0600
  struct RestoreMode {
    mode_t mode;
    ~RestoreMode() { ::chmod("/dev/fuse", mode); }
  } restore{static_cast<mode_t>(fuse_dev.st_mode & 07777)};
  TempDir tmp;
  ASSERT_SYS_OK(::chmod(tmp.path().c_str(), 0755));
  const std::string home = tmp.MakeDir("home", 0755, kNobody, kNobody);
  const std::string lower = tmp.MakeDir("lower", 0755, kNobody, kNobody);
  ASSERT_TRUE(WriteFile(lower + "/a.txt", "a\n"));
  ASSERT_TRUE(ChownTree(lower, kNobody, kNobody));
  auto as_nobody = [&](std::vector<std::string> argv) {
    std::vector<std::string> full = {"setpriv",       "--reuid=65534",
                                     "--regid=65534", "--clear-groups",
                                     "env",           "HOME=" + home};
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  };
  std::string acqfs = AcqfsBinary();
  if (!RunCommand(as_nobody({"test", "-x", acqfs}), 10).ok()) {
    const std::string copy = tmp.MakeDir("bin") + "/acqfs";
    ASSERT_TRUE(RunCommand({"cp", acqfs, copy}, 30).ok());
    acqfs = copy;
  }
  SandboxOptions o;
  o.name = "unpriv";
  o.command_prefix = as_nobody({});
  o.owner_uid = kNobody;
  o.owner_gid = kNobody;
  o.acqfs_bin = acqfs;
  Sandbox s(lower, o);
  ASSERT_TRUE(s.mounted()) << s.mount_failure();
  auto nobody_runs = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {acqfs};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(as_nobody(argv), kCommandSeconds);
  };
  CommandResult w = RunCommand(
      as_nobody({"sh", "-c", "echo kept > " + ShellQuote(s.M("kept.txt"))}),
      30);
  ASSERT_TRUE(w.ok()) << w.Describe();
  auto kill_daemon = [&] {
    const pid_t pid = ReadPidFile(s.pid_file());
    ASSERT_GT(pid, 0);
    ASSERT_SYS_OK(::kill(pid, SIGKILL));
    ASSERT_TRUE(WaitForProcessExit(pid, 20));
  };
  kill_daemon();
  CommandResult ls =
      nobody_runs({"ls", "--json", "--state-dir", s.state_dir()});
  ASSERT_TRUE(ls.ok()) << ls.Describe();
  auto j = nlohmann::json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(j.is_array() && j.size() == 1) << ls.Describe();
  EXPECT_EQ(j[0]["state"], "stale");
  // acqfs mount cleans it up...
  CommandResult m = nobody_runs({"mount", lower, s.mountpoint(), "--name",
                                 s.name(), "--state-dir", s.state_dir()});
  ASSERT_TRUE(m.ok()) << m.Describe();
  EXPECT_NE(m.err.find("cleaned up a stale mount of sandbox unpriv"),
            std::string::npos)
      << m.Describe();
  CommandResult cat = RunCommand(as_nobody({"cat", s.M("kept.txt")}), 30);
  EXPECT_EQ(cat.out, "kept\n") << cat.Describe();
  // ...and so does acqfs umount (Sandbox::Unmount checks exit 0, the mount
  // gone, the daemon gone).
  kill_daemon();
  EXPECT_TRUE(s.Unmount(/*by_name=*/true));
  EXPECT_FALSE(FindMount(s.mountpoint()).has_value());
}

// ---------------------------------------------------------------------------
// SIGTERM and SIGINT end the daemon cleanly.

class LifecycleSignal : public Lifecycle {
 protected:
  // Sends `sig` to the daemon and checks the clean end: the mount leaves
  // mountinfo, the daemon exits, its pid file goes, its lock is free, and
  // acqfs ls says "not-mounted".
  void ExpectCleanEndOn(int sig) {
    Sandbox& s = *sandbox_;
    const pid_t pid = ReadPidFile(s.pid_file());
    ASSERT_GT(pid, 0);
    ASSERT_SYS_OK(::kill(pid, sig));
    EXPECT_TRUE(WaitUntil(20, [&] { return !FindMount(s.mountpoint()); }))
        << "still mounted after signal " << sig;
    EXPECT_TRUE(WaitForProcessExit(pid, 20)) << "daemon " << pid;
    EXPECT_FALSE(Exists(s.pid_file()));
    EXPECT_TRUE(LockIsFree(lock()));
    EXPECT_EQ(LsState(s.state_dir(), s.name()), "not-mounted");
    const std::string log = s.DaemonLog();
    EXPECT_NE(log.find("unmounted " + s.mountpoint()), std::string::npos)
        << log;
  }
  // Mounts again and checks the earlier change is there.
  void ExpectRemountSees(const std::string& rel, const std::string& content) {
    CommandResult r = MountAgain(*sandbox_);
    ASSERT_TRUE(r.ok()) << r.Describe();
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(LsState(sandbox_->state_dir(), sandbox_->name()), "mounted");
    EXPECT_EQ(ContentOf(sandbox_->M(rel)), content);
  }
};

TEST_F(LifecycleSignal, SigtermUnmountsCleanly) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  ASSERT_TRUE(WriteFile(sandbox_->M("before-term.txt"), "written\n"));
  ExpectCleanEndOn(SIGTERM);
  ExpectRemountSees("before-term.txt", "written\n");
}

TEST_F(LifecycleSignal, SigintUnmountsCleanly) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  ASSERT_TRUE(WriteFile(sandbox_->M("before-int.txt"), "written\n"));
  ExpectCleanEndOn(SIGINT);
  ExpectRemountSees("before-int.txt", "written\n");
  // A shell starts background jobs with SIGINT ignored; the daemon still
  // ends on it.
  Sandbox& s = *sandbox_;
  ASSERT_TRUE(WriteFile(s.M("second.txt"), "again\n"));
  ExpectCleanEndOn(SIGINT);
  CommandResult bg =
      RunShell(ShellJoin({AcqfsBinary(), "mount", s.lower(), s.mountpoint(),
                          "--name", s.name(), "--state-dir", s.state_dir()}) +
                   " & wait $!",
               kCommandSeconds);
  ASSERT_TRUE(bg.ok()) << bg.Describe();
  ASSERT_TRUE(FindMount(s.mountpoint()).has_value());
  ExpectCleanEndOn(SIGINT);
  ExpectRemountSees("second.txt", "again\n");
}

// ---------------------------------------------------------------------------
// Several sandboxes in one state directory, mounted with `acqfs mount`
// directly (Sandbox keeps one per state directory). The destructor unmounts
// every one: `acqfs umount`, then forcibly, then the daemon's pid.
class SharedState {
 public:
  explicit SharedState(TempDir* tmp)
      : tmp_(tmp), state_(tmp->MakeDir("shared-state", 0700)) {}
  ~SharedState() {
    for (const auto& [name, mnt] : mounts_) {
      const pid_t pid = ReadPidFile(state_ + "/" + name + "/daemon.pid");
      if (FindMount(mnt)) {
        CommandResult r =
            Acqfs({"umount", name, "--state-dir", state_, "--no-export"});
        EXPECT_TRUE(r.ok()) << r.Describe();
      }
      if (FindMount(mnt)) ADD_FAILURE() << ForceUnmount(mnt);
      if (pid > 0 && !WaitForProcessExit(pid, 10)) KillIfAlive(pid, "acqfs");
    }
  }
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;

  AssertionResult Mount(const std::string& lower, const std::string& name) {
    const std::string mnt = tmp_->MakeDir("mnt-" + name);
    mounts_[name] = mnt;
    CommandResult r =
        Acqfs({"mount", lower, mnt, "--name", name, "--state-dir", state_});
    if (!r.ok()) return AssertionFailure() << r.Describe();
    if (!FindMount(mnt)) return AssertionFailure() << mnt << " not mounted";
    return AssertionSuccess();
  }
  const std::string& state() const { return state_; }
  std::string mnt(const std::string& name) const { return mounts_.at(name); }

 private:
  TempDir* tmp_;
  std::string state_;
  std::map<std::string, std::string> mounts_;
};

// A small C project: 18 files fNN.c (fNN() returns NN), tag.c (tag()
// returns "base") and main.c printing "<tag> <sum>", with a Makefile.
AssertionResult MakeCProject(const std::string& dir, const std::string& home) {
  std::string main_c = "#include <stdio.h>\nconst char* tag(void);\n";
  std::string sum = "0";
  for (int i = 0; i < 18; i++) {
    char name[8];
    std::snprintf(name, sizeof name, "f%02d", i);
    if (auto w = WriteFile(dir + "/" + name + ".c",
                           "int " + std::string(name) + "(void) { return " +
                               std::to_string(i) + "; }\n");
        !w)
      return w;
    main_c += "int " + std::string(name) + "(void);\n";
    sum += " + " + std::string(name) + "()";
  }
  main_c += "int main(void) {\n  printf(\"%s %d\\n\", tag(), " + sum +
            ");\n  return 0;\n}\n";
  if (auto w = WriteFile(dir + "/main.c", main_c); !w) return w;
  if (auto w = WriteFile(dir + "/tag.c",
                         "const char* tag(void) { return \"base\"; }\n");
      !w)
    return w;
  if (auto w = WriteFile(dir + "/Makefile",
                         "OBJS := $(patsubst %.c,%.o,$(sort $(wildcard *.c)))\n"
                         "prog: $(OBJS)\n\t$(CC) -o $@ $^\n"
                         "%.o: %.c\n\t$(CC) -O1 -c -o $@ $<\n"
                         "clean:\n\trm -f prog *.o\n");
      !w)
    return w;
  if (auto w = WriteFile(dir + "/.gitignore", "*.o\nprog\n"); !w) return w;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"init", "-q", "-b", "main"},
           {"add", "-A"},
           {"-c", "user.name=Test", "-c", "user.email=test@example.com",
            "commit", "-q", "-m", "a small C project"}}) {
    CommandResult r = RunGit(dir, args, home);
    if (!r.ok()) return AssertionFailure() << r.Describe();
  }
  return AssertionSuccess();
}

TEST(LifecycleConcurrency, FourSandboxesBuildTheSameProjectAtOnce) {
  ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
  TempDir tmp;
  ASSERT_SYS_OK(::chmod(tmp.path().c_str(), 0755));
  const std::string home = tmp.MakeDir("home");
  const std::string lower = tmp.MakeDir("project");
  ASSERT_TRUE(MakeCProject(lower, home));
  SharedState shared(&tmp);
  const std::vector<std::string> names = {"sb0", "sb1", "sb2", "sb3"};
  for (const auto& n : names) ASSERT_TRUE(shared.Mount(lower, n)) << n;
  // Taken after the mounts, which register one remote each in .git/config.
  Unchanged lower_untouched({lower});
  auto edit = [](const std::string& n) {
    return "const char* tag(void) { return \"edited-in-" + n + "\"; }\n";
  };
  for (const auto& n : names)
    ASSERT_TRUE(WriteFile(shared.mnt(n) + "/tag.c", edit(n)));

  std::map<std::string, CommandResult> builds;
  {
    std::vector<std::thread> threads;
    std::vector<CommandResult> results(names.size());
    for (size_t i = 0; i < names.size(); i++) {
      threads.emplace_back([&, i] {
        results[i] =
            RunShell("make -s -j2 && ./prog && touch built-by-" + names[i], 240,
                     shared.mnt(names[i]));
      });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < names.size(); i++) builds[names[i]] = results[i];
  }
  const int sum = 17 * 18 / 2;
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    const CommandResult& r = builds[n];
    ASSERT_TRUE(r.ok()) << r.Describe();
    EXPECT_EQ(r.out, "edited-in-" + n + " " + std::to_string(sum) + "\n");
    const std::string mnt = shared.mnt(n);
    EXPECT_EQ(ContentOf(mnt + "/tag.c"), edit(n));
    EXPECT_TRUE(Exists(mnt + "/prog"));
    EXPECT_TRUE(Exists(mnt + "/tag.o"));
    EXPECT_TRUE(Exists(SandboxUpper(shared.state(), n) + "/tag.o"));
    for (const auto& other : names)
      EXPECT_EQ(Exists(mnt + "/built-by-" + other), other == n) << other;
  }
  EXPECT_FALSE(Exists(lower + "/prog"));
  EXPECT_FALSE(Exists(lower + "/tag.o"));
  EXPECT_TRUE(lower_untouched.Check());

  nlohmann::json ls = LsJson(shared.state());
  ASSERT_EQ(ls.size(), names.size()) << ls.dump(2);
  for (size_t i = 0; i < names.size(); i++) {
    EXPECT_EQ(ls[i]["name"], names[i]);  // sorted by name
    EXPECT_EQ(ls[i]["state"], "mounted") << ls[i].dump();
    EXPECT_EQ(ls[i]["lower"], RealPath(lower));
    EXPECT_EQ(ls[i]["mountpoint"], shared.mnt(names[i]));
  }
}

// Many sandboxes of one checkout started and removed at once (issue 12,
// item 4): each `acqfs mount` registers, and each `acqfs rm` removes, its
// sandbox-<name> remote in the host's .git/config, which git replaces under
// config.lock at every write. All must succeed, every remote must be
// complete while its sandbox lives, and the config must end as it began
// with no lock file left. Generations overlap (the removal of one with the
// mounts of the next), for a few seconds, so a fixed race stays fixed.
class ParallelSandboxes {
 public:
  ParallelSandboxes(TempDir* tmp, std::string lower)
      : tmp_(tmp), lower_(std::move(lower)), state_(tmp->MakeDir("state")) {}
  // In every outcome: nothing stays mounted, no daemon stays behind.
  ~ParallelSandboxes() {
    for (const auto& [name, mnt] : mnts_) {
      const pid_t pid = ReadPidFile(state_ + "/" + name + "/daemon.pid");
      if (FindMount(mnt)) {
        std::string left = ForceUnmount(mnt);
        if (!left.empty()) ADD_FAILURE() << left;
      }
      if (pid > 0 && !WaitForProcessExit(pid, 10)) KillIfAlive(pid, "acqfs");
    }
  }
  ParallelSandboxes(const ParallelSandboxes&) = delete;
  ParallelSandboxes& operator=(const ParallelSandboxes&) = delete;

  std::vector<std::string> MountArgs(const std::string& name) {
    if (!mnts_.count(name)) mnts_[name] = tmp_->MakeDir("mnt-" + name);
    return {"mount", lower_,        mnts_[name], "--name",
            name,    "--state-dir", state_};
  }
  std::vector<std::string> RmArgs(const std::string& name) const {
    return {"rm", name, "--state-dir", state_};
  }
  // Runs every command at once; their results, in order.
  static std::vector<CommandResult> RunAll(
      const std::vector<std::vector<std::string>>& commands) {
    std::vector<CommandResult> results(commands.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < commands.size(); i++)
      threads.emplace_back([&, i] { results[i] = Acqfs(commands[i]); });
    for (auto& t : threads) t.join();
    return results;
  }
  std::string Bridge(const std::string& name) const {
    return state_ + "/" + name + "/bridge.git";
  }
  const std::string& state() const { return state_; }
  std::string mnt(const std::string& name) { return mnts_[name]; }

 private:
  TempDir* tmp_;
  std::string lower_, state_;
  std::map<std::string, std::string> mnts_;
};

TEST(LifecycleConcurrency, SixteenParallelMountsAndRemovalsOfOneCheckout) {
  ASSERT_EQ(::geteuid(), 0u) << "integration tests run as root (as CI)";
  constexpr int kParallel = 16;
  TempDir tmp;
  ASSERT_SYS_OK(::chmod(tmp.path().c_str(), 0755));
  const std::string home = tmp.MakeDir("home");
  const std::string lower = tmp.Sub("lower");
  ASSERT_TRUE(MakeLowerRepo(lower));
  const std::string config = lower + "/.git/config";
  const std::string original = ContentOf(config);
  ParallelSandboxes sb(&tmp, lower);
  auto names = [&](int gen) {
    std::vector<std::string> v;
    for (int i = 0; i < kParallel; i++)
      v.push_back("g" + std::to_string(gen) + "-" + std::to_string(i));
    return v;
  };
  auto expect_ok = [](const std::vector<CommandResult>& results) {
    size_t failed = 0;
    for (const auto& r : results) {
      EXPECT_TRUE(r.ok()) << r.Describe();
      if (!r.ok()) failed++;
    }
    return failed;
  };
  // Every sandbox of `gen` is mounted and its remote complete.
  auto expect_live = [&](int gen) {
    for (const auto& n : names(gen)) {
      EXPECT_TRUE(FindMount(sb.mnt(n)).has_value()) << n;
      CommandResult url = RunGit(
          lower, {"config", "--get", "remote.sandbox-" + n + ".url"}, home);
      EXPECT_EQ(url.out, sb.Bridge(n) + "\n") << url.Describe();
      CommandResult fetch = RunGit(
          lower, {"config", "--get-all", "remote.sandbox-" + n + ".fetch"},
          home);
      EXPECT_EQ(std::count(fetch.out.begin(), fetch.out.end(), '\n'), 4)
          << fetch.Describe();
    }
  };
  std::vector<std::vector<std::string>> first;
  for (const auto& n : names(0)) first.push_back(sb.MountArgs(n));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(expect_ok(ParallelSandboxes::RunAll(first)), 0u);
  expect_live(0);
  int gen = 0;
  size_t failures = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  do {
    std::vector<std::vector<std::string>> both;
    for (const auto& n : names(gen)) both.push_back(sb.RmArgs(n));
    for (const auto& n : names(gen + 1)) both.push_back(sb.MountArgs(n));
    failures += expect_ok(ParallelSandboxes::RunAll(both));
    gen++;
    expect_live(gen);
    for (const auto& n : names(gen - 1)) {
      EXPECT_FALSE(FindMount(sb.mnt(n)).has_value()) << n;
      EXPECT_FALSE(Exists(sb.state() + "/" + n)) << n;
    }
  } while (failures == 0 && std::chrono::steady_clock::now() < until);
  std::vector<std::vector<std::string>> last;
  for (const auto& n : names(gen)) last.push_back(sb.RmArgs(n));
  failures += expect_ok(ParallelSandboxes::RunAll(last));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::cerr << (gen + 1) << " generations of " << kParallel
            << " sandboxes mounted and removed in " << seconds << " s, "
            << failures << " failures\n";
  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(ContentOf(config), original);
  EXPECT_FALSE(Exists(config + ".lock"));
}

// ---------------------------------------------------------------------------
// One daemon per upper layer (issue 12, item 6): every way of starting a
// daemon takes the same claim on the upper and work directories, and a
// second one is refused, naming the upper and the pid holding it, before it
// touches the work area.

class LifecycleTwoDaemons : public Lifecycle {
 protected:
  std::string HelperOptions() const {
    return "lowerdir=" + lower_ + ",upperdir=" + sandbox_->upper() +
           ",workdir=" + sandbox_->work();
  }
  CommandResult Helper(const std::string& mnt) const {
    return RunCommand(
        {MountHelperBinary(), "acqfs", mnt, "-o", HelperOptions()},
        kCommandSeconds);
  }
  // Unmounts a mount the helper made and waits for its daemons.
  void HelperUnmount(const std::string& mnt) {
    const std::vector<pid_t> daemons = PidsWithArgument(mnt);
    CommandResult u = RunCommand({"fusermount3", "-u", mnt}, 30);
    EXPECT_TRUE(u.ok()) << u.Describe();
    for (pid_t pid : daemons) {
      EXPECT_TRUE(WaitForProcessExit(pid, 20)) << "daemon " << pid;
      KillIfAlive(pid, "acqfs");
    }
  }
};

TEST_F(LifecycleTwoDaemons, MountHelperRefusesTheUpperAcqfsMountServes) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  Sandbox& s = *sandbox_;
  // A file held open across a rename over it: its data now lives only in
  // what the daemon keeps (a descriptor, or a name in work/acqfs-tmp).
  ASSERT_TRUE(WriteFile(s.M("f"), "the data a process holds\n"));
  ScopedFd held(::open(s.M("f").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(held.valid());
  ASSERT_TRUE(WriteFile(s.M("g"), "new\n"));
  ASSERT_SYS_OK(::rename(s.M("g").c_str(), s.M("f").c_str()));
  const std::string kept = s.work() + "/acqfs-tmp/#acqfs.kept-by-the-first";
  ASSERT_TRUE(WriteFile(kept, "kept\n"));

  const std::string second = tmp_.MakeDir("second-mnt");
  MountGuard guard(second);
  CommandResult r = Helper(second);
  EXPECT_NE(r.exit_code, 0) << r.Describe();
  EXPECT_FALSE(FindMount(second).has_value()) << "a second daemon mounted";
  EXPECT_NE(r.err.find(s.upper()), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("pid " + std::to_string(s.daemon_pid())),
            std::string::npos)
      << r.Describe();
  EXPECT_EQ(ContentOf(kept), "kept\n") << "the second daemon emptied acqfs-tmp";
  char buf[64] = {};
  EXPECT_EQ(::pread(held.get(), buf, sizeof buf - 1, 0), 25)
      << ErrnoName(errno);
  EXPECT_STREQ(buf, "the data a process holds\n");
  EXPECT_EQ(ContentOf(s.M("f")), "new\n");
  EXPECT_EQ(LsState(s.state_dir(), s.name()), "mounted");
  // With -f (the daemon in the helper's own process) too.
  CommandResult fg = RunCommand(
      {MountHelperBinary(), "-f", "acqfs", second, "-o", HelperOptions()},
      kCommandSeconds);
  EXPECT_NE(fg.exit_code, 0) << fg.Describe();
  EXPECT_NE(fg.err.find(s.upper()), std::string::npos) << fg.Describe();
  EXPECT_FALSE(FindMount(second).has_value());
  EXPECT_EQ(ContentOf(kept), "kept\n");
}

TEST_F(LifecycleTwoDaemons, AcqfsMountRefusesLayersTheMountHelperServes) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  Sandbox& s = *sandbox_;
  ASSERT_TRUE(WriteFile(s.M("kept.txt"), "kept\n"));
  ASSERT_TRUE(s.Unmount());
  const std::string by_helper = tmp_.MakeDir("helper-mnt");
  MountGuard guard(by_helper);
  CommandResult h = Helper(by_helper);
  ASSERT_TRUE(h.ok()) << h.Describe();
  ASSERT_TRUE(FindMount(by_helper).has_value());
  const std::vector<pid_t> helper_daemons = PidsWithArgument(by_helper);
  ASSERT_EQ(helper_daemons.size(), 1u);
  const std::string pid = std::to_string(helper_daemons[0]);
  const std::string meta = ContentOf(s.layer_dir() + "/meta.json");
  {
    // acqfs mount of the sandbox: refused before anything is written.
    Unchanged unchanged({s.upper(), lower_});
    CommandResult r = MountAgain(s);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_NE(r.err.find("is served by acqfs daemon pid " + pid),
              std::string::npos)
        << r.Describe();
    EXPECT_NE(r.err.find(s.upper()), std::string::npos) << r.Describe();
    EXPECT_FALSE(FindMount(s.mountpoint()).has_value());
    EXPECT_EQ(ContentOf(s.layer_dir() + "/meta.json"), meta);
    EXPECT_TRUE(unchanged.Check());
  }
  // A second helper on the same layers: refused, naming the first's pid.
  const std::string third = tmp_.MakeDir("third-mnt");
  MountGuard guard3(third);
  CommandResult h2 = Helper(third);
  EXPECT_NE(h2.exit_code, 0) << h2.Describe();
  EXPECT_NE(h2.err.find("pid " + pid), std::string::npos) << h2.Describe();
  EXPECT_FALSE(FindMount(third).has_value());
  // acqfs rm never removes the layers from under it.
  CommandResult rm =
      Acqfs({"rm", "--force", s.name(), "--state-dir", s.state_dir()});
  EXPECT_EQ(rm.exit_code, 1) << rm.Describe();
  EXPECT_NE(rm.err.find("acqfs daemon pid " + pid), std::string::npos)
      << rm.Describe();
  EXPECT_TRUE(Exists(s.upper() + "/kept.txt"));
  EXPECT_EQ(ContentOf(by_helper + "/kept.txt"), "kept\n");
  // Once it is unmounted and ended, acqfs mount serves the sandbox again.
  HelperUnmount(by_helper);
  ASSERT_TRUE(s.Remount());
  EXPECT_EQ(ContentOf(s.M("kept.txt")), "kept\n");
}

// ---------------------------------------------------------------------------
// Clean-up unmounts only the sandbox's own mount (issue 12, item 7): a
// mount made over the mountpoint is never unmounted in its place.

// A tmpfs mounted over `path` for the length of a test, with a marker file;
// at the end, it alone is unmounted if it is still the one on top.
class TmpfsOver {
 public:
  explicit TmpfsOver(std::string path) : path_(std::move(path)) {
    CommandResult r = RunCommand(
        {"mount", "-t", "tmpfs", "-o", "size=1m", kSource, path_}, 30);
    ok_ = r.ok();
    if (!ok_) ADD_FAILURE() << r.Describe();
    if (ok_) ok_ = static_cast<bool>(WriteFile(marker(), "foreign\n"));
  }
  ~TmpfsOver() { Remove(); }
  TmpfsOver(const TmpfsOver&) = delete;
  TmpfsOver& operator=(const TmpfsOver&) = delete;

  bool ok() const { return ok_; }
  std::string marker() const { return path_ + "/foreign-marker"; }
  // Is this tmpfs still the mount on top of the path, with its marker?
  bool OnTop() const {
    auto m = FindMount(path_);
    return m && m->fs_type == "tmpfs" && m->source == kSource &&
           ContentOf(marker()) == "foreign\n";
  }
  void Remove() {
    auto m = FindMount(path_);
    if (m && m->fs_type == "tmpfs" && m->source == kSource &&
        ::umount2(path_.c_str(), UMOUNT_NOFOLLOW) != 0)
      ADD_FAILURE() << "umount " << path_ << ": " << ErrnoName(errno);
  }

 private:
  static constexpr const char* kSource = "acqfs-test-cover";
  std::string path_;
  bool ok_ = false;
};

TEST_F(LifecycleStale, CleanUpNeverUnmountsAMountCoveringTheDeadOne) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  Sandbox& s = *sandbox_;
  ASSERT_TRUE(WriteFile(s.M("kept.txt"), "kept\n"));
  KillDaemon();
  ASSERT_EQ(LsState(s.state_dir(), s.name()), "stale");
  TmpfsOver cover(s.mountpoint());
  ASSERT_TRUE(cover.ok());
  const std::string covered = "is covered by a tmpfs mount";
  // By name and by mountpoint: refused, the tmpfs kept, the dead mount kept.
  for (const std::string& target : {s.name(), s.mountpoint()}) {
    SCOPED_TRACE("acqfs umount " + target);
    CommandResult r =
        Acqfs({"umount", target, "--state-dir", s.state_dir(), "--no-export"});
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find(covered), std::string::npos) << r.Describe();
    EXPECT_EQ(r.err.find("cleaned up"), std::string::npos) << r.Describe();
    EXPECT_TRUE(cover.OnTop()) << "the foreign tmpfs was unmounted";
    EXPECT_EQ(LsState(s.state_dir(), s.name()), "stale");
  }
  // acqfs mount of the sandbox (which cleans up first) and rm: the same.
  CommandResult m = MountAgain(s);
  EXPECT_NE(m.exit_code, 0) << m.Describe();
  EXPECT_NE(m.err.find(covered), std::string::npos) << m.Describe();
  EXPECT_TRUE(cover.OnTop());
  CommandResult rm =
      Acqfs({"rm", "--force", s.name(), "--state-dir", s.state_dir()});
  EXPECT_NE(rm.exit_code, 0) << rm.Describe();
  EXPECT_NE(rm.err.find(covered), std::string::npos) << rm.Describe();
  EXPECT_TRUE(cover.OnTop());
  EXPECT_TRUE(Exists(s.upper() + "/kept.txt"));
  // Once the foreign mount is gone, the dead one is cleaned up as usual.
  cover.Remove();
  ASSERT_TRUE(s.Unmount(/*by_name=*/true));
  EXPECT_FALSE(FindMount(s.mountpoint()).has_value());
  ASSERT_TRUE(s.Remount());
  EXPECT_EQ(ContentOf(s.M("kept.txt")), "kept\n");
}

TEST_F(Lifecycle, UmountNeverUnmountsAMountCoveringALiveOne) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  Sandbox& s = *sandbox_;
  ASSERT_TRUE(WriteFile(s.M("kept.txt"), "kept\n"));
  TmpfsOver cover(s.mountpoint());
  ASSERT_TRUE(cover.ok());
  for (const std::string& target : {s.name(), s.mountpoint()}) {
    SCOPED_TRACE("acqfs umount " + target);
    CommandResult r =
        Acqfs({"umount", target, "--state-dir", s.state_dir(), "--no-export"});
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("is covered by a tmpfs mount"), std::string::npos)
        << r.Describe();
    EXPECT_TRUE(cover.OnTop()) << "the foreign tmpfs was unmounted";
    EXPECT_EQ(LsState(s.state_dir(), s.name()), "mounted");
  }
  cover.Remove();
  EXPECT_EQ(ContentOf(s.M("kept.txt")), "kept\n");
  ASSERT_TRUE(s.Unmount(/*by_name=*/true));
}

// A mount made outside the state directory (mount.fuse.acqfs), covered:
// `acqfs umount MOUNTPOINT` refuses rather than unmount the cover.
TEST_F(Lifecycle, UmountOfAHelperMountNeverUnmountsItsCover) {
  const std::string upper = tmp_.MakeDir("h-upper");
  const std::string work = tmp_.MakeDir("h-work");
  const std::string mnt = tmp_.MakeDir("h-mnt");
  MountGuard guard(mnt);
  CommandResult h = RunCommand(
      {MountHelperBinary(), "acqfs", mnt, "-o",
       "lowerdir=" + lower_ + ",upperdir=" + upper + ",workdir=" + work},
      kCommandSeconds);
  ASSERT_TRUE(h.ok()) << h.Describe();
  const std::vector<pid_t> daemons = PidsWithArgument(mnt);
  {
    TmpfsOver cover(mnt);
    ASSERT_TRUE(cover.ok());
    const std::string state = tmp_.MakeDir("empty-state");
    CommandResult r = Acqfs({"umount", mnt, "--state-dir", state});
    EXPECT_NE(r.exit_code, 0) << r.Describe();
    EXPECT_NE(r.err.find("is covered by a tmpfs mount"), std::string::npos)
        << r.Describe();
    EXPECT_TRUE(cover.OnTop());
  }
  const std::string state = tmp_.MakeDir("empty-state2");
  CommandResult r = Acqfs({"umount", mnt, "--state-dir", state});
  EXPECT_TRUE(r.ok()) << r.Describe();
  EXPECT_FALSE(FindMount(mnt).has_value());
  for (pid_t pid : daemons) {
    EXPECT_TRUE(WaitForProcessExit(pid, 20)) << "daemon " << pid;
    KillIfAlive(pid, "acqfs");
  }
}

// ---------------------------------------------------------------------------
// A mountpoint names the sandbox mounted there now, though earlier sandboxes
// mounted there recorded it too (docs/cli.md, "Naming a sandbox").

class LifecycleMountpoint : public Lifecycle {
 protected:
  void SetUp() override {
    Lifecycle::SetUp();
    state_ = tmp_.MakeDir("state");
    mnt_ = tmp_.MakeDir("w");
  }
  CommandResult MountAt(const std::string& name) {
    return Acqfs(
        {"mount", lower_, mnt_, "--name", name, "--state-dir", state_});
  }
  // `acqfs COMMAND <the mountpoint> ARGS... --state-dir STATE`.
  CommandResult AtMountpoint(const std::string& command,
                             std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {command, mnt_};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--state-dir", state_});
    return Acqfs(argv);
  }
  // status, diff and export of the mountpoint are those of `name`, which
  // alone wrote `name`-only.txt; then `acqfs umount MOUNTPOINT` unmounts it.
  void ExpectMountpointNames(const std::string& name,
                             const std::string& other) {
    SCOPED_TRACE("sandbox " + name + " mounted at " + mnt_);
    CommandResult status = AtMountpoint("status");
    EXPECT_TRUE(status.ok()) << status.Describe();
    EXPECT_NE(status.out.find("A " + name + "-only.txt\n"), std::string::npos)
        << status.Describe();
    EXPECT_EQ(status.out.find(other + "-only.txt"), std::string::npos)
        << status.Describe();
    CommandResult diff = AtMountpoint("diff");
    EXPECT_TRUE(diff.ok()) << diff.Describe();
    EXPECT_NE(diff.out.find("+++ b/" + name + "-only.txt"), std::string::npos)
        << diff.Describe();
    EXPECT_EQ(diff.out.find(other + "-only.txt"), std::string::npos)
        << diff.Describe();
    CommandResult exported = AtMountpoint("export", {"--json"});
    EXPECT_TRUE(exported.ok()) << exported.Describe();
    auto j = nlohmann::json::parse(exported.out, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.value("sandbox", "") == name)
        << exported.Describe();
    CommandResult umount = AtMountpoint("umount", {"--no-export"});
    EXPECT_TRUE(umount.ok()) << umount.Describe();
    EXPECT_FALSE(FindMount(mnt_).has_value());
    EXPECT_EQ(LsState(state_, name), "not-mounted");
    EXPECT_EQ(LsState(state_, other), "not-mounted");
  }

  std::string state_, mnt_;
};

TEST_F(LifecycleMountpoint, CommandsOfAMountpointUseTheSandboxMountedThere) {
  MountGuard guard(mnt_);
  // a, then b, mounted one after the other at the same place.
  ASSERT_TRUE(MountAt("a").ok());
  ASSERT_TRUE(WriteFile(mnt_ + "/a-only.txt", "a\n"));
  ASSERT_TRUE(
      Acqfs({"umount", "a", "--state-dir", state_, "--no-export"}).ok());
  CommandResult b = MountAt("b");
  ASSERT_TRUE(b.ok()) << b.Describe();
  ASSERT_TRUE(WriteFile(mnt_ + "/b-only.txt", "b\n"));
  ExpectMountpointNames("b", "a");
  // Both recorded the mountpoint and neither is mounted: refused, naming
  // both, for every command that takes a mountpoint.
  for (const std::string command : {"umount", "status", "diff", "export"}) {
    CommandResult r = AtMountpoint(command);
    EXPECT_EQ(r.exit_code, 1) << r.Describe();
    EXPECT_EQ(r.err.rfind("acqfs: " + command + ": " + mnt_ + ": ", 0), 0u)
        << r.Describe();
    EXPECT_NE(r.err.find("sandboxes a and b"), std::string::npos)
        << r.Describe();
    EXPECT_NE(r.err.find("give the name"), std::string::npos) << r.Describe();
  }
  // And the other way round: a mounted there again, b recorded it last.
  ASSERT_TRUE(MountAt("a").ok());
  ExpectMountpointNames("a", "b");
}

// A mount that `acqfs mount` did not make (mount.fuse.acqfs) at a
// mountpoint a sandbox recorded: `acqfs umount MOUNTPOINT` unmounts that
// mount rather than answer that the sandbox is not mounted.
TEST_F(LifecycleMountpoint, UmountOfAHelperMountWhereASandboxWasMounted) {
  MountGuard guard(mnt_);
  ASSERT_TRUE(MountAt("a").ok());
  ASSERT_TRUE(
      Acqfs({"umount", "a", "--state-dir", state_, "--no-export"}).ok());
  const std::string upper = tmp_.MakeDir("h-upper");
  const std::string work = tmp_.MakeDir("h-work");
  CommandResult h = RunCommand(
      {MountHelperBinary(), "acqfs", mnt_, "-o",
       "lowerdir=" + lower_ + ",upperdir=" + upper + ",workdir=" + work},
      kCommandSeconds);
  ASSERT_TRUE(h.ok()) << h.Describe();
  const std::vector<pid_t> daemons = PidsWithArgument(mnt_);
  CommandResult r = AtMountpoint("umount");
  EXPECT_TRUE(r.ok()) << r.Describe();
  EXPECT_FALSE(FindMount(mnt_).has_value());
  for (pid_t pid : daemons) {
    EXPECT_TRUE(WaitForProcessExit(pid, 20)) << "daemon " << pid;
    KillIfAlive(pid, "acqfs");
  }
  // With nothing mounted, the one sandbox that recorded it is named.
  CommandResult again = AtMountpoint("umount");
  EXPECT_EQ(again.exit_code, 1) << again.Describe();
  EXPECT_EQ(again.err, "acqfs: umount: " + mnt_ + ": not mounted\n")
      << again.Describe();
}

// ---------------------------------------------------------------------------
// A sandbox's folder is reachable by its owner only: device nodes and
// set-id files the sandbox makes in its upper layer cannot be used by other
// users of the host (docs/sandboxes.md).

class LifecycleState : public Lifecycle {
 protected:
  // `argv` run as nobody (uid and gid 65534, no groups).
  static CommandResult AsNobody(std::vector<std::string> argv) {
    std::vector<std::string> full = {"setpriv", "--reuid=65534",
                                     "--regid=65534", "--clear-groups"};
    full.insert(full.end(), argv.begin(), argv.end());
    return RunCommand(full, 30);
  }
  static mode_t ModeOf(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return 07777;
    return st.st_mode & 07777;
  }
};

TEST_F(LifecycleState, OnlyTheOwnerReachesTheSandboxFolder) {
  SandboxOptions o;
  o.extra_umount_args = {"--no-export"};
  Mount(o);
  Sandbox& s = *sandbox_;
  EXPECT_EQ(ModeOf(s.layer_dir()) & 077, 0u)
      << std::oct << ModeOf(s.layer_dir());
  // What a sandbox (run as root) can make in its upper layer.
  ASSERT_SYS_OK(::mknod(s.M("disk").c_str(), S_IFCHR | 0666, makedev(1, 3)));
  CommandResult cp =
      RunCommand({"cp", "/usr/bin/id", s.M("suid-id")}, kCommandSeconds);
  ASSERT_TRUE(cp.ok()) << cp.Describe();
  ASSERT_SYS_OK(::chmod(s.M("suid-id").c_str(), 04755));
  struct stat st {};
  ASSERT_SYS_OK(::lstat(s.U("disk").c_str(), &st));
  ASSERT_TRUE(S_ISCHR(st.st_mode));
  ASSERT_SYS_OK(::lstat(s.U("suid-id").c_str(), &st));
  ASSERT_EQ(st.st_mode & 04000, 04000u);
  auto nobody_locked_out = [&] {
    CommandResult dev = AsNobody({"cat", s.U("disk")});
    EXPECT_NE(dev.exit_code, 0) << dev.Describe();
    EXPECT_NE(dev.err.find("Permission denied"), std::string::npos)
        << dev.Describe();
    // Run by a shell that is nobody already (setpriv itself still holds
    // root's capabilities when it looks the program up).
    CommandResult suid = AsNobody({"sh", "-c", "exec \"$0\"", s.U("suid-id")});
    EXPECT_NE(suid.exit_code, 0) << suid.Describe();
    EXPECT_NE(suid.err.find("Permission denied"), std::string::npos)
        << suid.Describe();
  };
  nobody_locked_out();
  ASSERT_TRUE(s.Unmount());
  // A folder and a layer store with wider permissions (made by hand, or by
  // an older acqfs): another user reaches the upper layer...
  const std::string store = s.state_dir() + "/.layers";
  ASSERT_SYS_OK(::chmod(s.layer_dir().c_str(), 0755));
  ASSERT_SYS_OK(::chmod(store.c_str(), 0755));
  CommandResult reach = AsNobody({"stat", s.U("suid-id")});
  EXPECT_TRUE(reach.ok()) << reach.Describe();
  // ...until the next mount narrows them.
  ASSERT_TRUE(s.Remount());
  EXPECT_EQ(ModeOf(s.layer_dir()), 0700u) << std::oct << ModeOf(s.layer_dir());
  EXPECT_EQ(ModeOf(store), 0700u) << std::oct << ModeOf(store);
  nobody_locked_out();
  ASSERT_TRUE(s.Unmount());
  // The mount helper over the sandbox's layers narrows it too.
  ASSERT_SYS_OK(::chmod(s.layer_dir().c_str(), 0750));
  const std::string mnt = tmp_.MakeDir("helper-mnt");
  {
    MountGuard guard(mnt);
    CommandResult h =
        RunCommand({MountHelperBinary(), "acqfs", mnt, "-o",
                    "lowerdir=" + lower_ + ",upperdir=" + s.upper() +
                        ",workdir=" + s.work()},
                   kCommandSeconds);
    ASSERT_TRUE(h.ok()) << h.Describe();
    const std::vector<pid_t> daemons = PidsWithArgument(mnt);
    EXPECT_EQ(ModeOf(s.layer_dir()), 0700u)
        << std::oct << ModeOf(s.layer_dir());
    CommandResult u = RunCommand({"fusermount3", "-u", mnt}, 30);
    EXPECT_TRUE(u.ok()) << u.Describe();
    for (pid_t pid : daemons) {
      EXPECT_TRUE(WaitForProcessExit(pid, 20)) << "daemon " << pid;
      KillIfAlive(pid, "acqfs");
    }
  }
  nobody_locked_out();
  ASSERT_TRUE(s.Remount());
}

// ---------------------------------------------------------------------------
// What acqfs ls reports.

TEST_F(LifecycleLs, LsJsonMatchesWhatTheSandboxDid) {
  Mount();
  Sandbox& s = *sandbox_;
  const std::string home = tmp_.Sub("home");
  nlohmann::json e = LsEntry(s.state_dir(), s.name());
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e["name"], s.name());
  EXPECT_EQ(e["lower"], RealPath(lower_));
  EXPECT_EQ(e["mountpoint"], s.mountpoint());
  EXPECT_EQ(e["state"], "mounted");
  // The daemon's FUSE transport, the one this run's tests use.
  EXPECT_EQ(e["transport"],
            TestTransport() == "uring" ? "io_uring" : "/dev/fuse")
      << e.dump();
  EXPECT_EQ(e["changed_paths"], 0) << e.dump();
  EXPECT_EQ(e["last_export"], 0);
  EXPECT_TRUE(e["last_export_utc"].is_null());
  EXPECT_EQ(e["unfetched"], false) << e.dump();
  ASSERT_TRUE(e["upper_bytes"].is_number_unsigned()) << e.dump();
  const uint64_t empty_bytes = e["upper_bytes"];

  std::string blob;
  for (int i = 0; blob.size() < (1u << 20); i++)
    blob += "block " + std::to_string(i) + " of a 1 MiB file\n";
  blob.resize(1u << 20);
  ASSERT_TRUE(WriteFile(s.M("blob.bin"), blob));
  ASSERT_TRUE(AppendFile(s.M(lower::kFileA), "more\n"));
  ASSERT_SYS_OK(::unlink(s.M(lower::kFileB).c_str()));
  e = LsEntry(s.state_dir(), s.name());
  EXPECT_EQ(e["changed_paths"], 3) << e.dump();
  EXPECT_GE(e["upper_bytes"].get<uint64_t>(), empty_bytes + (1u << 20))
      << e.dump();
  EXPECT_EQ(e["unfetched"], false) << e.dump();

  CommandResult x = Acqfs({"export", s.name(), "--state-dir", s.state_dir()});
  ASSERT_TRUE(x.ok()) << x.Describe();
  e = LsEntry(s.state_dir(), s.name());
  EXPECT_EQ(e["unfetched"], true) << e.dump();
  CommandResult f =
      RunGit(lower_, {"fetch", "-q", "sandbox-" + s.name()}, home);
  ASSERT_TRUE(f.ok()) << f.Describe();
  e = LsEntry(s.state_dir(), s.name());
  EXPECT_EQ(e["unfetched"], false) << e.dump();

  CommandResult text = Acqfs({"ls", "--state-dir", s.state_dir()});
  ASSERT_TRUE(text.ok()) << text.Describe();
  std::vector<std::string> lines;
  std::istringstream in(text.out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 2u) << text.out;
  EXPECT_EQ(lines[0].rfind("NAME ", 0), 0u) << text.out;
  for (const char* col : {"STATE", "UPPER", "CHANGES", "EXPORTED", "UNFETCHED",
                          "LOWER", "MOUNTPOINT"})
    EXPECT_NE(lines[0].find(col), std::string::npos) << col;
  EXPECT_EQ(lines[1].rfind(s.name() + " ", 0), 0u) << text.out;
  EXPECT_NE(lines[1].find(" mounted "), std::string::npos) << text.out;
  EXPECT_NE(lines[1].find(" 3 "), std::string::npos) << text.out;
  EXPECT_NE(lines[1].find(" no "), std::string::npos) << text.out;
  EXPECT_NE(lines[1].find(s.mountpoint()), std::string::npos) << text.out;
  // Columns line up: each header starts where its value starts.
  EXPECT_EQ(lines[0].find("MOUNTPOINT"), lines[1].rfind(s.mountpoint()));

  ASSERT_TRUE(s.Unmount());
  EXPECT_EQ(LsState(s.state_dir(), s.name()), "not-mounted");
}

// cmd_export records the time of each export in meta.json; ls shows it.
TEST_F(LifecycleLs, LsShowsTheLastExport) {
  Mount();
  Sandbox& s = *sandbox_;
  ASSERT_TRUE(WriteFile(s.M("new.txt"), "new\n"));
  const int64_t before = static_cast<int64_t>(std::time(nullptr));
  CommandResult x = Acqfs({"export", s.name(), "--state-dir", s.state_dir()});
  ASSERT_TRUE(x.ok()) << x.Describe();
  const int64_t after = static_cast<int64_t>(std::time(nullptr));
  nlohmann::json e = LsEntry(s.state_dir(), s.name());
  ASSERT_TRUE(e["last_export"].is_number_integer()) << e.dump();
  EXPECT_GE(e["last_export"].get<int64_t>(), before) << e.dump();
  EXPECT_LE(e["last_export"].get<int64_t>(), after) << e.dump();
  EXPECT_TRUE(e["last_export_utc"].is_string()) << e.dump();
}

TEST(LifecycleLsFormat, TimesSizesAndNonGitLowers) {
  TempDir tmp;
  ASSERT_SYS_OK(::chmod(tmp.path().c_str(), 0755));
  const std::string lower = tmp.MakeDir("plain");
  ASSERT_TRUE(WriteFile(lower + "/a.txt", "a\n"));
  SandboxOptions o;
  o.name = "plain";
  Sandbox s(lower, o);
  ASSERT_TRUE(s.mounted()) << s.mount_failure();
  ASSERT_TRUE(s.Unmount());
  // A recorded export time (as cmd_export writes it).
  const std::string meta_path = s.layer_dir() + "/meta.json";
  auto meta = nlohmann::json::parse(ContentOf(meta_path), nullptr, false);
  ASSERT_TRUE(meta.is_object());
  meta["last_export"] = 1700000000;
  ASSERT_TRUE(WriteFile(meta_path, meta.dump(2) + "\n", 0600));
  // Folders without a readable meta.json are not sandboxes.
  ASSERT_SYS_OK(::mkdir((s.state_dir() + "/not-a-sandbox").c_str(), 0700));
  ASSERT_TRUE(WriteFile(s.state_dir() + "/stray-file", "x\n"));

  nlohmann::json ls = LsJson(s.state_dir());
  ASSERT_EQ(ls.size(), 1u) << ls.dump(2);
  nlohmann::json e = ls[0];
  EXPECT_EQ(e["name"], "plain");
  EXPECT_EQ(e["state"], "not-mounted");
  EXPECT_EQ(e["last_export"], 1700000000);
  EXPECT_EQ(e["last_export_utc"], "2023-11-14T22:13:20Z");
  EXPECT_TRUE(e["unfetched"].is_null()) << e.dump();
  EXPECT_EQ(e["changed_paths"], 0) << e.dump();

  CommandResult r =
      RunCommand({AcqfsBinary(), "ls", "--state-dir", s.state_dir()},
                 kCommandSeconds, "", {{"TZ", "UTC"}});
  ASSERT_TRUE(r.ok()) << r.Describe();
  EXPECT_NE(r.out.find(" not mounted "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 2023-11-14 22:13 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" - "), std::string::npos) << r.out;
}

TEST(LifecycleLsFormat, EmptyAndMissingStateDirectoriesListNothing) {
  TempDir tmp;
  const std::string empty = tmp.MakeDir("empty");
  const std::string missing = tmp.Sub("missing");
  for (const auto& dir : {empty, missing}) {
    CommandResult j = Acqfs({"ls", "--json", "--state-dir", dir});
    EXPECT_TRUE(j.ok()) << j.Describe();
    EXPECT_EQ(nlohmann::json::parse(j.out, nullptr, false),
              nlohmann::json::array())
        << j.Describe();
    CommandResult t = Acqfs({"ls", "--state-dir", dir});
    EXPECT_TRUE(t.ok()) << t.Describe();
    EXPECT_EQ(t.out, "") << t.Describe();
  }
  EXPECT_FALSE(Exists(missing));
  // A state "directory" that is a file is an error naming it.
  const std::string file = tmp.Sub("file");
  ASSERT_TRUE(WriteFile(file, "x\n"));
  CommandResult f = Acqfs({"ls", "--state-dir", file});
  EXPECT_EQ(f.exit_code, 1) << f.Describe();
  EXPECT_EQ(f.err.rfind("acqfs: ls: " + file + ": ", 0), 0u) << f.Describe();
}

}  // namespace
}  // namespace acqfs::test
