// PosixOracle: the kernel as the oracle for the mounted tests (issue 13,
// issue 34). The same operations, run by the same users in a plain
// directory of the same file system and in the mount, in both file modes,
// must print the same. The operations are Python scripts run as the user
// under test (setpriv), below kPrelude; each prints one line per step,
// "label: ok [value]" or "label: ERRNO" (the helper t()), so a difference
// names the step. kListing lists the tree "t/" with every entry's type,
// mode, owner, size, links, content, user xattrs and symlink target.
// Thread-safety: one fixture per test, on the test's thread.
#ifndef ACQFS_TESTS_INTEGRATION_POSIX_ORACLE_H_
#define ACQFS_TESTS_INTEGRATION_POSIX_ORACLE_H_

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "harness/command.h"
#include "integration/mount_fixture.h"

namespace acqfs::test {

inline constexpr char kPython[] = "/usr/bin/python3";

// Every script starts with this: it works in the tree argv[1] and defines
// t(label, f), m(path), touch, append, r(a, b) and deep(top, names).
extern const char kPrelude[];
// Lists "t" through directory descriptors (so no path length limit); a
// name longer than 16 bytes shows as its first three and its length.
extern const char kListing[];

// The lines in which `mnt` and `disk` differ (at most 40), or "".
std::string Differences(const std::string& mnt, const std::string& disk);

struct User {
  uid_t uid;
  gid_t gid;
  std::string groups;  // supplementary groups for setpriv, "" for none
};
inline const User kRoot{0, 0, ""};
inline const User kNobody{65534, 65534, ""};
inline const User kOther{1000, 1000, ""};

// The oracle fixture: a plain directory `native()` next to the mount, both
// prepared by the same LowerSetup script (in the lower before mounting), in
// both file modes. The mount serves other users as a root-mounted sandbox
// does by default (allow_other, the kernel checking permissions).
class PosixOracle : public BothFileModes {
 protected:
  // Python run as root in the tree (below the prelude) before the mount.
  virtual std::string LowerSetup() const {
    return "os.mkdir('t', 0o777); os.chmod('t', 0o777)\n";
  }
  void PrepareLower(const std::string& lower) override {
    // Other users must reach both trees.
    ASSERT_EQ(::chmod(tmp().path().c_str(), 0755), 0);
    ASSERT_EQ(::chmod(lower.c_str(), 0755), 0);
    native_ = tmp().MakeDir("native", 0755);
    for (const std::string& root : {lower, native_}) {
      CommandResult r = Py(LowerSetup(), root, kRoot);
      ASSERT_TRUE(r.ok()) << "setup in " << root << ": " << r.Describe();
    }
  }
  const std::string& native() const { return native_; }

  static CommandResult Py(const std::string& code, const std::string& root,
                          const User& u, int timeout = 120) {
    std::vector<std::string> argv;
    if (u.uid != 0) {
      argv = {"setpriv", "--reuid=" + std::to_string(u.uid),
              "--regid=" + std::to_string(u.gid)};
      argv.push_back(u.groups.empty() ? "--clear-groups"
                                      : "--groups=" + u.groups);
    }
    for (const char* a : {kPython, "-c"}) argv.push_back(a);
    argv.push_back(std::string(kPrelude) + code);
    argv.push_back(root);
    return RunCommand(argv, timeout);
  }

  // Runs `code` as `u` in the plain directory, then in the mount; both must
  // succeed and print the same. Returns what the mount printed.
  std::string Same(const std::string& what, const std::string& code,
                   const User& u) {
    CommandResult disk = Py(code, native_, u);
    CommandResult mnt = Py(code, sandbox().mountpoint(), u);
    EXPECT_TRUE(disk.ok()) << what << " on the disk: " << disk.Describe();
    EXPECT_TRUE(mnt.ok()) << what << " in the mount: " << mnt.Describe();
    const std::string diff = Differences(mnt.out, disk.out);
    EXPECT_TRUE(diff.empty())
        << what << " as uid " << u.uid << ": the mount and the disk differ\n"
        << diff;
    return mnt.out;
  }

  // Both trees list the same.
  void SameTrees(const std::string& when) {
    CommandResult disk = Py(kListing, native_, kRoot);
    CommandResult mnt = Py(kListing, sandbox().mountpoint(), kRoot);
    ASSERT_TRUE(disk.ok()) << disk.Describe();
    ASSERT_TRUE(mnt.ok()) << mnt.Describe();
    const std::string diff = Differences(mnt.out, disk.out);
    EXPECT_TRUE(diff.empty()) << "the trees differ " << when << "\n" << diff;
    listing_ = disk.out;
  }
  // The last listing SameTrees made of the disk.
  const std::string& listing() const { return listing_; }

 private:
  std::string native_;
  std::string listing_;
};

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_INTEGRATION_POSIX_ORACLE_H_
