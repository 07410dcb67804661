#include "common/mountinfo.h"

#include <sys/sysmacros.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace acqfs {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string UnescapeMountField(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct = s.substr(i + 1, 3);
      if (oct.find_first_not_of("01234567") == oct.npos) {
        out += static_cast<char>(std::strtoul(oct.c_str(), nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// Is `dir` (a mountpoint) `path` or one of its ancestors?
bool Covers(const std::string& dir, const std::string& path) {
  if (dir == "/") return !path.empty() && path.front() == '/';
  if (path.compare(0, dir.size(), dir) != 0) return false;
  return path.size() == dir.size() || path[dir.size()] == '/';
}

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  for (const auto& x : list)
    if (x == s) return true;
  return false;
}

bool HasTag(const MountEntry& e, const std::string& tag) {
  return Contains(e.tags, tag);
}

std::vector<std::string> SplitOptions(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string o; std::getline(ss, o, ',');) out.push_back(o);
  return out;
}

}  // namespace

bool MountEntry::HasOption(const std::string& option) const {
  return Contains(options, option);
}

bool MountEntry::HasSuperOption(const std::string& option) const {
  return Contains(super_options, option);
}

bool ParseMajorMinor(const std::string& text, int base, dev_t* out) {
  auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size())
    return false;
  char* end = nullptr;
  unsigned long maj = std::strtoul(text.c_str(), &end, base);
  if (end != text.c_str() + colon) return false;
  unsigned long min = std::strtoul(text.c_str() + colon + 1, &end, base);
  if (end != text.c_str() + text.size()) return false;
  *out = makedev(maj, min);
  return true;
}

std::optional<MountEntry> ParseMountInfoLine(const std::string& line) {
  // id parent maj:min root mountpoint opts [optional...] - fstype source ...
  auto dash = line.find(" - ");
  if (dash == std::string::npos) return std::nullopt;
  std::istringstream ss(line.substr(0, dash));
  std::string dev, root, mp, opts, tag;
  MountEntry e;
  if (!(ss >> e.id >> e.parent >> dev >> root >> mp >> opts))
    return std::nullopt;
  while (ss >> tag) e.tags.push_back(tag);
  std::istringstream rest(line.substr(dash + 3));
  std::string source, super;
  if (!(rest >> e.fstype)) return std::nullopt;
  rest >> source >> super;  // absent from some synthetic tables
  if (!ParseMajorMinor(dev, 10, &e.dev)) return std::nullopt;
  e.mountpoint = UnescapeMountField(mp);
  e.source = UnescapeMountField(source);
  e.options = SplitOptions(opts);
  e.super_options = SplitOptions(super);
  return e;
}

std::vector<MountEntry> ParseMountInfo(const std::string& text) {
  std::vector<MountEntry> table;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (auto e = ParseMountInfoLine(line)) table.push_back(std::move(*e));
  return table;
}

Result<std::vector<MountEntry>> ReadMountInfo(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error::Errno("open", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error::Of(EIO, "read", path);
  return ParseMountInfo(text.str());
}

const MountEntry* CoveringMount(const std::vector<MountEntry>& table,
                                const std::string& path) {
  const MountEntry* best = nullptr;
  for (const auto& e : table) {
    if (!Covers(e.mountpoint, path)) continue;
    if (best == nullptr || e.mountpoint.size() >= best->mountpoint.size())
      best = &e;
  }
  return best;
}

bool MountPropagates(const std::vector<MountEntry>& ours,
                     const std::vector<MountEntry>& theirs,
                     const std::string& path) {
  const MountEntry* mine = CoveringMount(ours, path);
  const MountEntry* other = CoveringMount(theirs, path);
  if (mine == nullptr || other == nullptr) return false;
  for (const auto& t : mine->tags) {
    if (t.rfind("shared:", 0) != 0) continue;
    const std::string group = t.substr(7);
    if (HasTag(*other, "shared:" + group) || HasTag(*other, "master:" + group))
      return true;
  }
  return false;
}

}  // namespace acqfs
