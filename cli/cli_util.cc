#include "cli/cli_util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "cli/daemon.h"
#include "cli/liveness.h"
#include "common/handle.h"

namespace acqfs::cli {

int Fail(int code, const std::string& what, const std::string& subject,
         const std::string& reason) {
  std::fprintf(stderr, "acqfs: %s: %s: %s\n", what.c_str(), subject.c_str(),
               reason.c_str());
  return code;
}

int Fail(int code, const std::string& what, const Error& e) {
  if (e.path.empty()) return Fail(code, what, e.op, std::strerror(e.err));
  return Fail(code, what, e.path,
              std::string(std::strerror(e.err)) + " (" + e.op + ")");
}

std::string Absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char buf[4096];
  if (!::getcwd(buf, sizeof buf)) return p;
  return std::string(buf) + "/" + p;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

bool Within(const std::string& inner, const std::string& outer) {
  if (inner == outer) return true;
  std::string o = outer == "/" ? outer : outer + "/";
  return inner.rfind(o, 0) == 0;
}

namespace {

// The sandbox `name` when <state>/<name>/meta.json exists (nullopt when it
// does not), or the error reading it.
std::optional<Result<FoundSandbox>> Named(const std::string& state,
                                          const std::string& name) {
  if (!ValidSandboxName(name) || !Exists(state + "/" + name + "/meta.json"))
    return std::nullopt;
  FoundSandbox f;
  f.paths = SandboxPaths(state, name);
  f.by_name = true;
  auto m = ReadMeta(f.paths.meta);
  if (!m)
    return Result<FoundSandbox>(Error::Of(m.err(),
                                          "its metadata " + f.paths.meta +
                                              ": " + std::strerror(m.err()) +
                                              " (" + m.error().op + ")",
                                          name));
  f.meta = *m;
  return Result<FoundSandbox>(std::move(f));
}

// Every sandbox in `state` whose metadata records `mountpoint`, by name.
// Folders whose metadata cannot be read are skipped (`acqfs ls` shows
// them).
std::vector<FoundSandbox> RecordedAt(const std::string& state,
                                     const std::string& mountpoint) {
  std::vector<FoundSandbox> found;
  UniqueDir dir(::opendir(state.c_str()));
  if (!dir) return found;
  while (struct dirent* e = ::readdir(dir.get())) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || !ValidSandboxName(n)) continue;
    FoundSandbox f;
    f.paths = SandboxPaths(state, n);
    auto m = ReadMeta(f.paths.meta);
    if (!m || m->mountpoint != mountpoint) continue;
    f.meta = *m;
    found.push_back(std::move(f));
  }
  std::sort(found.begin(), found.end(),
            [](const FoundSandbox& a, const FoundSandbox& b) {
              return a.paths.name < b.paths.name;
            });
  return found;
}

// "a", "a and b", "a, b and c".
std::string NameList(const std::vector<const FoundSandbox*>& sandboxes) {
  std::string s;
  for (size_t i = 0; i < sandboxes.size(); i++) {
    if (i > 0) s += i + 1 == sandboxes.size() ? " and " : ", ";
    s += sandboxes[i]->paths.name;
  }
  return s;
}

Error Ambiguous(const std::string& arg, const std::string& mountpoint,
                const std::vector<const FoundSandbox*>& sandboxes,
                const std::string& how) {
  const std::string where = arg == mountpoint ? "" : " (" + mountpoint + ")";
  return Error::Of(ENOTUNIQ,
                   "is the recorded mountpoint" + where + " of the sandboxes " +
                       NameList(sandboxes) + ", " + how +
                       "; give the name of the one you mean (acqfs ls lists "
                       "them)",
                   arg);
}

// Of several sandboxes whose own mounts are all at `mountpoint` (stacked
// there by hand), the one whose mount the path leads to.
Result<FoundSandbox> Reached(
    const std::string& arg, const std::string& mountpoint,
    const std::vector<std::pair<FoundSandbox*, MountEntry>>& mounted) {
  auto reached = MountReachedAt(mountpoint);
  std::vector<const FoundSandbox*> all;
  for (const auto& [f, m] : mounted) {
    if (reached && reached->id == m.id && reached->dev == m.dev) return *f;
    all.push_back(f);
  }
  return Ambiguous(arg, mountpoint, all,
                   "all mounted there, none of them on top");
}

}  // namespace

Result<FoundSandbox> FindSandboxByName(const std::string& state,
                                       const std::string& name) {
  if (auto named = Named(state, name)) return std::move(*named);
  return Error::Of(ENOENT, "no such sandbox", name);
}

Result<FoundSandbox> FindSandbox(const std::string& state,
                                 const std::string& arg) {
  if (auto named = Named(state, arg)) return std::move(*named);
  const std::string target = MountpointPath(arg);
  std::vector<FoundSandbox> recorded = RecordedAt(state, target);
  if (recorded.empty()) return Error::Of(ENOENT, "no such sandbox", arg);
  // The sandboxes whose own mount is there now (a probe that fails counts
  // as not mounted there).
  std::vector<std::pair<FoundSandbox*, MountEntry>> mounted;
  for (FoundSandbox& f : recorded) {
    auto live = ProbeSandbox(f.paths, f.meta);
    if (!live || !live->mount) continue;
    f.mounted_at = true;
    mounted.push_back({&f, *live->mount});
  }
  if (mounted.size() == 1) return *mounted[0].first;
  if (mounted.size() > 1) return Reached(arg, target, mounted);
  if (recorded.size() == 1) return recorded[0];
  std::vector<const FoundSandbox*> all;
  for (const FoundSandbox& f : recorded) all.push_back(&f);
  return Ambiguous(arg, target, all, "and none of them is mounted there now");
}

int FailFind(const std::string& what, const std::string& arg, const Error& e) {
  return Fail(kExitBadInput, what, e.path.empty() ? arg : e.path, e.op);
}

namespace {

// Length of the valid UTF-8 sequence at s[i] (1 for ASCII), 0 when the bytes
// there are not one (overlong forms, surrogates and values past U+10FFFF
// included).
size_t Utf8Length(const std::string& s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
  if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogate
  if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
  if (c == 0xF4 && b(1) >= 0x90) return 0;  // past U+10FFFF
  return n;
}

bool NeedsQuoting(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F || c == '"' || c == '\\') return true;
    size_t n = Utf8Length(s, i);
    if (n == 0) return true;
    i += n;
  }
  return false;
}

void AppendEscaped(unsigned char c, std::string* out) {
  static const char kNamed[] = "abtnvfr";  // \a (7) .. \r (13)
  out->push_back('\\');
  if (c == '"' || c == '\\') {
    out->push_back(static_cast<char>(c));
  } else if (c >= 7 && c <= 13) {
    out->push_back(kNamed[c - 7]);
  } else {
    char oct[4];
    std::snprintf(oct, sizeof oct, "%03o", c);
    out->append(oct);
  }
}

}  // namespace

bool IsUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = Utf8Length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string QuotePath(const std::string& path) {
  if (!NeedsQuoting(path)) return path;
  std::string out = "\"";
  for (size_t i = 0; i < path.size();) {
    unsigned char c = static_cast<unsigned char>(path[i]);
    size_t n = Utf8Length(path, i);
    if (c < 0x20 || c == 0x7F || c == '"' || c == '\\' || n == 0) {
      AppendEscaped(c, &out);
      ++i;
    } else {
      out.append(path, i, n);
      i += n;
    }
  }
  out += '"';
  return out;
}

Result<Layers> OpenSandboxLayers(const SandboxPaths& paths,
                                 const SandboxMeta& meta) {
  XattrNamespace ns = meta.xattr_namespace == "trusted"
                          ? XattrNamespace::kTrusted
                          : XattrNamespace::kUser;
  auto layers = Layers::OpenForReading(meta.lower, paths.upper, ns);
  if (!layers) return layers.error();
  auto policy = meta.policy.Build();
  if (!policy) return policy.error();
  layers->policy = *policy;
  return layers;
}

int CleanUpStaleSandbox(const std::string& command, const SandboxPaths& paths,
                        const SandboxMeta& meta) {
  const std::string what = command + ": clean up a stale mount";
  auto live = ProbeSandbox(paths, meta);
  if (!live) return Fail(kExitFailed, what, live.error());
  if (live->mount) {
    if (Status s = DetachStaleMount(*live->mount); !s)
      return Fail(kExitFailed, what, s.error());
    std::fprintf(stderr,
                 "acqfs: %s: %s: cleaned up a stale mount of sandbox %s\n",
                 command.c_str(), meta.mountpoint.c_str(), paths.name.c_str());
  }
  if (::unlink(paths.pid.c_str()) != 0 && errno != ENOENT)
    return Fail(kExitFailed, what, paths.pid, std::strerror(errno));
  return 0;
}

gitbridge::ExportConfig ExportConfigFor(const SandboxPaths& paths,
                                        const SandboxMeta& meta) {
  gitbridge::ExportConfig c;
  c.sandbox = paths.name;
  c.lower = meta.lower;
  c.upper = paths.upper;
  c.bridge = paths.bridge;
  c.xattr_namespace = meta.xattr_namespace == "trusted"
                          ? XattrNamespace::kTrusted
                          : XattrNamespace::kUser;
  auto policy = meta.policy.Build();
  // Callers that publish (export) check first that the policy builds.
  if (policy) c.policy = *policy;
  return c;
}

}  // namespace acqfs::cli
