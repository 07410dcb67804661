// The record of upper files the kernel may write without the daemon, and
// the fence that replaces them by copies (fs/live_files.h), on a private
// directory and without FUSE: a descriptor the test holds stands for the
// kernel's backing file.
#include "fs/live_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <string>

#include "harness/command.h"
#include "harness/fs_util.h"
#include "harness/temp_dir.h"

namespace acqfs {
namespace {

using test::ReadFile;
using test::ScopedFd;
using test::TempDir;
using test::WriteFile;

TEST(LiveFiles, AFencedFileIsACopyAndItsWriterWritesNoName) {
  TempDir tmp;
  const std::string upper = tmp.MakeDir("upper"), work = tmp.MakeDir("work");
  ASSERT_TRUE(WriteFile(upper + "/a", "a1\n"));
  ::mkdir((upper + "/d").c_str(), 0755);
  ASSERT_TRUE(WriteFile(upper + "/d/b", "b1\n"));
  ASSERT_EQ(::link((upper + "/d/b").c_str(), (upper + "/b2").c_str()), 0);
  ASSERT_TRUE(WriteFile(upper + "/quiet", "q\n"));
  ASSERT_EQ(::chmod((upper + "/d/b").c_str(), 04751), 0);
  ASSERT_EQ(::setxattr((upper + "/d/b").c_str(), "user.k", "v", 1, 0), 0);
  ScopedFd up(::open(upper.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ScopedFd wk(::open(work.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ScopedFd a(::open((upper + "/a").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  ScopedFd b(::open((upper + "/d/b").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  struct stat sa, sb, sq;
  ASSERT_EQ(::fstat(a.get(), &sa), 0);
  ASSERT_EQ(::fstat(b.get(), &sb), 0);
  ASSERT_EQ(::stat((upper + "/quiet").c_str(), &sq), 0);
  {
    auto rec = LiveFileRecord::Open(wk.get(), work);
    ASSERT_TRUE(rec) << rec.error().Message();
    auto s1 = rec->Add(sa.st_ino);
    auto s2 = rec->Add(sq.st_ino);
    auto s3 = rec->Add(sb.st_ino);
    ASSERT_TRUE(s1 && s2 && s3);
    EXPECT_NE(*s1, *s3);
    rec->Remove(*s2);  // closed: no longer listed
    // The daemon dies here, with `a` and `b` still written by the kernel.
  }
  size_t fenced = 0;
  Status s = FenceLiveFiles(up.get(), upper, wk.get(), work, &fenced);
  ASSERT_TRUE(s) << s.error().Message();
  EXPECT_EQ(fenced, 3u);  // a, and b under both its names
  ASSERT_EQ(::write(a.get(), "a2\n", 3), 3);
  ASSERT_EQ(::write(b.get(), "b2\n", 3), 3);
  EXPECT_EQ(ReadFile(upper + "/a"), "a1\n");
  EXPECT_EQ(ReadFile(upper + "/d/b"), "b1\n");
  EXPECT_EQ(ReadFile(upper + "/b2"), "b1\n");
  struct stat nb, nb2, nq;
  ASSERT_EQ(::stat((upper + "/d/b").c_str(), &nb), 0);
  ASSERT_EQ(::stat((upper + "/b2").c_str(), &nb2), 0);
  ASSERT_EQ(::stat((upper + "/quiet").c_str(), &nq), 0);
  EXPECT_NE(nb.st_ino, sb.st_ino);
  EXPECT_EQ(nb.st_ino, nb2.st_ino);  // still one file under two names
  EXPECT_EQ(nb.st_nlink, 2u);
  EXPECT_EQ(nb.st_mode & 07777, 04751u);
  EXPECT_EQ(nb.st_mtim.tv_sec, sb.st_mtim.tv_sec);
  EXPECT_EQ(nb.st_mtim.tv_nsec, sb.st_mtim.tv_nsec);
  char v[4] = {};
  EXPECT_EQ(::getxattr((upper + "/d/b").c_str(), "user.k", v, sizeof v), 1);
  EXPECT_EQ(v[0], 'v');
  EXPECT_EQ(nq.st_ino, sq.st_ino);  // not listed: left alone
  // The record is empty now: a second claim fences nothing.
  ASSERT_TRUE(FenceLiveFiles(up.get(), upper, wk.get(), work, &fenced));
  EXPECT_EQ(fenced, 0u);
  // Nothing left behind in the upper but the files.
  EXPECT_EQ(test::Sh("ls -A " + upper + " | tr '\\n' ' '"), "a b2 d quiet ");
  EXPECT_EQ(test::Sh("ls -A " + upper + "/d | tr '\\n' ' '"), "b ");
}

}  // namespace
}  // namespace acqfs
