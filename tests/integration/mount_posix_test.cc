// POSIX fidelity with the kernel as the oracle (issue 13): the same
// operations, run by the same users in a plain directory of the same file
// system and in the mount, in both file modes, must give the same results,
// error codes, modes, owners and trees:
//   - creation modes under every umask, set-id and sticky bits kept;
//   - set-id bits: cleared by a write or truncate from a caller without
//     CAP_FSETID and by chown; the set-group-id directory rules;
//   - paths longer than PATH_MAX from the mount's root, and of PATH_MAX-1
//     bytes relative to the working directory;
//   - renames by users other than the owner (write permission on both
//     parents, on a moved directory itself, sticky directories).
// The operations are Python scripts run as the user under test (setpriv);
// each prints one line per step, "label: ok [value]" or "label: ERRNO", so
// a difference names the step. Each tree the test works in is "t/" below
// the mount's root and below the plain directory; the listing compares
// every entry's type, mode, owner, size, links, content, user xattrs and
// symlink target.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "harness/command.h"
#include "harness/fs_util.h"
#include "integration/mount_fixture.h"
#include "integration/posix_oracle.h"

namespace acqfs::test {
namespace {

// ------------------------------------------------------------ item 1 and 2

using CreationModes = PosixOracle;

// Every creation call, under four umasks, by root and by another user: the
// mode asked for, masked by the caller's umask and by nothing else (the
// daemon's own umask never applies), set-id and sticky bits kept. Python's
// own test_os and test_pathlib found the difference (tests/soak).
TEST_P(CreationModes, AreWhatTheCallersUmaskLeaves) {
  for (const User& u : {kRoot, kNobody}) {
    for (int umask_now : {0, 002, 022, 077}) {
      std::string dir =
          "t/c" + std::to_string(u.uid) + "-" + std::to_string(umask_now);
      std::string code = "D = '" + dir + "'\nU = " + std::to_string(umask_now) +
                         R"(
os.mkdir(D, 0o777)
os.chmod(D, 0o777)
os.umask(U)
for mo in (0o620, 0o666, 0o777, 0o4777, 0o2755, 0o1777, 0o600, 0o7777):
    t("open %o" % mo,
      lambda: os.close(os.open("%s/f%o" % (D, mo), os.O_CREAT | os.O_WRONLY, mo)))
    t("open %o" % mo, lambda: m("%s/f%o" % (D, mo)))
    t("mkdir %o" % mo, lambda: os.mkdir("%s/d%o" % (D, mo), mo))
    t("mkdir %o" % mo, lambda: m("%s/d%o" % (D, mo)))
    t("mkfifo %o" % mo, lambda: os.mkfifo("%s/p%o" % (D, mo), mo))
    t("mkfifo %o" % mo, lambda: m("%s/p%o" % (D, mo)))
    t("mknod %o" % mo, lambda: os.mknod("%s/n%o" % (D, mo), stat.S_IFREG | mo))
    t("mknod %o" % mo, lambda: m("%s/n%o" % (D, mo)))
t("touch", lambda: os.close(os.open(D + "/touched", os.O_CREAT | os.O_WRONLY, 0o666)))
t("touch", lambda: m(D + "/touched"))
)";
      Same("creation as uid " + std::to_string(u.uid) + " with umask " +
               std::to_string(umask_now),
           code, u);
    }
  }
  SameTrees("after creating");
  EXPECT_NE(listing().find("t/c0-2/touched 100664"), std::string::npos)
      << listing();
}

ACQFS_IN_BOTH_FILE_MODES(CreationModes);

using CreatedReadOnly = PosixOracle;

// A file created by open(O_CREAT) is open for writing whatever mode it is
// created with (git writes each loose object with O_CREAT|O_EXCL|O_RDWR and
// 0444); opening it again afterwards is checked against that mode. Here by
// uid 65534 in a root daemon's mount (allow_other, the kernel checking
// permissions); an ordinary user's own mount, where the daemon is subject
// to the same modes, is Unprivileged.ReadOnlyFilesStayWritableThroughTheir-
// Descriptors.
TEST_P(CreatedReadOnly, IsWritableThroughTheOpenThatCreatedIt) {
  std::string code = R"(
os.mkdir("t/ro", 0o777)
os.chmod("t/ro", 0o777)
os.umask(0o022)
def create(name, flags, mode, data=b"blob\n"):
    fd = os.open("t/ro/" + name, flags, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)
for mo in (0o444, 0o400, 0o000, 0o555):
    t("excl rdwr %o" % mo, lambda: create("x%o" % mo,
      os.O_CREAT | os.O_EXCL | os.O_RDWR, mo))
    t("  mode", lambda: m("t/ro/x%o" % mo))
    t("  reopen for writing", lambda: os.close(os.open("t/ro/x%o" % mo, os.O_WRONLY)))
    t("  again excl", lambda: create("x%o" % mo,
      os.O_CREAT | os.O_EXCL | os.O_RDWR, mo))
    t("wronly trunc %o" % mo, lambda: create("w%o" % mo,
      os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mo))
    t("  again, existing", lambda: create("w%o" % mo,
      os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mo))
    t("rdonly %o" % mo, lambda: os.close(os.open("t/ro/r%o" % mo,
      os.O_CREAT | os.O_RDONLY, mo)))
    t("  mode", lambda: m("t/ro/r%o" % mo))
t("read back", lambda: open("t/ro/x444").read().strip())
)";
  Same("read-only creation as uid 65534", code, kNobody);
  SameTrees("after creating read-only files");
  EXPECT_NE(listing().find("t/ro/x444 100444"), std::string::npos) << listing();
}

ACQFS_IN_BOTH_FILE_MODES(CreatedReadOnly);

// ------------------------------------------------------------ reshaping

// Directories renamed, removed and made again under the same names, with
// files created, changed and read in them between each step, as fast as
// one process can: the daemon keeps the directories it last used open
// (Layer::DirFd), and a create, chmod, chown, utimes or xattr in a
// directory that has since been renamed or removed would land in the old
// one (a file that vanishes, or shows in the wrong directory). The
// listings and contents must be the disk's, in a merged lower directory as
// in a new one, at depth.
class ReshapedDirectories : public PosixOracle {
 protected:
  std::string LowerSetup() const override {
    return PosixOracle::LowerSetup() +
           "os.makedirs('h/sub/deep')\n"
           "open('h/sub/file', 'w').write('lower\\n')\n"
           "open('h/sub/deep/f', 'w').write('lower deep\\n')\n";
  }
};

TEST_P(ReshapedDirectories, CreateInTheDirectoryNowAtThatName) {
  const std::string code = R"(
def put(p, data):
    with open(p, "w") as f:
        f.write(data)
    os.chmod(p, 0o640)
    os.utime(p, (1000000, 2000000))
    os.setxattr(p, "user.k", data.encode()) if hasattr(os, "setxattr") else None
def show(top):
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(root, n)
            st = os.lstat(p)
            # The lower's own files were made apart (their times differ).
            when = "" if n in ("file", "f") else st.st_mtime
            print(p, "%o" % st.st_mode, when, open(p).read().strip())
for i in range(30):
    for top in ("t/n", "h/sub", "h/sub/deep"):
        os.makedirs(top, exist_ok=True)
        put(top + "/a%d" % i, "first %d" % i)
        os.rename(top, top + ".old%d" % i)
        os.mkdir(top)
        put(top + "/b%d" % i, "second %d" % i)
        os.chmod(top + "/b%d" % i, 0o600)
        os.unlink(top + "/b%d" % i)
        os.rmdir(top)
        os.mkdir(top)
        put(top + "/c%d" % i, "third %d" % i)
        print(top, sorted(os.listdir(top)))
        # A directory renamed over an empty one, then made again.
        os.mkdir(top + ".e")
        os.rename(top, top + ".e")
        os.mkdir(top)
        put(top + "/d%d" % i, "fourth %d" % i)
        print(top, sorted(os.listdir(top)), sorted(os.listdir(top + ".e")))
        shutil.rmtree(top + ".e")
show("t")
show("h")
)";
  const std::string out =
      Same("directories reshaped between creates", code, kRoot);
  SameTrees("after reshaping");
  EXPECT_NE(out.find("h/sub/deep/d29 100640"), std::string::npos) << out;
  EXPECT_NE(out.find("h/sub.old0/deep/f"), std::string::npos) << out;
}

ACQFS_IN_BOTH_FILE_MODES(ReshapedDirectories);

class SetIdBits : public PosixOracle {
 protected:
  std::string LowerSetup() const override {
    return R"(
os.mkdir('t', 0o777); os.chmod('t', 0o777)
for n, mode in (("lsuid", 0o6777), ("lsgid", 0o2745), ("luid", 0o4755)):
    with open("t/" + n, "w") as f:
        f.write("lower\n")
    os.chown("t/" + n, 1000, 1000)
    os.chmod("t/" + n, mode)
)";
  }
};

// Set-id bits survive what must keep them, and go where ext4 takes them
// away: a write or truncate by a caller without CAP_FSETID (owner or not),
// a chown; a set-group-id bit without group execute stays. Lower files
// the write copies up behave the same.
TEST_P(SetIdBits, ClearedAndKeptAsOnTheDisk) {
  Same("make", R"(
for n, mode in (("w-other", 0o6777), ("w-root", 0o6777), ("w-owner", 0o6777),
                ("tr-other", 0o6777), ("otrunc-other", 0o6755),
                ("sgid-noexec", 0o2745), ("chown-root", 0o6755),
                ("chmod-back", 0o6755), ("suid-only", 0o4711)):
    p = "t/" + n
    with open(p, "w") as f:
        f.write("data\n")
    os.chown(p, 1000, 1000)
    os.chmod(p, mode)
    t("made " + n, lambda: m(p))
)",
       kRoot);
  Same("writes by others", R"(
for n in ("w-other", "sgid-noexec", "lsuid", "lsgid", "suid-only"):
    t("append " + n, lambda: append("t/" + n))
    t("after " + n, lambda: m("t/" + n))
t("truncate tr-other", lambda: os.truncate("t/tr-other", 1))
t("after tr-other", lambda: m("t/tr-other"))
t("O_TRUNC", lambda: os.close(os.open("t/otrunc-other", os.O_WRONLY | os.O_TRUNC)))
t("after O_TRUNC", lambda: m("t/otrunc-other"))
)",
       kNobody);
  Same("a write by the owner", R"(
t("append w-owner", lambda: append("t/w-owner"))
t("after w-owner", lambda: m("t/w-owner"))
t("append luid", lambda: append("t/luid"))
t("after luid", lambda: m("t/luid"))
)",
       kOther);
  Same("root", R"(
t("append w-root", lambda: append("t/w-root"))
t("after w-root", lambda: m("t/w-root"))
t("chown", lambda: os.chown("t/chown-root", 1001, 1001))
t("after chown", lambda: m("t/chown-root"))
t("chown back", lambda: os.chown("t/chmod-back", 1000, 1000))
t("chmod", lambda: os.chmod("t/chmod-back", 0o6755))
t("after chmod", lambda: m("t/chmod-back"))
)",
       kRoot);
  SameTrees("after the set-id steps");
  // The disk's own answers, so that the test cannot pass by both trees
  // losing every bit.
  EXPECT_NE(listing().find("t/w-root 106777"), std::string::npos) << listing();
  EXPECT_NE(listing().find("t/w-other 100777"), std::string::npos) << listing();
  EXPECT_NE(listing().find("t/sgid-noexec 102745"), std::string::npos)
      << listing();
}

// What the kernel leaves to the daemon once the INIT reply carries
// FUSE_HANDLE_KILLPRIV_V2 (fuse/setid.h): every chown of a non-directory
// (also to the same owner, also chown(-1, -1), also through a descriptor),
// a truncate or O_TRUNC or ftruncate or O_DIRECT write by a caller without
// CAP_FSETID, a chown by the owner or a write of a file whose set-group-id
// bit has no group execute (kept for a member of the group, taken from
// others, which the kernel alone got wrong). security.capability goes with a
// write and a chown, also root's. Without the daemon's clearing these
// files keep their bits in the mount.
TEST_P(SetIdBits, DaemonClearsWhatTheKernelLeavesToIt) {
  Same("make", R"(
for n, mode, uid, gid in (
        ("ch-same", 0o6755, 1000, 1000), ("ch-none", 0o6755, 1000, 1000),
        ("ch-fd", 0o6755, 1000, 1000), ("ch-lock-root", 0o2745, 1000, 1000),
        ("ch-lock-none", 0o2745, 1000, 1000),
        ("tr-root", 0o6777, 1000, 1000), ("otr-root", 0o6777, 1000, 1000),
        ("ftr-root", 0o6777, 1000, 1000), ("ftr-other", 0o6777, 1000, 1000),
        ("otr-other", 0o6777, 1000, 1000), ("dio-other", 0o6777, 1000, 1000),
        ("w-lock-suid", 0o6747, 1000, 1000), ("w-lock", 0o2747, 1000, 1000),
        ("w-lock-member", 0o6767, 1000, 1234),
        ("own-chgrp", 0o6775, 65534, 65534), ("own-lock", 0o2745, 65534, 1234),
        ("own-lock-none", 0o2745, 65534, 1234),
        ("own-lock-member", 0o2745, 65534, 1234),
        ("cap-w", 0o755, 1000, 1000), ("cap-chown", 0o755, 1000, 1000),
        ("cap-chmod", 0o755, 1000, 1000)):
    p = "t/" + n
    with open(p, "w") as f:
        f.write("data\n")
    os.chown(p, uid, gid)
    os.chmod(p, mode)
    t("made " + n, lambda: m(p))
os.mkfifo("t/fifo")
os.chmod("t/fifo", 0o6777)
t("made fifo", lambda: m("t/fifo"))
# CAP_NET_BIND_SERVICE, permitted and effective (vfs_cap_data revision 2).
import struct
cap = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)
for n in ("cap-w", "cap-chown", "cap-chmod"):
    t("setcap " + n, lambda: os.setxattr("t/" + n, "security.capability", cap))
    t("cap " + n, lambda: os.getxattr("t/" + n, "security.capability").hex())
)",
       kRoot);
  Same("root", R"(
def cap(n):
    t("cap " + n, lambda: os.getxattr("t/" + n, "security.capability").hex())
t("chown same", lambda: os.chown("t/ch-same", 1000, 1000))
t("after chown same", lambda: m("t/ch-same"))
t("chown -1 -1", lambda: os.chown("t/ch-none", -1, -1))
t("after chown -1 -1", lambda: m("t/ch-none"))
fd = os.open("t/ch-fd", os.O_RDONLY)
t("fchown", lambda: os.fchown(fd, 1001, 1001))
os.close(fd)
t("after fchown", lambda: m("t/ch-fd"))
t("chown lock", lambda: os.chown("t/ch-lock-root", 1001, 1001))
t("after chown lock", lambda: m("t/ch-lock-root"))
t("chown lock -1 -1", lambda: os.chown("t/ch-lock-none", -1, -1))
t("after chown lock -1 -1", lambda: m("t/ch-lock-none"))
t("chown fifo", lambda: os.chown("t/fifo", 1000, 1000))
t("after chown fifo", lambda: m("t/fifo"))
t("truncate", lambda: os.truncate("t/tr-root", 2))
t("after truncate", lambda: m("t/tr-root"))
t("O_TRUNC", lambda: os.close(os.open("t/otr-root", os.O_WRONLY | os.O_TRUNC)))
t("after O_TRUNC", lambda: m("t/otr-root"))
fd = os.open("t/ftr-root", os.O_WRONLY)
t("ftruncate", lambda: os.ftruncate(fd, 1))
os.close(fd)
t("after ftruncate", lambda: m("t/ftr-root"))
t("append cap-w", lambda: append("t/cap-w"))
cap("cap-w")
t("after cap-w", lambda: m("t/cap-w"))
t("chown cap-chown", lambda: os.chown("t/cap-chown", 1000, 1000))
cap("cap-chown")
t("chmod cap-chmod", lambda: os.chmod("t/cap-chmod", 0o750))
cap("cap-chmod")
)",
       kRoot);
  Same("others", R"(
import mmap
fd = os.open("t/ftr-other", os.O_WRONLY)
t("ftruncate", lambda: os.ftruncate(fd, 1))
os.close(fd)
t("after ftruncate", lambda: m("t/ftr-other"))
t("O_TRUNC", lambda: os.close(os.open("t/otr-other", os.O_WRONLY | os.O_TRUNC)))
t("after O_TRUNC", lambda: m("t/otr-other"))
def direct():
    buf = mmap.mmap(-1, 4096)
    buf.write(b"d" * 4096)
    fd = os.open("t/dio-other", os.O_WRONLY | os.O_DIRECT)
    try:
        return os.write(fd, buf)
    finally:
        os.close(fd)
t("O_DIRECT write", direct)
t("after O_DIRECT write", lambda: m("t/dio-other"))
t("append w-lock-suid", lambda: append("t/w-lock-suid"))
t("after append", lambda: m("t/w-lock-suid"))
t("append w-lock", lambda: append("t/w-lock"))
t("after append w-lock", lambda: m("t/w-lock"))
t("chgrp by the owner", lambda: os.chown("t/own-chgrp", -1, 65534))
t("after chgrp", lambda: m("t/own-chgrp"))
t("chown lock by the owner", lambda: os.chown("t/own-lock", 65534, -1))
t("after chown lock", lambda: m("t/own-lock"))
t("chown -1 -1 lock by the owner", lambda: os.chown("t/own-lock-none", -1, -1))
t("after chown -1 -1 lock", lambda: m("t/own-lock-none"))
)",
       kNobody);
  Same("a member", R"(
t("chown lock by a member", lambda: os.chown("t/own-lock-member", 65534, -1))
t("after chown lock", lambda: m("t/own-lock-member"))
t("append by a member", lambda: append("t/w-lock-member"))
t("after append", lambda: m("t/w-lock-member"))
)",
       User{65534, 65534, "1234"});
  SameTrees("after the steps the daemon clears bits in");
  // The disk's own answers.
  for (const char* want :
       {"t/ch-same 100755", "t/ch-none 100755", "t/ch-lock-root 102745",
        "t/tr-root 106777", "t/ftr-other 100777", "t/dio-other 100777",
        "t/w-lock-suid 100747", "t/w-lock 100747", "t/w-lock-member 102767",
        "t/own-lock 100745", "t/own-lock-member 102745", "t/fifo 10777"})
    EXPECT_NE(listing().find(want), std::string::npos) << want << "\n"
                                                       << listing();
}

// The set-group-id directory rules: new entries take the directory's group,
// new directories the bit itself; a caller outside that group loses a
// set-group-id bit it asks for at creation or by chmod, a member keeps it.
TEST_P(SetIdBits, SetGroupIdDirectoriesAsOnTheDisk) {
  Same("make", R"(
os.mkdir("t/g", 0o777)
os.chown("t/g", 0, 1234)
os.chmod("t/g", 0o2777)
t("g", lambda: m("t/g"))
)",
       kRoot);
  Same("outsider", R"(
t("create", lambda: os.close(os.open("t/g/f", os.O_CREAT | os.O_WRONLY, 0o2777)))
t("create", lambda: m("t/g/f"))
t("mkdir", lambda: os.mkdir("t/g/d", 0o777))
t("mkdir", lambda: m("t/g/d"))
t("mkdir in d", lambda: os.mkdir("t/g/d/e", 0o755))
t("mkdir in d", lambda: m("t/g/d/e"))
t("mkfifo", lambda: os.mkfifo("t/g/p", 0o2777))
t("mkfifo", lambda: m("t/g/p"))
t("symlink", lambda: os.symlink("f", "t/g/s"))
t("symlink", lambda: m("t/g/s"))
t("chmod g+s", lambda: os.chmod("t/g/f", 0o2755))
t("chmod g+s", lambda: m("t/g/f"))
)",
       kNobody);
  Same("member", R"(
t("create", lambda: os.close(os.open("t/g/m", os.O_CREAT | os.O_WRONLY, 0o2775)))
t("create", lambda: m("t/g/m"))
t("chmod g+s", lambda: os.chmod("t/g/m", 0o2755))
t("chmod g+s", lambda: m("t/g/m"))
)",
       User{65534, 65534, "1234"});
  SameTrees("after the set-group-id steps");
  EXPECT_NE(listing().find("t/g/d 42755 65534:1234"), std::string::npos)
      << listing();
}

ACQFS_IN_BOTH_FILE_MODES(SetIdBits);

// ---------------------------------------------------------------- item 3

class LongPaths : public PosixOracle {
 protected:
  // A lower tree 24 directories of 200 characters deep (4,824 bytes), two
  // of them, with a file at the bottom. (No lower hard link: copying up one
  // name of one breaks the link, as in the kernel overlayfs without
  // `index`; docs/architecture.md.)
  std::string LowerSetup() const override {
    return R"(
os.mkdir('t', 0o777); os.chmod('t', 0o777)
N = "n" * 200
for top in ("t/L", "t/L2"):
    os.mkdir(top)
    d = deep(top, [N] * 24)
    fd = os.open("file.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d)
    os.write(fd, b"deep lower\n")
    os.setxattr(fd, "user.deep", b"1")
    os.close(fd)
    os.close(d)
)";
  }
};

// Every call on paths longer than PATH_MAX from the mount's root, reached
// step by step: creation, metadata, links, renames, removal, xattrs,
// listing; the deep lower tree copied up, moved (materialised) and removed.
// Then the upper layer, mounted by the kernel overlayfs, shows the same
// tree.
TEST_P(LongPaths, DeeperThanPathMaxFromTheRootAsOnTheDisk) {
  Same("creation below a deep directory", R"(
N = "n" * 200
os.mkdir("t/U")
os.chdir("t/U")
for i in range(24):
    t("mkdir %d" % i, lambda: os.mkdir(N))
    os.chdir(N)
t("open", lambda: os.close(os.open("file", os.O_CREAT | os.O_WRONLY, 0o640)))
t("write", lambda: append("file", b"deep upper\n"))
t("chmod", lambda: os.chmod("file", 0o600))
t("chown", lambda: os.chown("file", 1000, 1000))
t("truncate", lambda: os.truncate("file", 4))
t("utime", lambda: os.utime("file", (1, 2)))
t("mtime", lambda: os.stat("file").st_mtime)
t("link", lambda: os.link("file", "file2"))
t("rename", lambda: os.rename("file2", "file3"))
t("unlink", lambda: os.unlink("file3"))
t("symlink", lambda: os.symlink("file", "sl"))
t("readlink", lambda: os.readlink("sl"))
t("mkfifo", lambda: os.mkfifo("ff", 0o644))
t("setxattr", lambda: os.setxattr("file", "user.a", b"1"))
t("getxattr", lambda: os.getxattr("file", "user.a"))
t("mkdir", lambda: os.mkdir("sub"))
t("rename dir", lambda: os.rename("sub", "sub2"))
t("rmdir", lambda: os.rmdir("sub2"))
t("listdir", lambda: sorted(os.listdir(".")))
t("stat", lambda: m("file"))
)",
       kRoot);
  Same("the deep lower tree", R"(
N = "n" * 200
os.chdir("t/L/" + "/".join([N] * 12))
os.chdir("/".join([N] * 12))
t("read", lambda: open("file.txt").read())
t("append", lambda: append("file.txt"))
t("read after", lambda: open("file.txt").read())
t("chmod", lambda: os.chmod("file.txt", 0o600))
t("link", lambda: os.link("file.txt", "link.txt"))
t("rename", lambda: os.rename("file.txt", "moved.txt"))
t("link count", lambda: os.stat("link.txt").st_nlink)
os.chdir(sys.argv[1])
t("move the deep tree", lambda: os.rename("t/L", "t/Lmoved"))
t("remove a deep tree", lambda: shutil.rmtree("t/L2"))
t("gone", lambda: os.path.exists("t/L2"))
)",
       kRoot);
  Same("paths of PATH_MAX-1 bytes relative to the working directory", R"(
os.mkdir("t/P")
os.chdir("t/P")
D = ["d%03d" % i + "x" * 196 for i in range(20)]
rel = "/".join(D)
for i in range(20):
    t("mkdir %d" % i, lambda: os.mkdir("/".join(D[: i + 1])))
a = rel + "/" + "a" * 74
b = rel + "/" + "b" * 74
print("length", len(a.encode()))
t("open", lambda: os.close(os.open(a, os.O_CREAT | os.O_WRONLY, 0o644)))
t("chmod", lambda: os.chmod(a, 0o604))
t("chown", lambda: os.chown(a, 1000, 1000))
t("truncate", lambda: os.truncate(a, 7))
t("link", lambda: os.link(a, b))
t("unlink", lambda: os.unlink(a))
t("rename", lambda: os.rename(b, a))
t("stat", lambda: m(a))
t("too long", lambda: os.stat(a + "x"))
)",
       kRoot);
  SameTrees("after the long paths");
  EXPECT_NE(listing().find("t/Lmoved/"), std::string::npos) << listing();
  // The layers the daemon wrote, as the kernel overlayfs shows them.
  ASSERT_TRUE(sandbox().Unmount());
  const std::string kernel = tmp().MakeDir("kernel");
  CommandResult mounted =
      MountKernelOverlay(lower(), sandbox().upper(), sandbox().work(), kernel);
  ASSERT_TRUE(mounted.ok()) << mounted.Describe();
  CommandResult shown = Py(kListing, kernel, kRoot);
  RunCommand({"umount", kernel}, 30);
  ASSERT_TRUE(shown.ok()) << shown.Describe();
  const std::string diff = Differences(shown.out, listing());
  EXPECT_TRUE(diff.empty())
      << "the kernel overlayfs over the same layers (as 'mount') and the disk "
         "differ\n"
      << diff;
}

ACQFS_IN_BOTH_FILE_MODES(LongPaths);

// ---------------------------------------------------------------- item 4

class NonOwnerRenames : public PosixOracle {
 protected:
  // t/w: world-writable; t/s: world-writable and sticky; t/ro: writable by
  // root only. Lower directories and files of root's and of 65534's.
  std::string LowerSetup() const override {
    return R"(
os.mkdir('t', 0o777); os.chmod('t', 0o777)
for d, mode in (("t/w", 0o777), ("t/s", 0o1777), ("t/ro", 0o755)):
    os.mkdir(d)
    os.chmod(d, mode)
for d, mode, uid in (("t/w/ld1", 0o755, 0), ("t/w/ld2", 0o755, 0),
                     ("t/w/ld3", 0o755, 0), ("t/w/lw1", 0o777, 0),
                     ("t/w/lw2", 0o777, 0), ("t/w/lw3", 0o777, 0),
                     ("t/w/lw4", 0o777, 0), ("t/s/ld1", 0o777, 0),
                     ("t/s/ld2", 0o777, 0), ("t/s/own1", 0o755, 65534),
                     ("t/s/own2", 0o755, 65534), ("t/ro/ld", 0o777, 0)):
    os.mkdir(d)
    os.chmod(d, mode)
    os.chown(d, uid, uid)
    with open(d + "/inside", "w") as f:
        f.write(d + "\n")
for f, uid in (("t/w/lf", 0), ("t/s/lf", 0), ("t/s/nf", 65534)):
    with open(f, "w") as fh:
        fh.write(f + "\n")
    os.chown(f, uid, uid)
)";
  }
};

// What a user other than the owner may rename, and the error when not,
// for lower and upper directories and files; a refused rename changes
// nothing, and the names stay usable afterwards.
TEST_P(NonOwnerRenames, GiveTheDisksResultsAndChangeNothingWhenRefused) {
  // Upper directories of root's, made through the mount.
  Same("upper directories", R"(
for d, mode in (("t/w/ud1", 0o755), ("t/w/uw1", 0o777), ("t/s/ud1", 0o777)):
    os.mkdir(d)
    os.chmod(d, mode)
    touch(d + "/inside")
)",
       kRoot);
  const std::string renames = R"(
r("t/w/ld1", "t/w/ld1b")      # same parent, directory not mine: allowed
r("t/w/ld2", "t/s/ld2b")      # another parent needs write on the directory
r("t/w/lw1", "t/s/lw1b")      # ... which it has
r("t/w/lw2", "t/w/lw2b")
r("t/s/ld1", "t/s/ld1b")      # sticky and not mine
r("t/s/own1", "t/s/own1b")    # sticky and mine
r("t/s/own2", "t/w/own2b")
r("t/w/lw3", "t/ro/x")        # target parent not writable
r("t/ro/ld", "t/w/rold")      # source parent not writable
r("t/s/lf", "t/s/lf2")        # a sticky file not mine
r("t/s/nf", "t/s/nf2")        # a sticky file of mine
r("t/w/lw2b", "t/s/ld2")      # over a sticky directory not mine
r("t/w/lf", "t/w/lf2")        # a file not mine in a writable directory
r("t/w/ud1", "t/s/ud1b")      # an upper directory, not writable
r("t/w/uw1", "t/s/uw1b")      # an upper directory, writable
r("t/s/ud1", "t/s/ud1c")      # upper, sticky, not mine
t("unlink after refusal", lambda: os.unlink("t/s/lf"))
t("rmdir after refusal", lambda: shutil.rmtree("t/s/ld1"))
t("mkdir where a refused rename aimed", lambda: os.mkdir("t/w/rold"))
)";
  // Directories of 65534's in the upper, with something inside, that 1000
  // renames below.
  Same("65534's directories", R"(
for d, mode in (("t/w/n1", 0o755), ("t/w/n2", 0o755), ("t/w/n3", 0o777),
                ("t/s/n4", 0o777)):
    os.mkdir(d)
    os.chmod(d, mode)
    touch(d + "/inside")
    os.mkdir(d + "/sub")
)",
       kNobody);
  Same("renames of 65534's directories by 1000", R"(
r("t/w/n1", "t/w/n1b")        # same parent: allowed
r("t/w/n2", "t/s/n2b")        # another parent, not writable: EACCES
r("t/w/n3", "t/s/n3b")        # another parent, writable: allowed
r("t/s/n4", "t/s/n4b")        # sticky, not mine: EPERM
r("t/w/n1b/sub", "t/w/x")     # out of a directory not writable
t("unlink", lambda: os.unlink("t/w/n2/inside"))
)",
       kOther);
  Same("renames by 65534", renames, kNobody);
  SameTrees("after 65534's renames");
  Same("renames by 1000", renames, kOther);
  SameTrees("after 1000's renames");
  Same("root moves back", R"(
t("back", lambda: os.rename("t/w/ld1b", "t/w/ld1"))
t("into ro", lambda: os.rename("t/s/lw1b", "t/ro/lw1"))
)",
       kRoot);
  SameTrees("at the end");
  EXPECT_NE(listing().find("t/ro/lw1 "), std::string::npos) << listing();
}

ACQFS_IN_BOTH_FILE_MODES(NonOwnerRenames);

}  // namespace
}  // namespace acqfs::test
