#include "gitbridge/worktree_snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dir_walk.h"
#include "common/git_ptr.h"
#include "common/sys.h"
#include "fs/copy_up_source.h"
#include "fs/layer_walk.h"
#include "gitbridge/delta_scan.h"
#include "gitbridge/line_merge.h"
#include "gitbridge/merged_tree.h"
#include "gitbridge/publish_rule.h"
#include "gitbridge/tree_build.h"

namespace acqfs::gitbridge {
namespace {

using GitOdbStream = GitPtr<git_odb_stream, git_odb_stream_free>;

// What the base tree holds at a changed path.
struct BaseInfo {
  bool in_gitlink = false;  // the path is a gitlink or lies below one
  bool tracked = false;     // a blob or symlink is recorded at the path
  bool tree = false;        // a directory is recorded at the path
};

// The base tree's subtrees along the last path classified, root first, so
// that changes in path order look each base tree up about once. (Looking
// every prefix up from the root with git_tree_entry_bypath, which recurses
// in libgit2, costs O(depth^2) lookups per path.)
class BaseCursor {
 public:
  explicit BaseCursor(const git_tree* root) : root_(root) {}
  BaseCursor(const BaseCursor&) = delete;
  BaseCursor& operator=(const BaseCursor&) = delete;

  // What the base holds at `path`.
  Result<BaseInfo> Classify(const std::string& path);

 private:
  const git_tree* root_;            // null: no base
  std::vector<std::string> names_;  // the directories entered
  std::vector<GitTree> trees_;      // trees_[i]: the tree at names_[0..i]
};

Result<BaseInfo> BaseCursor::Classify(const std::string& path) {
  BaseInfo info;
  if (!root_) return info;
  std::vector<std::string_view> parts;
  const std::string_view p(path);
  for (size_t start = 0;;) {
    size_t slash = p.find('/', start);
    parts.push_back(p.substr(start, slash == std::string_view::npos
                                        ? std::string_view::npos
                                        : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  const size_t dirs = parts.size() - 1;
  size_t keep = 0;
  while (keep < dirs && keep < names_.size() && names_[keep] == parts[keep])
    ++keep;
  names_.resize(keep);
  trees_.resize(keep);
  for (size_t i = keep;; ++i) {
    const git_tree* tree = i == 0 ? root_ : trees_[i - 1].get();
    const std::string name(parts[i]);
    const git_tree_entry* entry = git_tree_entry_byname(tree, name.c_str());
    if (!entry) return info;
    git_filemode_t mode = git_tree_entry_filemode(entry);
    if (mode == GIT_FILEMODE_COMMIT) {
      info.in_gitlink = true;
      return info;
    }
    if (i == dirs) {
      info.tree = mode == GIT_FILEMODE_TREE;
      info.tracked = !info.tree;
      return info;
    }
    if (mode != GIT_FILEMODE_TREE) return info;  // a file on the way
    git_tree* raw = nullptr;
    int rc =
        git_tree_lookup(&raw, git_tree_owner(root_), git_tree_entry_id(entry));
    GitTree sub(raw);
    if (rc < 0) return GitError(rc, "git_tree_lookup", path);
    names_.push_back(name);
    trees_.push_back(std::move(sub));
  }
}

// Streams `size` bytes of `fd` into a new blob of `repo`.
Result<git_oid> StreamBlob(git_repository* repo, int fd, uint64_t size,
                           const std::string& shown) {
  git_odb* odb_raw = nullptr;
  int rc = git_repository_odb(&odb_raw, repo);
  GitOdb odb(odb_raw);
  if (rc < 0) return GitError(rc, "git_repository_odb", shown);
  git_odb_stream* ws_raw = nullptr;
  rc = git_odb_open_wstream(&ws_raw, odb.get(), size, GIT_OBJECT_BLOB);
  GitOdbStream ws(ws_raw);
  if (rc < 0) return GitError(rc, "git_odb_open_wstream", shown);
  std::unique_ptr<char[]> buf(new char[1 << 16]);
  for (uint64_t left = size; left > 0;) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(left, 1 << 16));
    ssize_t n = ::read(fd, buf.get(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::Errno("read", shown);
    if (n == 0) return Error::Of(EAGAIN, "read (file shrank)", shown);
    rc = git_odb_stream_write(ws.get(), buf.get(), static_cast<size_t>(n));
    if (rc < 0) return GitError(rc, "git_odb_stream_write", shown);
    left -= static_cast<uint64_t>(n);
  }
  git_oid id;
  rc = git_odb_stream_finalize_write(&id, ws.get());
  if (rc < 0) return GitError(rc, "git_odb_stream_finalize_write", shown);
  return id;
}

// A cursor over the directories of each own layer (the upper, the frozen
// layers), made when a change first names that layer: a bounded number of
// descriptors per layer (LayerStack::kOpenPerLayer), whatever the depth.
class OwnDirs {
 public:
  explicit OwnDirs(const Layers& layers)
      : layers_(layers), dirs_(layers.upper_number() + 1) {}
  OwnDirs(const OwnDirs&) = delete;
  OwnDirs& operator=(const OwnDirs&) = delete;

  // The layer of a change (0, for a change made without one: the upper).
  unsigned LayerOf(const Change& c) const {
    return c.layer == 0 ? layers_.upper_number() : c.layer;
  }
  DirStack* Of(unsigned layer) {
    std::unique_ptr<DirStack>& d = dirs_[layer];
    if (!d) {
      const Layer& l = layers_.At(layer);
      d = std::make_unique<DirStack>(l.root(), l.root_path(),
                                     LayerStack::kOpenPerLayer,
                                     DirStack::kPathOnly);
    }
    return d.get();
  }

 private:
  const Layers& layers_;
  std::vector<std::unique_ptr<DirStack>> dirs_;  // by layer number
};

// What the sandbox's version of a file it wrote started from, when the
// host had edited that file since the base (docs/git-bridge.md, "A host
// edit the sandbox wrote over"): its kept source (fs/copy_up_source.h:
// kept by the copy-up of an in-place write, or by the rename of a new file
// over the host's, as `sed -i`, editors and git write), else the host's
// file as it is now (a file removed and made anew: what the sandbox read
// it from, unless the host changed it again since).
struct Ancestor {
  std::string path;  // where the base's version is looked up
  mode_t mode = 0;
  std::string data;
  const char* what = "";  // for messages
};

// The ancestor of the own file `path` (open as `fd`), or nullopt when the
// host did not change the file since `since_ns` (the base's instant; 0:
// only kept sources count). A kept source that is gone is listed in
// stats->host_edits_kept.
// `host` walks the host's directories (two descriptors at most, whatever
// the depth); null: the host's file is not consulted (the base does not
// track the path, so there is no base version to merge onto).
Result<std::optional<Ancestor>> AncestorOf(const Layers& layers, int fd,
                                           const std::string& path,
                                           int64_t since_ns, DirStack* host,
                                           SnapshotStats* stats) {
  using Out = std::optional<Ancestor>;
  auto key = SourceKeyOf(layers.format, fd, path);
  if (!key) return key.error();
  if (*key) {
    auto src = layers.sources ? layers.sources->Read(**key)
                              : Result<CopyUpSources::Source>(Error::Of(
                                    ENOENT, "no store of copy-up sources", ""));
    if (!src) {
      if (src.err() != ENOENT && src.err() != EINVAL) return src.error();
      stats->host_edits_kept.push_back(
          HostEditKept{path, "its copy-up source is missing or damaged (" +
                                 src.error().Message() + ")"});
      return Out();
    }
    return Out(Ancestor{std::move(src->path), src->mode, std::move(src->data),
                        "its copy-up source"});
  }
  if (since_ns == 0 || !host) return Out();
  const std::string shown = layers.lower.Shown(path);
  auto gone = [](int e) { return e == ENOENT || e == ENOTDIR || e == ELOOP; };
  if (Status g = host->GoTo(sys::Dirname(path)); !g) {
    if (gone(g.err())) return Out();  // the host has no such directory now
    return g.error();
  }
  const std::string name = sys::Basename(path);
  struct stat st;
  bool found = false;
  ACQFS_TRY(sys::StatAtIfExists(host->top(), name, &st, &found, shown));
  if (!found || !S_ISREG(st.st_mode)) return Out();
  if (sys::CtimeNs(st) < since_ns) return Out();  // unchanged since the base
  if (static_cast<uint64_t>(st.st_size) > CopyUpSources::kMaxKept) {
    stats->host_edits_kept.push_back(HostEditKept{path, "too large to merge"});
    return Out();
  }
  auto in =
      sys::OpenBeneath(host->top(), name, O_RDONLY | O_NOFOLLOW, 0, shown);
  if (!in) return gone(in.err()) ? Result<Out>(Out()) : in.error();
  auto data = sys::ReadAll(in->get(), CopyUpSources::kMaxKept, shown);
  if (!data) return data.error();
  return Out(
      Ancestor{path, st.st_mode, std::move(*data), "the host's file now"});
}

// The own file `path` (open as `fd`, stat `st`), which the sandbox wrote
// after the host had edited it (its `anc`estor): the sandbox's change
// (ancestor -> file) merged onto `base`'s version of the ancestor's path,
// as a tree edit of `path`. nullopt when the file goes whole: the host's
// edit is not there to leave out (the base's version is the ancestor), or
// it cannot be left out (then listed in stats->host_edits_kept with why).
Result<std::optional<TreeEdit>> SeparateHostEdit(
    git_repository* repo, const git_tree* base, const Ancestor& anc, int fd,
    const struct stat& st, const std::string& path, SnapshotStats* stats) {
  using Out = std::optional<TreeEdit>;
  auto whole = [&](std::string why) -> Result<Out> {
    stats->host_edits_kept.push_back(HostEditKept{path, std::move(why)});
    return Out();
  };
  if (!base) return whole("the base has no file at " + anc.path);
  git_tree_entry* raw = nullptr;
  int rc = git_tree_entry_bypath(&raw, base, anc.path.c_str());
  GitTreeEntry entry(raw);
  if (rc == GIT_ENOTFOUND)
    return whole("the base has no file at " + anc.path +
                 " (the host made it after the base)");
  if (rc < 0) return GitError(rc, "git_tree_entry_bypath", anc.path);
  const git_filemode_t base_mode = git_tree_entry_filemode(entry.get());
  if (base_mode != GIT_FILEMODE_BLOB &&
      base_mode != GIT_FILEMODE_BLOB_EXECUTABLE)
    return whole("the base has no regular file at " + anc.path);
  git_blob* braw = nullptr;
  rc = git_blob_lookup(&braw, repo, git_tree_entry_id(entry.get()));
  GitBlob blob(braw);
  if (rc < 0) return GitError(rc, "git_blob_lookup", anc.path);
  const std::string_view ours(
      static_cast<const char*>(git_blob_rawcontent(blob.get())),
      static_cast<size_t>(git_blob_rawsize(blob.get())));
  if (ours == anc.data) return Out();  // nothing of the host's to leave out
  if (static_cast<uint64_t>(st.st_size) > CopyUpSources::kMaxKept)
    return whole("too large to merge");
  std::string theirs;
  theirs.resize(static_cast<size_t>(st.st_size));
  for (size_t off = 0; off < theirs.size();) {
    ssize_t n = ::pread(fd, theirs.data() + off, theirs.size() - off,
                        static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::Errno("read", path);
    if (n == 0) return Error::Of(EAGAIN, "read (file shrank)", path);
    off += static_cast<size_t>(n);
  }
  std::string result;
  if (theirs == anc.data) {
    result = std::string(ours);  // the sandbox changed no byte of it
  } else {
    auto merged = MergeFileLines(anc.data, ours, theirs, path);
    if (!merged) return merged.error();
    if (!*merged)
      return whole("the sandbox's change and the host's edit (against " +
                   std::string(anc.what) + ") touch the same lines");
    result = std::move(**merged);
  }
  TreeEdit edit{TreeEdit::kPut, path};
  rc =
      git_blob_create_from_buffer(&edit.id, repo, result.data(), result.size());
  if (rc < 0) return GitError(rc, "git_blob_create_from_buffer", path);
  // The mode as the sandbox left it, unless it is the ancestor's (then the
  // base's: a chmod of the host's is not the sandbox's either).
  const bool anc_x = (anc.mode & S_IXUSR) != 0;
  const bool now_x = (st.st_mode & S_IXUSR) != 0;
  edit.mode = anc_x == now_x
                  ? base_mode
                  : (now_x ? GIT_FILEMODE_BLOB_EXECUTABLE : GIT_FILEMODE_BLOB);
  ++stats->host_edits_separated;
  return Out(std::move(edit));
}

// Hashes the own object at `c.path` (in the layer the scan found it in) into
// `repo`: a regular file's bytes or a symlink's target, never following a
// link. Each layer's cursor moves a step or two per change (changes come in
// path order), and the object is opened relative to its directory.
// A file the host had edited since the base goes through SeparateHostEdit
// (`base`: the tree the edit applies to; `since_ns`: the base's instant;
// `tracked`: `base` has a file at the path).
Result<TreeEdit> WriteBlob(git_repository* repo, const git_tree* base,
                           const Layers& layers, OwnDirs* own, const Change& c,
                           int64_t since_ns, DirStack* host, bool tracked,
                           SnapshotStats* stats) {
  TreeEdit edit{TreeEdit::kPut, c.path};
  const unsigned layer = own->LayerOf(c);
  DirStack* dirs = own->Of(layer);
  ACQFS_TRY(dirs->GoTo(sys::Dirname(c.path)));
  const std::string name = sys::Basename(c.path);
  std::string shown = layers.At(layer).Shown(c.path);
  if (S_ISLNK(c.mode)) {
    auto target = sys::ReadLinkAt(dirs->top(), name, shown);
    if (!target) return target.error();
    int rc = git_blob_create_from_buffer(&edit.id, repo, target->data(),
                                         target->size());
    if (rc < 0) return GitError(rc, "git_blob_create_from_buffer", shown);
    edit.mode = GIT_FILEMODE_LINK;
    return edit;
  }
  auto fd =
      sys::OpenBeneath(dirs->top(), name, O_RDONLY | O_NOFOLLOW, 0, shown);
  if (!fd) return fd.error();
  auto st = sys::Fstat(fd->get(), shown);
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode))
    return Error::Of(EAGAIN, "hash file (changed type during the scan)", shown);
  auto anc = AncestorOf(layers, fd->get(), c.path, since_ns,
                        tracked ? host : nullptr, stats);
  if (!anc) return anc.error();
  if (*anc) {
    auto sep =
        SeparateHostEdit(repo, base, **anc, fd->get(), *st, c.path, stats);
    if (!sep) return sep.error();
    if (*sep) return std::move(**sep);
  }
  auto id =
      StreamBlob(repo, fd->get(), static_cast<uint64_t>(st->st_size), shown);
  if (!id) return id.error();
  edit.id = *id;
  edit.mode = (st->st_mode & S_IXUSR) ? GIT_FILEMODE_BLOB_EXECUTABLE
                                      : GIT_FILEMODE_BLOB;
  return edit;
}

// The state of one snapshot. Descriptors: the publish rule's ignore cursor
// and `own_dirs` (per layer) each hold a bounded number (fs/layer_walk.h,
// common/dir_walk.h), whatever the depth of the tree.
struct Snapshot {
  git_repository* repo;
  const git_tree* base;
  const Layers& layers;
  PublishRule& rule;
  BaseCursor& base_cursor;
  OwnDirs& own_dirs;
  int64_t host_changed_since_ns;
  DirStack* host_dirs;  // the host's directories (null: not consulted)
  SnapshotStats stats;
  std::vector<TreeEdit> edits;
};

// Turns one change into the tree edits it stands for (maybe none). The
// scan judged its entries and the policy; the publish rule adds what needs
// the base tree and the ignore rules (publish_rule.h).
Status AddChange(Snapshot* s, const Change& c) {
  auto base = s->base_cursor.Classify(c.path);
  if (!base) return base.error();
  const BaseAt at{base->tracked, base->in_gitlink};
  const TreeEdit remove{TreeEdit::kRemove, c.path};
  if (c.kind == Change::kDelete) {
    if (!at.in_gitlink) s->edits.push_back(remove);
    return Ok();
  }
  auto verdict = s->rule.BaseVerdict(c.path, c.mode, at);
  if (!verdict) return verdict.error();
  if (*verdict == PublishVerdict::kInSubmodule) return Ok();
  if (*verdict == PublishVerdict::kIgnored) {
    ++s->stats.ignored_skipped;
    // Left out means absent: a refused name takes the base's version of
    // its path out too, and an ignored file still hides the directory the
    // base had there.
    if (c.kind == Change::kUnsafe || base->tree) s->edits.push_back(remove);
    return Ok();
  }
  if (c.kind == Change::kUnsafe) {
    s->edits.push_back(remove);
    s->stats.skipped.push_back(SkippedPath{c.path, c.reason});
    return Ok();
  }
  auto edit = WriteBlob(s->repo, s->base, s->layers, &s->own_dirs, c,
                        s->host_changed_since_ns, s->host_dirs, base->tracked,
                        &s->stats);
  if (!edit) return edit.error();
  ++s->stats.blobs_written;
  s->edits.push_back(std::move(*edit));
  return Ok();
}

struct KeptWalk {
  const Policy* policy;
  std::string root;  // the removed directory's path
  std::vector<TreeEdit>* keep;
};

int CollectKept(const char* dir, const git_tree_entry* entry, void* data) {
  auto* w = static_cast<KeptWalk*>(data);
  git_filemode_t mode = git_tree_entry_filemode(entry);
  std::string path = w->root + "/" + dir + git_tree_entry_name(entry);
  if (mode == GIT_FILEMODE_TREE) return 0;  // its entries come next
  // The policy's verdict also answers for entries below a hidden or
  // read-only directory.
  if (PolicyVerdict(w->policy, path, 0) != PublishVerdict::kPublished)
    w->keep->push_back(
        TreeEdit{TreeEdit::kPut, path, mode, *git_tree_entry_id(entry)});
  return 0;
}

// A directory the sandbox removed may hold tracked entries the policy hid
// from it or made read-only: the export publishes no change of them
// (publish_rule.h), so the snapshot keeps them as the base has them. Only
// the base subtrees of removed directories are walked. An entry is not
// kept where the sandbox put a file on the way to it (git cannot hold
// both).
Status KeepPolicyBaseEntries(const git_tree* base, const Policy& policy,
                             std::vector<TreeEdit>* edits) {
  if (!base || !(policy.hides_anything() || policy.has_read_only()))
    return Ok();
  std::vector<TreeEdit> keep;
  for (const TreeEdit& e : *edits) {
    if (e.kind != TreeEdit::kRemove) continue;
    git_tree_entry* raw = nullptr;
    int rc = git_tree_entry_bypath(&raw, base, e.path.c_str());
    GitTreeEntry entry(raw);
    if (rc == GIT_ENOTFOUND) continue;
    if (rc < 0) return GitError(rc, "git_tree_entry_bypath", e.path);
    if (git_tree_entry_filemode(entry.get()) != GIT_FILEMODE_TREE) continue;
    git_tree* sub_raw = nullptr;
    rc = git_tree_lookup(&sub_raw, git_tree_owner(base),
                         git_tree_entry_id(entry.get()));
    GitTree sub(sub_raw);
    if (rc < 0) return GitError(rc, "git_tree_lookup", e.path);
    KeptWalk w{&policy, e.path, &keep};
    rc = git_tree_walk(sub.get(), GIT_TREEWALK_PRE, CollectKept, &w);
    if (rc < 0) return GitError(rc, "git_tree_walk", e.path);
  }
  std::vector<std::string> put_files;
  for (const TreeEdit& e : *edits)
    if (e.kind == TreeEdit::kPut) put_files.push_back(e.path);
  for (TreeEdit& k : keep) {
    bool blocked = false;
    for (const std::string& f : put_files)
      if (k.path.size() > f.size() && k.path.compare(0, f.size(), f) == 0 &&
          k.path[f.size()] == '/')
        blocked = true;
    if (!blocked) edits->push_back(std::move(k));
  }
  return Ok();
}

}  // namespace

Result<git_oid> BuildWorktreeTree(git_repository* repo,
                                  const git_oid* base_tree,
                                  const Layers& layers, SnapshotStats* stats,
                                  const ProgressFn& progress,
                                  int64_t host_changed_since_ns) {
  auto changes = ScanUpper(layers, nullptr, progress);
  if (!changes) return changes.error();
  GitTree base;
  if (base_tree) {
    git_tree* raw = nullptr;
    int rc = git_tree_lookup(&raw, repo, base_tree);
    base.reset(raw);
    if (rc < 0) return GitError(rc, "git_tree_lookup", OidHex(*base_tree));
  }
  PublishRule rule(layers);
  BaseCursor base_cursor(base.get());
  OwnDirs own_dirs(layers);
  DirStack host_dirs(layers.lower.root(), layers.lower.root_path(), 2,
                     DirStack::kPathOnly);
  Snapshot s{repo,
             base.get(),
             layers,
             rule,
             base_cursor,
             own_dirs,
             host_changed_since_ns,
             host_changed_since_ns ? &host_dirs : nullptr,
             {},
             {}};
  s.stats.changes = changes->size();
  uint64_t added = 0;
  for (const Change& c : *changes) {
    s.stats.paths.push_back(c.path);
    ACQFS_TRY(AddChange(&s, c));
    if (++added % 100 == 0) Report(progress, "hashing changed files", added);
  }
  if (layers.policy)
    ACQFS_TRY(KeepPolicyBaseEntries(base.get(), *layers.policy, &s.edits));
  Report(progress, "writing trees");
  auto id = ApplyTreeEdits(repo, base_tree, s.edits);
  if (!id) return id.error();
  if (stats) *stats = s.stats;
  return id;
}

}  // namespace acqfs::gitbridge
