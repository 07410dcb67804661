#include "state/paths.h"

#include <sys/stat.h>
#include <unistd.h>

namespace acqfs::cli {

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

}  // namespace acqfs::cli
