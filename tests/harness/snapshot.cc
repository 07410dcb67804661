#include "harness/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iomanip>
#include <memory>
#include <set>
#include <sstream>

#include "harness/fs_util.h"

namespace acqfs::test {
namespace {

constexpr char kHeader[] = "acqfs-snapshot 1";

char TypeChar(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return 'f';
    case S_IFDIR:
      return 'd';
    case S_IFLNK:
      return 'l';
    case S_IFIFO:
      return 'p';
    case S_IFSOCK:
      return 's';
    case S_IFCHR:
      return 'c';
    case S_IFBLK:
      return 'b';
    default:
      return '?';
  }
}

int64_t Nanos(const timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "." ? name : dir + "/" + name;
}

// ---- text helpers shared by Serialize, Parse and the diff ----

// Escapes bytes outside '!'..'~' and the separators %, = and , as %XX.
std::string Escape(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x21 || c > 0x7e || c == '%' || c == '=' || c == ',') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

bool Unescape(const std::string& s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      *out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return false;
    *out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return true;
}

std::string Hex(const std::string& bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

std::string Octal(uint32_t mode) {
  std::ostringstream s;
  s << '0' << std::oct << mode;
  return s.str();
}

std::string Hash64(uint64_t h) {
  std::ostringstream s;
  s << std::hex << h;
  return s.str();
}

std::string TimeText(int64_t ns) {
  std::ostringstream s;
  s << ns / 1000000000 << '.' << std::setfill('0') << std::setw(9)
    << (ns % 1000000000 + 1000000000) % 1000000000;
  return s.str();
}

std::string XattrsText(const std::map<std::string, std::string>& xattrs) {
  std::string out;
  for (const auto& [name, value] : xattrs) {
    if (!out.empty()) out += ',';
    out += Escape(name) + "=" + Hex(value);
  }
  return out;
}

std::vector<std::string> SplitKeepEmpty(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// ---- the walk ----

using HashState = std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)>;

class Walker {
 public:
  Walker(const std::string& root, const SnapshotOptions& options,
         TreeSnapshot* snap)
      : root_(root),
        options_(options),
        snap_(snap),
        skip_(options.skip.begin(), options.skip.end()) {}

  void Run() {
    Visit(".");
    if (options_.link_groups) AssignLinkGroups();
  }

 private:
  std::string Abs(const std::string& rel) const {
    return rel == "." ? root_ : root_ + "/" + rel;
  }

  void Error(const std::string& rel, const std::string& op, int err) {
    snap_->errors.push_back(rel + ": " + op + ": " + ErrnoName(err));
  }
  void Error(const std::string& message) { snap_->errors.push_back(message); }

  void Visit(const std::string& rel) {
    if (skip_.count(rel)) return;
    const std::string abs = Abs(rel);
    struct stat st;
    if (::lstat(abs.c_str(), &st) != 0) return Error(rel, "lstat", errno);
    snap_->entries[rel] = Describe(abs, rel, st);
    if (!S_ISDIR(st.st_mode)) return;
    std::vector<std::string> names;
    if (auto r = ListDir(abs, &names); !r) return Error(r.message());
    for (const auto& name : names) Visit(Join(rel, name));
  }

  EntryInfo Describe(const std::string& abs, const std::string& rel,
                     const struct stat& st) {
    EntryInfo e;
    const bool dir = S_ISDIR(st.st_mode);
    e.type = TypeChar(st.st_mode);
    e.mode = st.st_mode & 07777;
    e.size = dir && !options_.dir_size ? 0 : static_cast<uint64_t>(st.st_size);
    if (options_.owner) {
      e.uid = st.st_uid;
      e.gid = st.st_gid;
    }
    if (!dir || options_.dir_times) RecordTimes(st, &e);
    if (!dir) RecordIdentity(rel, st, &e);
    if (S_ISREG(st.st_mode) && options_.content) HashContent(abs, rel, &e);
    if (S_ISLNK(st.st_mode)) ReadTarget(abs, rel, &e);
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      e.rdev = std::to_string(major(st.st_rdev)) + "," +
               std::to_string(minor(st.st_rdev));
    }
    if (options_.xattrs) RecordXattrs(abs, rel, &e);
    return e;
  }

  void RecordTimes(const struct stat& st, EntryInfo* e) const {
    if (options_.mtime) e->mtime_ns = Nanos(st.st_mtim);
    if (options_.ctime) e->ctime_ns = Nanos(st.st_ctim);
    if (options_.atime) e->atime_ns = Nanos(st.st_atim);
  }

  void RecordIdentity(const std::string& rel, const struct stat& st,
                      EntryInfo* e) {
    if (options_.ino) e->ino = st.st_ino;
    if (options_.nlink) e->nlink = st.st_nlink;
    if (st.st_nlink > 1) inodes_[{st.st_dev, st.st_ino}].push_back(rel);
  }

  void HashContent(const std::string& abs, const std::string& rel,
                   EntryInfo* e) {
    ScopedFd fd(::open(abs.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return Error(rel, "open", errno);
    HashState state(XXH3_createState(), &XXH3_freeState);
    XXH3_64bits_reset(state.get());
    std::vector<char> buf(1 << 20);
    for (;;) {
      ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Error(rel, "read", errno);
      if (n == 0) break;
      XXH3_64bits_update(state.get(), buf.data(), static_cast<size_t>(n));
    }
    e->content_hash = XXH3_64bits_digest(state.get());
  }

  void ReadTarget(const std::string& abs, const std::string& rel,
                  EntryInfo* e) {
    std::vector<char> buf(4096);
    ssize_t n = ::readlink(abs.c_str(), buf.data(), buf.size());
    if (n < 0) return Error(rel, "readlink", errno);
    e->target.assign(buf.data(), static_cast<size_t>(n));
  }

  void RecordXattrs(const std::string& abs, const std::string& rel,
                    EntryInfo* e) {
    if (::llistxattr(abs.c_str(), nullptr, 0) < 0 && errno == ENOTSUP) {
      return;  // no xattrs on this file system
    }
    std::vector<std::string> names;
    if (auto r = ListXattrs(abs, &names); !r) return Error(r.message());
    for (const auto& name : names) {
      if (options_.user_xattrs_only && name.rfind("user.", 0) != 0) continue;
      std::string value;
      if (auto r = GetXattr(abs, name, &value); !r) return Error(r.message());
      e->xattrs[name] = value;
    }
  }

  void AssignLinkGroups() {
    for (auto& [key, paths] : inodes_) {
      std::sort(paths.begin(), paths.end());
      for (const auto& p : paths) snap_->entries[p].link_group = paths.front();
    }
  }

  const std::string root_;
  const SnapshotOptions& options_;
  TreeSnapshot* const snap_;
  const std::set<std::string> skip_;
  std::map<std::pair<dev_t, ino_t>, std::vector<std::string>> inodes_;
};

// ---- comparison ----

struct Field {
  const char* name;
  std::string (*show)(const EntryInfo&);
};

std::string Shorten(const std::string& s) {
  return s.size() <= 80 ? s : s.substr(0, 80) + "...";
}

const Field kFields[] = {
    {"type", [](const EntryInfo& e) { return std::string(1, e.type); }},
    {"mode", [](const EntryInfo& e) { return Octal(e.mode); }},
    {"size", [](const EntryInfo& e) { return std::to_string(e.size); }},
    {"content", [](const EntryInfo& e) { return Hash64(e.content_hash); }},
    {"symlink target", [](const EntryInfo& e) { return "'" + e.target + "'"; }},
    {"rdev", [](const EntryInfo& e) { return e.rdev; }},
    {"uid", [](const EntryInfo& e) { return std::to_string(e.uid); }},
    {"gid", [](const EntryInfo& e) { return std::to_string(e.gid); }},
    {"mtime", [](const EntryInfo& e) { return TimeText(e.mtime_ns); }},
    {"ctime", [](const EntryInfo& e) { return TimeText(e.ctime_ns); }},
    {"atime", [](const EntryInfo& e) { return TimeText(e.atime_ns); }},
    {"ino", [](const EntryInfo& e) { return std::to_string(e.ino); }},
    {"nlink", [](const EntryInfo& e) { return std::to_string(e.nlink); }},
    {"hard-link group", [](const EntryInfo& e) { return e.link_group; }},
    {"xattrs",
     [](const EntryInfo& e) {
       std::string s;
       for (const auto& [k, v] : e.xattrs) s += " " + k + "=" + Escape(v);
       return "{" + Shorten(s) + " }";
     }},
};

void DiffEntry(const std::string& path, const EntryInfo& a, const EntryInfo& b,
               std::vector<std::string>* lines) {
  for (const Field& f : kFields) {
    std::string va = f.show(a), vb = f.show(b);
    if (va != vb) {
      lines->push_back(path + ": " + f.name + " " + va + " != " + vb);
    }
  }
}

std::vector<std::string> DiffLines(const TreeSnapshot& a,
                                   const TreeSnapshot& b) {
  std::vector<std::string> lines;
  for (const auto& e : a.errors) lines.push_back("error in A: " + e);
  for (const auto& e : b.errors) lines.push_back("error in B: " + e);
  auto ia = a.entries.begin(), ib = b.entries.begin();
  while (ia != a.entries.end() || ib != b.entries.end()) {
    if (ib == b.entries.end() ||
        (ia != a.entries.end() && ia->first < ib->first)) {
      lines.push_back("only in A: " + ia->first + " (" + ia->second.type + ")");
      ++ia;
    } else if (ia == a.entries.end() || ib->first < ia->first) {
      lines.push_back("only in B: " + ib->first + " (" + ib->second.type + ")");
      ++ib;
    } else {
      if (!(ia->second == ib->second)) {
        DiffEntry(ia->first, ia->second, ib->second, &lines);
      }
      ++ia;
      ++ib;
    }
  }
  return lines;
}

// ---- text form ----

std::string EntryLine(const std::string& path, const EntryInfo& e) {
  std::ostringstream s;
  s << "E\t" << Escape(path) << '\t' << e.type << '\t' << Octal(e.mode) << '\t'
    << e.size << '\t' << Hash64(e.content_hash) << '\t' << Escape(e.target)
    << '\t' << e.rdev << '\t' << e.uid << '\t' << e.gid << '\t' << e.mtime_ns
    << '\t' << e.ctime_ns << '\t' << e.atime_ns << '\t' << e.ino << '\t'
    << e.nlink << '\t' << Escape(e.link_group) << '\t' << XattrsText(e.xattrs)
    << '\n';
  return s.str();
}

bool ParseXattrs(const std::string& text,
                 std::map<std::string, std::string>* xattrs) {
  if (text.empty()) return true;
  for (const auto& item : SplitKeepEmpty(text, ',')) {
    size_t eq = item.find('=');
    std::string name;
    if (eq == std::string::npos || !Unescape(item.substr(0, eq), &name)) {
      return false;
    }
    (*xattrs)[name] = FromHex(item.substr(eq + 1));
  }
  return true;
}

// Parses the fields after "E"; false on a malformed line.
bool ParseEntry(const std::vector<std::string>& f, std::string* path,
                EntryInfo* e) {
  if (f.size() != 17 || f[2].size() != 1) return false;
  if (!Unescape(f[1], path) || !Unescape(f[6], &e->target) ||
      !Unescape(f[15], &e->link_group)) {
    return false;
  }
  e->type = f[2][0];
  e->mode = static_cast<uint32_t>(std::stoul(f[3], nullptr, 8));
  e->size = std::stoull(f[4]);
  e->content_hash = std::stoull(f[5], nullptr, 16);
  e->rdev = f[7];
  e->uid = static_cast<uint32_t>(std::stoul(f[8]));
  e->gid = static_cast<uint32_t>(std::stoul(f[9]));
  e->mtime_ns = std::stoll(f[10]);
  e->ctime_ns = std::stoll(f[11]);
  e->atime_ns = std::stoll(f[12]);
  e->ino = std::stoull(f[13]);
  e->nlink = std::stoull(f[14]);
  return ParseXattrs(f[16], &e->xattrs);
}

void ParseLine(const std::string& line, size_t number, TreeSnapshot* snap) {
  std::vector<std::string> f = SplitKeepEmpty(line, '\t');
  std::string text;
  if (f[0] == "!" && f.size() == 2 && Unescape(f[1], &text)) {
    snap->errors.push_back(text);
    return;
  }
  std::string path;
  EntryInfo e;
  bool ok = false;
  try {
    ok = f[0] == "E" && ParseEntry(f, &path, &e);
  } catch (const std::exception&) {  // std::stoi and friends
    ok = false;
  }
  if (!ok) {
    snap->errors.push_back("snapshot text line " + std::to_string(number) +
                           " is malformed: " + Shorten(line));
    return;
  }
  snap->entries[path] = std::move(e);
}

}  // namespace

SnapshotOptions SnapshotOptions::Everything() {
  SnapshotOptions o;
  o.ctime = o.ino = o.nlink = o.link_groups = o.dir_size = true;
  return o;
}

SnapshotOptions SnapshotOptions::MergedView() {
  SnapshotOptions o;
  o.mtime = false;
  o.user_xattrs_only = true;
  return o;
}

SnapshotOptions SnapshotOptions::CheckoutOutsideGit() {
  SnapshotOptions o = Everything();
  o.skip = {".git"};
  return o;
}

SnapshotOptions SnapshotOptions::GitDirContent() {
  SnapshotOptions o = Everything();
  o.ino = false;
  o.link_groups = false;
  o.mtime = false;
  o.ctime = false;
  o.dir_times = false;
  return o;
}

TreeSnapshot Snapshot(const std::string& root, const SnapshotOptions& options) {
  TreeSnapshot snap;
  snap.root = root;
  Walker(root, options, &snap).Run();
  return snap;
}

const EntryInfo* TreeSnapshot::Find(const std::string& rel) const {
  auto it = entries.find(rel);
  return it == entries.end() ? nullptr : &it->second;
}

std::string TreeSnapshot::Serialize() const {
  std::string text = std::string(kHeader) + "\n";
  for (const auto& [path, e] : entries) text += EntryLine(path, e);
  for (const auto& e : errors) text += "!\t" + Escape(e) + "\n";
  return text;
}

TreeSnapshot TreeSnapshot::Parse(const std::string& text,
                                 const std::string& root) {
  TreeSnapshot snap;
  snap.root = root;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) {
    snap.errors.push_back("not a snapshot (header missing): " + Shorten(text));
    return snap;
  }
  for (size_t number = 2; std::getline(in, line); ++number) {
    if (!line.empty()) ParseLine(line, number, &snap);
  }
  return snap;
}

TreeSnapshot Subtree(const TreeSnapshot& snap, const std::string& rel) {
  TreeSnapshot sub;
  sub.root = snap.root + "/" + rel;
  sub.errors = snap.errors;
  const std::string prefix = rel + "/";
  for (const auto& [path, e] : snap.entries) {
    if (path == rel) {
      sub.entries["."] = e;
    } else if (path.compare(0, prefix.size(), prefix) == 0) {
      sub.entries[path.substr(prefix.size())] = e;
    }
  }
  return sub;
}

std::string DiffSnapshots(const TreeSnapshot& a, const TreeSnapshot& b,
                          size_t max_lines) {
  std::vector<std::string> lines = DiffLines(a, b);
  if (lines.empty()) return "";
  std::string text = std::to_string(lines.size()) +
                     " difference(s) between A=" + a.root + " and B=" + b.root +
                     ":\n";
  for (size_t i = 0; i < lines.size() && i < max_lines; ++i) {
    text += "  " + lines[i] + "\n";
  }
  if (lines.size() > max_lines) {
    text += "  ... and " + std::to_string(lines.size() - max_lines) + " more\n";
  }
  return text;
}

::testing::AssertionResult SnapshotsEqual(const TreeSnapshot& a,
                                          const TreeSnapshot& b,
                                          size_t max_lines) {
  std::string diff = DiffSnapshots(a, b, max_lines);
  if (diff.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diff;
}

}  // namespace acqfs::test
