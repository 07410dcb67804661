#include "gitbridge/layer_odb.h"

#include <dirent.h>
#include <fcntl.h>
#include <git2/sys/odb_backend.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/git_ptr.h"
#include "common/sys.h"

namespace acqfs::gitbridge {
namespace {

// zlib cannot expand data by more than about 1032:1, so a header that
// claims more than this per compressed byte is a lie (and is refused before
// anything that large is allocated).
constexpr uint64_t kMaxInflateRatio = 1100;
constexpr size_t kHeaderProbe = 64;  // inflated bytes that hold any header

// The libgit2 error for a failure of this backend. `rc` is GIT_ENOTFOUND or
// GIT_ERROR.
int Fail(int rc, const std::string& message) {
  git_error_set_str(GIT_ERROR_ODB, message.c_str());
  return rc;
}

// ---- loose objects ----------------------------------------------------

struct LooseBackend {
  git_odb_backend parent;  // first: libgit2 hands back &parent
  UniqueFd root;           // duplicate of the layer's root
  std::string root_path;   // for messages
  std::string dir;         // the objects directory, relative to root
};

LooseBackend* Loose(git_odb_backend* b) {
  return reinterpret_cast<LooseBackend*>(b);
}

std::string LooseRel(const LooseBackend* b, const git_oid* id) {
  std::string hex = OidHex(*id);
  return b->dir + "/" + hex.substr(0, 2) + "/" + hex.substr(2);
}

std::string ShownRel(const LooseBackend* b, const std::string& rel) {
  return b->root_path + "/" + rel;
}

// Opens the object file of `id`: GIT_ENOTFOUND when there is no regular
// file there (a whiteout or FIFO counts as none), GIT_ERROR for a symlink on
// the way or any other failure.
int OpenLoose(LooseBackend* b, const git_oid* id, UniqueFd* out,
              struct stat* st) {
  std::string rel = LooseRel(b, id);
  // O_NONBLOCK: a FIFO planted under an object's name must not hang us.
  auto fd = sys::OpenBeneath(b->root.get(), rel,
                             O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0,
                             ShownRel(b, rel));
  if (!fd) {
    int e = fd.err();
    if (e == ENOENT || e == ENOTDIR || e == ENXIO || e == ENODEV)
      return Fail(GIT_ENOTFOUND, "object not found: " + ShownRel(b, rel));
    if (e == ELOOP || e == EXDEV)
      return Fail(GIT_ERROR,
                  "symlink in the sandbox's object store, not followed: " +
                      ShownRel(b, rel));
    return Fail(GIT_ERROR, fd.error().Message());
  }
  auto s = sys::Fstat(fd->get(), ShownRel(b, rel));
  if (!s) return Fail(GIT_ERROR, s.error().Message());
  if (!S_ISREG(s->st_mode))
    return Fail(GIT_ENOTFOUND, "object not found: " + ShownRel(b, rel));
  *st = *s;
  *out = std::move(*fd);
  return 0;
}

struct LooseHeader {
  git_object_t type = GIT_OBJECT_INVALID;
  uint64_t size = 0;
  size_t length = 0;  // bytes of "<type> <size>\0"
};

// Parses "<type> <decimal size>\0" as git writes it (no sign, no leading
// zero but for "0").
bool ParseHeader(const unsigned char* p, size_t n, LooseHeader* h) {
  size_t i = 0;
  while (i < n && p[i] != ' ') ++i;
  if (i == n || i == 0) return false;
  std::string type(reinterpret_cast<const char*>(p), i);
  h->type = git_object_string2type(type.c_str());
  if (h->type != GIT_OBJECT_BLOB && h->type != GIT_OBJECT_TREE &&
      h->type != GIT_OBJECT_COMMIT && h->type != GIT_OBJECT_TAG)
    return false;
  size_t start = ++i;
  uint64_t size = 0;
  while (i < n && p[i] >= '0' && p[i] <= '9') {
    if (size > (UINT64_MAX - 9) / 10) return false;
    size = size * 10 + (p[i] - '0');
    ++i;
  }
  if (i == start || i == n || p[i] != '\0') return false;
  if (p[start] == '0' && i - start > 1) return false;
  h->size = size;
  h->length = i + 1;
  return true;
}

// Inflates a loose object file as it reads it, 64 KiB at a time, so that
// neither a sparse giant file nor a lying header costs memory.
class LooseReader {
 public:
  explicit LooseReader(int fd) : fd_(fd), in_(64 * 1024) {
    ok_ = ::inflateInit(&z_) == Z_OK;
  }
  ~LooseReader() {
    if (ok_) ::inflateEnd(&z_);
  }
  LooseReader(const LooseReader&) = delete;
  LooseReader& operator=(const LooseReader&) = delete;

  bool ok() const { return ok_; }
  bool ended() const { return ended_; }
  int read_errno() const { return read_errno_; }

  // Fills `out` (`cap` bytes) as far as the stream goes: how many bytes came
  // out, or -1 for corrupt data or a failed read (read_errno() != 0).
  long Read(unsigned char* out, size_t cap) {
    z_.next_out = out;
    z_.avail_out = static_cast<uInt>(cap);
    while (z_.avail_out > 0 && !ended_) {
      if (z_.avail_in == 0 && !eof_) {
        ssize_t n = ::pread(fd_, in_.data(), in_.size(), off_);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          read_errno_ = errno;
          return -1;
        }
        if (n == 0) eof_ = true;
        off_ += n;
        z_.next_in = in_.data();
        z_.avail_in = static_cast<uInt>(n);
      }
      int rc = ::inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc == Z_BUF_ERROR) {
        if (z_.avail_in > 0) return -1;
        if (eof_) break;  // the file ends before the stream does
      } else if (rc != Z_OK) {
        return -1;
      }
    }
    return static_cast<long>(cap - z_.avail_out);
  }

 private:
  int fd_;
  std::vector<unsigned char> in_;
  z_stream z_{};
  off_t off_ = 0;
  bool ok_ = false;
  bool eof_ = false;
  bool ended_ = false;
  int read_errno_ = 0;
};

std::string Corrupt(const LooseBackend* b, const git_oid* id,
                    const std::string& why) {
  return "corrupt loose object " + OidHex(*id) + " (" + why +
         "): " + ShownRel(b, LooseRel(b, id));
}

// Reads the header only (`data` null) or the whole object, which must hash
// to `id`.
int ReadLoose(LooseBackend* b, const git_oid* id, void** data, size_t* len,
              git_object_t* type) {
  UniqueFd fd;
  struct stat st;
  if (int rc = OpenLoose(b, id, &fd, &st); rc < 0) return rc;
  std::string shown = ShownRel(b, LooseRel(b, id));
  LooseReader r(fd.get());
  if (!r.ok()) return Fail(GIT_ERROR, "zlib: cannot start inflating");
  auto failed = [&](const char* why) {
    if (r.read_errno())
      return Fail(GIT_ERROR,
                  Error::Of(r.read_errno(), "read", shown).Message());
    return Fail(GIT_ERROR, Corrupt(b, id, why));
  };
  unsigned char probe[kHeaderProbe];
  long n = r.Read(probe, sizeof probe);
  LooseHeader h;
  if (n < 0 || !ParseHeader(probe, static_cast<size_t>(n), &h))
    return failed("bad header");
  if (h.size > kMaxInflateRatio * (static_cast<uint64_t>(st.st_size) + 1))
    return failed("larger than its compressed size allows");
  *type = h.type;
  *len = static_cast<size_t>(h.size);
  if (!data) return 0;

  size_t size = static_cast<size_t>(h.size);
  size_t have = static_cast<size_t>(n) - h.length;
  if (have > size) return failed("longer than its header says");
  auto* buf = static_cast<unsigned char*>(
      git_odb_backend_data_alloc(&b->parent, size + 1));
  if (!buf) return failed("out of memory");
  std::memcpy(buf, probe + h.length, have);
  const char* why = nullptr;
  long m = r.Read(buf + have, size - have);
  if (m < 0) {
    why = "bad compressed data";
  } else {
    have += static_cast<size_t>(m);
    unsigned char extra;
    if (have != size || (!r.ended() && r.Read(&extra, 1) != 0) || !r.ended())
      why = "not as long as its header says";
  }
  git_oid actual;
  if (!why && (git_odb_hash(&actual, buf, size, h.type) < 0 ||
               !git_oid_equal(&actual, id)))
    why = "content does not match its id";
  if (why) {
    git_odb_backend_data_free(&b->parent, buf);
    return failed(why);
  }
  buf[size] = '\0';
  *data = buf;
  return 0;
}

int LooseReadCb(void** data, size_t* len, git_object_t* type,
                git_odb_backend* b, const git_oid* id) {
  return ReadLoose(Loose(b), id, data, len, type);
}

int LooseReadHeaderCb(size_t* len, git_object_t* type, git_odb_backend* b,
                      const git_oid* id) {
  return ReadLoose(Loose(b), id, nullptr, len, type);
}

// libgit2 reads any non-zero answer of `exists` as "found" (odb.c casts it
// to bool), so every failure, a symlink on the way included, answers 0.
int LooseExistsCb(git_odb_backend* b, const git_oid* id) {
  UniqueFd fd;
  struct stat st;
  if (OpenLoose(Loose(b), id, &fd, &st) < 0) {
    git_error_clear();
    return 0;
  }
  return 1;
}

void LooseFreeCb(git_odb_backend* b) { delete Loose(b); }

Result<git_odb_backend*> NewLooseBackend(const Layer& layer,
                                         const std::string& rel) {
  auto b = std::make_unique<LooseBackend>();
  if (git_odb_init_backend(&b->parent, GIT_ODB_BACKEND_VERSION) < 0)
    return GitError(-1, "new object backend", layer.Shown(rel));
  int fd = ::fcntl(layer.root(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Error::Errno("dup", layer.root_path());
  b->root = UniqueFd(fd);
  b->root_path = layer.root_path();
  b->dir = rel;
  b->parent.read = LooseReadCb;
  b->parent.read_header = LooseReadHeaderCb;
  b->parent.exists = LooseExistsCb;
  b->parent.free = LooseFreeCb;
  return &b.release()->parent;
}

// ---- packs ------------------------------------------------------------

// libgit2's pack backend over a private directory whose pack/ holds links
// to descriptors opened through the layer. Forwards every call to it, and
// releases the descriptors and the directory only when libgit2 frees the
// backend: libgit2 opens the links lazily, at any time until then.
struct PackBackend {
  git_odb_backend parent;  // first
  git_odb_backend* inner = nullptr;
  std::vector<UniqueFd> files;
  std::string links;  // the private objects directory ("" once removed)

  ~PackBackend() {
    if (inner) inner->free(inner);
    files.clear();
    if (!links.empty()) {
      auto d = sys::OpenDirPath(sys::Dirname(links), O_RDONLY);
      if (d) (void)sys::RemoveTree(d->get(), sys::Basename(links), links);
    }
  }
};

PackBackend* Pack(git_odb_backend* b) {
  return reinterpret_cast<PackBackend*>(b);
}

git_odb_backend* Inner(git_odb_backend* b) {
  PackBackend* p = Pack(b);
  p->inner->odb = p->parent.odb;
  return p->inner;
}

int PackReadCb(void** data, size_t* len, git_object_t* type, git_odb_backend* b,
               const git_oid* id) {
  git_odb_backend* in = Inner(b);
  return in->read(data, len, type, in, id);
}

int PackReadPrefixCb(git_oid* out, void** data, size_t* len, git_object_t* type,
                     git_odb_backend* b, const git_oid* id, size_t n) {
  git_odb_backend* in = Inner(b);
  return in->read_prefix(out, data, len, type, in, id, n);
}

int PackReadHeaderCb(size_t* len, git_object_t* type, git_odb_backend* b,
                     const git_oid* id) {
  git_odb_backend* in = Inner(b);
  return in->read_header(len, type, in, id);
}

int PackExistsCb(git_odb_backend* b, const git_oid* id) {
  git_odb_backend* in = Inner(b);
  return in->exists(in, id) == 1 ? 1 : 0;
}

int PackExistsPrefixCb(git_oid* out, git_odb_backend* b, const git_oid* id,
                       size_t n) {
  git_odb_backend* in = Inner(b);
  return in->exists_prefix(out, in, id, n);
}

void PackFreeCb(git_odb_backend* b) { delete Pack(b); }

// A pack truncated by the sandbox while libgit2 has it mapped raises
// SIGBUS in our process. Say what happened instead of dying silently; the
// export writes refs only after it has read the sandbox, so nothing was
// published.
void OnSigbus(int) {
  static const char msg[] =
      "acqfs: a pack in the sandbox's object store shrank while it was read "
      "(SIGBUS); stopped before publishing anything\n";
  ssize_t ignored = ::write(2, msg, sizeof msg - 1);
  (void)ignored;
  ::_exit(2);
}

void GuardSigbus() {
  struct sigaction old {};
  if (::sigaction(SIGBUS, nullptr, &old) != 0) return;
  if (old.sa_handler != SIG_DFL) return;
  struct sigaction sa {};
  sa.sa_handler = OnSigbus;
  ::sigemptyset(&sa.sa_mask);
  (void)::sigaction(SIGBUS, &sa, nullptr);
}

bool IsPackIdx(const std::string& name) {
  constexpr size_t kPrefix = 5, kSuffix = 4;  // "pack-", ".idx"
  if (name.size() <= kPrefix + kSuffix || name.rfind("pack-", 0) != 0 ||
      name.compare(name.size() - kSuffix, kSuffix, ".idx") != 0)
    return false;
  for (size_t i = kPrefix; i < name.size() - kSuffix; ++i) {
    char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Opens `name` in the pack directory: a regular file, or nothing.
Result<UniqueFd> OpenPackFile(int dirfd, const std::string& name,
                              const std::string& shown) {
  int fd = ::openat(dirfd, name.c_str(),
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ELOOP || errno == ENXIO || errno == ENODEV)
      return UniqueFd();
    return Error::Errno("open", shown);
  }
  UniqueFd owned(fd);
  auto st = sys::Fstat(fd, shown);
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode)) return UniqueFd();
  return owned;
}

Status LinkTo(const std::string& link, int fd) {
  std::string target = "/proc/self/fd/" + std::to_string(fd);
  if (::symlink(target.c_str(), link.c_str()) != 0)
    return Error::Errno("symlink", link);
  return Ok();
}

std::string TempRoot() {
  const char* t = ::getenv("TMPDIR");
  std::string dir = t && *t == '/' ? t : "/tmp";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

constexpr char kLinkDirPrefix[] = "acqfs-packs-";

// Removes the link directories that exports killed before their clean-up
// left behind: "acqfs-packs-<pid>-*" of ours whose process is gone. Best
// effort: what cannot be removed stays for the system's tmp cleaner.
void RemoveStaleLinkDirs(const std::string& root) {
  auto dir = sys::OpenDirPath(root, O_RDONLY);
  if (!dir) return;
  auto ents = sys::ReadDir(dir->get(), root);
  if (!ents) return;
  const std::string prefix = kLinkDirPrefix;
  for (const auto& e : *ents) {
    if (e.type != DT_DIR || e.name.rfind(prefix, 0) != 0) continue;
    std::string rest = e.name.substr(prefix.size());
    size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos) continue;
    std::string pid = rest.substr(0, dash);
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st;
    if (::fstatat(dir->get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        st.st_uid != ::geteuid())
      continue;
    if (::access(("/proc/" + pid).c_str(), F_OK) == 0) continue;  // alive
    (void)sys::RemoveTree(dir->get(), e.name, root + "/" + e.name);
  }
}

// The packs of `rel`, or nullptr when it holds none.
Result<std::unique_ptr<PackBackend>> OpenPacks(const Layer& layer,
                                               const std::string& rel) {
  std::string pack_rel = rel + "/pack";
  std::string shown = layer.Shown(pack_rel);
  auto dir = layer.OpenDir(pack_rel);
  if (!dir) {
    int e = dir.err();
    // No pack directory, or a symlink (never followed): no packs.
    if (e == ENOENT || e == ENOTDIR || e == ELOOP || e == EXDEV)
      return std::unique_ptr<PackBackend>();
    return dir.error();
  }
  auto ents = sys::ReadDir(dir->get(), shown);
  if (!ents) return ents.error();
  auto p = std::make_unique<PackBackend>();
  std::vector<std::pair<std::string, size_t>> opened;  // idx name, fd index
  for (const auto& e : *ents) {
    if (!IsPackIdx(e.name)) continue;
    std::string base = e.name.substr(0, e.name.size() - 4);
    auto idx = OpenPackFile(dir->get(), e.name, shown + "/" + e.name);
    if (!idx) return idx.error();
    if (!idx->is_valid()) continue;
    auto pack = OpenPackFile(dir->get(), base + ".pack", shown + "/" + base);
    if (!pack) return pack.error();
    if (!pack->is_valid()) continue;
    if (opened.size() == kMaxLayerPacks)
      return Error::Of(EMFILE,
                       "more than " + std::to_string(kMaxLayerPacks) +
                           " packs in the sandbox's object store (run `git "
                           "gc` in the sandbox)",
                       shown);
    opened.emplace_back(base, p->files.size());
    p->files.push_back(std::move(*idx));
    p->files.push_back(std::move(*pack));
  }
  if (opened.empty()) return std::unique_ptr<PackBackend>();

  RemoveStaleLinkDirs(TempRoot());
  std::string tmpl = TempRoot() + "/" + kLinkDirPrefix +
                     std::to_string(::getpid()) + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return Error::Errno("mkdtemp", tmpl);
  p->links = tmpl;
  std::string links_pack = tmpl + "/pack";
  if (::mkdir(links_pack.c_str(), 0700) != 0)
    return Error::Errno("mkdir", links_pack);
  for (const auto& [base, i] : opened) {
    ACQFS_TRY(LinkTo(links_pack + "/" + base + ".idx", p->files[i].get()));
    ACQFS_TRY(LinkTo(links_pack + "/" + base + ".pack", p->files[i + 1].get()));
  }
  int rc = git_odb_backend_pack(&p->inner, tmpl.c_str());
  if (rc < 0) return GitError(rc, "open packs", shown);
  if (git_odb_init_backend(&p->parent, GIT_ODB_BACKEND_VERSION) < 0)
    return GitError(-1, "new object backend", shown);
  p->parent.read = PackReadCb;
  p->parent.read_prefix = PackReadPrefixCb;
  p->parent.read_header = PackReadHeaderCb;
  p->parent.exists = PackExistsCb;
  p->parent.exists_prefix = PackExistsPrefixCb;
  p->parent.free = PackFreeCb;
  GuardSigbus();
  return p;
}

Status Add(git_odb* odb, git_odb_backend* b, int priority,
           const std::string& shown) {
  int rc = git_odb_add_alternate(odb, b, priority);
  if (rc < 0) {
    Error e = GitError(rc, "add object store", shown);
    b->free(b);
    return e;
  }
  return Ok();
}

}  // namespace

Status AddLayerObjects(git_odb* odb, const Layer& layer, const std::string& rel,
                       int pack_priority, int loose_priority) {
  std::string shown = layer.Shown(rel);
  auto packs = OpenPacks(layer, rel);
  if (!packs) return packs.error();
  if (*packs)
    ACQFS_TRY(Add(odb, &packs->release()->parent, pack_priority, shown));
  auto loose = NewLooseBackend(layer, rel);
  if (!loose) return loose.error();
  return Add(odb, *loose, loose_priority, shown);
}

}  // namespace acqfs::gitbridge
