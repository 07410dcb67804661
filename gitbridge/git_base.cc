#include "gitbridge/git_base.h"

#include <fcntl.h>
#include <git2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <vector>

#include "common/git_ptr.h"
#include "common/sys.h"
#include "fs/copy_up.h"
#include "gitbridge/host_repo.h"
#include "gitbridge/sandbox_repo.h"

namespace acqfs::gitbridge {
namespace {

constexpr char kStaging[] = "acqfs-base";
constexpr char kIndexTemp[] = "acqfs-base-index";
constexpr int kMaxGitDirDepth = 64;

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() &&
         s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Entries of the host's .git the sandbox does not get a copy of: the
// shared stores at the top, and everything that belongs to a git command of
// the host's that is running right now.
bool LeftOut(const std::string& name, int depth) {
  if (depth == 0 && (name == "objects" || name == "lfs" || name == "modules" ||
                     name == "index" || name == "gc.pid"))
    return true;
  return EndsWith(name, ".lock");
}

// Gives the copy `dst_dirfd`/`name` of the lower directory `rel` the
// lower's times again, which filling it changed (as a copy-up leaves them).
Status KeepTimes(const Layers& layers, const std::string& rel, int dst_dirfd,
                 const std::string& name) {
  auto st = layers.lower.Stat(rel);
  if (!st) return st.error();
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (::utimensat(dst_dirfd, name.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
    return Error::Errno("utimensat", layers.lower.Shown(rel));
  return Ok();
}

// Copies the lower directory `rel` (already copied as `dst_dirfd`/`name`,
// without its children) below its copy; regular files copied are added to
// `files` for the fsync that follows.
Status CopyChildren(const Layers& layers, const std::string& rel, int dst_dirfd,
                    const std::string& name, int depth,
                    std::vector<UniqueFd>* dirs) {
  if (depth > kMaxGitDirDepth)
    return Error::Of(ELOOP, "copy the host's .git (nested too deeply)",
                     layers.lower.Shown(rel));
  auto src = layers.lower.OpenForReading(rel, O_DIRECTORY);
  if (!src) return src.error();
  auto entries = sys::ReadDir(src->get(), layers.lower.Shown(rel));
  if (!entries) return entries.error();
  auto dst = sys::OpenBeneath(dst_dirfd, name, O_RDONLY | O_DIRECTORY, 0,
                              layers.lower.Shown(rel));
  if (!dst) return dst.error();
  for (const sys::DirEntry& e : *entries) {
    if (LeftOut(e.name, depth)) continue;
    const std::string child = sys::Join(rel, e.name);
    Status s = CopyLowerTo(layers, child, dst->get(), e.name);
    if (!s) {
      // The host removed it meanwhile (a ref deleted, a lock let go).
      if (s.err() == ENOENT) continue;
      return s;
    }
    struct stat st;
    bool found = false;
    ACQFS_TRY(sys::StatAtIfExists(dst->get(), e.name, &st, &found,
                                  layers.lower.Shown(child)));
    if (found && S_ISDIR(st.st_mode))
      ACQFS_TRY(
          CopyChildren(layers, child, dst->get(), e.name, depth + 1, dirs));
  }
  dirs->push_back(std::move(*dst));
  return KeepTimes(layers, rel, dst_dirfd, name);
}

// fsync of every regular file below the open directory `dir`, then of it.
Status SyncTree(int dir, const std::string& shown) {
  auto entries = sys::ReadDir(dir, shown);
  if (!entries) return entries.error();
  for (const sys::DirEntry& e : *entries) {
    if (e.type != DT_REG) continue;
    UniqueFd f(::openat(dir, e.name.c_str(),
                        O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME));
    if (!f) return Error::Errno("open to fsync", sys::Join(shown, e.name));
    if (::fsync(f.get()) != 0)
      return Error::Errno("fsync", sys::Join(shown, e.name));
  }
  if (::fsync(dir) != 0) return Error::Errno("fsync", shown);
  return Ok();
}

std::string Hex(const git_oid& id) {
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof buf, &id);
  return buf;
}

}  // namespace

FileIdentity FileIdentity::Of(const struct stat& st) {
  FileIdentity id;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = sys::MtimeNs(st);
  id.ctime_ns = sys::CtimeNs(st);
  return id;
}

int64_t NowNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

Result<bool> OwnLayersHaveGit(const Layers& layers) {
  for (unsigned i = 1; i <= layers.upper_number(); ++i) {
    const Layer& l = layers.At(i);
    struct stat st;
    bool found = false;
    ACQFS_TRY(
        sys::StatAtIfExists(l.root(), ".git", &st, &found, l.Shown(".git")));
    if (found) return true;
  }
  return false;
}

Status FreezeGitDir(const Layers& layers, const std::string& work) {
  auto workfd = sys::OpenDirPath(work, O_RDONLY);
  if (!workfd) return workfd.error();
  const std::string shown = sys::Join(work, kStaging);
  // What an interrupted freeze left: never published, so never seen.
  ACQFS_TRY(sys::RemoveTree(workfd->get(), kStaging, shown));
  auto lower_git = layers.lower.Stat(".git");
  if (!lower_git) return lower_git.error();
  if (!S_ISDIR(lower_git->st_mode))
    return Error::Of(ENOTDIR, "copy the host's .git (not a directory)",
                     layers.lower.Shown(".git"));
  ACQFS_TRY(CopyLowerTo(layers, ".git", workfd->get(), kStaging));
  std::vector<UniqueFd> dirs;  // deepest first
  Status s = CopyChildren(layers, ".git", workfd->get(), kStaging, 0, &dirs);
  // Durable before it is published: one pass of fsyncs once everything is
  // written (the journal commits the lot at the first), not one a file.
  for (size_t i = 0; s && i < dirs.size(); ++i)
    s = SyncTree(dirs[i].get(), shown);
  auto upper = sys::OpenDirPath(layers.upper.root_path(), O_RDONLY);
  if (!upper) s = upper.error();
  // The merged root shows the upper root's times, which the rename below
  // changes: they are put back, as a copy-up leaves its parent's.
  struct stat root_st;
  if (s && ::fstat(upper->get(), &root_st) != 0)
    s = Error::Errno("stat", layers.upper.root_path());
  if (s)
    s = sys::Renameat2(workfd->get(), kStaging, layers.upper.root(), ".git",
                       RENAME_NOREPLACE, layers.upper.Shown(".git"));
  if (!s) {
    (void)sys::RemoveTree(workfd->get(), kStaging, shown);
    return s;
  }
  struct timespec ts[2] = {root_st.st_atim, root_st.st_mtim};
  if (::futimens(upper->get(), ts) != 0)
    return Error::Errno("utimensat", layers.upper.root_path());
  if (::fsync(upper->get()) != 0)
    return Error::Errno("fsync", layers.upper.root_path());
  return Ok();
}

Result<std::optional<UniqueFd>> OpenHostIndex(const std::string& lower,
                                              FileIdentity* id) {
  auto root = sys::OpenDirPath(lower, O_PATH);
  if (!root) return root.error();
  const std::string shown = sys::Join(lower, ".git/index");
  auto fd = sys::OpenBeneath(root->get(), ".git/index",
                             O_RDONLY | O_NOFOLLOW | O_NOATIME, 0, shown);
  if (!fd && fd.err() == EPERM)  // O_NOATIME on another user's file
    fd = sys::OpenBeneath(root->get(), ".git/index", O_RDONLY | O_NOFOLLOW, 0,
                          shown);
  if (!fd) {
    if (fd.err() == ENOENT) return std::optional<UniqueFd>();
    return fd.error();
  }
  auto st = sys::Fstat(fd->get(), sys::Join(lower, ".git/index"));
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode))
    return Error::Of(EINVAL, "the host's index is not a regular file",
                     sys::Join(lower, ".git/index"));
  *id = FileIdentity::Of(*st);
  return std::optional<UniqueFd>(std::move(*fd));
}

Status ReadBaseRefs(const Layers& layers, GitBase* base) {
  auto repo = SandboxRepo::OpenRefsOnly(layers);
  if (!repo) return repo.error();
  auto head = repo->Head();
  if (!head) return head.error();
  base->head = *head ? Hex(**head) : "";
  auto branch = repo->HeadBranch();
  if (!branch) return branch.error();
  base->branch = *branch;
  auto branches = repo->Branches();
  if (!branches) return branches.error();
  base->branches.clear();
  for (const auto& [name, id] : *branches) base->branches[name] = Hex(id);
  return Ok();
}

Status ReadHostRefs(const std::string& lower, GitBase* base) {
  GitLibrary lib;
  auto host = HostRepo::Open(lower);
  if (!host) return host.error();
  auto head = host->Head();
  if (!head) return head.error();
  base->head = *head ? Hex(**head) : "";
  base->branch.clear();
  git_reference* raw = nullptr;
  if (git_reference_lookup(&raw, host->repo(), "HEAD") == 0) {
    GitReference ref(raw);
    if (git_reference_type(ref.get()) == GIT_REFERENCE_SYMBOLIC) {
      std::string target = git_reference_symbolic_target(ref.get());
      if (target.rfind("refs/heads/", 0) == 0 && *head)
        base->branch = target.substr(11);
    }
  }
  auto branches = host->Branches();
  if (!branches) return branches.error();
  base->branches.clear();
  for (const auto& [name, id] : *branches) base->branches[name] = Hex(id);
  return Ok();
}

Status RebuildIndex(const Layers& layers, const std::string& lower,
                    const std::string& head, const std::string& work) {
  GitLibrary lib;
  auto host = HostRepo::Open(lower);
  if (!host) return host.error();
  auto workfd = sys::OpenDirPath(work, O_RDONLY);
  if (!workfd) return workfd.error();
  const std::string temp = sys::Join(work, kIndexTemp);
  (void)::unlinkat(workfd->get(), kIndexTemp, 0);
  git_index* raw = nullptr;
  int rc = git_index_open(&raw, temp.c_str());
  GitIndex index(raw);
  if (rc < 0) return GitError(rc, "make an index", temp);
  if (!head.empty()) {
    git_oid id;
    if (git_oid_fromstr(&id, head.c_str()) != 0)
      return Error::Of(EINVAL, "bad commit id '" + head + "'", temp);
    git_commit* craw = nullptr;
    rc = git_commit_lookup(&craw, host->repo(), &id);
    GitCommit commit(craw);
    if (rc < 0) return GitError(rc, "read the base commit " + head, lower);
    git_tree* traw = nullptr;
    rc = git_commit_tree(&traw, commit.get());
    GitTree tree(traw);
    if (rc < 0) return GitError(rc, "read the base tree", lower);
    rc = git_index_read_tree(index.get(), tree.get());
    if (rc < 0) return GitError(rc, "read the base tree into an index", temp);
  }
  rc = git_index_write(index.get());
  if (rc < 0) return GitError(rc, "write an index", temp);
  auto git = sys::OpenBeneath(layers.upper.root(), ".git", O_PATH | O_DIRECTORY,
                              0, layers.upper.Shown(".git"));
  if (!git) {
    (void)::unlinkat(workfd->get(), kIndexTemp, 0);
    return git.error();
  }
  Status s = sys::Renameat2(workfd->get(), kIndexTemp, git->get(), "index", 0,
                            layers.upper.Shown(".git/index"));
  if (!s) (void)::unlinkat(workfd->get(), kIndexTemp, 0);
  return s;
}

}  // namespace acqfs::gitbridge
