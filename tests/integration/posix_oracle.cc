// The POSIX oracle's shared parts (tests/integration/posix_oracle.h).
#include "integration/posix_oracle.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace acqfs::test {

const char kPrelude[] = R"(
import errno, hashlib, os, shutil, stat, sys
os.chdir(sys.argv[1])
def t(label, f):
    try:
        r = f()
        print(label + ": ok" + ("" if r is None else " " + str(r)))
    except OSError as e:
        print(label + ": " + errno.errorcode.get(e.errno, str(e.errno)))
def m(p, **kw):
    st = os.lstat(p, **kw)
    return "%o %d:%d" % (st.st_mode, st.st_uid, st.st_gid)
def touch(p, mode=0o644):
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, mode))
def append(p, data=b"more\n"):
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
def r(a, b):
    # A rename, then what each name shows (and what a moved directory holds).
    t("rename %s %s" % (a, b), lambda: os.rename(a, b))
    t("  %s" % a, lambda: m(a))
    t("  %s" % b, lambda: m(b))
    t("  %s/inside" % b, lambda: open(b + "/inside").read().strip()
      if os.path.isdir(b) else None)
def deep(top, names):
    # Makes the directories `names` nested below `top`, one at a time
    # through directory descriptors; returns a descriptor of the last.
    d = os.open(top, os.O_PATH | os.O_DIRECTORY)
    for n in names:
        os.mkdir(n, dir_fd=d)
        nd = os.open(n, os.O_PATH | os.O_DIRECTORY, dir_fd=d)
        os.close(d)
        d = nd
    return d
)";

// Lists "t" through directory descriptors (so no path length limit); a
// name longer than 16 bytes shows as its first three and its length.
const char kListing[] = R"(
def short(p):
    out = []
    for c in p.split("/"):
        c = c if len(c) <= 16 else "%s~%d" % (c[:3], len(c))
        if out and out[-1][0] == c:
            out[-1][1] += 1
        else:
            out.append([c, 1])
    return "/".join(c if n == 1 else "%s*%d" % (c, n) for c, n in out)
out = []
for top, dirs, files, dfd in os.fwalk("t", follow_symlinks=False):
    dirs.sort()
    for n in sorted(dirs + files):
        st = os.lstat(n, dir_fd=dfd)
        line = "%s %o %d:%d" % (short(top + "/" + n), st.st_mode, st.st_uid,
                                st.st_gid)
        if stat.S_ISREG(st.st_mode):
            fd = os.open(n, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
            data = b""
            while True:
                b = os.read(fd, 65536)
                if not b:
                    break
                data += b
            xs = sorted(x for x in os.listxattr(fd) if x.startswith("user."))
            os.close(fd)
            line += " size %d links %d %s %s" % (
                st.st_size, st.st_nlink, hashlib.sha1(data).hexdigest()[:12],
                ",".join(xs))
        elif stat.S_ISLNK(st.st_mode):
            line += " -> " + os.readlink(n, dir_fd=dfd)
        out.append(line)
print("\n".join(out))
)";

namespace {

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

std::string Differences(const std::string& mnt, const std::string& disk) {
  std::vector<std::string> a = SplitLines(mnt), b = SplitLines(disk);
  std::string out;
  int shown = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()) && shown < 40; ++i) {
    const std::string x = i < a.size() ? a[i] : "(none)";
    const std::string y = i < b.size() ? b[i] : "(none)";
    if (x == y) continue;
    out += "  line " + std::to_string(i + 1) +
           ":\n    mount: " + x.substr(0, 400) +
           "\n    disk:  " + y.substr(0, 400) + "\n";
    ++shown;
  }
  return out;
}

}  // namespace acqfs::test
