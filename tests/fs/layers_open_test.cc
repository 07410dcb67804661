// Tests of Layers::Open: the directories it opens and the work area it
// prepares.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/owner_access.h"
#include "fs/layer.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

using acqfs::test::Exists;
using acqfs::test::ListDir;
using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::ReadFile;
using acqfs::test::TempTree;
using Strings = std::vector<std::string>;

TEST(LayersOpen, CreatesEmptyAcqfsTmpInWorkdir) {
  TempTree t;
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  struct stat st = Lstat(t.tmp());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(ListDir(t.tmp()).empty());
  EXPECT_EQ(l.tmp_path, t.tmp());
  EXPECT_TRUE(l.tmp.is_valid());
  EXPECT_EQ(l.format.ns(), XattrNamespace::kUser);
  EXPECT_EQ(l.lower.root_path(), t.lower());
  EXPECT_EQ(l.upper.root_path(), t.upper());
  // Nothing is created in the layers themselves.
  EXPECT_TRUE(ListDir(t.lower()).empty());
  EXPECT_TRUE(ListDir(t.upper()).empty());
  EXPECT_EQ(ListDir(t.work()), (Strings{"acqfs-tmp"}));
}

TEST(LayersOpen, RemovesLeftoversFromAcqfsTmp) {
  TempTree t;
  // A crashed daemon left a half-written copy and a half-built directory.
  MakeDir(t.tmp(), 0700);
  MakeFile(t.tmp() + "/#acqfs.0123456789abcdef", "half");
  const std::string half_dir = t.tmp() + "/#acqfs.fedcba9876543210";
  MakeDir(half_dir, 0700);
  MakeFile(half_dir + "/f", "x");
  MakeDir(half_dir + "/sub", 0700);
  MakeFile(half_dir + "/sub/g", "y");
  ASSERT_EQ(::chmod((half_dir + "/sub").c_str(), 0), 0);
  ASSERT_EQ(::chmod(half_dir.c_str(), 0500), 0);
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(ListDir(t.tmp()).empty());
  EXPECT_TRUE(l.tmp.is_valid());
}

TEST(LayersOpen, LeavesTheKernelWorkDirAndUpperAlone) {
  TempTree t;
  MakeDir(t.work() + "/work");
  MakeFile(t.work() + "/work/kernel-junk", "k");
  MakeFile(t.U("keep"), "u");
  MakeDir(t.tmp(), 0700);
  MakeFile(t.tmp() + "/#acqfs.1", "junk");
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_EQ(ReadFile(t.work() + "/work/kernel-junk"), "k");
  EXPECT_EQ(ReadFile(t.U("keep")), "u");
  EXPECT_EQ(ListDir(t.work()), (Strings{"acqfs-tmp", "work"}));
}

TEST(LayersOpen, AcqfsTmpSymlinkIsReplacedWithoutFollowingIt) {
  TempTree t;
  MakeDir(t.root() + "/victim");
  MakeFile(t.root() + "/victim/precious", "keep me");
  ASSERT_EQ(::symlink((t.root() + "/victim").c_str(), t.tmp().c_str()), 0);
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(S_ISDIR(Lstat(t.tmp()).st_mode));
  EXPECT_EQ(ReadFile(t.root() + "/victim/precious"), "keep me");
}

TEST(LayersOpen, AcqfsTmpThatIsAFileIsReplaced) {
  TempTree t;
  MakeFile(t.tmp(), "junk");
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(S_ISDIR(Lstat(t.tmp()).st_mode));
  EXPECT_TRUE(ListDir(t.tmp()).empty());
}

TEST(LayersOpen, ReopeningEmptiesAcqfsTmpAgain) {
  TempTree t;
  { ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t)); }
  MakeFile(t.tmp() + "/#acqfs.leftover", "x");
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(ListDir(t.tmp()).empty());
}

// One daemon per upper layer and work area: a second Layers::Open of the
// same directories (a second daemon) is refused, names the pid holding
// them, and touches nothing in the work area, where the first keeps the
// data of files held open after their last name.
TEST(LayersOpen, ASecondOpenOfTheSameLayersIsRefusedAndTouchesNothing) {
  TempTree t;
  ASSERT_OK_AND_ASSIGN(Layers first, acqfs::test::OpenLayers(t));
  MakeFile(t.tmp() + "/#acqfs.kept", "data of a file held open");
  auto second = acqfs::test::OpenLayers(t);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.err(), EBUSY);
  const std::string msg = second.error().Message();
  EXPECT_NE(msg.find(t.upper()), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(::getpid())), std::string::npos)
      << msg;
  EXPECT_EQ(ReadFile(t.tmp() + "/#acqfs.kept"), "data of a file held open");
  auto holder = LayersHolder(t.upper());
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(*holder, ::getpid());
  // Another upper layer with the same work area: refused too.
  MakeDir(t.root() + "/upper2");
  auto shared_work = Layers::Open(t.lower(), t.root() + "/upper2", t.work(),
                                  XattrNamespace::kUser);
  ASSERT_FALSE(shared_work.ok());
  EXPECT_EQ(shared_work.err(), EBUSY);
  EXPECT_NE(shared_work.error().Message().find(t.work()), std::string::npos)
      << shared_work.error().Message();
  EXPECT_EQ(ReadFile(t.tmp() + "/#acqfs.kept"), "data of a file held open");
  // Once the first is gone, the layers open again (and are emptied).
  { Layers gone = std::move(first); }
  EXPECT_FALSE(LayersHolder(t.upper()).has_value());
  ASSERT_OK_AND_ASSIGN(Layers again, acqfs::test::OpenLayers(t));
  EXPECT_TRUE(ListDir(t.tmp()).empty());
}

TEST(LayersOpen, MissingLowerFails) {
  TempTree t;
  auto r = Layers::Open(t.root() + "/nope", t.upper(), t.work(),
                        XattrNamespace::kUser);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.err(), ENOENT);
  EXPECT_FALSE(Exists(t.tmp()));
}

TEST(LayersOpen, LowerThatIsAFileFails) {
  TempTree t;
  MakeFile(t.root() + "/file", "");
  auto r = Layers::Open(t.root() + "/file", t.upper(), t.work(),
                        XattrNamespace::kUser);
  EXPECT_EQ(r.err(), ENOTDIR);
}

TEST(LayersOpen, RecordsTheNamespace) {
  TempTree t;
  ASSERT_OK_AND_ASSIGN(Layers l,
                       acqfs::test::OpenLayers(t, XattrNamespace::kTrusted));
  EXPECT_EQ(l.format.ns(), XattrNamespace::kTrusted);
  EXPECT_EQ(l.format.OpaqueKey(), "trusted.overlay.opaque");
}

// ---------------------------------------------------------------- owner_access

mode_t ModeOf(const std::string& path) { return Lstat(path).st_mode & 07777; }

std::string JournalOf(const TempTree& t) {
  return t.work() + "/" + owner_access::kJournalName;
}

// The record a widening of `path` (`rel` in the upper) from `mode` writes.
std::string RecordFor(const std::string& path, mode_t mode,
                      const std::string& rel) {
  struct stat st = Lstat(path);
  char head[96];
  std::snprintf(head, sizeof head, "%o %llu %llu ", mode,
                static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  return head + rel + std::string(1, '\0');
}

// A daemon killed while a file's mode was widened left the journal: the
// next claim of the layers puts the mode back and removes the journal.
TEST(LayersOpen, RestoresAModeAKilledDaemonLeftWidened) {
  TempTree t;
  MakeDir(t.upper() + "/dir with space");
  const std::string f = t.upper() + "/dir with space/obj\nname";
  MakeFile(f, "blob");
  ASSERT_EQ(::chmod(f.c_str(), 0644), 0);
  MakeDir(t.upper() + "/d");
  ASSERT_EQ(::chmod((t.upper() + "/d").c_str(), 0700), 0);
  MakeFile(JournalOf(t), RecordFor(f, 0444, "dir with space/obj\nname"));
  { ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t)); }
  EXPECT_EQ(ModeOf(f), 0444u);
  EXPECT_FALSE(Exists(JournalOf(t)));
  // A directory widened from 0 (its xattrs were read).
  MakeFile(JournalOf(t), RecordFor(t.upper() + "/d", 0, "d"));
  { ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t)); }
  EXPECT_EQ(ModeOf(t.upper() + "/d"), 0u);
  ASSERT_EQ(::chmod((t.upper() + "/d").c_str(), 0700), 0);
}

// What the journal names is left alone unless it is the same object with
// exactly the widened mode; a record cut short or malformed, a path out of
// the upper or through a symlink restores nothing; the journal goes
// either way.
TEST(LayersOpen, ARepairChangesNothingElse) {
  const std::string nul(1, '\0');
  struct Case {
    std::string label;
    mode_t before;  // of upper/f
    std::function<std::string(const TempTree&)> journal;
  };
  auto rec = [](mode_t mode, const std::string& rel) {
    return [=](const TempTree& t) {
      return RecordFor(t.upper() + "/f", mode, rel);
    };
  };
  const std::vector<Case> cases = {
      {"restored already", 0444, rec(0444, "f")},
      {"changed since", 0755, rec(0444, "f")},
      {"a group bit too", 0640, rec(0400, "f")},
      {"another inode at the name", 0644,
       [&](const TempTree&) { return "444 1 1 f" + nul; }},
      {"cut short", 0644,
       [&](const TempTree& t) {
         std::string r = RecordFor(t.upper() + "/f", 0444, "f");
         return r.substr(0, r.size() - 1);
       }},
      {"not octal", 0644,
       [&](const TempTree& t) {
         std::string r = RecordFor(t.upper() + "/f", 0444, "f");
         return "4x4" + r.substr(3);
       }},
      {"no path", 0644,
       [&](const TempTree& t) {
         std::string r = RecordFor(t.upper() + "/f", 0444, "f");
         return r.substr(0, r.size() - 2) + nul;
       }},
      {"leaves the upper", 0644, rec(0444, "../outside")},
      {"a symlink to f", 0644, rec(0444, "link")},
      {"empty", 0644, [](const TempTree&) { return std::string(); }},
      {"two NULs", 0644,
       [&](const TempTree& t) {
         return RecordFor(t.upper() + "/f", 0444, "f") + nul;
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    TempTree t;
    MakeFile(t.upper() + "/f", "data");
    ASSERT_EQ(::chmod((t.upper() + "/f").c_str(), c.before), 0);
    ASSERT_EQ(::symlink("f", (t.upper() + "/link").c_str()), 0);
    MakeFile(t.root() + "/outside", "host");
    ASSERT_EQ(::chmod((t.root() + "/outside").c_str(), 0644), 0);
    MakeFile(JournalOf(t), c.journal(t));
    ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
    EXPECT_EQ(ModeOf(t.upper() + "/f"), c.before);
    EXPECT_EQ(ModeOf(t.root() + "/outside"), 0644u);
    EXPECT_FALSE(Exists(JournalOf(t)));
  }
}

// The widening itself (as the test's own user, who owns the files): while
// the retry runs the mode has the owner bit and the journal names the
// file; afterwards the mode is back, the journal empty and the stat
// sequence two on. Nothing is widened when it is off, for a bit the mode
// has, for the host, a symlink, or a file of another user.
TEST(OwnerAccess, WidensForOneRetryAndPutsTheModeBack) {
  TempTree t;
  MakeFile(t.upper() + "/obj", "");
  ASSERT_EQ(::chmod((t.upper() + "/obj").c_str(), 0444), 0);
  MakeFile(t.lower() + "/host", "");
  ASSERT_EQ(::chmod((t.lower() + "/host").c_str(), 0444), 0);
  ASSERT_EQ(::symlink("obj", (t.upper() + "/link").c_str()), 0);
  ASSERT_OK_AND_ASSIGN(Layers l, acqfs::test::OpenLayers(t));
  auto open_path = [](const std::string& p) {
    return acqfs::UniqueFd(::open(p.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  };
  acqfs::UniqueFd obj = open_path(t.upper() + "/obj");
  bool ran = false;
  EXPECT_FALSE(owner_access::Retry(obj.get(), S_IWUSR, [&] { ran = true; }));
  EXPECT_FALSE(ran) << "widened while off";

  ASSERT_TRUE(owner_access::Enable(l.upper.root(), l.work.root()).ok());
  const uint64_t seq = owner_access::Seq();
  mode_t during = 0;
  std::string journal_during;
  EXPECT_TRUE(owner_access::Retry(obj.get(), S_IWUSR, [&] {
    during = ModeOf(t.upper() + "/obj");
    journal_during = ReadFile(JournalOf(t));
    EXPECT_TRUE(owner_access::Raced(seq));
  }));
  EXPECT_EQ(during, 0644u);
  EXPECT_EQ(journal_during, RecordFor(t.upper() + "/obj", 0444, "obj"));
  EXPECT_EQ(ModeOf(t.upper() + "/obj"), 0444u);
  EXPECT_EQ(ReadFile(JournalOf(t)), "");
  EXPECT_EQ(owner_access::Seq(), seq + 2);
  EXPECT_FALSE(owner_access::Raced(owner_access::Seq()));

  ran = false;
  auto mark = [&] { ran = true; };
  EXPECT_FALSE(owner_access::Retry(obj.get(), S_IRUSR, mark)) << "has it";
  acqfs::UniqueFd host = open_path(t.lower() + "/host");
  EXPECT_FALSE(owner_access::Retry(host.get(), S_IWUSR, mark)) << "the host";
  EXPECT_EQ(ModeOf(t.lower() + "/host"), 0444u);
  acqfs::UniqueFd link = open_path(t.upper() + "/link");
  EXPECT_FALSE(owner_access::Retry(link.get(), S_IWUSR, mark)) << "symlink";
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown((t.upper() + "/obj").c_str(), 65534, 65534), 0);
    EXPECT_FALSE(owner_access::Retry(obj.get(), S_IWUSR, mark)) << "not ours";
    EXPECT_EQ(ModeOf(t.upper() + "/obj"), 0444u);
  }
  EXPECT_FALSE(ran);
  owner_access::Disable();
}

}  // namespace
}  // namespace acqfs
