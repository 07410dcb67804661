// The mount(8) options acqfs applies or refuses (fuse/vfs_options.h) and
// ApplyMountOption's handling of them: each refusal names its option and
// says why; nothing is taken and ignored.
#include "fuse/vfs_options.h"

#include <gtest/gtest.h>
#include <sys/mount.h>

#include <string>

#include "fuse/mount.h"

namespace acqfs {
namespace {

Status Take(const std::string& o, bool privileged, VfsFlags* f,
            bool* taken = nullptr) {
  bool t = false;
  Status s = TakeVfsOption(o, privileged, f, &t);
  if (taken) *taken = t;
  return s;
}

TEST(VfsOptions, DefaultsAreNoatimeNosuidNodevRw) {
  VfsFlags f;
  EXPECT_EQ(f.MsFlags(),
            static_cast<unsigned long>(MS_NOATIME | MS_NOSUID | MS_NODEV));
  EXPECT_EQ(f.LibfuseOptions(), "noatime,rw,nodev,nosuid,exec");
}

TEST(VfsOptions, AppliedOnesSetTheirFlags) {
  VfsFlags f;
  ASSERT_TRUE(Take("ro", false, &f));
  ASSERT_TRUE(Take("noexec", false, &f));
  ASSERT_TRUE(Take("noatime", false, &f));
  ASSERT_TRUE(Take("async", false, &f));
  ASSERT_TRUE(Take("dev", true, &f));
  ASSERT_TRUE(Take("suid", true, &f));
  ASSERT_TRUE(Take("nodiratime", true, &f));
  EXPECT_EQ(f.MsFlags(), static_cast<unsigned long>(MS_NOATIME | MS_RDONLY |
                                                    MS_NOEXEC | MS_NODIRATIME));
  EXPECT_EQ(f.LibfuseOptions(), "noatime,ro,dev,suid,noexec");
  ASSERT_TRUE(Take("rw", false, &f));
  ASSERT_TRUE(Take("nodev", false, &f));
  ASSERT_TRUE(Take("nosuid", false, &f));
  ASSERT_TRUE(Take("exec", false, &f));
  EXPECT_EQ(f.MsFlags(), static_cast<unsigned long>(MS_NOATIME | MS_NOSUID |
                                                    MS_NODEV | MS_NODIRATIME));
}

TEST(VfsOptions, RootOnlyOnesAreRefusedForAnOrdinaryUser) {
  for (const char* o : {"dev", "suid", "nodiratime"}) {
    VfsFlags f;
    Status s = Take(o, false, &f);
    ASSERT_FALSE(s) << o;
    EXPECT_EQ(s.err(), EPERM) << o;
    EXPECT_EQ(s.error().path, o);
    EXPECT_NE(s.error().op.find("only root"), std::string::npos)
        << s.error().op;
    EXPECT_EQ(f.MsFlags(), VfsFlags{}.MsFlags()) << o;
  }
}

TEST(VfsOptions, ThoseAcqfsCannotHonourAreRefusedWithTheReason) {
  for (const char* o :
       {"atime", "relatime", "strictatime", "norelatime", "nostrictatime",
        "diratime", "lazytime", "sync", "dirsync"}) {
    VfsFlags f;
    Status s = Take(o, true, &f);
    ASSERT_FALSE(s) << o;
    EXPECT_EQ(s.err(), EINVAL) << o;
    EXPECT_EQ(s.error().path, o);
    EXPECT_NE(s.error().op.find("acqfs"), std::string::npos) << s.error().op;
  }
}

TEST(VfsOptions, OthersAreNotTaken) {
  VfsFlags f;
  bool taken = true;
  ASSERT_TRUE(Take("threads=4", true, &f, &taken));
  EXPECT_FALSE(taken);
  ASSERT_TRUE(Take("remount", true, &f, &taken));
  EXPECT_FALSE(taken);
}

TEST(VfsOptions, FsnameIsCheckedByteForByte) {
  EXPECT_TRUE(CheckFsname("acqfs:sbx-1", "x"));
  EXPECT_TRUE(CheckFsname("/srv/layers/one", "x"));
  EXPECT_TRUE(CheckFsname(std::string(255, 'a'), "x"));
  for (const std::string& bad :
       {std::string(), std::string(256, 'a'), std::string("a b"),
        std::string("a,b"), std::string("a\\b"), std::string("a\tb"),
        std::string("a\nb"), std::string("a\x7f")}) {
    Status s = CheckFsname(bad, "what");
    ASSERT_FALSE(s) << bad;
    EXPECT_EQ(s.err(), EINVAL);
    EXPECT_EQ(s.error().path, "what");
  }
}

TEST(VfsOptions, ApplyMountOptionTakesThemAndFsname) {
  MountConfig c;
  EXPECT_EQ(c.fsname, "acqfs");
  ASSERT_TRUE(ApplyMountOption("ro", &c));
  EXPECT_TRUE(c.vfs.read_only);
  ASSERT_TRUE(ApplyMountOption("fsname=sandbox-one", &c));
  EXPECT_EQ(c.fsname, "sandbox-one");
  Status bad = ApplyMountOption("fsname=", &c);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().path, "fsname=");
  EXPECT_EQ(c.fsname, "sandbox-one");
  Status sync = ApplyMountOption("sync", &c);
  ASSERT_FALSE(sync);
  EXPECT_EQ(sync.error().path, "sync");
}

// Each option `acqfs mount --help` names is taken, and nothing else: the
// help and the parser share DaemonOptionNames, which gates the parser.
TEST(MountOptions, EveryNameInTheHelpIsTaken) {
  const std::string help = MountOptionsHelp();
  for (const auto& name : DaemonOptionNames()) {
    EXPECT_NE(help.find(name), std::string::npos) << name;
    const size_t eq = name.find('=');
    const std::string word =
        eq == std::string::npos ? name : name.substr(0, eq + 1) + "2";
    MountConfig c;
    Status s = ApplyMountOption(word, &c);
    if (word == "uring" && !s) {
      // Refused only for what the kernel offers, never as unknown.
      EXPECT_NE(s.error().op.find("io_uring"), std::string::npos)
          << s.error().Message();
      continue;
    }
    EXPECT_TRUE(s) << word << ": " << s.error().Message();
  }
  const std::string flags = help.substr(help.find("mount flags: ") + 13);
  size_t at = 0;
  while (at < flags.size()) {
    size_t end = flags.find(", ", at);
    if (end == std::string::npos) end = flags.size();
    std::string word = flags.substr(at, end - at);
    at = end + 2;
    MountConfig c;
    if (word == "fsname=NAME") {
      EXPECT_TRUE(ApplyMountOption("fsname=x", &c));
      continue;
    }
    bool taken = false;
    EXPECT_TRUE(TakeVfsOption(word, true, &c.vfs, &taken)) << word;
    EXPECT_TRUE(taken) << word;
  }
  for (const char* unknown : {"frobnicate", "timeouts=1", "warm_limit",
                              "uring=1", "handles=1", "Debug", ""}) {
    MountConfig c;
    Status s = ApplyMountOption(unknown, &c);
    ASSERT_FALSE(s) << unknown;
    EXPECT_EQ(s.err(), EINVAL) << unknown;
    EXPECT_EQ(s.error().path, unknown);
  }
}

}  // namespace
}  // namespace acqfs
