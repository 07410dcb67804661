// Who may use a mount (daemon/allow_other.h): /etc/fuse.conf read as
// fusermount3 reads it, the default by who mounts, and the options that ask.
#include "daemon/allow_other.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "harness/layer_tree.h"

namespace acqfs::cli {
namespace {

TEST(FuseConf, UserAllowOtherOnALineOfItsOwn) {
  EXPECT_TRUE(FuseConfAllowsOther("user_allow_other\n"));
  EXPECT_TRUE(
      FuseConfAllowsOther("# comment\nmount_max = 5\nuser_allow_other\n"
                          "\n"));
  EXPECT_TRUE(FuseConfAllowsOther("  \tuser_allow_other \r\n"));
  EXPECT_TRUE(FuseConfAllowsOther("user_allow_other # as a comment says\n"));
}

TEST(FuseConf, CommentsAndOtherSpellingsDoNotCount) {
  EXPECT_FALSE(FuseConfAllowsOther(""));
  EXPECT_FALSE(FuseConfAllowsOther("#user_allow_other\n"));
  EXPECT_FALSE(FuseConfAllowsOther("# user_allow_other\n"));
  EXPECT_FALSE(FuseConfAllowsOther("user_allow_other=1\n"));
  EXPECT_FALSE(FuseConfAllowsOther("user_allow_other yes\n"));
  EXPECT_FALSE(FuseConfAllowsOther("User_Allow_Other\n"));
  EXPECT_FALSE(FuseConfAllowsOther("allow_other\n"));
  EXPECT_FALSE(FuseConfAllowsOther("xuser_allow_other\n"));
}

// Debian 12's /etc/fuse.conf, as the fuse3 package installs it.
TEST(FuseConf, DebianDefaultSaysNo) {
  const std::string debian =
      "# The file /etc/fuse.conf allows for the following parameters:\n"
      "#\n"
      "# user_allow_other - Using the allow_other mount option works fine as "
      "root, in\n"
      "# This option must appear on a line by itself. There is no value, "
      "just the\n"
      "# presence of the option.\n"
      "\n"
      "#user_allow_other\n"
      "\n"
      "\n"
      "# mount_max = n - this option sets the maximum number of mounts.\n"
      "#mount_max = 1000\n";
  EXPECT_FALSE(FuseConfAllowsOther(debian));
}

// fusermount3 reads lines with fgets into 256 bytes: the last line without
// a newline, and a line too long for the buffer, are never parsed.
TEST(FuseConf, LinesFusermountIgnores) {
  EXPECT_FALSE(FuseConfAllowsOther("user_allow_other"));
  EXPECT_FALSE(FuseConfAllowsOther("# x\nuser_allow_other"));
  const std::string blanks254(254 - 16, ' ');  // 254 bytes before '\n'
  EXPECT_TRUE(FuseConfAllowsOther(blanks254 + "user_allow_other\n"));
  const std::string blanks255(255 - 16, ' ');  // one byte too many
  EXPECT_FALSE(FuseConfAllowsOther(blanks255 + "user_allow_other\n"));
  // The rest of a long line is skipped, the next line is read again.
  EXPECT_TRUE(
      FuseConfAllowsOther(std::string(600, '#') + "\nuser_allow_other\n"));
  // A NUL byte ends the line for C: the newline after it is not seen.
  EXPECT_FALSE(FuseConfAllowsOther(std::string("user_allow_other\0\n", 18)));
}

TEST(FuseConf, ReadsTheFileAMissingOneSaysNo) {
  acqfs::test::TempTree t;
  const std::string conf = t.root() + "/fuse.conf";
  auto missing = UserAllowOther(conf);
  ASSERT_TRUE(missing.ok()) << missing.error().Message();
  EXPECT_FALSE(*missing);
  acqfs::test::MakeFile(conf, "user_allow_other\n");
  auto yes = UserAllowOther(conf);
  ASSERT_TRUE(yes.ok()) << yes.error().Message();
  EXPECT_TRUE(*yes);
  auto dir = UserAllowOther(t.root());
  EXPECT_FALSE(dir.ok());
}

TEST(AllowOtherRequest, DefaultFollowsWhoMounts) {
  acqfs::test::TempTree t;
  const std::string conf = t.root() + "/fuse.conf";
  acqfs::test::MakeFile(conf, "user_allow_other\n");
  AllowOtherRequest none;
  EXPECT_TRUE(none.is_default());
  ASSERT_TRUE(none.Decide(0, conf).ok());
  EXPECT_TRUE(*none.Decide(0, conf));
  // An ordinary user: off, whatever fuse.conf says.
  EXPECT_FALSE(*none.Decide(1000, conf));
}

TEST(AllowOtherRequest, AskedForOrAgainst) {
  acqfs::test::TempTree t;
  const std::string yes_conf = t.root() + "/yes.conf";
  const std::string no_conf = t.root() + "/no.conf";
  acqfs::test::MakeFile(yes_conf, "user_allow_other\n");
  acqfs::test::MakeFile(no_conf, "#user_allow_other\n");
  auto off = AllowOtherRequest::FromFlags(false, true);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(*off->Decide(0, no_conf));
  EXPECT_FALSE(*off->Decide(1000, yes_conf));
  auto on = AllowOtherRequest::FromFlags(true, false);
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(*on->Decide(0, no_conf));  // root needs no fuse.conf
  EXPECT_TRUE(*on->Decide(1000, yes_conf));
  auto refused = on->Decide(1000, no_conf);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.err(), EPERM);
  EXPECT_EQ(refused.error().path, no_conf);
  EXPECT_NE(refused.error().op.find("user_allow_other"), std::string::npos)
      << refused.error().op;
  EXPECT_NE(refused.error().op.find("--allow-other"), std::string::npos)
      << refused.error().op;
  auto missing = on->Decide(1000, t.root() + "/none.conf");
  EXPECT_EQ(missing.err(), EPERM);
}

TEST(AllowOtherRequest, OptionsAskTooAndContradictionsAreRefused) {
  AllowOtherRequest r;
  bool taken = true;
  EXPECT_TRUE(r.TakeOption("userxattr", &taken).ok());
  EXPECT_FALSE(taken);
  EXPECT_TRUE(r.is_default());
  EXPECT_TRUE(r.TakeOption("noallow_other", &taken).ok());
  EXPECT_TRUE(taken);
  EXPECT_FALSE(r.is_default());
  EXPECT_FALSE(*r.Decide(0));
  EXPECT_TRUE(r.TakeOption("noallow_other", &taken).ok());  // again: fine
  Status s = r.TakeOption("allow_other", &taken);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EINVAL);
  EXPECT_EQ(s.error().path, "-o allow_other");
  EXPECT_NE(s.error().op.find("-o noallow_other"), std::string::npos)
      << s.error().op;
  auto both = AllowOtherRequest::FromFlags(true, true);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.error().path, "--no-allow-other");
  EXPECT_NE(both.error().op.find("--allow-other"), std::string::npos);
}

}  // namespace
}  // namespace acqfs::cli
