#include "state/state.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "common/handle.h"
#include "common/sys.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"

namespace acqfs::cli {

std::string ResolveStateDir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* e = std::getenv("ACQFS_STATE_DIR"); e && *e) return e;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    return std::string(x) + "/acqfs";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/root") + "/.local/state/acqfs";
}

bool ValidSandboxName(const std::string& name) {
  return ValidSandboxNameRule(name);
}

SandboxPaths::SandboxPaths(const std::string& state_dir, const std::string& n)
    : name(n),
      dir(state_dir + "/" + n),
      upper(dir + "/upper"),
      work(dir + "/work"),
      meta(dir + "/meta.json"),
      pid(dir + "/daemon.pid"),
      log(dir + "/daemon.log"),
      lock(dir + "/lock"),
      bridge(dir + "/bridge.git"),
      sources(dir + "/sources"),
      stack(dir + "/stack.json") {}

// The largest metadata file read (a real one is a few KiB).
constexpr size_t kMaxMetaBytes = 1 << 20;

Result<SandboxMeta> ReadMeta(const std::string& path) {
  // The sandbox's folder is its owner's, and root reads it too: a
  // meta.json replaced by a symlink (to a directory: the read threw and
  // aborted acqfs; to a file of root's) is not followed, and only a
  // regular file of bounded size is read.
  UniqueFd fd(::open(
      path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) return Error::Errno("read", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Error::Errno("stat", path);
  if (!S_ISREG(st.st_mode))
    return Error::Of(EINVAL, "read (not a regular file)", path);
  auto text = sys::ReadAll(fd.get(), kMaxMetaBytes, path);
  if (!text) return text.error();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Error::Of(EINVAL, "parse sandbox metadata", path);
  SandboxMeta m;
  try {
    m.name = j.value("name", "");
    m.lower = j.value("lower", "");
    m.mountpoint = j.value("mountpoint", "");
    m.xattr_namespace = j.value("xattr_namespace", "");
    m.last_export = j.value("last_export", int64_t{0});
  } catch (const nlohmann::json::exception&) {
    return Error::Of(EINVAL, "parse sandbox metadata", path);
  }
  if (j.contains("policy")) {
    const auto& p = j["policy"];
    if (!p.is_object())
      return Error::Of(EINVAL, "parse sandbox metadata (policy)", path);
    try {
      m.policy.hide = p.value("hide", std::vector<std::string>{});
      m.policy.read_only = p.value("read_only", std::vector<std::string>{});
      m.policy.quota_bytes = p.value("quota_bytes", uint64_t{0});
      m.policy.hide_secrets = p.value("hide_secrets", false);
      m.policy.own_git = p.value("own_git", false);
      m.policy.own_git_modules =
          p.value("own_git_modules", std::vector<std::string>{});
      m.policy.audit_reads = p.value("audit_reads", std::vector<std::string>{});
      m.policy.audit_max = p.value("audit_max", uint64_t{0});
    } catch (const nlohmann::json::exception&) {
      return Error::Of(EINVAL, "parse sandbox metadata (policy)", path);
    }
  }
  if (j.contains("base")) {
    const auto& b = j["base"];
    if (!b.is_object())
      return Error::Of(EINVAL, "parse sandbox metadata (base)", path);
    try {
      using gitbridge::GitBase;
      std::string state = b.value("state", "");
      m.base.state = state == "recorded"    ? GitBase::State::kRecorded
                     : state == "recording" ? GitBase::State::kRecording
                                            : GitBase::State::kNone;
      m.base.time_ns = b.value("time_ns", int64_t{0});
      m.base.head = b.value("head", "");
      m.base.branch = b.value("branch", "");
      m.base.branches =
          b.value("branches", std::map<std::string, std::string>{});
      m.base.own_git = b.value("own_git", false);
      m.base.index_state = b.value("index", "");
      m.base.index_objects = b.value("index_objects", uint64_t{0});
      m.base.index_objects_not_kept =
          b.value("index_objects_not_kept", std::vector<std::string>{});
      if (b.contains("index_id")) {
        const auto& i = b["index_id"];
        if (!i.is_object())
          return Error::Of(EINVAL, "parse sandbox metadata (base)", path);
        m.base.index.dev = i.value("dev", uint64_t{0});
        m.base.index.ino = i.value("ino", uint64_t{0});
        m.base.index.size = i.value("size", uint64_t{0});
        m.base.index.mtime_ns = i.value("mtime_ns", int64_t{0});
        m.base.index.ctime_ns = i.value("ctime_ns", int64_t{0});
      }
    } catch (const nlohmann::json::exception&) {
      return Error::Of(EINVAL, "parse sandbox metadata (base)", path);
    }
  }
  return m;
}

nlohmann::json BaseJson(const gitbridge::GitBase& b) {
  using gitbridge::GitBase;
  if (b.state == GitBase::State::kNone) return nlohmann::json::object();
  nlohmann::json j = {
      {"state",
       b.state == GitBase::State::kRecorded ? "recorded" : "recording"},
      {"time_ns", b.time_ns},
      {"head", b.head},
      {"branch", b.branch},
      {"branches", b.branches},
      {"own_git", b.own_git},
      {"index", b.index_state},
      {"index_objects", b.index_objects}};
  if (!b.index_objects_not_kept.empty())
    j["index_objects_not_kept"] = b.index_objects_not_kept;
  if (b.index.ino != 0)
    j["index_id"] = {{"dev", b.index.dev},
                     {"ino", b.index.ino},
                     {"size", b.index.size},
                     {"mtime_ns", b.index.mtime_ns},
                     {"ctime_ns", b.index.ctime_ns}};
  return j;
}

Result<std::shared_ptr<const Policy>> PolicyRecord::Build() const {
  if (empty()) return std::shared_ptr<const Policy>();
  auto p = Policy::Make(hide, read_only, quota_bytes, own_git, own_git_modules);
  if (!p) return p.error();
  return std::shared_ptr<const Policy>(std::make_shared<Policy>(std::move(*p)));
}

std::string FormatBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B",
                  static_cast<unsigned long long>(n));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string PolicyRecord::Summary() const {
  if (!restricts()) return "none";
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
  };
  std::vector<std::string> parts;
  if (!hide.empty()) {
    std::vector<std::string> own;
    const auto& secrets = Policy::SecretPatterns();
    for (const auto& h : hide)
      if (!hide_secrets ||
          std::find(secrets.begin(), secrets.end(), h) == secrets.end())
        own.push_back(h);
    std::string what = hide_secrets ? "the secrets set" : "";
    if (!own.empty()) what += (what.empty() ? "" : ", ") + join(own);
    parts.push_back("hide " + what);
  }
  if (!read_only.empty()) parts.push_back("read-only " + join(read_only));
  if (quota_bytes) parts.push_back("quota " + FormatBytes(quota_bytes));
  if (!audit_reads.empty())
    parts.push_back("audit reads of " + join(audit_reads));
  if (audit_max) parts.push_back("audit log at most " + FormatBytes(audit_max));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Status WriteMeta(const std::string& path, const SandboxMeta& meta) {
  nlohmann::json j = {{"name", meta.name},
                      {"lower", meta.lower},
                      {"mountpoint", meta.mountpoint},
                      {"xattr_namespace", meta.xattr_namespace},
                      {"last_export", meta.last_export}};
  if (!meta.policy.empty())
    j["policy"] = {{"hide", meta.policy.hide},
                   {"read_only", meta.policy.read_only},
                   {"quota_bytes", meta.policy.quota_bytes},
                   {"hide_secrets", meta.policy.hide_secrets},
                   {"own_git", meta.policy.own_git}};
  if (!meta.policy.own_git_modules.empty())
    j["policy"]["own_git_modules"] = meta.policy.own_git_modules;
  if (!meta.policy.audit_reads.empty())
    j["policy"]["audit_reads"] = meta.policy.audit_reads;
  if (meta.policy.audit_max != 0)
    j["policy"]["audit_max"] = meta.policy.audit_max;
  if (meta.base.state != gitbridge::GitBase::State::kNone)
    j["base"] = BaseJson(meta.base);
  return WriteFileAtomically(path, j.dump(2) + "\n", 0600, Durability::kDurable,
                             FileOwner::kDirectory);
}

Status MakeDirs(const std::string& path) {
  // Relative paths grow from ".", absolute ones from "/".
  std::string cur = !path.empty() && path[0] == '/' ? "" : ".";
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      return Error::Errno("mkdir", cur);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Error::Errno("stat", path);
  if (!S_ISDIR(st.st_mode)) return Error::Of(ENOTDIR, "mkdir", path);
  return Ok();
}

Status SecureSandboxDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Error::Errno("open", dir);
  auto st = sys::Fstat(fd.get(), dir);
  if (!st) return st.error();
  if ((st->st_mode & 07777) == (st->st_mode & 0700)) return Ok();
  if (::fchmod(fd.get(), st->st_mode & 0700) != 0)
    return Error::Errno("chmod (to keep other users out)", dir);
  return Ok();
}

Result<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) return Error::Errno("resolve", path);
  return std::string(buf);
}

}  // namespace acqfs::cli
