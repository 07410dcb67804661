#include "gitbridge/index_objects.h"

#include <fcntl.h>
#include <git2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "common/git_ptr.h"
#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/quota.h"
#include "gitbridge/index_file.h"

namespace acqfs::gitbridge {
namespace {

constexpr char kTemp[] = "acqfs-object";     // in the work directory
constexpr char kTempDir[] = "acqfs-objdir";  // likewise
constexpr mode_t kObjectMode = 0444;         // as git leaves a loose object

struct OidLess {
  bool operator()(const git_oid& a, const git_oid& b) const {
    return git_oid_cmp(&a, &b) < 0;
  }
};

// A read-only mapping of a whole file; empty for an empty file.
class Mapping {
 public:
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_) ::munmap(data_, size_);
  }
  Status Map(int fd, size_t size, const std::string& shown) {
    if (size == 0) return Ok();
    // Populated at once: the index was just copied, so its pages are in
    // the page cache, and one call maps them all (not a fault a page).
    void* p =
        ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) return Error::Errno("mmap", shown);
    data_ = p;
    size_ = size;
    (void)::madvise(p, size, MADV_SEQUENTIAL);
    return Ok();
  }
  std::string_view bytes() const {
    return {static_cast<const char*>(data_), size_};
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

bool IsFileMode(uint32_t mode) {
  const uint32_t type = mode & 0170000;
  return type == 0100000 || type == 0120000;
}

// The directories of the index whose entries are all HEAD's: a valid
// cache-tree node whose tree is HEAD's tree at that path. Top-down, so a
// match below a matching directory is never looked for. As "dir/" (sorted;
// "" for the whole index).
Result<std::vector<std::string>> DirectoriesAsHead(const IndexFile& index,
                                                   git_tree* head_tree) {
  std::vector<std::string> same;
  if (!head_tree) return same;
  std::string skip;  // below a directory found equal: not looked at
  bool skipping = false;
  for (const CacheTreeNode& n : index.cache_tree()) {
    if (skipping && n.path.compare(0, skip.size(), skip) == 0) continue;
    skipping = false;
    if (!n.valid) continue;
    git_oid head_id;
    if (n.path.empty()) {
      git_oid_cpy(&head_id, git_tree_id(head_tree));
    } else {
      git_tree_entry* raw = nullptr;
      if (git_tree_entry_bypath(&raw, head_tree, n.path.c_str()) != 0) continue;
      GitTreeEntry e(raw);
      if (git_tree_entry_type(e.get()) != GIT_OBJECT_TREE) continue;
      git_oid_cpy(&head_id, git_tree_entry_id(e.get()));
    }
    if (git_oid_equal(&head_id, &n.id)) {
      skip = n.path.empty() ? "" : n.path + "/";
      same.push_back(skip);
      skipping = true;
      if (n.path.empty()) break;
    }
  }
  std::sort(same.begin(), same.end());
  return same;
}

// Writes loose objects into the upper's .git/objects, as git would have
// written them there: each compressed into a temporary file of the work
// directory and renamed into its fan-out directory, made (by a copy-up of
// the host's, when it has one) as needed.
class UpperObjectWriter {
 public:
  UpperObjectWriter(const Layers& layers, int workfd, std::string work,
                    const std::string& gitdir)
      : layers_(layers),
        workfd_(workfd),
        work_(std::move(work)),
        gitdir_(gitdir),
        objects_rel_(gitdir + "/objects") {}

  // True when the upper already holds the object.
  Result<bool> Has(const git_oid& id) {
    const std::string hex = OidHex(id);
    struct stat st;
    bool found = false;
    const std::string rel =
        objects_rel_ + "/" + hex.substr(0, 2) + "/" + hex.substr(2);
    auto dir = FanOut(hex.substr(0, 2), /*make=*/false);
    if (!dir) return dir.error();
    if (!*dir) return false;
    ACQFS_TRY(sys::StatAtIfExists((*dir)->get(), hex.substr(2), &st, &found,
                                  layers_.upper.Shown(rel)));
    return found;
  }

  // Writes the object; returns its size on disk.
  Result<uint64_t> Write(const git_oid& id, git_object_t type,
                         std::string_view data) {
    const std::string hex = OidHex(id);
    const std::string rel =
        objects_rel_ + "/" + hex.substr(0, 2) + "/" + hex.substr(2);
    const std::string shown = layers_.upper.Shown(rel);
    auto dir = FanOut(hex.substr(0, 2), /*make=*/true);
    if (!dir) return dir.error();
    const std::string temp_shown = sys::Join(work_, kTemp);
    UniqueFd out(::openat(workfd_, kTemp,
                          O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                          kObjectMode));
    if (!out) return Error::Errno("create", temp_shown);
    Status s = Deflate(out.get(), type, data, temp_shown);
    if (s && ::fchmod(out.get(), kObjectMode) != 0)
      s = Error::Errno("chmod", temp_shown);
    if (s && ::geteuid() == 0 &&
        ::fchown(out.get(), objects_st_.st_uid, objects_st_.st_gid) != 0)
      s = Error::Errno("chown", temp_shown);
    if (s && ::fsync(out.get()) != 0) s = Error::Errno("fsync", temp_shown);
    struct stat st {};
    if (s && ::fstat(out.get(), &st) != 0) s = Error::Errno("stat", temp_shown);
    if (s)
      s = sys::Renameat2(workfd_, kTemp, (**dir).get(), hex.substr(2),
                         RENAME_NOREPLACE, shown);
    if (!s) {
      (void)::unlinkat(workfd_, kTemp, 0);
      if (s.err() == EEXIST) return uint64_t{0};  // there already
      return s.error();
    }
    touched_.insert(hex.substr(0, 2));
    return Quota::Bytes(st);
  }

  // fsync of every fan-out directory written, and of the objects directory.
  Status Sync() {
    for (const std::string& fan : touched_) {
      auto dir = FanOut(fan, false);
      if (!dir) return dir.error();
      if (*dir && ::fsync((*dir)->get()) != 0)
        return Error::Errno("fsync", layers_.upper.Shown(Rel(fan)));
    }
    if (objects_ && ::fsync(objects_.get()) != 0)
      return Error::Errno("fsync", layers_.upper.Shown(objects_rel_));
    if (git_ && ::fsync(git_.get()) != 0)
      return Error::Errno("fsync", layers_.upper.Shown(gitdir_));
    return Ok();
  }

  uint64_t dir_bytes() const { return dir_bytes_; }

 private:
  std::string Rel(const std::string& fan) const {
    return objects_rel_ + "/" + fan;
  }

  // The copy-up of the host's directory `rel` (without its children) to
  // `parent`/`name` in the upper: built in the work directory, then renamed
  // into place.
  Status CopyUpDir(const std::string& rel, int parent,
                   const std::string& name) {
    const std::string temp_shown = sys::Join(work_, kTempDir);
    ACQFS_TRY(sys::RemoveTree(workfd_, kTempDir, temp_shown));
    ACQFS_TRY(CopyLowerTo(layers_, rel, workfd_, kTempDir));
    Status s = sys::Renameat2(workfd_, kTempDir, parent, name, RENAME_NOREPLACE,
                              layers_.upper.Shown(rel));
    if (!s) (void)sys::RemoveTree(workfd_, kTempDir, temp_shown);
    return s;
  }

  // The upper's .git/objects, made by a copy-up of the host's when
  // missing and `make`; nullopt when missing and not `make`.
  Result<bool> Objects(bool make) {
    if (objects_) return true;
    const std::string shown = layers_.upper.Shown(objects_rel_);
    auto git =
        sys::OpenBeneath(layers_.upper.root(), gitdir_, O_RDONLY | O_DIRECTORY,
                         0, layers_.upper.Shown(gitdir_));
    if (!git) return git.error();
    struct stat st;
    bool found = false;
    ACQFS_TRY(sys::StatAtIfExists(git->get(), "objects", &st, &found, shown));
    if (!found) {
      if (!make) return false;
      // The copy-up of a directory leaves its parent's times.
      auto git_st = sys::Fstat(git->get(), layers_.upper.Shown(gitdir_));
      if (!git_st) return git_st.error();
      ACQFS_TRY(CopyUpDir(objects_rel_, git->get(), "objects"));
      struct timespec ts[2] = {git_st->st_atim, git_st->st_mtim};
      if (::futimens(git->get(), ts) != 0)
        return Error::Errno("utimensat", layers_.upper.Shown(gitdir_));
      auto made = sys::StatAt(git->get(), "objects", shown);
      if (!made) return made.error();
      dir_bytes_ += Quota::Bytes(*made);
      git_ = std::move(*git);
    }
    auto fd = sys::OpenBeneath(layers_.upper.root(), objects_rel_,
                               O_RDONLY | O_DIRECTORY, 0, shown);
    if (!fd) return fd.error();
    auto st2 = sys::Fstat(fd->get(), shown);
    if (!st2) return st2.error();
    objects_st_ = *st2;
    objects_ = std::move(*fd);
    return true;
  }

  // The upper's .git/objects/<fan>: opened, or made when `make` (a
  // copy-up of the host's, else a new directory like the objects
  // directory); nullopt when missing and not `make`.
  Result<std::optional<UniqueFd>> FanOut(const std::string& fan, bool make) {
    auto have = Objects(make);
    if (!have) return have.error();
    if (!*have) return std::optional<UniqueFd>();
    const std::string rel = Rel(fan);
    const std::string shown = layers_.upper.Shown(rel);
    auto fd =
        sys::OpenBeneath(objects_.get(), fan, O_RDONLY | O_DIRECTORY, 0, shown);
    if (fd) return std::optional<UniqueFd>(std::move(*fd));
    if (fd.err() != ENOENT) return fd.error();
    if (!make) return std::optional<UniqueFd>();
    auto lower = layers_.lower.Stat(rel);
    if (lower && S_ISDIR(lower->st_mode)) {
      ACQFS_TRY(CopyUpDir(rel, objects_.get(), fan));
    } else {
      if (::mkdirat(objects_.get(), fan.c_str(), objects_st_.st_mode & 07777) !=
          0)
        return Error::Errno("mkdir", shown);
      if (::geteuid() == 0 &&
          ::fchownat(objects_.get(), fan.c_str(), objects_st_.st_uid,
                     objects_st_.st_gid, AT_SYMLINK_NOFOLLOW) != 0)
        return Error::Errno("chown", shown);
    }
    auto made =
        sys::OpenBeneath(objects_.get(), fan, O_RDONLY | O_DIRECTORY, 0, shown);
    if (!made) return made.error();
    auto st = sys::Fstat(made->get(), shown);
    if (!st) return st.error();
    dir_bytes_ += Quota::Bytes(*st);
    return std::optional<UniqueFd>(std::move(*made));
  }

  // "<type> <size>\0<data>", zlib-compressed, as a loose object is.
  static Status Deflate(int fd, git_object_t type, std::string_view data,
                        const std::string& shown) {
    const std::string header = std::string(git_object_type2string(type)) + " " +
                               std::to_string(data.size()) +
                               std::string(1, '\0');
    z_stream z{};
    if (::deflateInit(&z, Z_DEFAULT_COMPRESSION) != Z_OK)
      return Error::Of(ENOMEM, "compress an object", shown);
    std::vector<unsigned char> buf(64 << 10);
    Status s = Ok();
    off_t off = 0;
    auto pump = [&](std::string_view in, int flush) -> bool {
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
      z.avail_in = static_cast<uInt>(in.size());
      int rc;
      do {
        z.next_out = buf.data();
        z.avail_out = static_cast<uInt>(buf.size());
        rc = ::deflate(&z, flush);
        if (rc == Z_STREAM_ERROR) {
          s = Error::Of(EIO, "compress an object", shown);
          return false;
        }
        const size_t n = buf.size() - z.avail_out;
        if (n) {
          s = sys::PwriteAll(fd, buf.data(), n, off, shown);
          if (!s) return false;
          off += static_cast<off_t>(n);
        }
      } while (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
      return true;
    };
    // Fed in pieces: zlib counts its input in 32 bits.
    bool ok = pump(header, Z_NO_FLUSH);
    constexpr size_t kPiece = size_t{1} << 30;
    for (size_t at = 0; ok && at < data.size(); at += kPiece)
      ok = pump(data.substr(at, kPiece), Z_NO_FLUSH);
    if (ok) ok = pump({}, Z_FINISH);
    ::deflateEnd(&z);
    return s;
  }

  const Layers& layers_;
  int workfd_;
  std::string work_;
  std::string gitdir_, objects_rel_;
  UniqueFd git_;      // the upper's .git, when its times were kept
  UniqueFd objects_;  // the upper's .git/objects, once known to exist
  struct stat objects_st_ {};
  std::set<std::string> touched_;
  uint64_t dir_bytes_ = 0;
};

}  // namespace

Result<IndexObjectsKept> KeepIndexObjects(const Layers& layers,
                                          const std::string& lower,
                                          const std::string& head,
                                          const std::string& work,
                                          const std::string& gitdir) {
  IndexObjectsKept kept;
  const std::string index_rel = gitdir + "/index";
  const std::string shown = layers.upper.Shown(index_rel);
  auto fd = sys::OpenBeneath(layers.upper.root(), index_rel,
                             O_RDONLY | O_NOFOLLOW, 0, shown);
  if (!fd) {
    if (fd.err() == ENOENT) return kept;
    return fd.error();
  }
  auto st = sys::Fstat(fd->get(), shown);
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode))
    return Error::Of(EINVAL, "the sandbox's index is not a regular file",
                     shown);
  Mapping map;
  ACQFS_TRY(map.Map(fd->get(), static_cast<size_t>(st->st_size), shown));
  if (st->st_size == 0) return kept;
  auto index = IndexFile::Parse(map.bytes(), shown);
  if (!index) return index.error();
  kept.entries = index->entry_count();
  kept.split_index = index->split();

  GitLibrary lib;
  const std::string host_path =
      gitdir == ".git" ? lower : sys::Join(lower, gitdir);
  git_repository* repo_raw = nullptr;
  const int open_rc =
      GitOpenRepository(&repo_raw, host_path, GIT_REPOSITORY_OPEN_NO_SEARCH);
  GitRepository host(repo_raw);
  if (open_rc < 0)
    return GitOpenError(open_rc, "open git repository", host_path);
  GitTree head_tree;
  if (!head.empty()) {
    git_oid id;
    if (git_oid_fromstr(&id, head.c_str()) != 0)
      return Error::Of(EINVAL, "bad commit id '" + head + "'", lower);
    git_commit* craw = nullptr;
    int rc = git_commit_lookup(&craw, host.get(), &id);
    GitCommit commit(craw);
    if (rc < 0) return GitError(rc, "read the base commit " + head, lower);
    git_tree* traw = nullptr;
    rc = git_commit_tree(&traw, commit.get());
    head_tree.reset(traw);
    if (rc < 0) return GitError(rc, "read the base tree", lower);
  }
  auto same = DirectoriesAsHead(*index, head_tree.get());
  if (!same) return same.error();

  // Entries outside those directories, one by one against HEAD's tree.
  std::set<git_oid, OidLess> named;
  if (same->empty() || !(*same)[0].empty()) {
    size_t next = 0;  // the first directory not wholly before the path
    ACQFS_TRY(index->ForEach([&](const IndexEntry& e) -> Status {
      while (next < same->size() && (*same)[next] < e.path &&
             e.path.compare(0, (*same)[next].size(), (*same)[next]) != 0)
        ++next;
      if (next < same->size() &&
          e.path.compare(0, (*same)[next].size(), (*same)[next]) == 0)
        return Ok();  // in a directory that is HEAD's
      if (!IsFileMode(e.mode) || e.intent_to_add) return Ok();
      ++kept.checked;
      if (head_tree) {
        git_tree_entry* raw = nullptr;
        const std::string path(e.path);
        if (git_tree_entry_bypath(&raw, head_tree.get(), path.c_str()) == 0) {
          GitTreeEntry te(raw);
          if (git_oid_equal(git_tree_entry_id(te.get()), &e.id)) return Ok();
        }
      }
      named.insert(e.id);
      return Ok();
    }));
  }
  for (const git_oid& id : index->resolve_undo()) named.insert(id);
  kept.named = named.size();
  if (named.empty()) return kept;

  auto workfd = sys::OpenDirPath(work, O_RDONLY);
  if (!workfd) return workfd.error();
  git_odb* odb_raw = nullptr;
  int rc = git_repository_odb(&odb_raw, host.get());
  GitOdb odb(odb_raw);
  if (rc < 0) return GitError(rc, "open the object store", lower);
  UpperObjectWriter writer(layers, workfd->get(), work, gitdir);
  for (const git_oid& id : named) {
    auto has = writer.Has(id);
    if (!has) return has.error();
    if (*has) continue;
    size_t size = 0;
    git_object_t type = GIT_OBJECT_INVALID;
    rc = git_odb_read_header(&size, &type, odb.get(), &id);
    if (rc == GIT_ENOTFOUND) {
      kept.not_kept.push_back(OidHex(id) + " (no longer in the host's store)");
      continue;
    }
    if (rc < 0) return GitError(rc, "read object " + OidHex(id), lower);
    if (size > kMaxKeptObject) {
      kept.not_kept.push_back(OidHex(id) + " (" + std::to_string(size) +
                              " bytes: larger than the limit)");
      continue;
    }
    git_odb_object* oraw = nullptr;
    rc = git_odb_read(&oraw, odb.get(), &id);
    GitOdbObject obj(oraw);
    if (rc == GIT_ENOTFOUND) {
      kept.not_kept.push_back(OidHex(id) + " (no longer in the host's store)");
      continue;
    }
    if (rc < 0) return GitError(rc, "read object " + OidHex(id), lower);
    auto bytes =
        writer.Write(id, git_odb_object_type(obj.get()),
                     {static_cast<const char*>(git_odb_object_data(obj.get())),
                      git_odb_object_size(obj.get())});
    if (!bytes) return bytes.error();
    if (*bytes) {
      ++kept.copied;
      kept.bytes += *bytes;
    }
  }
  ACQFS_TRY(writer.Sync());
  kept.bytes += writer.dir_bytes();
  return kept;
}

}  // namespace acqfs::gitbridge
