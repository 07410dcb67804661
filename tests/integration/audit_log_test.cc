// The audit log through a mount (docs/audit.md): each change made through
// the mount is recorded once, with the caller and the path as given; each
// refusal by a boundary with its errno and boundary; the log lives beneath
// the state folder and refuses a planted symlink; it survives a kill -9 and
// a remount; -o noaudit writes none; --audit-reads records opens.
// Read back through `acqfs log --json`, in both file modes.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/mounts.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {
namespace {

CommandResult Acqfs(const Sandbox& s, std::vector<std::string> args) {
  return AcqfsIn(s, std::move(args));
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// A field of a record as bytes: its *_hex form when there is one.
std::string Bytes(const nlohmann::json& r, const std::string& key) {
  if (r.contains(key + "_hex")) return FromHex(r[key + "_hex"]);
  return r.value(key, "");
}

// The records `acqfs log --json` prints (a test failure when it fails).
std::vector<nlohmann::json> Records(const Sandbox& s,
                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"log", s.name(), "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  CommandResult r = Acqfs(s, args);
  EXPECT_TRUE(r.ok()) << r.Describe();
  std::vector<nlohmann::json> out;
  size_t at = 0;
  while (at < r.out.size()) {
    size_t nl = r.out.find('\n', at);
    if (nl == std::string::npos) nl = r.out.size();
    auto j = nlohmann::json::parse(r.out.substr(at, nl - at), nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.out.substr(at, nl - at);
    if (j.is_object()) out.push_back(j);
    at = nl + 1;
  }
  return out;
}

// "op path[ -> path2]" of each record this process made.
std::vector<std::string> Mine(const std::vector<nlohmann::json>& records) {
  std::vector<std::string> out;
  for (const auto& r : records) {
    if (r.value("pid", 0) != ::getpid()) continue;
    std::string line = r.value("op", "") + " " + Bytes(r, "path");
    if (r.contains("path2") || r.contains("path2_hex"))
      line += " -> " + Bytes(r, "path2");
    out.push_back(line);
  }
  return out;
}

const nlohmann::json* Find(const std::vector<nlohmann::json>& records,
                           const std::string& op, const std::string& path) {
  for (const auto& r : records)
    if (r.value("op", "") == op && Bytes(r, "path") == path) return &r;
  return nullptr;
}

class AuditLog : public BothFileModes {};
ACQFS_IN_BOTH_FILE_MODES(AuditLog);

TEST_P(AuditLog, EachChangeIsRecordedOnceWithItsCallerAndPath) {
  ASSERT_TRUE(WriteFile(M("new.txt"), "hello"));
  ASSERT_EQ(::mkdir(M("adir").c_str(), 0750), 0) << ErrnoName(errno);
  ASSERT_EQ(::rename(M("new.txt").c_str(), M("adir/moved.txt").c_str()), 0);
  ASSERT_EQ(::symlink("target", M("slk").c_str()), 0);
  ASSERT_EQ(::link(M("adir/moved.txt").c_str(), M("hl").c_str()), 0)
      << ErrnoName(errno);
  ASSERT_EQ(::chmod(M("adir/moved.txt").c_str(), 0600), 0);
  ASSERT_EQ(::chown(M("adir/moved.txt").c_str(), 1234, 5678), 0)
      << ErrnoName(errno);
  ASSERT_EQ(::utimensat(AT_FDCWD, M("adir/moved.txt").c_str(), nullptr, 0), 0);
  ASSERT_EQ(::setxattr(M("adir/moved.txt").c_str(), "user.k", "v", 1, 0), 0);
  ASSERT_EQ(::removexattr(M("adir/moved.txt").c_str(), "user.k"), 0);
  ASSERT_EQ(::truncate(M("adir/moved.txt").c_str(), 2), 0);
  ASSERT_EQ(::unlink(M("slk").c_str()), 0);
  ASSERT_EQ(::unlink(M("hl").c_str()), 0);
  ASSERT_EQ(::unlink(M("adir/moved.txt").c_str()), 0);
  ASSERT_EQ(::rmdir(M("adir").c_str()), 0);
  // The pending write records go out at the unmount at the latest.
  ASSERT_TRUE(sandbox().Unmount());
  auto records = Records(sandbox());
  std::vector<std::string> mine = Mine(records);
  std::vector<std::string> want = {"create new.txt",
                                   "write new.txt",
                                   "mkdir adir",
                                   "rename new.txt -> adir/moved.txt",
                                   "symlink slk -> target",
                                   "link hl -> adir/moved.txt",
                                   "chmod adir/moved.txt",
                                   "chown adir/moved.txt",
                                   "utimes adir/moved.txt",
                                   "setxattr adir/moved.txt",
                                   "removexattr adir/moved.txt",
                                   "truncate adir/moved.txt",
                                   "unlink slk",
                                   "unlink hl",
                                   "unlink adir/moved.txt",
                                   "rmdir adir"};
  std::vector<std::string> sorted_mine = mine, sorted_want = want;
  std::sort(sorted_mine.begin(), sorted_mine.end());
  std::sort(sorted_want.begin(), sorted_want.end());
  EXPECT_EQ(sorted_mine, sorted_want) << ::testing::PrintToString(mine);
  for (const auto& r : records) {
    if (r.value("pid", 0) != ::getpid()) continue;
    EXPECT_EQ(r.value("result", 0), 0) << r.dump();
    EXPECT_EQ(r.value("uid", 0u), ::getuid()) << r.dump();
    EXPECT_FALSE(r.value("exe", "").empty()) << r.dump();
    EXPECT_FALSE(r.value("layer", "").empty()) << r.dump();
  }
  const nlohmann::json* w = Find(records, "write", "new.txt");
  ASSERT_NE(w, nullptr);
  if (GetParam() == "no_open") {
    // The daemon saw the data: its range.
    EXPECT_EQ((*w)["ranges"], nlohmann::json::parse("[[0,5]]")) << w->dump();
    EXPECT_EQ(w->value("size", 0), 5) << w->dump();
  } else {
    // Passed through: the kernel wrote it.
    EXPECT_EQ(w->value("ranges_known", true), false) << w->dump();
  }
  const nlohmann::json* c = Find(records, "chown", "adir/moved.txt");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->value("owner_uid", 0), 1234);
  EXPECT_EQ(c->value("owner_gid", 0), 5678);
  const nlohmann::json* m = Find(records, "chmod", "adir/moved.txt");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->value("mode", 0), 0600);
  const nlohmann::json* t = Find(records, "truncate", "adir/moved.txt");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->value("size", 0), 2);
}

TEST_P(AuditLog, RefusalsAreRecordedWithTheirBoundary) {
  // Made before the mount: a hidden file, a read-only one.
  ASSERT_TRUE(sandbox().Unmount());
  ASSERT_TRUE(WriteFile(L(".env"), "SECRET=1\n"));
  ASSERT_TRUE(WriteFile(L("ro.txt"), "keep\n"));
  SandboxOptions o = Options();
  o.name = "refusals";
  o.extra_mount_args.insert(o.extra_mount_args.end(),
                            {"--hide", ".env", "--read-only", "ro.txt"});
  Sandbox s(lower(), o);
  ASSERT_TRUE(s.mounted()) << s.mount_failure();
  struct stat st;
  EXPECT_NE(::stat(s.M(".env").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
  // Refused at the open where the daemon answers OPEN; in the handle-less
  // mode, which sees no open, at the first write.
  int fd = ::open(s.M("ro.txt").c_str(), O_WRONLY | O_APPEND);
  if (GetParam() == "no_open") {
    ASSERT_GE(fd, 0) << ErrnoName(errno);
    EXPECT_EQ(::write(fd, "x", 1), -1);
    EXPECT_EQ(errno, EROFS);
    ::close(fd);
  } else {
    EXPECT_LT(fd, 0);
    EXPECT_EQ(errno, EROFS);
    if (fd >= 0) ::close(fd);
  }
  EXPECT_NE(::mknod(s.M("wh").c_str(), S_IFCHR | 0600, makedev(0, 0)), 0);
  EXPECT_EQ(errno, EPERM);
  ASSERT_TRUE(s.Unmount());
  auto records = Records(s, {"--refused"});
  const nlohmann::json* hidden = Find(records, "lookup", ".env");
  ASSERT_NE(hidden, nullptr) << ::testing::PrintToString(Mine(records));
  EXPECT_EQ(hidden->value("result", 0), ENOENT);
  EXPECT_EQ(hidden->value("boundary", ""), "hidden");
  const nlohmann::json* ro = Find(records, "write", "ro.txt");
  ASSERT_NE(ro, nullptr) << ::testing::PrintToString(Mine(records));
  EXPECT_EQ(ro->value("result", 0), EROFS);
  EXPECT_EQ(ro->value("boundary", ""), "read_only");
  const nlohmann::json* special = Find(records, "mknod", "wh");
  ASSERT_NE(special, nullptr) << ::testing::PrintToString(Mine(records));
  EXPECT_EQ(special->value("result", 0), EPERM);
  EXPECT_EQ(special->value("boundary", ""), "special");
  for (const auto& r : records) EXPECT_NE(r.value("result", 0), 0) << r.dump();
}

TEST_P(AuditLog, PathsAreKeptByteForByte) {
  const std::string odd = std::string("a\nb\xff\xfe-") + std::string(200, 'x');
  ASSERT_TRUE(WriteFile(M(odd), "x"));
  std::string deep;
  for (int i = 0; i < 15; ++i) {
    deep += (i ? "/" : "") + std::string(250, static_cast<char>('a' + i));
    ASSERT_EQ(::mkdir(M(deep).c_str(), 0755), 0) << ErrnoName(errno);
  }
  ASSERT_TRUE(sandbox().Unmount());
  auto records = Records(sandbox());
  EXPECT_NE(Find(records, "create", odd), nullptr)
      << ::testing::PrintToString(Mine(records));
  EXPECT_NE(Find(records, "mkdir", deep), nullptr);
  // `acqfs log` prints each record on one line, whatever its path.
  CommandResult text = Acqfs(sandbox(), {"log", sandbox().name()});
  ASSERT_TRUE(text.ok()) << text.Describe();
  size_t lines = std::count(text.out.begin(), text.out.end(), '\n');
  EXPECT_EQ(lines, records.size()) << text.out;
}

TEST_P(AuditLog, ASymlinkPlantedForTheLogFailsTheMountAndIsNotFollowed) {
  ASSERT_TRUE(sandbox().Unmount());
  const std::string audit = sandbox().layer_dir() + "/audit";
  const std::string elsewhere = tmp().Sub("elsewhere");
  ASSERT_EQ(::mkdir(elsewhere.c_str(), 0700), 0);
  ASSERT_TRUE(WriteFile(elsewhere + "/log", "untouched\n"));
  ASSERT_EQ(::rename(audit.c_str(), (audit + ".old").c_str()), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), audit.c_str()), 0);
  const std::vector<std::string> mount = {
      "mount", lower(), sandbox().mountpoint(), "--name", sandbox().name()};
  CommandResult r = Acqfs(sandbox(), mount);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("audit: Too many levels of symbolic links"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(FindMount(sandbox().mountpoint()).has_value());
  EXPECT_EQ(ReadFile(elsewhere + "/log"), "untouched\n");
  // The file itself a symlink.
  ASSERT_EQ(::unlink(audit.c_str()), 0);
  ASSERT_EQ(::rename((audit + ".old").c_str(), audit.c_str()), 0);
  ASSERT_EQ(::unlink((audit + "/log").c_str()), 0);
  ASSERT_EQ(::symlink((elsewhere + "/log").c_str(), (audit + "/log").c_str()),
            0);
  r = Acqfs(sandbox(), mount);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("audit/log: Too many levels of symbolic links"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(FindMount(sandbox().mountpoint()).has_value());
  EXPECT_EQ(ReadFile(elsewhere + "/log"), "untouched\n");
}

TEST_P(AuditLog, AKilledDaemonLosesNoWrittenRecordAndTheNextGoesOn) {
  ASSERT_TRUE(WriteFile(M("one"), "1"));
  ASSERT_EQ(::mkdir(M("dir1").c_str(), 0755), 0);
  // Written by the writer thread before the kill: wait for the record.
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    seen = Find(Records(sandbox()), "mkdir", "dir1") != nullptr;
    if (!seen) ::usleep(20 * 1000);
  }
  ASSERT_TRUE(seen);
  const pid_t pid = sandbox().daemon_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  for (int i = 0; i < 500 && ::kill(pid, 0) == 0; ++i) ::usleep(10 * 1000);
  (void)sandbox().Unmount();
  // A torn last line, as a kill in the middle of a write leaves.
  {
    ScopedFd fd(::open((sandbox().layer_dir() + "/audit/log").c_str(),
                       O_WRONLY | O_APPEND | O_CLOEXEC));
    ASSERT_TRUE(fd.valid()) << ErrnoName(errno);
    ASSERT_EQ(::write(fd.get(), "{\"seq\":99", 9), 9);
  }
  ASSERT_TRUE(sandbox().Remount());
  ASSERT_EQ(::mkdir(M("dir2").c_str(), 0755), 0);
  ASSERT_TRUE(sandbox().Unmount());
  CommandResult text = Acqfs(sandbox(), {"log", sandbox().name()});
  ASSERT_TRUE(text.ok()) << text.Describe();
  EXPECT_EQ(text.err.find("damaged"), std::string::npos) << text.err;
  auto records = Records(sandbox());
  EXPECT_NE(Find(records, "mkdir", "dir1"), nullptr);
  EXPECT_NE(Find(records, "mkdir", "dir2"), nullptr);
  uint64_t last = 0;
  int mounts = 0;
  for (const auto& r : records) {
    const uint64_t seq = r.value("seq", uint64_t{0});
    EXPECT_GT(seq, last) << r.dump();
    last = seq;
    mounts += r.value("op", "") == "mount";
  }
  EXPECT_EQ(mounts, 2);
}

TEST_P(AuditLog, ALogOfAMountedSandboxShowsTheWritesOfFilesStillOpen) {
  ScopedFd fd(
      ::open(M("open.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid()) << ErrnoName(errno);
  ASSERT_EQ(::write(fd.get(), "line\n", 5), 5);
  auto records = Records(sandbox(), {"--op", "write"});
  EXPECT_NE(Find(records, "write", "open.log"), nullptr)
      << ::testing::PrintToString(Mine(records));
  CommandResult ls = Acqfs(sandbox(), {"ls", "--json"});
  ASSERT_TRUE(ls.ok()) << ls.Describe();
  auto j = nlohmann::json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(j.is_array()) << ls.out;
  ASSERT_EQ(j.size(), 1u);
  ASSERT_TRUE(j[0]["audit"].is_object()) << ls.out;
  EXPECT_GT(j[0]["audit"]["written"].get<uint64_t>(), 0u) << ls.out;
  EXPECT_EQ(j[0]["audit"]["incomplete"], false) << ls.out;
}

class AuditLogOff : public MountTest {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"-o", "noaudit"};
    return o;
  }
};

TEST_F(AuditLogOff, NoAuditWritesNoRecord) {
  ASSERT_TRUE(WriteFile(M("x"), "x"));
  ASSERT_NE(sandbox().DaemonLog().find("audit log: off (-o noaudit)"),
            std::string::npos)
      << sandbox().DaemonLog();
  ASSERT_TRUE(sandbox().Unmount());
  struct stat st;
  EXPECT_NE(::stat((sandbox().layer_dir() + "/audit/log").c_str(), &st), 0);
  EXPECT_TRUE(Records(sandbox()).empty());
}

class AuditQuota : public MountTest {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"--quota", "1M"};
    return o;
  }
};

TEST_F(AuditQuota, AWriteTheQuotaRefusesIsRecorded) {
  const std::string big(2 << 20, 'q');
  EXPECT_FALSE(WriteFile(M("big.bin"), big));
  ASSERT_TRUE(sandbox().Unmount());
  auto records = Records(sandbox(), {"--refused", "--op", "write"});
  const nlohmann::json* w = Find(records, "write", "big.bin");
  ASSERT_NE(w, nullptr) << ::testing::PrintToString(Mine(records));
  EXPECT_EQ(w->value("result", 0), EDQUOT);
  EXPECT_EQ(w->value("boundary", ""), "quota");
  EXPECT_EQ(w->value("pid", 0), ::getpid());
}

class AuditReads : public MountTest {
 protected:
  SandboxOptions Options() const override {
    SandboxOptions o;
    o.extra_mount_args = {"--audit-reads", "*.key"};
    return o;
  }
  void PrepareLower(const std::string& lower) override {
    ASSERT_TRUE(WriteFile(lower + "/id.key", "k"));
    ASSERT_TRUE(WriteFile(lower + "/plain.txt", "p"));
  }
};

TEST_F(AuditReads, OpensForReadingOfMatchingPathsAreRecorded) {
  EXPECT_EQ(ReadFile(M("id.key")), "k");
  EXPECT_EQ(ReadFile(M("plain.txt")), "p");
  ASSERT_TRUE(sandbox().Unmount());
  std::vector<nlohmann::json> records;
  for (const auto& r : Records(sandbox(), {"--op", "open_read"}))
    if (r.value("op", "") != "mount") records.push_back(r);
  ASSERT_EQ(records.size(), 1u) << ::testing::PrintToString(Mine(records));
  EXPECT_EQ(Bytes(records[0], "path"), "id.key");
  EXPECT_EQ(records[0].value("pid", 0), ::getpid());
  // The handle-less mode would see no open: refused, not silently empty.
  CommandResult r =
      Acqfs(sandbox(), {"mount", lower(), sandbox().mountpoint(), "--name",
                        sandbox().name(), "-o", "no_open"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("no_open"), std::string::npos) << r.err;
  EXPECT_FALSE(FindMount(sandbox().mountpoint()).has_value());
}

}  // namespace
}  // namespace acqfs::test
