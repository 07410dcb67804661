#include "gitbridge/remote.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "common/git_ptr.h"
#include "common/handle.h"
#include "common/sys.h"

namespace acqfs::gitbridge {
namespace {

Result<GitRepository> OpenHost(const std::string& workdir) {
  git_repository* raw = nullptr;
  int rc = git_repository_open_ext(&raw, workdir.c_str(),
                                   GIT_REPOSITORY_OPEN_NO_SEARCH, nullptr);
  if (rc < 0) return GitError(rc, "open git repository", workdir);
  return GitRepository(raw);
}

// The URL of an existing remote, or "" when there is none.
Result<std::string> ExistingUrl(git_repository* repo, const std::string& name,
                                const std::string& shown) {
  git_remote* raw = nullptr;
  int rc = git_remote_lookup(&raw, repo, name.c_str());
  GitRemote remote(raw);
  if (rc == GIT_ENOTFOUND) return std::string();
  if (rc < 0) return GitError(rc, "look up remote " + name, shown);
  const char* url = git_remote_url(remote.get());
  return std::string(url ? url : "");
}

}  // namespace

std::string RemoteName(const std::string& sandbox) {
  return "sandbox-" + sandbox;
}

std::vector<std::string> RemoteFetchSpecs(const std::string& sandbox) {
  std::string r = RemoteName(sandbox);
  // Patterns, not exact names: an exact source ref that the bridge does not
  // have yet (no working-tree commit before the first export with changes)
  // would make `git fetch` fail.
  return {
      "+refs/heads/*:refs/remotes/" + r + "/*",
      "+refs/acqfs/*:refs/remotes/" + r + "/acqfs-*",
      "+refs/heads/*:refs/sandboxes/" + sandbox + "/heads/*",
      "+refs/acqfs/*:refs/sandboxes/" + sandbox + "/*",
  };
}

Status CheckRemoteFree(const std::string& host_workdir,
                       const std::string& sandbox,
                       const std::string& bridge_path) {
  GitLibrary lib;
  auto repo = OpenHost(host_workdir);
  if (!repo) return repo.error();
  auto url = ExistingUrl(repo->get(), RemoteName(sandbox), host_workdir);
  if (!url) return url.error();
  if (!url->empty() && *url != bridge_path)
    return Error::Of(EEXIST,
                     "remote " + RemoteName(sandbox) +
                         " already exists and points to " + *url,
                     host_workdir);
  return Ok();
}

Status RegisterRemote(const std::string& host_workdir,
                      const std::string& sandbox,
                      const std::string& bridge_path) {
  GitLibrary lib;
  auto repo = OpenHost(host_workdir);
  if (!repo) return repo.error();
  std::string name = RemoteName(sandbox);
  auto url = ExistingUrl(repo->get(), name, host_workdir);
  if (!url) return url.error();
  if (*url == bridge_path) return Ok();
  if (!url->empty())
    return Error::Of(EEXIST,
                     "remote " + name + " already exists and points to " + *url,
                     host_workdir);
  auto specs = RemoteFetchSpecs(sandbox);
  git_remote* raw = nullptr;
  int rc = git_remote_create_with_fetchspec(
      &raw, repo->get(), name.c_str(), bridge_path.c_str(), specs[0].c_str());
  GitRemote remote(raw);
  if (rc < 0) return GitError(rc, "add remote " + name, host_workdir);
  for (size_t i = 1; i < specs.size(); i++) {
    rc = git_remote_add_fetch(repo->get(), name.c_str(), specs[i].c_str());
    if (rc < 0)
      return GitError(rc, "add fetch refspec to " + name, host_workdir);
  }
  return Ok();
}

namespace {

// Deletes every ref whose name matches `glob`.
Status DeleteRefs(git_repository* repo, const std::string& glob,
                  const std::string& shown) {
  git_reference_iterator* raw = nullptr;
  int rc = git_reference_iterator_glob_new(&raw, repo, glob.c_str());
  GitReferenceIterator it(raw);
  if (rc < 0) return GitError(rc, "list refs " + glob, shown);
  std::vector<std::string> names;
  const char* name = nullptr;
  while ((rc = git_reference_next_name(&name, it.get())) == 0)
    names.emplace_back(name);
  if (rc != GIT_ITEROVER) return GitError(rc, "list refs " + glob, shown);
  for (const auto& n : names) {
    rc = git_reference_remove(repo, n.c_str());
    if (rc < 0 && rc != GIT_ENOTFOUND)
      return GitError(rc, "delete ref " + n, shown);
  }
  return Ok();
}

// Removes the remote's section. libgit2 1.5's git_remote_delete fails on a
// remote with several fetch refspecs ("entry is not unique due to being a
// multivar"), so they go first; it then drops the whole section.
Status DeleteRemoteConfig(git_repository* repo, const std::string& name,
                          const std::string& shown) {
  git_config* raw = nullptr;
  int rc = git_repository_config(&raw, repo);
  GitConfig cfg(raw);
  if (rc < 0) return GitError(rc, "open config", shown);
  std::string key = "remote." + name + ".fetch";
  rc = git_config_delete_multivar(cfg.get(), key.c_str(), ".*");
  if (rc < 0 && rc != GIT_ENOTFOUND)
    return GitError(rc, "delete config " + key, shown);
  rc = git_remote_delete(repo, name.c_str());
  if (rc < 0 && rc != GIT_ENOTFOUND)
    return GitError(rc, "remove remote " + name, shown);
  return Ok();
}

std::string Trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// libgit2 1.5 deletes a section's keys but leaves its header line, so the
// host's config would keep an empty `[remote "sandbox-<name>"]`. Removes
// that header when nothing but blank lines and comments follow it up to the
// next section, under git's own lock file (config.lock, created
// exclusively, so a concurrent git waits or fails rather than losing
// either write), keeping the file's mode.
Status DropEmptySection(git_repository* repo, const std::string& name) {
  std::string path = std::string(git_repository_path(repo)) + "config";
  std::string header = "[remote \"" + name + "\"]";
  std::string all;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Error::Errno("read", path);
    all.assign(std::istreambuf_iterator<char>(in),
               std::istreambuf_iterator<char>());
  }
  const bool last_has_newline = all.empty() || all.back() == '\n';
  std::vector<std::string> lines;
  std::istringstream split(all);
  for (std::string l; std::getline(split, l);) lines.push_back(l);
  std::vector<std::string> out;
  bool changed = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (Trim(lines[i]) == header) {
      size_t j = i + 1;
      while (j < lines.size()) {
        std::string t = Trim(lines[j]);
        if (!t.empty() && t[0] == '[') break;
        if (!t.empty() && t[0] != '#' && t[0] != ';') break;
        ++j;
      }
      bool empty = j == lines.size() || Trim(lines[j])[0] == '[';
      if (empty) {
        changed = true;
        continue;  // drop the header; keep any blank lines and comments
      }
    }
    out.push_back(lines[i]);
  }
  if (!changed) return Ok();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Error::Errno("stat", path);
  std::string lock = path + ".lock";
  UniqueFd fd(::open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                     st.st_mode & 07777));
  if (!fd) return Error::Errno("lock", lock);
  std::string text;
  for (size_t i = 0; i < out.size(); ++i) {
    text += out[i];
    if (i + 1 < out.size() || last_has_newline) text += "\n";
  }
  Status w = sys::PwriteAll(fd.get(), text.data(), text.size(), 0, lock);
  if (w && ::fsync(fd.get()) != 0) w = Error::Errno("fsync", lock);
  if (w && ::rename(lock.c_str(), path.c_str()) != 0)
    w = Error::Errno("rename", path);
  if (!w) ::unlink(lock.c_str());
  return w;
}

}  // namespace

Status UnregisterRemote(const std::string& host_workdir,
                        const std::string& sandbox) {
  GitLibrary lib;
  auto repo = OpenHost(host_workdir);
  if (!repo) return repo.error();
  std::string name = RemoteName(sandbox);
  auto url = ExistingUrl(repo->get(), name, host_workdir);
  if (!url) return url.error();
  if (url->empty()) return Ok();
  ACQFS_TRY(
      DeleteRefs(repo->get(), "refs/remotes/" + name + "/*", host_workdir));
  ACQFS_TRY(DeleteRemoteConfig(repo->get(), name, host_workdir));
  return DropEmptySection(repo->get(), name);
}

}  // namespace acqfs::gitbridge
