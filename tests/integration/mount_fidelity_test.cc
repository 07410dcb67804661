// Fidelity where the kernel's file systems already are (issue 34), with ext4
// (a plain directory of the same file system) as the oracle, in both file
// modes (PosixOracle, tests/integration/posix_oracle.h):
//   - direct I/O and the page cache: a buffered read after O_DIRECT writes
//     (pwrite, io_submit, with a reader racing them), copy_file_range,
//     fallocate and truncate sees the new bytes; a file made by
//     open(O_CREAT|O_DIRECT) can be mapped;
//   - a directory that loses its name (rmdir, a rename over it) keeps its
//     identity for a descriptor or a working directory that holds it:
//     fstat with st_nlink 0, chmod, chown, utimes and xattrs;
//   - open(O_TMPFILE), linkat(2) of one, and the refusals around it;
//   - file handles: open_by_handle_at of what the kernel still knows.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness/command.h"
#include "harness/fs_util.h"
#include "integration/mount_fixture.h"
#include "integration/posix_oracle.h"

namespace acqfs::test {
namespace {

// The names in `dir` (not "." or "..").
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// ---------------------------------------------------- direct I/O coherence

// io_submit(2) through ctypes (no libaio in Python), x86_64 numbers.
constexpr char kAio[] = R"(
import ctypes, mmap, platform, threading
if platform.machine() != "x86_64":
    raise SystemExit("io_submit numbers are x86_64's")
libc = ctypes.CDLL(None, use_errno=True)
class iocb(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32),
                ("rw_flags", ctypes.c_int32), ("lio_opcode", ctypes.c_uint16),
                ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("offset", ctypes.c_int64), ("reserved2", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]
class io_event(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]
def aio_write(fd, cbuf, off, chunks):
    # `chunks` writes of cbuf's parts in flight at once, then all reaped.
    ctx = ctypes.c_ulong(0)
    if libc.syscall(206, 64, ctypes.byref(ctx)) != 0:
        raise OSError(ctypes.get_errno(), "io_setup")
    try:
        n = len(cbuf); step = n // chunks; cbs = []
        for i in range(chunks):
            cb = iocb(); cb.lio_opcode = 1; cb.fildes = fd
            cb.buf = ctypes.addressof(cbuf) + i * step
            cb.nbytes = step; cb.offset = off + i * step
            cbs.append(cb)
        p = (ctypes.POINTER(iocb) * chunks)(*[ctypes.pointer(c) for c in cbs])
        if libc.syscall(209, ctx, chunks, p) != chunks:
            raise OSError(ctypes.get_errno(), "io_submit")
        evs = (io_event * chunks)(); got = 0
        while got < chunks:
            r = libc.syscall(208, ctx, 1, chunks - got,
                             ctypes.byref(evs, got * ctypes.sizeof(io_event)),
                             None)
            if r <= 0:
                raise OSError(ctypes.get_errno(), "io_getevents")
            got += r
        return sum(e.res for e in evs)
    finally:
        libc.syscall(207, ctx)
)";

class DirectIo : public PosixOracle {
 protected:
  void BufferedReadsSeeWhatDirectWritesWrote();
  void FilesOpenedForDirectIoMap();
};

// Each way of changing a file's bytes around the page cache, with the old
// bytes cached (and, for one, dirty in a shared mapping, or read by a
// thread racing the writes): a buffered read through a descriptor opened
// before, one opened after, and a mapping all see the new bytes, as on
// ext4.
TEST_P(DirectIo, BufferedReadsSeeWhatDirectWritesWrote) {
  BufferedReadsSeeWhatDirectWritesWrote();
}
void DirectIo::BufferedReadsSeeWhatDirectWritesWrote() {
  Same("direct writes", std::string(kAio) + R"(
N = 0x100000; A = 0xa0000
def seen(tag, p, rd, want):
    data = os.pread(rd, N, 0)
    t(tag + " same fd", lambda: data[:A] == want * A)
    fd = os.open(p, os.O_RDONLY); d2 = os.pread(fd, N, 0); os.close(fd)
    t(tag + " new fd", lambda: d2[:A] == want * A)
    t(tag + " rest", lambda: data[A:] == d2[A:])
def case(kind, race=False, dirty=False, run=0):
    p = "t/" + kind + ("-race%d" % run if race else "") + ("-dirty" if dirty else "")
    with open(p, "wb") as f:
        f.write(b"\x55" * N)
    rd = os.open(p, os.O_RDWR)
    os.pread(rd, N, 0)  # the old bytes in the page cache
    m = None
    if dirty:
        m = mmap.mmap(rd, N); m[:] = b"\x55" * N
    stop = [False]
    def reader():
        while not stop[0]:
            os.pread(rd, N, 0)
    th = threading.Thread(target=reader) if race else None
    if th: th.start()
    buf = mmap.mmap(-1, A); buf.write(b"\xaa" * A)
    want = b"\xaa"
    if kind == "pwrite":
        fd = os.open(p, os.O_RDWR | os.O_DIRECT)
        t(kind + " wrote", lambda: os.pwritev(fd, [buf], 0)); os.close(fd)
    elif kind == "aio":
        fd = os.open(p, os.O_RDWR | os.O_DIRECT)
        cb = (ctypes.c_char * A).from_buffer(buf)
        t(kind + " wrote", lambda: aio_write(fd, cb, 0, 10)); os.close(fd)
    elif kind == "creat-direct":
        os.unlink(p)
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
        t(kind + " wrote", lambda: os.pwritev(fd, [buf], 0)); os.close(fd)
        want = b"\xaa"
    elif kind == "copy_file_range":
        with open(p + ".src", "wb") as f:
            f.write(b"\xaa" * A)
        s = os.open(p + ".src", os.O_RDONLY); d = os.open(p, os.O_WRONLY)
        n = 0
        while n < A:
            n += os.copy_file_range(s, d, A - n, n, n)
        os.close(s); os.close(d)
    elif kind == "punch":
        fd = os.open(p, os.O_RDWR)
        t(kind + " punched", lambda: libc.fallocate(fd, 3, ctypes.c_long(0),
                                                     ctypes.c_long(A)))
        os.close(fd); want = b"\0"
    elif kind == "zero":
        fd = os.open(p, os.O_RDWR)
        t(kind + " zeroed", lambda: libc.fallocate(fd, 0x10, ctypes.c_long(0),
                                                    ctypes.c_long(A)))
        os.close(fd); want = b"\0"
    elif kind == "truncate":
        os.truncate(p, 0); os.truncate(p, N); want = b"\0"
    stop[0] = True
    if th: th.join()
    if m is not None:
        t(kind + " mapping", lambda: m[:A] == want * A); m.close()
    if kind == "creat-direct":
        os.close(rd); rd = os.open(p, os.O_RDWR)
    seen(kind, p, rd, want)
    os.close(rd)
for k in ("pwrite", "aio", "creat-direct", "copy_file_range", "punch", "zero",
          "truncate"):
    case(k)
for k in ("pwrite", "aio"):
    case(k, dirty=True)
    # A race: each run gives the reader other moments to fill the cache.
    for run in range(8):
        case(k, race=True, run=run)
)",
       kRoot);
  SameTrees("after the direct writes");
}

// A file made by open(O_CREAT|O_DIRECT) maps, as on ext4, and so does one
// opened with O_DIRECT later; what the mapping writes, a read sees.
// (FOPEN_DIRECT_IO made the kernel refuse both with ENODEV.)
TEST_P(DirectIo, FilesOpenedForDirectIoMap) { FilesOpenedForDirectIoMap(); }
void DirectIo::FilesOpenedForDirectIoMap() {
  Same("mmap of O_DIRECT files", R"(
import mmap
def new_map():
    fd = os.open("t/new", os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o644)
    try:
        os.ftruncate(fd, 8192)
        m = mmap.mmap(fd, 8192); m[0:5] = b"hello"; m.flush(); m.close()
    finally:
        os.close(fd)
    return open("t/new", "rb").read(5)
t("map new O_DIRECT file", new_map)
def old_map():
    fd = os.open("t/new", os.O_RDWR | os.O_DIRECT)
    try:
        m = mmap.mmap(fd, 8192); r = m[0:5]; m[5:8] = b"!!!"; m.close()
    finally:
        os.close(fd)
    return r + open("t/new", "rb").read(8)
t("map O_DIRECT open", old_map)
)",
       kRoot);
}

ACQFS_IN_BOTH_FILE_MODES(DirectIo);

// The same with the writeback cache (-o writeback), where buffered writes
// stay dirty in the kernel's pages until it writes them back: a direct
// write must neither be read past nor overwritten by them.
class DirectIoWriteback : public DirectIo {
 protected:
  SandboxOptions ModeOptions() const override {
    SandboxOptions o;
    o.extra_mount_args = {"-o", "writeback"};
    return o;
  }
};

TEST_P(DirectIoWriteback, BufferedReadsSeeWhatDirectWritesWrote) {
  BufferedReadsSeeWhatDirectWritesWrote();
}

TEST_P(DirectIoWriteback, FilesOpenedForDirectIoMap) {
  FilesOpenedForDirectIoMap();
}

ACQFS_IN_BOTH_FILE_MODES(DirectIoWriteback);

// ------------------------------------------- directories that lose a name

class OpenDirectories : public PosixOracle {
 protected:
  std::string LowerSetup() const override {
    return PosixOracle::LowerSetup() + R"(
for how in ("rmdir", "over", "moved"):
    os.mkdir("t/lower-b-" + how); os.mkdir("t/lower-a-" + how)
    os.setxattr("t/lower-b-" + how, "user.kept", b"lower")
)";
  }
};

// A descriptor of a directory that a rmdir, a rename over it, or a rename
// then a rmdir took the last name of: fstat gives the same number with
// st_nlink 0, and chmod, chown, utimes and xattrs of it work and show, as
// on ext4; nothing can be made in it (ENOENT), and its listing is empty.
// For a lower directory and one the sandbox made. Also a working directory
// removed from under its process. Before, every fstat answered ENOENT.
TEST_P(OpenDirectories, KeepTheirIdentityWhenTheirNameGoes) {
  Same("removed directories", R"(
def battery(tag, fd, ino):
    def st():
        s = os.fstat(fd)
        return "%o nlink=%d %d:%d same=%s" % (s.st_mode, s.st_nlink, s.st_uid,
                                             s.st_gid, s.st_ino == ino)
    t(tag + " fstat", st)
    t(tag + " fchmod", lambda: os.chmod(fd, 0o711))
    t(tag + " fchown", lambda: os.chown(fd, 1000, 1000))
    t(tag + " utime", lambda: os.utime(fd, (1, 2)))
    t(tag + " fstat after", st)
    t(tag + " mtime", lambda: os.fstat(fd).st_mtime)
    t(tag + " getxattr", lambda: os.getxattr(fd, "user.kept"))
    t(tag + " setxattr", lambda: os.setxattr(fd, "user.a", b"1"))
    t(tag + " setxattr create", lambda: os.setxattr(fd, "user.a", b"2",
                                                    os.XATTR_CREATE))
    t(tag + " removexattr", lambda: os.removexattr(fd, "user.kept"))
    t(tag + " setxattr 64 KiB", lambda: os.setxattr(fd, "user.big",
                                                    b"x" * 65536))
    t(tag + " listxattr", lambda: sorted(x for x in os.listxattr(fd)
                                          if x.startswith("user.")))
    t(tag + " listdir", lambda: os.listdir(fd))
    t(tag + " create in", lambda: os.close(
        os.open("x", os.O_CREAT | os.O_WRONLY, dir_fd=fd)))
    t(tag + " mkdir in", lambda: os.mkdir("y", dir_fd=fd))
    t(tag + " dot", lambda: os.stat(".", dir_fd=fd).st_nlink)
    t(tag + " dotdot", lambda: os.stat("..", dir_fd=fd).st_ino ==
      os.stat("t").st_ino)
    t(tag + " fsync", lambda: os.fsync(fd))
for where in ("lower", "upper"):
    for how in ("rmdir", "over", "moved"):
        b = "t/%s-b-%s" % (where, how); a = "t/%s-a-%s" % (where, how)
        if where == "upper":
            os.mkdir(a); os.mkdir(b); os.mkdir(b + "/sub")
            os.setxattr(b, "user.kept", b"upper"); os.rmdir(b + "/sub")
        fd = os.open(b, os.O_RDONLY | os.O_DIRECTORY)
        ino = os.fstat(fd).st_ino
        if how == "rmdir":
            t("rmdir", lambda: os.rmdir(b))
        elif how == "over":
            t("rename over", lambda: os.rename(a, b))
        else:
            t("move", lambda: os.rename(b, a + "-moved"))
            t("rmdir", lambda: os.rmdir(a + "-moved"))
        battery(where + " " + how, fd, ino)
        os.close(fd)
os.mkdir("t/cwd"); os.chdir("t/cwd"); os.rmdir("../cwd")
t("cwd stat", lambda: os.stat(".").st_nlink)
t("cwd getcwd", lambda: os.getcwd())
t("cwd create", lambda: open("z", "w").close())
t("cwd chmod", lambda: os.chmod(".", 0o700))
t("cwd mode", lambda: oct(os.stat(".").st_mode))
)",
       kRoot);
  SameTrees("after the removals");
}

ACQFS_IN_BOTH_FILE_MODES(OpenDirectories);

// ------------------------------------------------------------- O_TMPFILE

class Tmpfile : public PosixOracle {
 protected:
  std::string LowerSetup() const override {
    return PosixOracle::LowerSetup() +
           "os.mkdir('t/low', 0o777); os.chmod('t/low', 0o777)\n"
           "os.mkdir('t/rootonly', 0o755)\n";
  }
};

// open(O_TMPFILE) makes a nameless file (st_nlink 0, the mode asked for,
// the caller's owner), which linkat(2) names (through /proc and with
// AT_EMPTY_PATH, twice), unless it was opened O_EXCL; a link over a name
// fails with EEXIST; O_RDONLY is EINVAL, a non-directory ENOTDIR, a
// directory the caller may not write EACCES; Python's TemporaryFile works.
// As on ext4, in a directory the sandbox made and in a lower one. Before,
// every open(O_TMPFILE) answered EOPNOTSUPP.
TEST_P(Tmpfile, IsANamelessFileALinkCanName) {
  const std::string code = R"(
import ctypes, tempfile
libc = ctypes.CDLL(None, use_errno=True)
def link(fd, dst, empty=False):
    r = (libc.linkat(fd, b"", -100, dst.encode(), 0x1000) if empty else
         libc.linkat(-100, ("/proc/self/fd/%d" % fd).encode(), -100,
                     dst.encode(), 0x400))
    if r != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
for d in ("t/up", "t/low"):
    if d == "t/up":
        os.mkdir(d, 0o777); os.chmod(d, 0o777)
    def basic():
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
        try:
            os.write(fd, b"hello")
            st = os.fstat(fd)
            return (oct(st.st_mode), st.st_nlink, os.pread(fd, 5, 0),
                    sorted(os.listdir(d)))
        finally:
            os.close(fd)
    t(d + " tmpfile", basic)
    def named():
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
        try:
            os.write(fd, b"linked")
            link(fd, d + "/named")
            link(fd, d + "/again", empty=True)
            st = os.fstat(fd)
            return (st.st_nlink, st.st_ino == os.stat(d + "/named").st_ino,
                    open(d + "/again", "rb").read())
        finally:
            os.close(fd)
    t(d + " link", named)
    def excl():
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
        try:
            link(fd, d + "/nope")
        finally:
            os.close(fd)
    t(d + " O_EXCL link", excl)
    def over():
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
        try:
            link(fd, d + "/named")
        finally:
            os.close(fd)
    t(d + " link over a name", over)
    def py():
        with tempfile.TemporaryFile(dir=d) as f:
            f.write(b"x" * 100000); f.seek(0); return len(f.read())
    t(d + " TemporaryFile", py)
    t(d + " O_RDONLY", lambda: os.open(d, os.O_TMPFILE | os.O_RDONLY, 0o600))
    t(d + " O_WRONLY", lambda: os.close(
        os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o600)))
    t(d + " on a file", lambda: os.open(d + "/named",
                                        os.O_TMPFILE | os.O_RDWR, 0o600))
    t(d + " listing", lambda: sorted(os.listdir(d)))
)";
  Same("O_TMPFILE by root", code, kRoot);
  Same("O_TMPFILE by 65534", R"(
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
os.umask(0o022)
def named():
    fd = os.open("t/up", os.O_TMPFILE | os.O_RDWR, 0o666)
    try:
        if libc.linkat(-100, ("/proc/self/fd/%d" % fd).encode(), -100,
                       b"t/up/bynobody", 0x400) != 0:
            e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)
    return m("t/up/bynobody")
t("tmpfile by 65534", named)
t("in a directory not writable", lambda: os.open("t/rootonly",
  os.O_TMPFILE | os.O_RDWR, 0o600))
)",
       kNobody);
  SameTrees("after the temporary files");
  // Nothing is left behind in the work area once every file is closed.
  EXPECT_TRUE(Entries(sandbox().work() + "/acqfs-tmp").empty());
}

ACQFS_IN_BOTH_FILE_MODES(Tmpfile);

// ------------------------------------------------------------ file handles

using FileHandles = PosixOracle;

// name_to_handle_at and open_by_handle_at of what the kernel still knows:
// a file held open, a file and a directory just looked up, the root; a
// handle of an unlinked file and a forged one are ESTALE. As on ext4
// (docs/architecture.md, "Choices": a handle outlives neither the kernel's
// inode nor the daemon).
TEST_P(FileHandles, OpenWhatTheKernelStillKnows) {
  Same("file handles", R"(
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class FH(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int),
                ("f", ctypes.c_ubyte * 128)]
def handle(p):
    h = FH(); h.bytes = 128; mid = ctypes.c_int()
    if libc.name_to_handle_at(-100, p.encode(), ctypes.byref(h),
                              ctypes.byref(mid), 0) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return h
root = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
def by_handle(h, flags=os.O_RDONLY):
    r = libc.open_by_handle_at(root, ctypes.byref(h), flags)
    if r < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return r
os.mkdir("t/d"); open("t/f", "w").write("hello")
def cycle(p, held, flags=os.O_RDONLY):
    fd = os.open(p, os.O_RDONLY) if held else None
    try:
        g = by_handle(handle(p), flags)
        same = os.fstat(g).st_ino == os.stat(p).st_ino
        data = None if flags & os.O_DIRECTORY else os.read(g, 10)
        os.close(g)
        return (same, data)
    finally:
        if fd is not None:
            os.close(fd)
t("file held open", lambda: cycle("t/f", True))
t("file looked up", lambda: cycle("t/f", False))
t("directory", lambda: cycle("t/d", False, os.O_RDONLY | os.O_DIRECTORY))
t("root", lambda: cycle(".", False, os.O_RDONLY | os.O_DIRECTORY))
def unlinked():
    open("t/g", "w").write("x"); h = handle("t/g"); os.unlink("t/g")
    return by_handle(h)
t("unlinked", unlinked)
def forged():
    h = handle("t/f")
    for i in range(h.bytes):
        h.f[i] ^= 0x5a
    return by_handle(h)
t("forged", forged)
)",
       kRoot);
}

ACQFS_IN_BOTH_FILE_MODES(FileHandles);

}  // namespace
}  // namespace acqfs::test
