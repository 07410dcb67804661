#include "gitbridge/apply.h"

#include <fcntl.h>
#include <git2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "common/git_ptr.h"
#include "common/sys.h"
#include "gitbridge/host_repo.h"
#include "gitbridge/line_merge.h"

namespace acqfs::gitbridge {
namespace {

using GitDiff = GitPtr<git_diff, git_diff_free>;

// One side of a path's merge: absent, a regular file (exec or not), a
// symlink, or something apply cannot write over (a directory, a special
// file, a path beyond a symlink).
struct Side {
  enum Kind { kAbsent, kFile, kLink, kOther } kind = kAbsent;
  bool exec = false;
  std::string data;  // content, or the link's target
  std::string why;   // kOther: what is there
  bool operator==(const Side& o) const {
    return kind == o.kind && exec == o.exec && data == o.data;
  }
};

Result<Side> BlobSide(git_repository* repo, const git_diff_file& f) {
  Side s;
  if (!(f.flags & GIT_DIFF_FLAG_EXISTS) || git_oid_is_zero(&f.id)) return s;
  if (f.mode == GIT_FILEMODE_COMMIT) {
    s.kind = Side::kOther;
    s.why = "a submodule";
    return s;
  }
  git_blob* raw = nullptr;
  int rc = git_blob_lookup(&raw, repo, &f.id);
  GitBlob blob(raw);
  if (rc < 0) return GitError(rc, "read blob " + OidHex(f.id), f.path);
  s.data.assign(static_cast<const char*>(git_blob_rawcontent(blob.get())),
                git_blob_rawsize(blob.get()));
  s.kind = f.mode == GIT_FILEMODE_LINK ? Side::kLink : Side::kFile;
  s.exec = f.mode == GIT_FILEMODE_BLOB_EXECUTABLE;
  return s;
}

// The host's working file at `rel`, reached beneath the checkout without
// following a symlink.
Result<Side> HostSide(int root, const std::string& workdir,
                      const std::string& rel) {
  Side s;
  const std::string shown = sys::Join(workdir, rel);
  const std::string dir = sys::Dirname(rel);
  auto parent = dir.empty() ? sys::OpenBeneath(root, ".", O_PATH | O_DIRECTORY,
                                               0, workdir)
                            : sys::OpenBeneath(root, dir, O_PATH | O_DIRECTORY,
                                               0, sys::Join(workdir, dir));
  if (!parent) {
    if (parent.err() == ENOENT) return s;
    if (parent.err() == ELOOP || parent.err() == ENOTDIR ||
        parent.err() == EXDEV) {
      s.kind = Side::kOther;
      s.why = "it lies beyond a symbolic link or a file on the host";
      return s;
    }
    return parent.error();
  }
  const std::string name = sys::Basename(rel);
  struct stat st;
  bool found = false;
  ACQFS_TRY(sys::StatAtIfExists(parent->get(), name, &st, &found, shown));
  if (!found) return s;
  if (S_ISLNK(st.st_mode)) {
    auto target = sys::ReadLinkAt(parent->get(), name, shown);
    if (!target) return target.error();
    s.kind = Side::kLink;
    s.data = *target;
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    s.kind = Side::kOther;
    s.why = S_ISDIR(st.st_mode) ? "a directory on the host"
                                : "a special file on the host";
    return s;
  }
  UniqueFd fd(
      ::openat(parent->get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Error::Errno("open", shown);
  auto data = sys::ReadAll(fd.get(), size_t{1} << 31, shown);
  if (!data) return data.error();
  s.kind = Side::kFile;
  s.exec = (st.st_mode & S_IXUSR) != 0;
  s.data = std::move(*data);
  return s;
}

bool HoldsConflictMarker(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.rfind("<<<<<<< ", 0) == 0 || line.rfind(">>>>>>> ", 0) == 0 ||
        line == "<<<<<<<" || line == ">>>>>>>")
      return true;
    pos = eol + 1;
  }
  return false;
}

// What is to be written at a path: the content, or a removal.
struct Plan {
  std::string path;
  bool remove = false;
  Side result;
  std::string temp;  // its name beside the path, once made
};

// The line merge of the three sides (all regular files or absent
// ancestors); nullopt when lines conflict.
Result<std::optional<std::string>> MergeLines(const Side& base,
                                              const Side& ours,
                                              const Side& theirs,
                                              const std::string& path) {
  return MergeFileLines(base.data, ours.data, theirs.data, path);
}

// Decides one path; sets e->conflict, or adds what to write to `plans`.
Status Decide(const Side& base, const Side& ours, const Side& theirs,
              ApplyEntry* e, std::vector<Plan>* plans) {
  e->remove = theirs.kind == Side::kAbsent;
  if (theirs.kind == Side::kOther) {
    e->conflict = theirs.why + " in the sandbox: apply it by hand";
    return Ok();
  }
  if (ours.kind == Side::kOther) {
    e->conflict = ours.why;
    return Ok();
  }
  if (ours == theirs) {
    e->nothing = true;
    return Ok();
  }
  if (ours.kind == Side::kFile && HoldsConflictMarker(ours.data))
    return Error::Of(EINVAL,
                     "the host's file holds a conflict marker; resolve it "
                     "first",
                     e->path);
  if (ours == base) {
    plans->push_back(Plan{e->path, e->remove, theirs, {}});
    return Ok();
  }
  // Both changed it since the base.
  if (theirs.kind == Side::kAbsent) {
    e->conflict = "changed on the host, removed in the sandbox";
    return Ok();
  }
  if (ours.kind == Side::kAbsent) {
    e->conflict = base.kind == Side::kAbsent
                      ? "added on the host too"
                      : "removed on the host, changed in the sandbox";
    if (base.kind == Side::kAbsent) e->conflict = "added on both sides";
    return Ok();
  }
  if (ours.kind != Side::kFile || theirs.kind != Side::kFile ||
      (base.kind != Side::kFile && base.kind != Side::kAbsent)) {
    e->conflict = "a symbolic link changed on both sides";
    return Ok();
  }
  Side ancestor = base;
  auto merged = MergeLines(ancestor, ours, theirs, e->path);
  if (!merged) return merged.error();
  if (!*merged) {
    e->conflict = "both changed the same lines";
    return Ok();
  }
  Side result = theirs;
  result.data = std::move(**merged);
  // The mode: the sandbox's change of it wins over the base's, else the
  // host's.
  result.exec = theirs.exec != base.exec ? theirs.exec : ours.exec;
  e->merged = true;
  plans->push_back(Plan{e->path, false, std::move(result), {}});
  return Ok();
}

// The directory of `rel`'s parent beneath `root`, made where missing
// (never through a symlink).
Result<UniqueFd> MakeParents(int root, const std::string& workdir,
                             const std::string& rel) {
  auto cur = sys::OpenBeneath(root, ".", O_PATH | O_DIRECTORY, 0, workdir);
  if (!cur) return cur.error();
  const std::string dir = sys::Dirname(rel);
  std::string done;
  size_t pos = 0;
  while (!dir.empty() && pos <= dir.size()) {
    size_t slash = dir.find('/', pos);
    if (slash == std::string::npos) slash = dir.size();
    const std::string comp = dir.substr(pos, slash - pos);
    done = sys::Join(done, comp);
    if (::mkdirat(cur->get(), comp.c_str(), 0777) != 0 && errno != EEXIST)
      return Error::Errno("mkdir", sys::Join(workdir, done));
    auto next = sys::OpenBeneath(cur->get(), comp, O_PATH | O_DIRECTORY, 0,
                                 sys::Join(workdir, done));
    if (!next) return next.error();
    cur = std::move(next);
    pos = slash + 1;
  }
  return cur;
}

Status WriteTemp(int dirfd, const std::string& workdir, Plan* p,
                 mode_t umask_bits) {
  const std::string shown = sys::Join(workdir, p->path);
  p->temp = sys::TempName(".acqfs-apply.");
  if (p->result.kind == Side::kLink) {
    if (::symlinkat(p->result.data.c_str(), dirfd, p->temp.c_str()) != 0)
      return Error::Errno("symlink", shown);
    return Ok();
  }
  const mode_t mode = (p->result.exec ? 0777 : 0666) & ~umask_bits;
  UniqueFd fd(::openat(dirfd, p->temp.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       mode));
  if (!fd) return Error::Errno("create", shown);
  Status s = sys::PwriteAll(fd.get(), p->result.data.data(),
                            p->result.data.size(), 0, shown);
  if (s && ::fchmod(fd.get(), mode) != 0) s = Error::Errno("chmod", shown);
  if (!s) (void)::unlinkat(dirfd, p->temp.c_str(), 0);
  return s;
}

Status BusyCheck(const HostRepo& host) {
  const std::string gitdir = host.gitdir();
  struct Busy {
    const char* name;
    const char* what;
  };
  const Busy kBusy[] = {
      {"MERGE_HEAD", "in the middle of a merge"},
      {"CHERRY_PICK_HEAD", "in the middle of a cherry-pick"},
      {"REVERT_HEAD", "in the middle of a revert"},
      {"rebase-merge", "in the middle of a rebase"},
      {"rebase-apply", "in the middle of a rebase or `git am`"},
      {"index.lock", "its index locked by a git command"},
  };
  for (const Busy& b : kBusy) {
    struct stat st;
    const std::string p = gitdir + b.name;
    if (::lstat(p.c_str(), &st) == 0)
      return Error::Of(
          EBUSY,
          std::string("the host checkout is ") + b.what + "; finish it first",
          p);
  }
  return Ok();
}

}  // namespace

Result<std::string> CheckoutRelative(const std::string& lower,
                                     const std::string& path) {
  std::string rel = path;
  if (!rel.empty() && rel.front() == '/') {
    std::string top = lower;
    while (top.size() > 1 && top.back() == '/') top.pop_back();
    if (rel == top) {
      rel = "";
    } else if (rel.compare(0, top.size() + 1, top + "/") == 0) {
      rel = rel.substr(top.size() + 1);
    } else {
      return Error::Of(EINVAL, "outside the checkout " + lower, path);
    }
  }
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= rel.size()) {
    size_t slash = rel.find('/', pos);
    if (slash == std::string::npos) slash = rel.size();
    std::string comp = rel.substr(pos, slash - pos);
    pos = slash + 1;
    if (comp.empty() || comp == ".") continue;
    if (comp == "..") {
      if (parts.empty())
        return Error::Of(EINVAL, "outside the checkout " + lower, path);
      parts.pop_back();
      continue;
    }
    parts.push_back(comp);
  }
  if (!parts.empty() && parts.front() == ".git")
    return Error::Of(EINVAL, "inside the checkout's .git", path);
  std::string out;
  for (const auto& p : parts) out = sys::Join(out, p);
  return out;
}

Result<ApplyResult> Apply(const ExportConfig& c, const ApplyOptions& o) {
  std::vector<std::string> paths;
  for (const std::string& p : o.paths) {
    auto rel = CheckoutRelative(c.lower, p);
    if (!rel) return rel.error();
    if (rel->empty()) {  // the whole checkout
      paths.clear();
      break;
    }
    paths.push_back(*rel);
  }
  GitLibrary lib;
  auto host = HostRepo::Open(c.lower);
  if (!host) return host.error();
  ACQFS_TRY(BusyCheck(*host));
  auto planned = PlanWorktreeOnly(c);
  if (!planned) return planned.error();
  if (planned->tree.empty()) {
    std::string why;
    for (const auto& r : planned->refused) why += (why.empty() ? "" : "; ") + r;
    return Error::Of(EIO, "the sandbox's working tree cannot be read: " + why,
                     c.upper);
  }
  git_repository* raw = nullptr;
  int rc = git_repository_open_bare(&raw, c.bridge.c_str());
  GitRepository bridge(raw);
  if (rc < 0) return GitError(rc, "open the bridge", c.bridge);
  auto tree_of = [&](const std::string& hex,
                     bool commit) -> Result<std::optional<GitTree>> {
    if (hex.empty()) return std::optional<GitTree>();
    git_oid id;
    if (git_oid_fromstr(&id, hex.c_str()) != 0)
      return Error::Of(EINVAL, "bad object id '" + hex + "'", c.bridge);
    git_tree* t = nullptr;
    int r = 0;
    if (commit) {
      git_commit* cr = nullptr;
      r = git_commit_lookup(&cr, bridge.get(), &id);
      GitCommit cm(cr);
      if (r == 0) r = git_commit_tree(&t, cm.get());
    } else {
      r = git_tree_lookup(&t, bridge.get(), &id);
    }
    GitTree tree(t);
    if (r < 0) return GitError(r, "read the tree of " + hex, c.bridge);
    return std::optional<GitTree>(std::move(tree));
  };
  auto base_tree = tree_of(planned->base_commit, true);
  if (!base_tree) return base_tree.error();
  auto work_tree = tree_of(planned->tree, false);
  if (!work_tree) return work_tree.error();

  git_diff_options dopts = GIT_DIFF_OPTIONS_INIT;
  std::vector<char*> specs;
  for (auto& p : paths) specs.push_back(p.data());
  dopts.pathspec.strings = specs.data();
  dopts.pathspec.count = specs.size();
  git_diff* draw = nullptr;
  rc = git_diff_tree_to_tree(&draw, bridge.get(),
                             *base_tree ? (*base_tree)->get() : nullptr,
                             (*work_tree)->get(), &dopts);
  GitDiff diff(draw);
  if (rc < 0) return GitError(rc, "diff the base with the sandbox", c.bridge);

  auto root = sys::OpenDirPath(c.lower, O_PATH);
  if (!root) return root.error();
  ApplyResult result;
  std::vector<Plan> plans;
  for (size_t i = 0; i < git_diff_num_deltas(diff.get()); ++i) {
    const git_diff_delta* d = git_diff_get_delta(diff.get(), i);
    ApplyEntry e;
    e.path = d->new_file.path ? d->new_file.path : d->old_file.path;
    auto base = BlobSide(bridge.get(), d->old_file);
    if (!base) return base.error();
    auto theirs = BlobSide(bridge.get(), d->new_file);
    if (!theirs) return theirs.error();
    auto ours = HostSide(root->get(), c.lower, e.path);
    if (!ours) return ours.error();
    ACQFS_TRY(Decide(*base, *ours, *theirs, &e, &plans));
    result.entries.push_back(std::move(e));
  }
  if (o.check || result.conflicts()) return result;

  // Every new file is made beside its place first, then all are renamed
  // over their places: a failure before the renames writes nothing.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  std::vector<UniqueFd> dirs;
  Status made = Ok();
  for (Plan& p : plans) {
    auto dir = p.remove ? sys::OpenBeneath(root->get(),
                                           sys::Dirname(p.path).empty()
                                               ? "."
                                               : sys::Dirname(p.path),
                                           O_PATH | O_DIRECTORY, 0, c.lower)
                        : MakeParents(root->get(), c.lower, p.path);
    if (!dir) {
      made = dir.error();
      dirs.emplace_back();
      break;
    }
    if (!p.remove) made = WriteTemp(dir->get(), c.lower, &p, mask);
    dirs.push_back(std::move(*dir));
    if (!made) break;
  }
  if (!made) {
    for (size_t i = 0; i < dirs.size(); ++i)
      if (dirs[i] && !plans[i].temp.empty())
        (void)::unlinkat(dirs[i].get(), plans[i].temp.c_str(), 0);
    return made.error();
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    const Plan& p = plans[i];
    const std::string name = sys::Basename(p.path);
    const std::string shown = sys::Join(c.lower, p.path);
    if (p.remove) {
      if (::unlinkat(dirs[i].get(), name.c_str(), 0) != 0 && errno != ENOENT)
        return Error::Errno("remove", shown);
      continue;
    }
    ACQFS_TRY(
        sys::Renameat2(dirs[i].get(), p.temp, dirs[i].get(), name, 0, shown));
  }
  result.written = true;
  // The index, as `git apply --3way` leaves it: the applied paths staged.
  git_index* iraw = nullptr;
  rc = git_repository_index(&iraw, host->repo());
  GitIndex index(iraw);
  if (rc < 0) return GitError(rc, "read the host's index", host->gitdir());
  for (const Plan& p : plans) {
    rc = p.remove ? git_index_remove_bypath(index.get(), p.path.c_str())
                  : git_index_add_bypath(index.get(), p.path.c_str());
    if (rc < 0) return GitError(rc, "stage", sys::Join(c.lower, p.path));
  }
  rc = git_index_write(index.get());
  if (rc < 0) return GitError(rc, "write the host's index", host->gitdir());
  return result;
}

}  // namespace acqfs::gitbridge
