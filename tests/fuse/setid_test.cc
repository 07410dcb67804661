// The daemon's own set-id rules (fuse/setid.h) against what ext4 does in
// each case (the mounted comparison is SetIdBits in
// tests/integration/mount_posix_test.cc).
#include "fuse/setid.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

namespace acqfs {
namespace {

CallerPrivilege Member(bool fsetid) {
  CallerPrivilege p;
  p.cap_fsetid = fsetid;
  p.fsgid = 100;
  p.groups = {7, 8};
  return p;
}

std::function<Result<CallerPrivilege>()> Is(CallerPrivilege p, int* asked) {
  return [p, asked]() -> Result<CallerPrivilege> {
    ++*asked;
    return p;
  };
}

TEST(SetIdBitsToClear, ChownDropsSuidAndExecutableSgid) {
  int asked = 0;
  auto c = Is(Member(true), &asked);
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 06755, 100, SetIdChange::kChown, c),
            static_cast<mode_t>(S_ISUID | S_ISGID));
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 04711, 100, SetIdChange::kChown, c),
            static_cast<mode_t>(S_ISUID));
  EXPECT_EQ(SetIdBitsToClear(S_IFIFO | 06777, 100, SetIdChange::kChown, c),
            static_cast<mode_t>(S_ISUID | S_ISGID));
  EXPECT_EQ(SetIdBitsToClear(S_IFDIR | 06777, 100, SetIdChange::kChown, c), 0u);
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 0755, 100, SetIdChange::kChown, c), 0u);
  EXPECT_EQ(asked, 0) << "the caller is read only when the answer needs it";
}

TEST(SetIdBitsToClear, ChownOfMandatoryLockingBitAsksTheCaller) {
  int asked = 0;
  // In the group, or holding CAP_FSETID: kept.
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 02745, 100, SetIdChange::kChown,
                             Is(Member(false), &asked)),
            0u);
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 02745, 8, SetIdChange::kChown,
                             Is(Member(false), &asked)),
            0u);
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 02745, 55, SetIdChange::kChown,
                             Is(Member(true), &asked)),
            0u);
  // Neither: dropped; and when the caller cannot be read.
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 02745, 55, SetIdChange::kChown,
                             Is(Member(false), &asked)),
            static_cast<mode_t>(S_ISGID));
  EXPECT_EQ(asked, 4);
  auto gone = []() -> Result<CallerPrivilege> {
    return Error::Of(ESRCH, "read", "");
  };
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 06745, 100, SetIdChange::kChown, gone),
            static_cast<mode_t>(S_ISUID | S_ISGID));
}

TEST(SetIdBitsToClear, UnprivilegedWriteOfMandatoryLockingBitAsksGroups) {
  int asked = 0;
  auto c = Is(Member(false), &asked);
  EXPECT_EQ(
      SetIdBitsToClear(S_IFREG | 06777, 55, SetIdChange::kUnprivilegedWrite, c),
      static_cast<mode_t>(S_ISUID | S_ISGID));
  EXPECT_EQ(
      SetIdBitsToClear(S_IFIFO | 06777, 55, SetIdChange::kUnprivilegedWrite, c),
      0u);
  EXPECT_EQ(asked, 0);
  // Outside the group: dropped; a member keeps it.
  EXPECT_EQ(
      SetIdBitsToClear(S_IFREG | 06745, 55, SetIdChange::kUnprivilegedWrite, c),
      static_cast<mode_t>(S_ISUID | S_ISGID));
  EXPECT_EQ(
      SetIdBitsToClear(S_IFREG | 06745, 7, SetIdChange::kUnprivilegedWrite, c),
      static_cast<mode_t>(S_ISUID));
  EXPECT_EQ(SetIdBitsToClear(S_IFREG | 02745, 100,
                             SetIdChange::kUnprivilegedWrite, c),
            0u);
  EXPECT_EQ(asked, 3);
}

TEST(ParseProcStatus, ReadsGroupsAndCapFsetid) {
  const std::string text =
      "Name:\tpython3\nUid:\t65534\t65534\t65534\t65534\n"
      "Gid:\t65534\t65534\t65534\t1234\nGroups:\t4 27 \n"
      "CapInh:\t0000000000000000\nCapEff:\t0000000000000010\n";
  auto p = ParseProcStatus(text, true);
  ASSERT_TRUE(p) << p.error().Message();
  EXPECT_TRUE(p->cap_fsetid);
  EXPECT_EQ(p->fsgid, 1234u);
  EXPECT_TRUE(p->InGroup(27));
  EXPECT_TRUE(p->InGroup(1234));
  EXPECT_FALSE(p->InGroup(65534));
  // Held in another user namespace: not the kernel's capable().
  auto other_ns = ParseProcStatus(text, false);
  ASSERT_TRUE(other_ns);
  EXPECT_FALSE(other_ns->cap_fsetid);
  auto none =
      ParseProcStatus("Gid:\t1\t1\t1\t1\nCapEff:\t00000000ffffffef\n", true);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->cap_fsetid);
  EXPECT_TRUE(none->groups.empty());
  EXPECT_FALSE(ParseProcStatus("Gid:\t1\t1\t1\t1\n", true));
  EXPECT_FALSE(ParseProcStatus("Gid:\t1\nCapEff:\t0\n", true));
}

TEST(ReadCallerPrivilege, ReadsThisProcess) {
  auto p = ReadCallerPrivilege(::getpid());
  ASSERT_TRUE(p) << p.error().Message();
  EXPECT_EQ(p->fsgid, ::getegid());
  EXPECT_EQ(p->cap_fsetid, ::geteuid() == 0);
  EXPECT_FALSE(ReadCallerPrivilege(0));
}

}  // namespace
}  // namespace acqfs
