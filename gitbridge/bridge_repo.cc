#include "gitbridge/bridge_repo.h"

#include <dirent.h>
#include <fcntl.h>
#include <git2/sys/odb_backend.h>
#include <unistd.h>

#include <unordered_set>
#include <vector>

#include "common/atomic_file.h"
#include "common/handle.h"
#include "common/sys.h"

namespace acqfs::gitbridge {
namespace {

// git's core.maxTreeDepth default: deeper trees are refused.
constexpr int kMaxTreeDepth = 2048;

// ---- Bridge creation -----------------------------------------------------

// Removes every entry of <path>/hooks (libgit2's built-in template leaves a
// README.sample there).
Status EmptyHooks(const std::string& path) {
  std::string hooks = path + "/hooks";
  auto dfd = sys::OpenDirPath(hooks, O_RDONLY);
  if (!dfd) return dfd.err() == ENOENT ? Ok() : Status(dfd.error());
  auto ents = sys::ReadDir(dfd->get(), hooks);
  if (!ents) return ents.error();
  for (const auto& e : *ents) {
    int flags = e.type == DT_DIR ? AT_REMOVEDIR : 0;
    if (::unlinkat(dfd->get(), e.name.c_str(), flags) != 0)
      return Error::Errno("remove hook", hooks + "/" + e.name);
  }
  return Ok();
}

// Creates the bare repository unless one is there already.
Status CreateIfMissing(const std::string& path) {
  git_repository_init_options opts = GIT_REPOSITORY_INIT_OPTIONS_INIT;
  // No GIT_REPOSITORY_INIT_EXTERNAL_TEMPLATE: no template directory (and no
  // init.templatedir) is read, only libgit2's built-in skeleton.
  opts.flags = GIT_REPOSITORY_INIT_BARE | GIT_REPOSITORY_INIT_NO_REINIT |
               GIT_REPOSITORY_INIT_MKPATH;
  opts.mode = GIT_REPOSITORY_INIT_SHARED_UMASK;
  git_repository* raw = nullptr;
  int rc = git_repository_init_ext(&raw, path.c_str(), &opts);
  GitRepository repo(raw);
  if (rc == GIT_EEXISTS) return Ok();
  if (rc < 0) return GitError(rc, "create bridge repository", path);
  return EmptyHooks(path);
}

Status Configure(const std::string& path) {
  std::string file = path + "/config";
  git_config* raw = nullptr;
  int rc = git_config_open_ondisk(&raw, file.c_str());
  GitConfig cfg(raw);
  if (rc < 0) return GitError(rc, "open config", file);
  for (const char* key :
       {"core.protectHFS", "core.protectNTFS", "core.logAllRefUpdates"}) {
    rc = git_config_set_bool(cfg.get(), key, 1);
    if (rc < 0) return GitError(rc, std::string("set ") + key, file);
  }
  rc = git_config_set_int32(cfg.get(), "gc.auto", 0);
  if (rc < 0) return GitError(rc, "set gc.auto", file);
  return Ok();
}

// objects/info/alternates = `host_objects_dir`, rewritten only on change.
Status WriteAlternates(const std::string& path,
                       const std::string& host_objects_dir) {
  std::string dir = path + "/objects/info";
  std::string want = host_objects_dir + "\n";
  std::string file = dir + "/alternates";
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    UniqueFd owned(fd);
    std::string have(want.size() + 1, '\0');
    ssize_t n = ::pread(fd, have.data(), have.size(), 0);
    if (n == static_cast<ssize_t>(want.size()) &&
        have.compare(0, want.size(), want) == 0)
      return Ok();
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Error::Errno("mkdir", dir);
  return WriteFileAtomically(file, want, 0644);
}

// libgit2 "freshens" (touches) an existing object instead of writing it
// again, in whichever backend holds it, alternates included: it would change
// the mtime of the host's object files and packs. Without a freshen hook the
// odb falls back to `exists`, which only reads.
Status DisableFreshen(git_repository* repo, const std::string& path) {
  git_odb* raw = nullptr;
  int rc = git_repository_odb(&raw, repo);
  GitOdb odb(raw);
  if (rc < 0) return GitError(rc, "open object database", path);
  size_t n = git_odb_num_backends(odb.get());
  for (size_t i = 0; i < n; ++i) {
    git_odb_backend* b = nullptr;
    rc = git_odb_get_backend(&b, odb.get(), i);
    if (rc < 0) return GitError(rc, "open object database", path);
    b->freshen = nullptr;
  }
  return Ok();
}

// ---- CopyReachable -------------------------------------------------------

const char* TypeName(git_object_t t) { return git_object_type2string(t); }

// Copies objects from `src` into `dst`, tree contents before trees and trees
// before commits, so a failure never leaves an object whose parts are
// missing.
class ObjectCopier {
 public:
  ObjectCopier(git_repository* src_repo, git_odb* src, git_odb* dst,
               std::string dst_path)
      : src_repo_(src_repo), src_(src), dst_(dst), path_(std::move(dst_path)) {}

  // Does the bridge (with its alternates) hold `id`?
  bool Have(const git_oid& id) {
    if (done_.count(OidHex(id))) return true;
    return git_odb_exists_ext(dst_, &id, GIT_ODB_LOOKUP_NO_REFRESH) == 1;
  }
  Status CopyCommit(const git_oid& id);

 private:
  Status CopyTree(const git_oid& id, const std::string& where, int depth);
  Status CopyRaw(const git_oid& id, git_object_t type,
                 const std::string& where);

  git_repository* src_repo_;
  git_odb* src_;
  git_odb* dst_;
  std::string path_;
  std::unordered_set<std::string> done_;  // hex ids written by this copier
};

Status ObjectCopier::CopyRaw(const git_oid& id, git_object_t type,
                             const std::string& where) {
  std::string hex = OidHex(id);
  git_odb_object* raw = nullptr;
  int rc = git_odb_read(&raw, src_, &id);  // hash-verified by libgit2
  GitOdbObject obj(raw);
  if (rc < 0) return GitError(rc, "read object " + hex, where);
  if (git_odb_object_type(obj.get()) != type)
    return Error::Of(EIO,
                     "object " + hex + " is a " +
                         TypeName(git_odb_object_type(obj.get())) +
                         ", expected a " + TypeName(type),
                     where);
  git_oid written;
  rc = git_odb_write(&written, dst_, git_odb_object_data(obj.get()),
                     git_odb_object_size(obj.get()), type);
  if (rc < 0) return GitError(rc, "write object " + hex, path_);
  if (!git_oid_equal(&written, &id))
    return Error::Of(EIO, "object " + hex + " written as " + OidHex(written),
                     path_);
  done_.insert(hex);
  return Ok();
}

// `where` is "<commit>:<path>" of this tree.
Status ObjectCopier::CopyTree(const git_oid& id, const std::string& where,
                              int depth) {
  if (Have(id)) return Ok();
  if (depth > kMaxTreeDepth)
    return Error::Of(EPERM, "refused tree nested too deeply", where);
  {
    // The raw object is what is copied, so that is what is checked.
    git_odb_object* oraw = nullptr;
    int rc = git_odb_read(&oraw, src_, &id);  // hash-verified by libgit2
    GitOdbObject obj(oraw);
    if (rc < 0) return GitError(rc, "read tree " + OidHex(id), where);
    if (git_odb_object_type(obj.get()) != GIT_OBJECT_TREE)
      return Error::Of(EIO, "object " + OidHex(id) + " is not a tree", where);
    ACQFS_TRY(
        CheckRawTree(static_cast<const char*>(git_odb_object_data(obj.get())),
                     git_odb_object_size(obj.get()), where));
  }
  git_tree* raw = nullptr;
  int rc = git_tree_lookup(&raw, src_repo_, &id);
  GitTree tree(raw);
  if (rc < 0) return GitError(rc, "read tree " + OidHex(id), where);
  size_t n = git_tree_entrycount(tree.get());
  for (size_t i = 0; i < n; ++i) {
    const git_tree_entry* e = git_tree_entry_byindex(tree.get(), i);
    std::string name = git_tree_entry_name(e);
    std::string path = where.back() == ':' ? where + name : where + "/" + name;
    const git_oid* eid = git_tree_entry_id(e);
    switch (git_tree_entry_type(e)) {
      case GIT_OBJECT_TREE:
        ACQFS_TRY(CopyTree(*eid, path, depth + 1));
        break;
      case GIT_OBJECT_BLOB:
        if (!Have(*eid)) ACQFS_TRY(CopyRaw(*eid, GIT_OBJECT_BLOB, path));
        break;
      default:  // a gitlink names a commit of another repository
        break;
    }
  }
  return CopyRaw(id, GIT_OBJECT_TREE, where);
}

Status ObjectCopier::CopyCommit(const git_oid& id) {
  if (Have(id)) return Ok();
  std::string hex = OidHex(id);
  git_commit* raw = nullptr;
  int rc = git_commit_lookup(&raw, src_repo_, &id);
  GitCommit commit(raw);
  if (rc < 0) return GitError(rc, "read commit " + hex, "");
  ACQFS_TRY(CopyTree(*git_commit_tree_id(commit.get()), hex + ":", 0));
  unsigned parents = git_commit_parentcount(commit.get());
  for (unsigned i = 0; i < parents; ++i) {
    const git_oid* p = git_commit_parent_id(commit.get(), i);
    if (!Have(*p))
      return Error::Of(EIO, "parent " + OidHex(*p) + " of " + hex + " missing",
                       path_);
  }
  return CopyRaw(id, GIT_OBJECT_COMMIT, hex);
}

int HideIfBridgeHas(const git_oid* id, void* payload) {
  return static_cast<ObjectCopier*>(payload)->Have(*id) ? 1 : 0;
}

// A walk over the commits of `tips` the bridge lacks, parents first.
Result<GitRevwalk> WalkNewCommits(git_repository* source, git_odb* src,
                                  ObjectCopier* copier,
                                  const std::vector<git_oid>& tips,
                                  const std::vector<git_oid>& hide) {
  git_revwalk* raw = nullptr;
  int rc = git_revwalk_new(&raw, source);
  GitRevwalk walk(raw);
  if (rc < 0) return GitError(rc, "new revision walk", "");
  rc = git_revwalk_sorting(walk.get(), GIT_SORT_TOPOLOGICAL | GIT_SORT_REVERSE);
  if (rc < 0) return GitError(rc, "sort revision walk", "");
  rc = git_revwalk_add_hide_cb(walk.get(), HideIfBridgeHas, copier);
  if (rc < 0) return GitError(rc, "hide known commits", "");
  for (const git_oid& t : tips) {
    rc = git_revwalk_push(walk.get(), &t);
    if (rc < 0) return GitError(rc, "walk from " + OidHex(t), "");
  }
  // Only commits both sides have can bound the walk: what the source lacks
  // cannot be walked, what the bridge lacks would be left out of it.
  for (const git_oid& h : hide) {
    if (!git_odb_exists(src, &h) || !copier->Have(h)) continue;
    rc = git_revwalk_hide(walk.get(), &h);
    if (rc < 0) return GitError(rc, "hide " + OidHex(h), "");
  }
  return walk;
}

Result<GitOdb> OdbOf(git_repository* repo, const std::string& shown) {
  git_odb* raw = nullptr;
  int rc = git_repository_odb(&raw, repo);
  GitOdb odb(raw);
  if (rc < 0) return GitError(rc, "open object database", shown);
  return odb;
}

// An object database of the bridge's own objects/ only (loose and packed),
// without the alternates.
Result<GitOdb> OwnOdb(const std::string& bridge) {
  const std::string objects = bridge + "/objects";
  git_odb* raw = nullptr;
  int rc = git_odb_new(&raw);
  GitOdb odb(raw);
  if (rc < 0) return GitError(rc, "new object database", objects);
  git_odb_backend* loose = nullptr;
  rc = git_odb_backend_loose(&loose, objects.c_str(), -1, 0, 0, 0);
  if (rc < 0) return GitError(rc, "open loose objects", objects);
  rc = git_odb_add_backend(odb.get(), loose, 1);
  if (rc < 0) {
    loose->free(loose);
    return GitError(rc, "open loose objects", objects);
  }
  git_odb_backend* packed = nullptr;
  rc = git_odb_backend_pack(&packed, objects.c_str());
  if (rc < 0) return GitError(rc, "open packs", objects);
  rc = git_odb_add_backend(odb.get(), packed, 2);
  if (rc < 0) {
    packed->free(packed);
    return GitError(rc, "open packs", objects);
  }
  return odb;
}

}  // namespace

Result<BridgeRepo> BridgeRepo::OpenOrCreate(
    const std::string& path, const std::string& host_objects_dir) {
  if (!host_objects_dir.empty() && host_objects_dir.front() != '/')
    return Error::Of(EINVAL, "host objects directory must be absolute",
                     host_objects_dir);
  if (host_objects_dir.find('\n') != std::string::npos)
    return Error::Of(EINVAL, "newline in host objects directory",
                     host_objects_dir);
  ACQFS_TRY(CreateIfMissing(path));
  ACQFS_TRY(Configure(path));
  if (!host_objects_dir.empty())
    ACQFS_TRY(WriteAlternates(path, host_objects_dir));
  return Open(path);
}

Result<BridgeRepo> BridgeRepo::Open(const std::string& path) {
  git_repository* raw = nullptr;
  int rc = git_repository_open_bare(&raw, path.c_str());
  GitRepository repo(raw);
  if (rc < 0) return GitError(rc, "open bridge repository", path);
  ACQFS_TRY(DisableFreshen(repo.get(), path));
  return BridgeRepo(std::move(repo), path);
}

Status BridgeRepo::CopyReachable(git_repository* source,
                                 const std::vector<git_oid>& tips,
                                 const std::vector<git_oid>& hide) {
  auto src = OdbOf(source, "sandbox");
  if (!src) return src.error();
  auto dst = OdbOf(repo(), path_);
  if (!dst) return dst.error();
  ObjectCopier copier(source, src->get(), dst->get(), path_);
  auto walk = WalkNewCommits(source, src->get(), &copier, tips, hide);
  if (!walk) return walk.error();
  git_oid id;
  for (;;) {
    int rc = git_revwalk_next(&id, walk->get());
    if (rc == GIT_ITEROVER) return Ok();
    if (rc < 0) return GitError(rc, "walk commits", path_);
    ACQFS_TRY(copier.CopyCommit(id));
  }
}

Status BridgeRepo::VerifyPublished(const std::vector<git_oid>& tips) const {
  auto own = OwnOdb(path_);
  if (!own) return own.error();
  auto all = OdbOf(repo(), path_);
  if (!all) return all.error();
  auto damaged = [&](const std::string& hex, const std::string& where,
                     const std::string& what) {
    return Error::Of(EIO,
                     "damaged bridge repository: object " + hex + " (" + where +
                         ") " + what +
                         "; remove the bridge and export again to rebuild it "
                         "from the layers",
                     path_);
  };
  struct Pending {
    git_oid id;
    git_object_t type;
    std::string where;  // how it was reached, for the message
  };
  std::vector<Pending> todo;
  for (const git_oid& t : tips)
    todo.push_back({t, GIT_OBJECT_COMMIT, "commit " + OidHex(t)});
  std::unordered_set<std::string> seen;
  while (!todo.empty()) {
    Pending p = std::move(todo.back());
    todo.pop_back();
    std::string hex = OidHex(p.id);
    if (!seen.insert(hex).second) continue;
    // Its packs were listed when it was opened: a miss needs no rescan.
    if (git_odb_exists_ext(own->get(), &p.id, GIT_ODB_LOOKUP_NO_REFRESH) != 1) {
      // Not the bridge's own: the host's, through the alternates.
      if (git_odb_exists_ext(all->get(), &p.id, GIT_ODB_LOOKUP_NO_REFRESH) !=
              1 &&
          git_odb_exists(all->get(), &p.id) != 1)
        return damaged(hex, p.where, "is missing");
      continue;
    }
    {
      git_odb_object* raw = nullptr;
      int rc = git_odb_read(&raw, own->get(), &p.id);  // checks the hash
      GitOdbObject obj(raw);
      if (rc < 0) {
        const git_error* e = git_error_last();
        return damaged(hex, p.where,
                       std::string("cannot be read") +
                           (e && e->message ? std::string(": ") + e->message
                                            : std::string()));
      }
      git_object_t type = git_odb_object_type(obj.get());
      if (type != p.type)
        return damaged(hex, p.where,
                       std::string("is a ") + TypeName(type) + ", expected a " +
                           TypeName(p.type));
    }
    if (p.type == GIT_OBJECT_COMMIT) {
      git_commit* raw = nullptr;
      int rc = git_commit_lookup(&raw, repo(), &p.id);
      GitCommit c(raw);
      if (rc < 0) return damaged(hex, p.where, "cannot be parsed");
      todo.push_back({*git_commit_tree_id(c.get()), GIT_OBJECT_TREE,
                      "tree of commit " + hex});
      for (unsigned i = 0; i < git_commit_parentcount(c.get()); ++i)
        todo.push_back({*git_commit_parent_id(c.get(), i), GIT_OBJECT_COMMIT,
                        "parent of commit " + hex});
    } else if (p.type == GIT_OBJECT_TREE) {
      git_tree* raw = nullptr;
      int rc = git_tree_lookup(&raw, repo(), &p.id);
      GitTree t(raw);
      if (rc < 0) return damaged(hex, p.where, "cannot be parsed");
      size_t n = git_tree_entrycount(t.get());
      for (size_t i = 0; i < n; ++i) {
        const git_tree_entry* e = git_tree_entry_byindex(t.get(), i);
        git_object_t type = git_tree_entry_type(e);
        if (type != GIT_OBJECT_TREE && type != GIT_OBJECT_BLOB) continue;
        todo.push_back({*git_tree_entry_id(e), type,
                        std::string("entry '") +
                            PrintableName(git_tree_entry_name(e)) +
                            "' of tree " + hex});
      }
    }
  }
  return Ok();
}

Result<std::map<std::string, git_oid>> BridgeRepo::Refs(
    const std::string& prefix) const {
  git_reference_iterator* raw = nullptr;
  int rc = git_reference_iterator_new(&raw, repo());
  GitReferenceIterator it(raw);
  if (rc < 0) return GitError(rc, "list refs", path_);
  std::map<std::string, git_oid> out;
  for (;;) {
    git_reference* rraw = nullptr;
    rc = git_reference_next(&rraw, it.get());
    GitReference ref(rraw);
    if (rc == GIT_ITEROVER) return out;
    if (rc < 0) return GitError(rc, "list refs", path_);
    std::string name = git_reference_name(ref.get());
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    git_reference* resolved_raw = nullptr;
    rc = git_reference_resolve(&resolved_raw, ref.get());
    GitReference resolved(resolved_raw);
    if (rc < 0) continue;  // a dangling symbolic ref
    out[name.substr(prefix.size())] = *git_reference_target(resolved.get());
  }
}

Status BridgeRepo::SetRef(const std::string& name, const git_oid& id,
                          const std::string& message) {
  git_reference* raw = nullptr;
  int rc =
      git_reference_create(&raw, repo(), name.c_str(), &id, 1, message.c_str());
  GitReference ref(raw);
  if (rc < 0) return GitError(rc, "set ref " + name, path_);
  return Ok();
}

Status BridgeRepo::DeleteRef(const std::string& name) {
  git_reference* raw = nullptr;
  int rc = git_reference_lookup(&raw, repo(), name.c_str());
  GitReference ref(raw);
  if (rc == GIT_ENOTFOUND) return Ok();
  if (rc < 0) return GitError(rc, "look up ref " + name, path_);
  rc = git_reference_delete(ref.get());
  if (rc < 0) return GitError(rc, "delete ref " + name, path_);
  return Ok();
}

}  // namespace acqfs::gitbridge
