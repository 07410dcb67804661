#include "gitbridge/host_changes.h"

#include <fcntl.h>
#include <git2.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "common/git_ptr.h"
#include "common/sys.h"
#include "gitbridge/host_repo.h"

namespace acqfs::gitbridge {
namespace {

using GitDiff = GitPtr<git_diff, git_diff_free>;

// Is `path` `top` or below it?
bool Covers(const std::string& top, const std::string& path) {
  return path == top ||
         (path.size() > top.size() && path.compare(0, top.size(), top) == 0 &&
          path[top.size()] == '/');
}

Result<std::optional<GitTree>> TreeOfCommit(git_repository* repo,
                                            const std::string& hex,
                                            const std::string& shown) {
  if (hex.empty()) return std::optional<GitTree>();
  git_oid id;
  if (hex.size() != GIT_OID_HEXSZ || git_oid_fromstr(&id, hex.c_str()) != 0)
    return Error::Of(EINVAL, "bad commit id '" + hex + "'", shown);
  git_commit* craw = nullptr;
  int rc = git_commit_lookup(&craw, repo, &id);
  GitCommit commit(craw);
  if (rc < 0) return GitError(rc, "read commit " + hex, shown);
  git_tree* traw = nullptr;
  rc = git_commit_tree(&traw, commit.get());
  GitTree tree(traw);
  if (rc < 0) return GitError(rc, "read the tree of " + hex, shown);
  return std::optional<GitTree>(std::move(tree));
}

// The host's commits since the base: its HEAD's tree against the base's.
Status Committed(const HostRepo& host, const GitBase& base,
                 const std::vector<std::string>& paths,
                 std::vector<HostChange>* out) {
  auto head = host.Head();
  if (!head) return head.error();
  std::string now = *head ? OidHex(**head) : "";
  if (now == base.head) return Ok();
  auto old_tree = TreeOfCommit(host.repo(), base.head, host.workdir());
  if (!old_tree) return old_tree.error();
  auto new_tree = TreeOfCommit(host.repo(), now, host.workdir());
  if (!new_tree) return new_tree.error();
  git_diff* raw = nullptr;
  int rc = git_diff_tree_to_tree(
      &raw, host.repo(), *old_tree ? (*old_tree)->get() : nullptr,
      *new_tree ? (*new_tree)->get() : nullptr, nullptr);
  GitDiff diff(raw);
  if (rc < 0) return GitError(rc, "diff the base with HEAD", host.workdir());
  git_diff_find_options find = GIT_DIFF_FIND_OPTIONS_INIT;
  find.flags = GIT_DIFF_FIND_RENAMES;
  rc = git_diff_find_similar(diff.get(), &find);
  if (rc < 0) return GitError(rc, "find renames", host.workdir());
  for (size_t i = 0; i < git_diff_num_deltas(diff.get()); ++i) {
    const git_diff_delta* d = git_diff_get_delta(diff.get(), i);
    const std::string from = d->old_file.path ? d->old_file.path : "";
    const std::string to = d->new_file.path ? d->new_file.path : "";
    for (const std::string& p : paths) {
      bool at_from = Covers(p, from), at_to = Covers(p, to);
      if (!at_from && !at_to) continue;
      HostChange c;
      c.path = p;
      c.host_path = at_from ? from : to;
      if (d->status == GIT_DELTA_DELETED) {
        c.how = "committed-deleted";
      } else if (d->status == GIT_DELTA_RENAMED && at_from) {
        c.how = "committed-renamed";
        c.renamed_to = to;
      } else {
        c.how = "committed";
      }
      out->push_back(std::move(c));
    }
  }
  return Ok();
}

// The host's working tree, path by path: uncommitted changes made after
// the base was recorded.
Status Uncommitted(const HostRepo& host, const GitBase& base,
                   const std::vector<std::string>& paths,
                   std::vector<HostChange>* out) {
  auto root = sys::OpenDirPath(host.workdir(), O_PATH);
  if (!root) return root.error();
  for (const std::string& p : paths) {
    unsigned int flags = 0;
    int rc = git_status_file(&flags, host.repo(), p.c_str());
    // A directory, a path git does not know (untracked and absent), or one
    // it cannot tell alone (ambiguous): nothing to say of it as a file.
    if (rc == GIT_ENOTFOUND || rc == GIT_EAMBIGUOUS || rc == GIT_EINVALIDSPEC)
      continue;
    if (rc < 0) return GitError(rc, "status of " + p, host.workdir());
    if (flags == GIT_STATUS_CURRENT || (flags & GIT_STATUS_IGNORED)) continue;
    HostChange c;
    c.path = p;
    c.host_path = p;
    struct stat st;
    bool found = false;
    ACQFS_TRY(sys::StatAtIfExists(root->get(), p, &st, &found,
                                  sys::Join(host.workdir(), p)));
    if (!found) {
      c.how = "uncommitted-deleted";
    } else {
      // Changed before the base: the sandbox saw this version.
      if (sys::CtimeNs(st) < base.time_ns) continue;
      c.how = "uncommitted";
    }
    out->push_back(std::move(c));
  }
  return Ok();
}

}  // namespace

Result<std::vector<HostChange>> HostChangesSince(
    const std::string& lower, const GitBase& base,
    const std::vector<std::string>& paths) {
  if (!base.recorded())
    return Error::Of(EINVAL, "the sandbox's base is not recorded", lower);
  std::vector<HostChange> out;
  if (paths.empty()) return out;
  GitLibrary lib;
  auto host = HostRepo::Open(lower);
  if (!host) return host.error();
  ACQFS_TRY(Committed(*host, base, paths, &out));
  ACQFS_TRY(Uncommitted(*host, base, paths, &out));
  std::stable_sort(
      out.begin(), out.end(),
      [](const HostChange& a, const HostChange& b) { return a.path < b.path; });
  return out;
}

std::string DescribeHostChange(const HostChange& c) {
  std::string where =
      c.host_path != c.path && !c.host_path.empty() ? c.host_path + ": " : "";
  if (c.how == "committed-deleted")
    return where + "deleted in a commit since the base";
  if (c.how == "committed-renamed")
    return where + "renamed to " + c.renamed_to + " in a commit since the base";
  if (c.how == "uncommitted") return where + "changed, uncommitted";
  if (c.how == "uncommitted-deleted") return where + "deleted, uncommitted";
  return where + "changed in a commit since the base";
}

}  // namespace acqfs::gitbridge
