// WriteFileAtomically and ReplaceWithTemp (common/atomic_file.h): the
// content and the mode after a write, what a failed write leaves (the old
// file, no temporary file), and errors that name the path.
#include "common/atomic_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/handle.h"
#include "common/sys.h"

namespace acqfs {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/acqfs-atomic-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    ::chmod(dir_.c_str(), 0700);
    Status s = sys::RemoveTree(AT_FDCWD, dir_, dir_);
    EXPECT_TRUE(s.ok()) << s.error().Message();
  }
  std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  mode_t Mode(const std::string& path) {
    struct stat st;
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }
  std::vector<std::string> Entries() {
    std::vector<std::string> names;
    auto fd = sys::OpenDirPath(dir_, O_RDONLY);
    EXPECT_TRUE(fd.ok());
    if (!fd) return names;
    auto entries = sys::ReadDir(fd->get(), dir_);
    EXPECT_TRUE(entries.ok());
    if (!entries) return names;
    for (const auto& e : *entries) names.push_back(e.name);
    return names;
  }

  std::string dir_;
};

TEST_F(AtomicFileTest, CreatesTheFileWithItsContentAndExactMode) {
  const std::string path = dir_ + "/meta.json";
  const mode_t old_umask = ::umask(077);
  Status s = WriteFileAtomically(path, "{\"a\": 1}\n", 0644);
  ::umask(old_umask);
  ASSERT_TRUE(s.ok()) << s.error().Message();
  EXPECT_EQ(Read(path), "{\"a\": 1}\n");
  EXPECT_EQ(Mode(path), 0644u);  // the umask does not narrow it
  EXPECT_EQ(Entries(), std::vector<std::string>{"meta.json"});
}

// kWhileRunning (a daemon's pid record) skips the fsyncs, not the rename:
// a reader still finds one whole version, with its mode, and nothing else
// is left beside it.
TEST_F(AtomicFileTest, AWhileRunningRecordIsStillReplacedWhole) {
  const std::string path = dir_ + "/daemon.pid";
  ASSERT_TRUE(
      WriteFileAtomically(path, "1\n", 0644, Durability::kWhileRunning));
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  Status s = WriteFileAtomically(path, "42\n0:77\n9\n", 0640,
                                 Durability::kWhileRunning);
  ASSERT_TRUE(s.ok()) << s.error().Message();
  EXPECT_EQ(Read(path), "42\n0:77\n9\n");
  EXPECT_EQ(Mode(path), 0640u);
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);  // renamed into place
  EXPECT_EQ(Entries(), std::vector<std::string>{"daemon.pid"});
}

TEST_F(AtomicFileTest, ReplacesTheContentAndModeOfAnExistingFile) {
  const std::string path = dir_ + "/daemon.pid";
  ASSERT_TRUE(WriteFileAtomically(path, "a much longer old content\n", 0644));
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  Status s = WriteFileAtomically(path, "12\n", 0600);
  ASSERT_TRUE(s.ok()) << s.error().Message();
  EXPECT_EQ(Read(path), "12\n");
  EXPECT_EQ(Mode(path), 0600u);
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);  // a new file, renamed into place
  EXPECT_EQ(Entries(), std::vector<std::string>{"daemon.pid"});
  ASSERT_TRUE(WriteFileAtomically(path, "", 0600));
  EXPECT_EQ(Read(path), "");
}

TEST_F(AtomicFileTest, AFailedRenameKeepsTheOldFileAndLeavesNoTemporaryFile) {
  // A directory in the file's place: the rename over it fails (EISDIR).
  const std::string path = dir_ + "/config";
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(path + "/inner", "old\n", 0644));
  Status s = WriteFileAtomically(path, "new\n", 0644);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EISDIR);
  EXPECT_EQ(s.error().op, "rename");
  EXPECT_EQ(s.error().path, path);
  EXPECT_EQ(Read(path + "/inner"), "old\n");
  EXPECT_EQ(Entries(), std::vector<std::string>{"config"});
}

TEST_F(AtomicFileTest, AnUnwritableDirectoryIsNamedAndTheOldFileStays) {
  if (::geteuid() == 0) {
    // Root writes anywhere; a missing directory fails the same step.
    const std::string path = dir_ + "/missing/file";
    Status s = WriteFileAtomically(path, "x", 0644);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.err(), ENOENT);
    EXPECT_EQ(s.error().op, "create");
    EXPECT_EQ(s.error().path.rfind(dir_ + "/missing/.file.", 0), 0u)
        << s.error().path;
    EXPECT_EQ(Entries(), std::vector<std::string>{});
    return;
  }
  const std::string path = dir_ + "/file";
  ASSERT_TRUE(WriteFileAtomically(path, "old\n", 0644));
  ASSERT_EQ(::chmod(dir_.c_str(), 0500), 0);
  Status s = WriteFileAtomically(path, "new\n", 0644);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EACCES);
  EXPECT_NE(s.error().Message().find(dir_), std::string::npos);
  EXPECT_EQ(Read(path), "old\n");
  EXPECT_EQ(Entries(), std::vector<std::string>{"file"});
}

TEST_F(AtomicFileTest, ReplaceWithTempCommitsACallersLockFile) {
  const std::string path = dir_ + "/config";
  const std::string lock = path + ".lock";
  ASSERT_TRUE(WriteFileAtomically(path, "[core]\n\tbare = false\n", 0640));
  UniqueFd fd(
      ::open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
  ASSERT_TRUE(fd);
  Status s = ReplaceWithTemp(fd.get(), lock, path, "[core]\n");
  ASSERT_TRUE(s.ok()) << s.error().Message();
  EXPECT_EQ(Read(path), "[core]\n");
  EXPECT_EQ(Entries(), std::vector<std::string>{"config"});
  // A failed rename leaves the lock file to the caller and the file as it
  // was.
  const std::string sub = dir_ + "/sub";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(sub + "/keep", "k", 0644));
  UniqueFd fd2(
      ::open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
  ASSERT_TRUE(fd2);
  s = ReplaceWithTemp(fd2.get(), lock, sub, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().path, sub);
  EXPECT_EQ(Read(lock), "x");
  EXPECT_EQ(Read(sub + "/keep"), "k");
}

}  // namespace
}  // namespace acqfs
