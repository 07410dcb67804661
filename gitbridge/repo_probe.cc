#include "gitbridge/repo_probe.h"

#include <git2.h>

#include <memory>

namespace acqfs::gitbridge {
namespace {

struct Lib {
  Lib() { git_libgit2_init(); }
  ~Lib() { git_libgit2_shutdown(); }
};

struct RepoFree {
  void operator()(git_repository* r) const { git_repository_free(r); }
};
using GitRepo = std::unique_ptr<git_repository, RepoFree>;

}  // namespace

Result<RepoInfo> ProbeRepository(const std::string& dir) {
  Lib lib;
  git_repository* raw = nullptr;
  int rc = git_repository_open_ext(&raw, dir.c_str(),
                                   GIT_REPOSITORY_OPEN_NO_SEARCH, nullptr);
  GitRepo repo(raw);
  RepoInfo info;
  if (rc == GIT_ENOTFOUND) return info;
  if (rc < 0) {
    const git_error* e = git_error_last();
    return Error::Of(EIO,
                     std::string("open git repository: ") +
                         (e ? e->message : "unknown error"),
                     dir);
  }
  info.is_repo = true;
  info.git_dir = git_repository_path(repo.get());
  info.bare = git_repository_is_bare(repo.get());
  return info;
}

}  // namespace acqfs::gitbridge
