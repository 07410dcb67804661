#include "gitbridge/git_base.h"

#include <fcntl.h>
#include <git2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <set>
#include <vector>

#include "common/git_ptr.h"
#include "common/handle.h"
#include "common/sys.h"
#include "fs/copy_up.h"
#include "gitbridge/host_repo.h"
#include "gitbridge/remote.h"
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

// Entries of a git directory of the host's (.git, or a submodule's) the
// sandbox does not get a copy of: the shared object stores, and what
// belongs to a git command of the host's that is running right now
// (gc.pid; lock files are left out everywhere). The index of .git itself
// is the daemon's to copy (`top`); a submodule's is copied with the rest.
bool LeftOut(const std::string& name, bool top) {
  return name == "objects" || name == "lfs" || name == "gc.pid" ||
         (top && name == "index");
}

// The refs of acqfs's own in the host's repository, which a sandbox's copy
// of .git leaves out: the keep refs of every sandbox (refs/acqfs-base,
// refs/acqfs-keep, refs/acqfs-tips), and what the host fetched from the
// sandboxes' bridges (refs/sandboxes, and refs/remotes/<r> of each remote
// acqfs registered: one whose fetch refspec fills refs/sandboxes/). A
// clone made at the mount has none of them; copied, they showed one
// sandbox the others' work, each first mount kept every other sandbox's
// keep refs again (writing refs/acqfs-tips for each: a cost that grew with
// every sandbox), and once another sandbox was removed and the host's gc
// ran, they named objects gone, which the sandbox's `git fsck` reported.
class AcqfsRefs {
 public:
  // Reads the remotes from the host's .git/config (none when unreadable).
  static AcqfsRefs Of(const Layers& layers, const std::string& sandbox) {
    AcqfsRefs r;
    r.own_base_ = "refs/acqfs-base/" + sandbox;
    GitLibrary lib;
    const std::string path = layers.lower.Shown(".git/config");
    git_config* raw = nullptr;
    if (git_config_open_ondisk(&raw, path.c_str()) != 0) return r;
    GitConfig cfg(raw);
    git_config_iterator* iraw = nullptr;
    if (git_config_iterator_glob_new(&iraw, cfg.get(),
                                     "^remote\\..*\\.fetch$") != 0)
      return r;
    GitConfigIterator it(iraw);
    git_config_entry* e = nullptr;
    while (git_config_next(&e, it.get()) == 0) {
      const std::string name = e->name, value = e->value ? e->value : "";
      if (value.find(":refs/sandboxes/") == std::string::npos) continue;
      // "remote.<name>.fetch", <name> as written (it may hold dots).
      r.remotes_.insert(name.substr(7, name.size() - 7 - 6));
    }
    return r;
  }

  // Is `ref` ("refs/...", or a directory of refs such as "refs/acqfs-base")
  // one of them?
  bool Covers(const std::string& ref) const {
    // The ref itself, and the directory that holds it.
    if (ref == own_base_ || own_base_.rfind(ref + "/", 0) == 0) return false;
    const std::string r = ref + "/";
    for (const char* ns : {"refs/acqfs-base/", "refs/acqfs-keep/",
                           "refs/acqfs-tips/", "refs/sandboxes/"})
      if (r.rfind(ns, 0) == 0) return true;
    if (r.rfind("refs/remotes/", 0) != 0) return false;
    const size_t end = r.find('/', 13);
    return remotes_.count(r.substr(13, end - 13)) > 0;
  }

  // The same for a path in .git ("refs/...", or its reflog "logs/refs/...").
  bool CoversPath(const std::string& in_git) const {
    if (in_git.rfind("logs/refs/", 0) == 0) return Covers(in_git.substr(5));
    return in_git.rfind("refs/", 0) == 0 && Covers(in_git);
  }

  // packed-refs without their lines (and the peeled "^" lines that follow
  // them); nullopt when it has none.
  std::optional<std::string> Filter(const std::string& packed) const {
    std::string out;
    bool changed = false, dropping = false;
    size_t pos = 0;
    while (pos < packed.size()) {
      size_t eol = packed.find('\n', pos);
      const size_t next = eol == std::string::npos ? packed.size() : eol + 1;
      const std::string_view line(packed.data() + pos, next - pos);
      pos = next;
      if (!line.empty() && line[0] == '^') {
        if (!dropping) out.append(line);
        continue;
      }
      dropping = false;
      const size_t sp = line.find(' ');
      if (line[0] != '#' && sp != std::string_view::npos) {
        std::string name(line.substr(sp + 1));
        while (!name.empty() && (name.back() == '\n' || name.back() == '\r'))
          name.pop_back();
        if (Covers(name)) {
          dropping = changed = true;
          continue;
        }
      }
      out.append(line);
    }
    if (!changed) return std::nullopt;
    return out;
  }

 private:
  std::set<std::string> remotes_;
  // The sandbox's own base ref, written before the copy so that the copy
  // is the host's .git as it was once the mount began: it stays.
  std::string own_base_;
};

// The copy of packed-refs at `dirfd`/`name` without acqfs's refs, its
// times kept.
Status FilterPackedRefs(const AcqfsRefs& own, int dirfd,
                        const std::string& name, const std::string& shown) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Error::Errno("open", shown);
  auto st = sys::Fstat(fd.get(), shown);
  if (!st) return st.error();
  auto text = sys::ReadAll(fd.get(), size_t{1} << 30, shown);
  if (!text) return text.error();
  auto kept = own.Filter(*text);
  if (!kept) return Ok();
  if (::ftruncate(fd.get(), 0) != 0) return Error::Errno("truncate", shown);
  ACQFS_TRY(sys::PwriteAll(fd.get(), kept->data(), kept->size(), 0, shown));
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (::futimens(fd.get(), ts) != 0) return Error::Errno("utimensat", shown);
  return Ok();
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

// What a directory of the host's .git is, for its copy: a git directory
// (.git itself, or a submodule's repository below .git/modules), the
// modules area between them (.git/modules and the directories a submodule's
// name with slashes makes), or anything inside a git directory.
enum class Area { kGitDir, kModules, kInside, kLogs, kLogsRefs };

// Of a git directory's reflogs (logs/), the copy keeps the stash's alone
// (logs/refs/stash: `stash@{1}` and older are named only there, and
// KeepTips keeps them). The others name commits that only they reach,
// which nothing keeps from the host's gc: once the host expires its
// reflogs and prunes, the sandbox's `git fsck` failed ("invalid reflog
// entry") where a clone's, whose reflogs begin at the clone, passes.
bool ReflogLeftOut(Area area, const std::string& name) {
  return (area == Area::kLogs && name != "refs") ||
         (area == Area::kLogsRefs && name != "stash");
}

// Is the lower directory `rel` a submodule's git directory (it has a HEAD)?
bool IsModuleGitDir(const Layers& layers, const std::string& rel) {
  auto st = layers.lower.Stat(rel + "/HEAD");
  return st && S_ISREG(st->st_mode);
}

// Copies the lower directory `rel` (already copied as `dst_dirfd`/`name`,
// without its children) below its copy, leaving out what a git directory's
// copy leaves out (LeftOut: its object stores, locks, and for .git itself
// the index, which the daemon copies) and acqfs's own refs. `gitdir` is
// the git directory `rel` is in (or is). Directories are added to `dirs`,
// deepest first, for the fsync that follows.
Status CopyChildren(const Layers& layers, const AcqfsRefs& own,
                    const std::string& rel, Area area,
                    const std::string& gitdir, int dst_dirfd,
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
    if (EndsWith(e.name, ".lock")) continue;
    if (area == Area::kGitDir && LeftOut(e.name, gitdir == ".git")) continue;
    if (ReflogLeftOut(area, e.name)) continue;
    const std::string child = sys::Join(rel, e.name);
    if (area != Area::kModules &&
        own.CoversPath(child.substr(gitdir.size() + 1)))
      continue;
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
    if (found && S_ISDIR(st.st_mode)) {
      Area next = Area::kInside;
      std::string next_gitdir = gitdir;
      if (area == Area::kGitDir && e.name == "modules") {
        next = Area::kModules;
      } else if (area == Area::kGitDir && e.name == "logs") {
        next = Area::kLogs;
        // Opaque, so that the kernel overlayfs over the same layers hides
        // the host's reflogs too, as acqfs's own-git rule does.
        ACQFS_TRY(layers.format.SetOpaque(dst->get(), e.name,
                                          layers.upper.Shown(child)));
      } else if (area == Area::kLogs) {
        next = Area::kLogsRefs;
      } else if (area == Area::kModules) {
        next = IsModuleGitDir(layers, child) ? Area::kGitDir : Area::kModules;
        if (next == Area::kGitDir) next_gitdir = child;
      }
      ACQFS_TRY(CopyChildren(layers, own, child, next, next_gitdir, dst->get(),
                             e.name, depth + 1, dirs));
    }
    if (found && area == Area::kGitDir && e.name == "packed-refs" &&
        S_ISREG(st.st_mode))
      ACQFS_TRY(
          FilterPackedRefs(own, dst->get(), e.name, layers.upper.Shown(child)));
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

Status FreezeGitDir(const Layers& layers, const std::string& work,
                    const std::string& sandbox) {
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
  Status s =
      CopyChildren(layers, AcqfsRefs::Of(layers, sandbox), ".git",
                   Area::kGitDir, ".git", workfd->get(), kStaging, 0, &dirs);
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

Status ReadBaseRefs(const Layers& layers, GitBase* base,
                    const std::string& gitdir) {
  auto repo = SandboxRepo::OpenRefsOnly(layers, gitdir);
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

Result<std::vector<std::string>> ReadBaseTips(const Layers& layers,
                                              const GitBase& base,
                                              const std::string& gitdir) {
  auto repo = SandboxRepo::OpenRefsOnly(layers, gitdir);
  if (!repo) return repo.error();
  auto refs = repo->AllRefs();
  if (!refs) return refs.error();
  auto stash = repo->ReflogIds("refs/stash");
  if (!stash) return stash.error();
  std::set<std::string> kept;  // by KeepBase and KeepBranches
  if (!base.head.empty()) kept.insert(base.head);
  for (const auto& [name, hex] : base.branches) kept.insert(hex);
  std::set<std::string> tips;
  auto add = [&](const git_oid& id) {
    std::string hex = Hex(id);
    if (!kept.count(hex)) tips.insert(std::move(hex));
  };
  for (const auto& [name, id] : *refs) {
    // acqfs's own (a copy made before they were left out of it): each is
    // kept by the sandbox it belongs to.
    if (name.rfind("refs/acqfs-", 0) == 0 ||
        name.rfind("refs/sandboxes/", 0) == 0 ||
        name.rfind("refs/remotes/sandbox-", 0) == 0)
      continue;
    add(id);
  }
  for (const git_oid& id : *stash) add(id);
  return std::vector<std::string>(tips.begin(), tips.end());
}

namespace {

// Adds the submodule git directories at or below the upper's directory
// `rel` (of the modules area) to `out`.
Status FindModules(const Layers& layers, const std::string& rel, int depth,
                   std::vector<std::string>* out) {
  if (depth > kMaxGitDirDepth)
    return Error::Of(ELOOP, "submodules nested too deeply",
                     layers.upper.Shown(rel));
  auto dir = sys::OpenBeneath(layers.upper.root(), rel, O_RDONLY | O_DIRECTORY,
                              0, layers.upper.Shown(rel));
  if (!dir) {
    if (dir.err() == ENOENT || dir.err() == ENOTDIR) return Ok();
    return dir.error();
  }
  auto entries = sys::ReadDir(dir->get(), layers.upper.Shown(rel));
  if (!entries) return entries.error();
  for (const sys::DirEntry& e : *entries) {
    if (e.type != DT_DIR) continue;
    const std::string child = sys::Join(rel, e.name);
    struct stat st;
    bool found = false;
    ACQFS_TRY(sys::StatAtIfExists(dir->get(), e.name + "/HEAD", &st, &found,
                                  layers.upper.Shown(child + "/HEAD")));
    if (found && S_ISREG(st.st_mode)) {
      out->push_back(child);
      ACQFS_TRY(FindModules(layers, child + "/modules", depth + 1, out));
    } else {
      ACQFS_TRY(FindModules(layers, child, depth + 1, out));
    }
  }
  return Ok();
}

}  // namespace

Result<std::vector<std::string>> ListOwnModules(const Layers& layers) {
  std::vector<std::string> out;
  ACQFS_TRY(FindModules(layers, ".git/modules", 0, &out));
  std::sort(out.begin(), out.end());
  return out;
}

Status KeepModuleBase(const Layers& layers, const std::string& lower,
                      const std::string& gitdir, const std::string& sandbox) {
  const std::string host = sys::Join(lower, gitdir);
  auto st = layers.lower.Stat(gitdir + "/HEAD");
  if (!st) return Ok();  // the host removed the submodule's repository
  GitBase base;
  ACQFS_TRY(ReadBaseRefs(layers, &base, gitdir));
  if (!base.head.empty()) ACQFS_TRY(KeepBase(host, sandbox, base.head));
  ACQFS_TRY(KeepBranches(host, sandbox, base.branches, base.head));
  auto tips = ReadBaseTips(layers, base, gitdir);
  if (!tips) return tips.error();
  auto written = KeepTips(host, sandbox, *tips);
  if (!written) return written.error();
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
