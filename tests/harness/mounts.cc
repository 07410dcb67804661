#include "harness/mounts.h"

#include <gtest/gtest.h>
#include <sys/mount.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "harness/command.h"

namespace acqfs::test {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && s.size() - i > 3 &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Parses one line: "id parent maj:min root mountpoint opts [tags...] - type
// source superopts".
std::optional<MountEntry> ParseLine(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> fields;
  for (std::string f; in >> f;) fields.push_back(f);
  auto dash = std::find(fields.begin(), fields.end(), "-");
  if (fields.size() < 6 || dash == fields.end() || fields.end() - dash < 4) {
    return std::nullopt;
  }
  MountEntry m;
  m.mount_point = Unescape(fields[4]);
  m.mount_options = fields[5];
  m.fs_type = dash[1];
  m.source = Unescape(dash[2]);
  m.super_options = dash[3];
  return m;
}

bool IsAtOrBelow(const std::string& path, const std::string& dir) {
  if (path == dir) return true;
  std::string prefix = dir.back() == '/' ? dir : dir + "/";
  return path.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

bool MountEntry::HasMountOption(const std::string& option) const {
  std::istringstream in(mount_options);
  for (std::string o; std::getline(in, o, ',');) {
    if (o == option) return true;
  }
  return false;
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return path;
  return buf;
}

std::vector<MountEntry> ReadMountInfo() {
  std::vector<MountEntry> mounts;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    if (auto m = ParseLine(line)) mounts.push_back(std::move(*m));
  }
  return mounts;
}

std::optional<MountEntry> FindMount(const std::string& path) {
  const std::string want = RealPath(path);
  std::optional<MountEntry> found;
  for (auto& m : ReadMountInfo()) {
    if (m.mount_point == want) found = std::move(m);
  }
  return found;
}

std::vector<MountEntry> MountsBelow(const std::string& dir) {
  const std::string root = RealPath(dir);
  std::vector<MountEntry> below;
  for (auto& m : ReadMountInfo()) {
    if (IsAtOrBelow(m.mount_point, root)) below.push_back(std::move(m));
  }
  // Deepest first; for the same path, the most recent mount first.
  std::reverse(below.begin(), below.end());
  std::stable_sort(below.begin(), below.end(),
                   [](const MountEntry& a, const MountEntry& b) {
                     return a.mount_point.size() > b.mount_point.size();
                   });
  return below;
}

std::string ForceUnmount(const std::string& path) {
  std::string report;
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto m = FindMount(path);
    if (!m) return "";
    if (m->fs_type.rfind("fuse", 0) == 0 && attempt == 0) {
      CommandResult r = RunCommand({"fusermount3", "-u", "-z", path}, 20);
      if (!r.ok()) report += r.Describe() + "\n";
      continue;
    }
    if (::umount2(path.c_str(), MNT_DETACH) != 0) {
      report +=
          "umount2(" + path + ", MNT_DETACH): " + std::strerror(errno) + "\n";
    }
  }
  if (!FindMount(path)) return "";
  return "still mounted: " + path + "\n" + report;
}

MountGuard::~MountGuard() {
  if (!FindMount(path_)) return;
  std::string problem = ForceUnmount(path_);
  if (!problem.empty()) ADD_FAILURE() << problem;
}

}  // namespace acqfs::test
