#include "gitbridge/remote.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "common/git_ptr.h"
#include "common/handle.h"
#include "common/sys.h"

namespace acqfs::gitbridge {
namespace {

// How long an acqfs command waits for another acqfs command to finish its
// change of the host's remotes (each takes milliseconds; many sandboxes
// starting at once queue up), and for a lock file git holds.
constexpr auto kHostLockWait = std::chrono::seconds(60);
constexpr auto kGitLockWait = std::chrono::seconds(5);

// Sleeps growing intervals (1 ms doubling to 50 ms, each with a random
// quarter more or less, so waiters do not wake in step) until `limit` has
// passed since it was made; then Wait() returns false without sleeping.
class Backoff {
 public:
  explicit Backoff(std::chrono::milliseconds limit)
      : deadline_(std::chrono::steady_clock::now() + limit),
        rng_(std::random_device{}()) {}
  bool Wait() {
    if (std::chrono::steady_clock::now() >= deadline_) return false;
    std::uniform_int_distribution<int> jitter(750, 1250);
    std::this_thread::sleep_for(std::chrono::microseconds(
        static_cast<int64_t>(step_.count()) * jitter(rng_)));
    step_ = std::min(step_ * 2, std::chrono::milliseconds(50));
    return true;
  }

 private:
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds step_{1};
  std::minstd_rand rng_;
};

// Runs the libgit2 call `f` (returning its code) again while it fails with
// GIT_ELOCKED (a lock file of git's exists), for at most kGitLockWait.
template <class F>
int RetryWhileLocked(F&& f) {
  Backoff backoff(kGitLockWait);
  for (;;) {
    int rc = f();
    if (rc != GIT_ELOCKED || !backoff.Wait()) return rc;
  }
}

// The Error for a libgit2 call that failed; a lock that stayed held gets a
// message that says what to do.
Error GitFailure(int rc, const std::string& op, const std::string& shown) {
  if (rc != GIT_ELOCKED) return GitError(rc, op, shown);
  Error e = GitError(rc, op, shown);
  e.op +=
      ": a git command holds the lock file, or one that crashed left it"
      " (remove it if no git command is running)";
  return e;
}

// Holds back SIGINT, SIGTERM, SIGHUP and SIGQUIT for its lifetime: they are
// delivered when it ends, once no lock file of ours is left to clean up.
class HoldTerminationSignals {
 public:
  HoldTerminationSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
    held_ = ::pthread_sigmask(SIG_BLOCK, &set, &old_) == 0;
  }
  ~HoldTerminationSignals() {
    if (held_) ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  HoldTerminationSignals(const HoldTerminationSignals&) = delete;
  HoldTerminationSignals& operator=(const HoldTerminationSignals&) = delete;

 private:
  sigset_t old_;
  bool held_ = false;
};

// The exclusive lock acqfs commands take on the host repository's
// directory (the one holding `config`) around every change of its remotes:
// an flock of the directory itself, whose inode stays when git replaces
// .git/config, and which leaves nothing on disk. Waits at most
// kHostLockWait.
class HostLock {
 public:
  HostLock() = default;
  HostLock(const HostLock&) = delete;
  HostLock& operator=(const HostLock&) = delete;

  Status Take(const std::string& dir) {
    fd_.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd_) return Error::Errno("open the host's git directory", dir);
    Backoff backoff(kHostLockWait);
    while (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK)
        return Error::Errno("lock the host's git directory", dir);
      if (!backoff.Wait())
        return Error::Of(ETIMEDOUT,
                         "wait for other acqfs commands to finish changing "
                         "the host's remotes (lock on the git directory)",
                         dir);
    }
    return Ok();
  }

 private:
  UniqueFd fd_;  // closing it releases the lock
};

Result<GitRepository> OpenHost(const std::string& workdir) {
  git_repository* raw = nullptr;
  int rc = GitOpenRepository(&raw, workdir, GIT_REPOSITORY_OPEN_NO_SEARCH);
  if (rc < 0) return GitOpenError(rc, "open git repository", workdir);
  return GitRepository(raw);
}

// Root changing the remotes or refs of a checkout another user owns (one
// git trusts: root through sudo from that user, or a safe.directory
// entry): libgit2 writes the new config, and the new packed-refs when it
// deletes a packed ref, by renaming a lock file over it, so the file would
// become root's, and its owner could no longer change their own config.
// Record() notes the owner and mode of <commondir>/config and packed-refs;
// Restore() gives them back after the edit (a packed-refs made by the edit
// gets the config's owner). Each file is opened beneath the common
// directory without following a symlink, and only a regular file of one
// link changes.
class ConfigOwner {
 public:
  void Record(const std::string& commondir) {
    if (::geteuid() != 0) return;
    commondir_ = commondir;
    config_ = StatOf("config");
    if (!config_ || config_->st_uid == 0) {
      config_.reset();
      return;
    }
    packed_ = StatOf("packed-refs");
    if (!packed_) {
      packed_ = config_;
      packed_->st_mode = 0644;
    }
  }
  Status Restore() const {
    if (!config_) return Ok();
    ACQFS_TRY(Give("config", *config_));
    return Give("packed-refs", *packed_);
  }

 private:
  std::optional<struct stat> StatOf(const char* name) const {
    auto dir = sys::OpenDirPath(commondir_, O_PATH);
    if (!dir) return std::nullopt;
    auto fd = sys::OpenBeneath(dir->get(), name, O_RDONLY | O_NONBLOCK, 0,
                               commondir_ + name);
    if (!fd) return std::nullopt;
    auto st = sys::Fstat(fd->get(), commondir_ + name);
    if (!st || !S_ISREG(st->st_mode)) return std::nullopt;
    return *st;
  }

  Status Give(const char* name, const struct stat& before) const {
    const std::string shown = commondir_ + name;
    auto dir = sys::OpenDirPath(commondir_, O_PATH);
    if (!dir) return dir.error();
    auto fd =
        sys::OpenBeneath(dir->get(), name, O_RDONLY | O_NONBLOCK, 0, shown);
    if (!fd) {
      if (fd.err() == ENOENT) return Ok();
      return fd.error();
    }
    auto st = sys::Fstat(fd->get(), shown);
    if (!st) return st.error();
    if (!S_ISREG(st->st_mode) || st->st_nlink != 1) return Ok();
    if ((st->st_uid != before.st_uid || st->st_gid != before.st_gid) &&
        ::fchown(fd->get(), before.st_uid, before.st_gid) != 0)
      return Error::Errno("give the host's git file back to its owner", shown);
    if ((st->st_mode & 07777) != (before.st_mode & 07777) &&
        ::fchmod(fd->get(), before.st_mode & 07777) != 0)
      return Error::Errno("restore the mode of the host's git file", shown);
    return Ok();
  }

  std::optional<struct stat> config_, packed_;
  std::string commondir_;
};

// A ref's lock file acqfs left when it was killed in the middle of writing
// one of its own refs (refs/acqfs-base, refs/acqfs-keep, refs/acqfs-tips):
// libgit2 and git refuse to write that ref while it is there, so the
// sandbox's next mount, or a second `acqfs rm`, failed until a person
// deleted it. Only acqfs writes those refs, always holding HostLock, which
// the caller holds: one older than kStaleLockAge is no write in progress
// (git's own `update-ref` on them, by hand, takes milliseconds) and is
// removed. git's config.lock and packed-refs.lock are git's own protocol,
// shared with every git command, and stay (as a killed git leaves them).
constexpr auto kStaleLockAge = std::chrono::seconds(10);

void RemoveStaleRefLocks(int dirfd, const std::string& shown, int depth) {
  if (depth > 16) return;
  auto entries = sys::ReadDir(dirfd, shown);
  if (!entries) return;
  const auto now = std::chrono::system_clock::now();
  for (const auto& e : *entries) {
    struct stat st;
    if (::fstatat(dirfd, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(dirfd, e.name.c_str(),
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub) RemoveStaleRefLocks(sub.get(), shown + "/" + e.name, depth + 1);
      continue;
    }
    const size_t n = e.name.size();
    if (!S_ISREG(st.st_mode) || n < 6 || e.name.compare(n - 5, 5, ".lock") != 0)
      continue;
    const auto mtime = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(sys::MtimeNs(st))));
    if (now - mtime >= kStaleLockAge) ::unlinkat(dirfd, e.name.c_str(), 0);
  }
}

void RemoveStaleAcqfsRefLocks(const std::string& gitdir) {
  for (const char* ns :
       {"refs/acqfs-base", "refs/acqfs-keep", "refs/acqfs-tips"}) {
    const std::string dir = gitdir + "/" + ns;
    UniqueFd fd(
        ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd) RemoveStaleRefLocks(fd.get(), dir, 0);
  }
}

// Runs `edit` on the host repository with HostLock held and termination
// signals held back; the repository is opened once the lock is held, so
// libgit2 reads the configuration every earlier edit left.
template <class Edit>
auto WithHostLocked(const std::string& workdir, Edit&& edit)
    -> decltype(edit(static_cast<git_repository*>(nullptr))) {
  std::string dir;
  {
    auto probe = OpenHost(workdir);
    if (!probe) return probe.error();
    dir = git_repository_commondir(probe->get());
  }
  HostLock lock;
  ACQFS_TRY(lock.Take(dir));
  RemoveStaleAcqfsRefLocks(dir);
  HoldTerminationSignals hold;
  ConfigOwner owner;
  owner.Record(dir);
  auto repo = OpenHost(workdir);
  if (!repo) return repo.error();
  auto result = edit(repo->get());
  if (Status s = owner.Restore(); !s) return s.error();
  return result;
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

// Does the remote URL `url` name the bridge at `bridge` (the same string,
// or the same directory)?
bool SameBridge(const std::string& url, const std::string& bridge) {
  if (url == bridge) return true;
  char a[PATH_MAX], b[PATH_MAX];
  return ::realpath(url.c_str(), a) && ::realpath(bridge.c_str(), b) &&
         std::string(a) == b;
}

// The host's own .git/config (never the user's or the system's).
Result<GitConfig> LocalConfig(git_repository* repo, const std::string& shown) {
  git_config* raw = nullptr;
  int rc = git_repository_config(&raw, repo);
  GitConfig all(raw);
  if (rc < 0) return GitError(rc, "open config", shown);
  raw = nullptr;
  rc = git_config_open_level(&raw, all.get(), GIT_CONFIG_LEVEL_LOCAL);
  GitConfig local(raw);
  if (rc < 0) return GitError(rc, "open config (.git/config)", shown);
  return local;
}

// Locks .git/config (git's config.lock) for a transaction: every set and
// delete on `cfg` until the commit is written at once, by one rename.
// Freeing the transaction uncommitted removes the lock file.
Result<GitTransaction> BeginConfigEdit(git_config* cfg,
                                       const std::string& shown) {
  git_transaction* raw = nullptr;
  int rc = RetryWhileLocked([&] {
    raw = nullptr;
    return git_config_lock(&raw, cfg);
  });
  GitTransaction tx(raw);
  if (rc < 0) return GitFailure(rc, "lock the config", shown + "/config.lock");
  return tx;
}

// Every value of the multivar `key` in `cfg`.
Result<std::vector<std::string>> Values(git_config* cfg, const std::string& key,
                                        const std::string& shown) {
  std::vector<std::string> out;
  git_config_iterator* raw = nullptr;
  int rc = git_config_multivar_iterator_new(&raw, cfg, key.c_str(), nullptr);
  GitConfigIterator it(raw);
  if (rc == GIT_ENOTFOUND) return out;
  if (rc < 0) return GitError(rc, "read config " + key, shown);
  git_config_entry* e = nullptr;
  while ((rc = git_config_next(&e, it.get())) == 0)
    out.emplace_back(e->value ? e->value : "");
  if (rc != GIT_ITEROVER && rc != GIT_ENOTFOUND)
    return GitError(rc, "read config " + key, shown);
  return out;
}

// The names of the entries of `cfg` matching the regular expression `re`,
// with their values.
Result<std::vector<std::pair<std::string, std::string>>> Entries(
    git_config* cfg, const std::string& re, const std::string& shown) {
  std::vector<std::pair<std::string, std::string>> out;
  git_config_iterator* raw = nullptr;
  int rc = git_config_iterator_glob_new(&raw, cfg, re.c_str());
  GitConfigIterator it(raw);
  if (rc < 0) return GitError(rc, "read config " + re, shown);
  git_config_entry* e = nullptr;
  while ((rc = git_config_next(&e, it.get())) == 0)
    out.emplace_back(e->name, e->value ? e->value : "");
  if (rc != GIT_ITEROVER) return GitError(rc, "read config " + re, shown);
  return out;
}

// `s` with the characters a regular expression gives a meaning quoted (a
// sandbox name may hold '.').
std::string RegexQuote(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string(".^$|()[]{}*+?\\").find(c) != std::string::npos)
      out += '\\';
    out += c;
  }
  return out;
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
  if (!url->empty() && !SameBridge(*url, bridge_path))
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
  const std::string name = RemoteName(sandbox);
  return WithHostLocked(host_workdir, [&](git_repository* repo) -> Status {
    auto url = ExistingUrl(repo, name, host_workdir);
    if (!url) return url.error();
    if (!url->empty() && !SameBridge(*url, bridge_path))
      return Error::Of(
          EEXIST, "remote " + name + " already exists and points to " + *url,
          host_workdir);
    auto cfg = LocalConfig(repo, host_workdir);
    if (!cfg) return cfg.error();
    const std::string fetch_key = "remote." + name + ".fetch";
    auto have = Values(cfg->get(), fetch_key, host_workdir);
    if (!have) return have.error();
    std::vector<std::string> missing;
    for (const auto& spec : RemoteFetchSpecs(sandbox)) {
      if (std::find(have->begin(), have->end(), spec) == have->end())
        missing.push_back(spec);
    }
    if (!url->empty() && missing.empty()) return Ok();  // registered already
    const std::string shown = git_repository_commondir(repo);
    auto tx = BeginConfigEdit(cfg->get(), shown);
    if (!tx) return tx.error();
    int rc = 0;
    if (url->empty()) {
      rc = git_config_set_string(
          cfg->get(), ("remote." + name + ".url").c_str(), bridge_path.c_str());
      if (rc < 0) return GitError(rc, "add remote " + name, host_workdir);
    }
    for (const auto& spec : missing) {
      // "^$" matches no refspec: each is added as a value of its own.
      rc = git_config_set_multivar(cfg->get(), fetch_key.c_str(), "^$",
                                   spec.c_str());
      if (rc < 0)
        return GitError(rc, "add fetch refspec to " + name, host_workdir);
    }
    rc = git_transaction_commit(tx->get());
    if (rc < 0)
      return GitError(rc, "write config (add remote " + name + ")",
                      shown + "/config");
    return Ok();
  });
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
    rc =
        RetryWhileLocked([&] { return git_reference_remove(repo, n.c_str()); });
    if (rc < 0 && rc != GIT_ENOTFOUND)
      return GitFailure(rc, "delete ref " + n, shown);
  }
  return Ok();
}

// Removes every key of the remote's section, and the upstream settings
// (branch.<b>.remote and .merge) of branches that track it, as
// `git remote remove` does, in one write of .git/config.
Status DeleteRemoteConfig(git_repository* repo, const std::string& name,
                          const std::string& shown) {
  auto cfg = LocalConfig(repo, shown);
  if (!cfg) return cfg.error();
  auto own =
      Entries(cfg->get(), "^remote\\." + RegexQuote(name) + "\\.", shown);
  if (!own) return own.error();
  auto tracking = Entries(cfg->get(), "^branch\\..*\\.remote$", shown);
  if (!tracking) return tracking.error();
  std::set<std::string> keys;
  for (const auto& [key, value] : *own) keys.insert(key);
  for (const auto& [key, value] : *tracking) {
    if (value != name) continue;
    const std::string branch = key.substr(0, key.size() - 7);  // ".remote"
    keys.insert(key);
    keys.insert(branch + ".merge");
  }
  if (keys.empty()) return Ok();
  const std::string dir = git_repository_commondir(repo);
  auto tx = BeginConfigEdit(cfg->get(), dir);
  if (!tx) return tx.error();
  for (const auto& key : keys) {
    int rc = git_config_delete_multivar(cfg->get(), key.c_str(), ".*");
    if (rc < 0 && rc != GIT_ENOTFOUND)
      return GitError(rc, "delete config " + key, shown);
  }
  int rc = git_transaction_commit(tx->get());
  if (rc < 0)
    return GitError(rc, "write config (remove remote " + name + ")",
                    dir + "/config");
  return Ok();
}

std::string Trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// `text` (a config file) without the header line `[remote "<name>"]` of a
// section that holds nothing but blank lines and comments; nullopt when
// there is no such header.
std::optional<std::string> WithoutEmptySection(const std::string& text,
                                               const std::string& name) {
  const std::string header = "[remote \"" + name + "\"]";
  const bool last_has_newline = text.empty() || text.back() == '\n';
  std::vector<std::string> lines;
  std::istringstream split(text);
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
  if (!changed) return std::nullopt;
  std::string result;
  for (size_t i = 0; i < out.size(); ++i) {
    result += out[i];
    if (i + 1 < out.size() || last_has_newline) result += "\n";
  }
  return result;
}

Result<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::Errno("read", path);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// libgit2 1.5 deletes a section's keys but leaves its header line, so the
// host's config would keep an empty `[remote "sandbox-<name>"]`. Removes
// that header (WithoutEmptySection) under git's own lock file (config.lock,
// created exclusively and waited for while a git command holds it, so
// neither write is lost), keeping the file's mode. Nothing is locked or
// written when there is no such header; the lock file is renamed over the
// config or removed on every path out.
Status DropEmptySection(git_repository* repo, const std::string& name) {
  const std::string path =
      std::string(git_repository_commondir(repo)) + "config";
  auto before = ReadWhole(path);
  if (!before) return before.error();
  if (!WithoutEmptySection(*before, name)) return Ok();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Error::Errno("stat", path);
  const std::string lock = path + ".lock";
  UniqueFd fd;
  Backoff backoff(kGitLockWait);
  for (;;) {
    fd.reset(::open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                    st.st_mode & 07777));
    if (fd || errno != EEXIST || !backoff.Wait()) break;
  }
  if (!fd) {
    Error e = Error::Errno("lock the config", lock);
    if (e.err == EEXIST)
      e.op +=
          ": a git command holds the lock file, or one that crashed left "
          "it (remove it if no git command is running)";
    return e;
  }
  // Read again under the lock: no write of git's can come in between.
  auto text = ReadWhole(path);
  std::optional<std::string> after;
  if (text) after = WithoutEmptySection(*text, name);
  Status w = text ? Ok() : Status(text.error());
  if (w && after) {
    w = ReplaceWithTemp(fd.get(), lock, path, *after);
    if (w) return w;
  }
  if (::unlink(lock.c_str()) != 0 && w) return Error::Errno("remove", lock);
  return w;
}

// Sets `ref` to `id` (forced, waiting out a concurrent writer's lock);
// libgit2's result.
int CreateRef(git_repository* repo, const std::string& ref, const git_oid& id,
              const char* message) {
  git_reference* raw = nullptr;
  int rc = RetryWhileLocked([&] {
    if (raw) git_reference_free(raw);
    raw = nullptr;
    return git_reference_create(&raw, repo, ref.c_str(), &id, /*force=*/1,
                                message);
  });
  GitReference made(raw);
  return rc;
}

}  // namespace

namespace {

// The repository's refs/ directory (of the common directory `common`,
// with its trailing '/'), opened without following a symlink, and its
// owner.
Result<std::pair<UniqueFd, struct stat>> OpenRefs(const std::string& common) {
  auto root = sys::OpenDirPath(common, O_PATH);
  if (!root) return root.error();
  auto refs = sys::OpenBeneath(root->get(), "refs", O_RDONLY | O_DIRECTORY, 0,
                               common + "refs");
  if (!refs) return refs.error();
  auto st = sys::Fstat(refs->get(), common + "refs");
  if (!st) return st.error();
  return std::make_pair(std::move(*refs), *st);
}

// The directory of loose refs `prefix` (e.g. "refs/acqfs-tips/<name>/")
// in the host's repository `common`, made as git would (owned, when root
// writes into another user's repository, by the owner of its refs/), for
// WriteRef.
class RefDirs {
 public:
  static Result<RefDirs> Make(const std::string& common,
                              const std::string& prefix) {
    RefDirs d;
    d.shown_ = common + prefix;
    auto refs = OpenRefs(common);
    if (!refs) return refs.error();
    d.owner_ = refs->second;
    UniqueFd at = std::move(refs->first);
    std::string rel = "refs";
    size_t pos = 5;  // past "refs/"
    while (pos < prefix.size()) {
      size_t slash = prefix.find('/', pos);
      if (slash == std::string::npos) slash = prefix.size();
      const std::string part = prefix.substr(pos, slash - pos);
      pos = slash + 1;
      rel += "/" + part;
      if (::mkdirat(at.get(), part.c_str(), 0777) == 0) {  // less the umask
        if (::geteuid() == 0 && d.owner_.st_uid != 0 &&
            ::fchownat(at.get(), part.c_str(), d.owner_.st_uid, d.owner_.st_gid,
                       AT_SYMLINK_NOFOLLOW) != 0)
          return Error::Errno("chown", common + rel);
      } else if (errno != EEXIST) {
        return Error::Errno("mkdir", common + rel);
      }
      auto next = sys::OpenBeneath(at.get(), part, O_RDONLY | O_DIRECTORY, 0,
                                   common + rel);
      if (!next) return next.error();
      at = std::move(*next);
    }
    d.dir_ = std::move(at);
    return d;
  }

  // `name` in the directory names `id`: "<hex>\n" in `name`.lock, renamed
  // over `name`.
  Status WriteRef(const std::string& name, const git_oid& id) {
    const std::string lock = name + ".lock";
    const std::string shown = shown_ + name;
    UniqueFd fd(::openat(dir_.get(), lock.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                         0666));
    if (!fd) return Error::Errno("create the lock file", shown + ".lock");
    const std::string text = OidHex(id) + "\n";
    Status s = sys::PwriteAll(fd.get(), text.data(), text.size(), 0, shown);
    if (s && ::geteuid() == 0 && owner_.st_uid != 0 &&
        ::fchown(fd.get(), owner_.st_uid, owner_.st_gid) != 0)
      s = Error::Errno("chown", shown);
    fd.reset();
    if (s) s = sys::Renameat2(dir_.get(), lock, dir_.get(), name, 0, shown);
    if (!s) (void)::unlinkat(dir_.get(), lock.c_str(), 0);
    return s;
  }

 private:
  UniqueFd dir_;
  struct stat owner_ {};
  std::string shown_;
};

// libgit2 writes refs with the caller's owner. When root writes the keep
// refs into another user's repository, the directories it made
// (refs/acqfs-base/, refs/acqfs-keep/<name>/...) were root's, and the
// user's `git gc` (pack-refs) and `git update-ref -d` failed on them
// ("cannot lock ref ... Permission denied"). Gives them, and the refs in
// them, to the owner of the repository's refs/, as git run by that user
// would have made them. Never follows a symlink.
Status GiveKeepRefsToOwner(git_repository* repo, const std::string& sandbox) {
  if (::geteuid() != 0) return Ok();
  const std::string common = git_repository_commondir(repo);
  auto opened = OpenRefs(common);
  if (!opened) return opened.error();
  const UniqueFd& refs = opened->first;
  const struct stat* owner = &opened->second;
  if (owner->st_uid == 0) return Ok();
  // Chowns `name` in `dirfd` and, for a directory, everything below it.
  std::function<Status(int, const std::string&, const std::string&, int)> give =
      [&](int dirfd, const std::string& name, const std::string& shown,
          int depth) -> Status {
    struct stat st;
    bool found = false;
    ACQFS_TRY(sys::StatAtIfExists(dirfd, name, &st, &found, shown));
    if (!found) return Ok();
    if ((st.st_uid != owner->st_uid || st.st_gid != owner->st_gid) &&
        ::fchownat(dirfd, name.c_str(), owner->st_uid, owner->st_gid,
                   AT_SYMLINK_NOFOLLOW) != 0)
      return Error::Errno("give to the repository's owner", shown);
    if (!S_ISDIR(st.st_mode) || depth > 64) return Ok();
    auto dir = sys::OpenBeneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0, shown);
    if (!dir) return dir.error();
    auto entries = sys::ReadDir(dir->get(), shown);
    if (!entries) return entries.error();
    for (const sys::DirEntry& e : *entries)
      ACQFS_TRY(give(dir->get(), e.name, shown + "/" + e.name, depth + 1));
    return Ok();
  };
  for (const char* top : {"acqfs-base", "acqfs-keep", "acqfs-tips"}) {
    const std::string shown = common + "refs/" + top;
    struct stat st;
    bool found = false;
    ACQFS_TRY(sys::StatAtIfExists(refs.get(), top, &st, &found, shown));
    if (!found || !S_ISDIR(st.st_mode)) continue;
    ACQFS_TRY(give(refs.get(), top, shown, 65));  // the directory alone
    auto dir =
        sys::OpenBeneath(refs.get(), top, O_RDONLY | O_DIRECTORY, 0, shown);
    if (!dir) return dir.error();
    ACQFS_TRY(give(dir->get(), sandbox, shown + "/" + sandbox, 0));
  }
  return Ok();
}

}  // namespace

std::string BaseRefName(const std::string& sandbox) {
  return "refs/acqfs-base/" + sandbox;
}

Status KeepBase(const std::string& host_workdir, const std::string& sandbox,
                const std::string& commit) {
  GitLibrary lib;
  git_oid id;
  if (commit.size() != GIT_OID_HEXSZ || git_oid_fromstr(&id, commit.c_str()))
    return Error::Of(EINVAL, "bad commit id '" + commit + "'", host_workdir);
  const std::string ref = BaseRefName(sandbox);
  return WithHostLocked(host_workdir, [&](git_repository* repo) -> Status {
    int rc = CreateRef(repo, ref, id, "acqfs: the base of a sandbox");
    if (rc < 0) return GitFailure(rc, "set " + ref, host_workdir);
    return GiveKeepRefsToOwner(repo, sandbox);
  });
}

Result<std::string> KeepHostHead(const std::string& host_workdir,
                                 const std::string& sandbox) {
  GitLibrary lib;
  const std::string ref = BaseRefName(sandbox);
  return WithHostLocked(
      host_workdir, [&](git_repository* repo) -> Result<std::string> {
        git_oid id;
        int rc = git_reference_name_to_id(&id, repo, "HEAD");
        if (rc == GIT_ENOTFOUND || rc == GIT_EUNBORNBRANCH)
          return std::string();
        if (rc < 0) return GitError(rc, "resolve HEAD", host_workdir);
        rc = CreateRef(repo, ref, id, "acqfs: the base of a sandbox");
        if (rc < 0) return GitFailure(rc, "set " + ref, host_workdir);
        ACQFS_TRY(GiveKeepRefsToOwner(repo, sandbox));
        return OidHex(id);
      });
}

std::string KeepRefPrefix(const std::string& sandbox) {
  return "refs/acqfs-keep/" + sandbox + "/";
}

Status KeepBranches(const std::string& host_workdir, const std::string& sandbox,
                    const std::map<std::string, std::string>& branches,
                    const std::string& head) {
  std::vector<std::pair<std::string, git_oid>> refs;
  for (const auto& [name, hex] : branches) {
    if (hex == head) continue;  // the base's ref keeps it
    git_oid id;
    if (hex.size() != GIT_OID_HEXSZ || git_oid_fromstr(&id, hex.c_str()))
      return Error::Of(EINVAL, "bad commit id '" + hex + "' of " + name,
                       host_workdir);
    refs.emplace_back(KeepRefPrefix(sandbox) + name,
                      id);  // name: no refs/heads/
  }
  if (refs.empty()) return Ok();
  GitLibrary lib;
  return WithHostLocked(host_workdir, [&](git_repository* repo) -> Status {
    for (const auto& [ref, id] : refs) {
      int rc =
          CreateRef(repo, ref, id, "acqfs: a branch tip of a sandbox's base");
      // Gone from the host already (pruned between the copy and now):
      // nothing left to keep.
      if (rc == GIT_ENOTFOUND || rc == GIT_EINVALID) continue;
      if (rc < 0) return GitFailure(rc, "set " + ref, host_workdir);
    }
    return GiveKeepRefsToOwner(repo, sandbox);
  });
}

std::string TipsRefPrefix(const std::string& sandbox) {
  return "refs/acqfs-tips/" + sandbox + "/";
}

Result<size_t> KeepTips(const std::string& host_workdir,
                        const std::string& sandbox,
                        const std::vector<std::string>& tips) {
  std::vector<git_oid> ids;
  for (const std::string& hex : tips) {
    git_oid id;
    if (hex.size() != GIT_OID_HEXSZ || git_oid_fromstr(&id, hex.c_str()))
      return Error::Of(EINVAL, "bad object id '" + hex + "'", host_workdir);
    ids.push_back(id);
  }
  if (ids.empty()) return size_t{0};
  GitLibrary lib;
  return WithHostLocked(
      host_workdir, [&](git_repository* repo) -> Result<size_t> {
        git_odb* raw = nullptr;
        int rc = git_repository_odb(&raw, repo);
        GitOdb odb(raw);
        if (rc < 0) return GitError(rc, "open the object store", host_workdir);
        // Written as git writes a loose ref (its lock file renamed over
        // it), not through libgit2, which takes 150 us a ref: a thousand
        // tags would have cost the first mount 150 ms. The names are
        // acqfs's alone (the sandbox's, which its lock serialises); a
        // `git pack-refs` of the host's packs them like any other.
        const std::string common = git_repository_commondir(repo);
        auto dirs = RefDirs::Make(common, TipsRefPrefix(sandbox));
        if (!dirs) return dirs.error();
        size_t written = 0;
        for (const git_oid& id : ids) {
          // Gone from the host already, or never the host's (the
          // sandbox's own): nothing to keep.
          if (!git_odb_exists(odb.get(), &id)) continue;
          ACQFS_TRY(dirs->WriteRef(OidHex(id), id));
          ++written;
        }
        return written;
      });
}

namespace {

// Removes the empty directories under (and including) `dir`, deepest
// first, as git leaves no empty directory of refs behind; ones that are
// not empty stay.
Status RemoveEmptyDirs(const std::string& dir) {
  UniqueDir d(::opendir(dir.c_str()));
  if (!d) {
    if (errno == ENOENT || errno == ENOTDIR) return Ok();
    return Error::Errno("opendir", dir);
  }
  std::vector<std::string> subdirs;
  while (struct dirent* e = ::readdir(d.get())) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || e->d_type != DT_DIR) continue;
    subdirs.push_back(dir + "/" + n);
  }
  d.reset();
  for (const auto& s : subdirs) ACQFS_TRY(RemoveEmptyDirs(s));
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY &&
      errno != EEXIST)
    return Error::Errno("rmdir", dir);
  return Ok();
}

}  // namespace

namespace {

// Deletes the sandbox's keep refs (BaseRefName, KeepRefPrefix,
// TipsRefPrefix) and, as git leaves no empty directory of refs behind,
// the directories they leave empty (the last base gone, refs/acqfs-base
// goes; another sandbox's keeps it).
Status DeleteKeepRefs(git_repository* repo, const std::string& sandbox,
                      const std::string& shown) {
  ACQFS_TRY(DeleteRefs(repo, BaseRefName(sandbox), shown));
  ACQFS_TRY(DeleteRefs(repo, KeepRefPrefix(sandbox) + "*", shown));
  ACQFS_TRY(DeleteRefs(repo, TipsRefPrefix(sandbox) + "*", shown));
  const std::string common = git_repository_commondir(repo);
  ACQFS_TRY(RemoveEmptyDirs(common + "refs/acqfs-base"));
  ACQFS_TRY(RemoveEmptyDirs(common + "refs/acqfs-keep"));
  return RemoveEmptyDirs(common + "refs/acqfs-tips");
}

}  // namespace

Status DropKeepRefs(const std::string& repo_path, const std::string& sandbox) {
  GitLibrary lib;
  return WithHostLocked(repo_path, [&](git_repository* repo) -> Status {
    return DeleteKeepRefs(repo, sandbox, repo_path);
  });
}

Result<std::string> UnregisterRemote(const std::string& host_workdir,
                                     const std::string& sandbox,
                                     const std::string& bridge_path) {
  GitLibrary lib;
  const std::string name = RemoteName(sandbox);
  return WithHostLocked(
      host_workdir, [&](git_repository* repo) -> Result<std::string> {
        auto url = ExistingUrl(repo, name, host_workdir);
        if (!url) return url.error();
        if (!url->empty() && !SameBridge(*url, bridge_path))
          return *url;  // someone else's remote of that name
        if (!url->empty())
          ACQFS_TRY(
              DeleteRefs(repo, "refs/remotes/" + name + "/*", host_workdir));
        ACQFS_TRY(DeleteKeepRefs(repo, sandbox, host_workdir));
        ACQFS_TRY(DeleteRemoteConfig(repo, name, host_workdir));
        ACQFS_TRY(DropEmptySection(repo, name));
        return std::string();
      });
}

}  // namespace acqfs::gitbridge
