#include "gitbridge/host_repo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "common/handle.h"
#include "common/sys.h"
#include "gitbridge/tree_build.h"

namespace acqfs::gitbridge {
namespace {

constexpr char kDirtyMessage[] = "acqfs: host working state";

std::string StripSlash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// The paths `git add -A` would look at: every path the status list names,
// on either side of either comparison. Untracked directories reported as a
// whole ("dir/", a nested repository) are left out.
std::set<std::string> ChangedPaths(git_status_list* list) {
  std::set<std::string> paths;
  auto add = [&](const git_diff_delta* d) {
    if (!d) return;
    for (const char* p : {d->old_file.path, d->new_file.path})
      if (p && *p && p[std::strlen(p) - 1] != '/') paths.insert(p);
  };
  size_t n = git_status_list_entrycount(list);
  for (size_t i = 0; i < n; ++i) {
    const git_status_entry* e = git_status_byindex(list, i);
    if (e->status == GIT_STATUS_CURRENT || (e->status & GIT_STATUS_IGNORED))
      continue;
    add(e->head_to_index);
    add(e->index_to_workdir);
  }
  return paths;
}

Result<GitStatusList> HostStatus(git_repository* repo,
                                 const std::string& shown) {
  git_status_options opts = GIT_STATUS_OPTIONS_INIT;
  opts.show = GIT_STATUS_SHOW_INDEX_AND_WORKDIR;
  // Never GIT_STATUS_OPT_UPDATE_INDEX: the host's index is not written.
  opts.flags = GIT_STATUS_OPT_INCLUDE_UNTRACKED |
               GIT_STATUS_OPT_RECURSE_UNTRACKED_DIRS |
               GIT_STATUS_OPT_EXCLUDE_SUBMODULES;
  git_status_list* raw = nullptr;
  int rc = git_status_list_new(&raw, repo, &opts);
  GitStatusList list(raw);
  if (rc < 0) return GitError(rc, "read status", shown);
  return list;
}

// Writes `data` as a blob into `odb` unless it holds it already: writing an
// object the odb has makes libgit2 touch the existing copy, which may be
// the host's own (through the alternates).
Result<git_oid> WriteBlob(git_odb* odb, const char* data, size_t size,
                          const std::string& shown) {
  git_oid id;
  int rc = git_odb_hash(&id, data, size, GIT_OBJECT_BLOB);
  if (rc < 0) return GitError(rc, "hash blob", shown);
  if (git_odb_exists(odb, &id)) return id;
  git_oid written;
  rc = git_odb_write(&written, odb, data, size, GIT_OBJECT_BLOB);
  if (rc < 0) return GitError(rc, "write blob", shown);
  return written;
}

// A regular file's content as `git add` stores it: with the host's clean
// filters (.gitattributes eol/ident, core.autocrlf) applied.
Result<git_oid> WriteFileBlob(git_repository* host, git_odb* odb, int root,
                              const std::string& path,
                              const std::string& shown) {
  auto fd = sys::OpenBeneath(root, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0,
                             shown);
  if (!fd) return fd.error();
  auto data = sys::ReadAll(fd->get(), SIZE_MAX, shown);
  if (!data) return data.error();
  git_filter_list* fraw = nullptr;
  int rc = git_filter_list_load(&fraw, host, nullptr, path.c_str(),
                                GIT_FILTER_TO_ODB, GIT_FILTER_DEFAULT);
  std::unique_ptr<git_filter_list,
                  GitFree<git_filter_list, git_filter_list_free>>
      filters(fraw);
  if (rc < 0) return GitError(rc, "load filters", shown);
  if (!filters) return WriteBlob(odb, data->data(), data->size(), shown);
  git_buf out = GIT_BUF_INIT;
  rc = git_filter_list_apply_to_buffer(&out, filters.get(), data->data(),
                                       data->size());
  if (rc < 0) {
    git_buf_dispose(&out);
    return GitError(rc, "filter", shown);
  }
  auto id = WriteBlob(odb, out.ptr, out.size, shown);
  git_buf_dispose(&out);
  return id;
}

// The edit that makes `path` in the tree what the working directory holds:
// a blob (regular file or symlink) or a removal (missing, a directory, or
// another kind of file git does not track).
Result<TreeEdit> WorkingEdit(git_repository* host, git_odb* odb, int root,
                             const std::string& path,
                             const std::string& shown) {
  TreeEdit edit{TreeEdit::kRemove, path};
  auto fd = sys::OpenBeneath(root, path, O_PATH | O_NOFOLLOW, 0, shown);
  if (!fd) {
    // ELOOP: a parent is a symlink, so git sees no file at `path`.
    int e = fd.err();
    if (e == ENOENT || e == ENOTDIR || e == ELOOP) return edit;
    return fd.error();
  }
  auto st = sys::Fstat(fd->get(), shown);
  if (!st) return st.error();
  if (S_ISLNK(st->st_mode)) {
    auto target = sys::ReadLinkAt(fd->get(), "", shown);
    if (!target) return target.error();
    auto id = WriteBlob(odb, target->data(), target->size(), shown);
    if (!id) return id.error();
    edit = TreeEdit{TreeEdit::kPut, path, GIT_FILEMODE_LINK, *id};
  } else if (S_ISREG(st->st_mode)) {
    auto id = WriteFileBlob(host, odb, root, path, shown);
    if (!id) return id.error();
    git_filemode_t mode = (st->st_mode & S_IXUSR) ? GIT_FILEMODE_BLOB_EXECUTABLE
                                                  : GIT_FILEMODE_BLOB;
    edit = TreeEdit{TreeEdit::kPut, path, mode, *id};
  }
  return edit;
}

// HEAD's commit, or null when unborn.
Result<GitCommit> HeadCommit(git_repository* repo, const std::string& shown) {
  git_reference* raw = nullptr;
  int rc = git_repository_head(&raw, repo);
  GitReference head(raw);
  if (rc == GIT_EUNBORNBRANCH || rc == GIT_ENOTFOUND) return GitCommit();
  if (rc < 0) return GitError(rc, "read HEAD", shown);
  git_object* obj = nullptr;
  rc = git_reference_peel(&obj, head.get(), GIT_OBJECT_COMMIT);
  if (rc < 0) return GitError(rc, "read HEAD commit", shown);
  return GitCommit(reinterpret_cast<git_commit*>(obj));
}

// The commit of `tree` on `parent` in `bridge`. Its time is the parent's
// commit time, so the same working state always gives the same commit.
Result<git_oid> CommitDirty(git_repository* bridge, const git_oid& tree_id,
                            const git_commit* host_parent,
                            const std::string& shown) {
  git_tree* traw = nullptr;
  int rc = git_tree_lookup(&traw, bridge, &tree_id);
  GitTree tree(traw);
  if (rc < 0) return GitError(rc, "read tree " + OidHex(tree_id), shown);
  GitCommit parent;
  if (host_parent) {
    git_commit* praw = nullptr;
    rc = git_commit_lookup(&praw, bridge, git_commit_id(host_parent));
    parent.reset(praw);
    if (rc < 0) return GitError(rc, "read HEAD in the bridge", shown);
  }
  git_time_t when = host_parent ? git_commit_time(host_parent) : 0;
  int offset = host_parent ? git_commit_time_offset(host_parent) : 0;
  git_signature* sraw = nullptr;
  rc = git_signature_new(&sraw, "acqfs", "acqfs@localhost", when, offset);
  GitSignature sig(sraw);
  if (rc < 0) return GitError(rc, "make signature", shown);
  const git_commit* parents[] = {parent.get()};
  git_oid id;
  rc = git_commit_create(&id, bridge, nullptr, sig.get(), sig.get(), nullptr,
                         kDirtyMessage, tree.get(), parent ? 1 : 0, parents);
  if (rc < 0) return GitError(rc, "commit host working state", shown);
  return id;
}

}  // namespace

Result<HostRepo> HostRepo::Open(const std::string& workdir) {
  git_repository* raw = nullptr;
  int rc = GitOpenRepository(&raw, workdir, GIT_REPOSITORY_OPEN_NO_SEARCH);
  GitRepository repo(raw);
  if (rc < 0) {
    if (ClassifyGitOpenFailure(rc) == GitOpenFailure::kNoRepository)
      return GitError(rc, "open git checkout", workdir);  // ENOENT
    // A repository libgit2 will not open is never "no repository".
    Error e = GitOpenError(rc, "open git checkout", workdir);
    if (e.err == ENOENT) e.err = EIO;
    return e;
  }
  if (git_repository_is_bare(repo.get()))
    return Error::Of(ENOENT, "not a git checkout (bare repository)", workdir);
  return HostRepo(std::move(repo), workdir);
}

std::string HostRepo::gitdir() const { return git_repository_path(repo()); }

std::string HostRepo::objects_dir() const {
  git_buf buf = GIT_BUF_INIT;
  std::string out;
  if (git_repository_item_path(&buf, repo(), GIT_REPOSITORY_ITEM_OBJECTS) == 0)
    out = StripSlash(buf.ptr);
  else
    out = gitdir() + "objects";
  git_buf_dispose(&buf);
  return out;
}

Result<std::optional<git_oid>> HostRepo::Head() const {
  auto head = HeadCommit(repo(), workdir_);
  if (!head) return head.error();
  if (!*head) return std::optional<git_oid>();
  return std::optional<git_oid>(*git_commit_id(head->get()));
}

Result<std::map<std::string, git_oid>> HostRepo::Branches() const {
  git_branch_iterator* raw = nullptr;
  int rc = git_branch_iterator_new(&raw, repo(), GIT_BRANCH_LOCAL);
  std::unique_ptr<git_branch_iterator,
                  GitFree<git_branch_iterator, git_branch_iterator_free>>
      it(raw);
  if (rc < 0) return GitError(rc, "list branches", workdir_);
  std::map<std::string, git_oid> out;
  for (;;) {
    git_reference* rraw = nullptr;
    git_branch_t type;
    rc = git_branch_next(&rraw, &type, it.get());
    GitReference ref(rraw);
    if (rc == GIT_ITEROVER) return out;
    if (rc < 0) return GitError(rc, "list branches", workdir_);
    const git_oid* id = git_reference_target(ref.get());
    if (!id) continue;  // symbolic
    const char* name = nullptr;
    if (git_branch_name(&name, ref.get()) < 0) continue;
    out[name] = *id;
  }
}

bool HostRepo::HasObject(const git_oid& id) const {
  git_odb* raw = nullptr;
  if (git_repository_odb(&raw, repo()) < 0) return false;
  GitOdb odb(raw);
  return git_odb_exists(odb.get(), &id) == 1;
}

Result<std::optional<git_oid>> HostRepo::DirtyCommit(
    git_repository* bridge, std::vector<SkippedPath>* skipped) const {
  auto list = HostStatus(repo(), workdir_);
  if (!list) return list.error();
  std::set<std::string> paths = ChangedPaths(list->get());
  if (paths.empty()) return std::optional<git_oid>();
  auto head = HeadCommit(repo(), workdir_);
  if (!head) return head.error();
  auto root =
      sys::OpenDirPath(StripSlash(git_repository_workdir(repo())), O_PATH);
  if (!root) return root.error();
  git_odb* oraw = nullptr;
  int rc = git_repository_odb(&oraw, bridge);
  GitOdb odb(oraw);
  if (rc < 0) return GitError(rc, "open bridge object database", workdir_);
  // Removals first, so that a path that became a directory (or stopped
  // being one) is cleared before what replaces it is put.
  std::vector<TreeEdit> removals, puts;
  std::set<std::string> refused;  // first refused components, reported once
  for (const std::string& path : paths) {
    auto edit = WorkingEdit(repo(), odb.get(), root->get(), path,
                            workdir_ + "/" + path);
    if (!edit) return edit.error();
    if (edit->kind == TreeEdit::kPut) {
      if (auto bad = UnsafeTreePath(path, static_cast<uint32_t>(edit->mode))) {
        // Left out means absent: not HEAD's version of the path either.
        removals.push_back(TreeEdit{TreeEdit::kRemove, bad->path});
        if (refused.insert(bad->path).second && skipped)
          skipped->push_back(std::move(*bad));
        continue;
      }
    }
    (edit->kind == TreeEdit::kRemove ? removals : puts).push_back(*edit);
  }
  removals.insert(removals.end(), puts.begin(), puts.end());
  const git_oid* base = *head ? git_commit_tree_id(head->get()) : nullptr;
  const bool any_put = !puts.empty();
  auto tree = ApplyTreeEdits(bridge, base, removals);
  if (!tree) return tree.error();
  // Nothing but paths left out (or changes that undo themselves): no
  // working state to record.
  if (base ? git_oid_equal(&*tree, base) : !any_put)
    return std::optional<git_oid>();
  auto id = CommitDirty(bridge, *tree, head->get(), workdir_);
  if (!id) return id.error();
  return std::optional<git_oid>(*id);
}

}  // namespace acqfs::gitbridge
