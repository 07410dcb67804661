#include "cli/cli_util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

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

bool FindSandbox(const std::string& state, const std::string& arg,
                 SandboxPaths* out, SandboxMeta* meta) {
  if (ValidSandboxName(arg) && Exists(state + "/" + arg + "/meta.json")) {
    *out = SandboxPaths(state, arg);
    auto m = ReadMeta(out->meta);
    if (m) *meta = *m;
    return m.ok();
  }
  auto real = RealPath(arg);
  std::string target = real ? *real : Absolute(arg);
  UniqueDir dir(::opendir(state.c_str()));
  if (!dir) return false;
  while (struct dirent* e = ::readdir(dir.get())) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    SandboxPaths p(state, n);
    auto m = ReadMeta(p.meta);
    if (m && m->mountpoint == target) {
      *out = p;
      *meta = *m;
      return true;
    }
  }
  return false;
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
  return c;
}

}  // namespace acqfs::cli
