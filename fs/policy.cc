#include "fs/policy.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace acqfs {
namespace {

Error BadPattern(const std::string& text, const std::string& why) {
  return Error::Of(EINVAL, "not a pattern: " + why, "'" + text + "'");
}

// The end of the character class opening at text[i] == '[', or npos.
size_t ClassEnd(const std::string& text, size_t i) {
  size_t j = i + 1;
  if (j < text.size() && (text[j] == '!' || text[j] == '^')) ++j;
  if (j < text.size() && text[j] == ']') ++j;  // a leading ']' is literal
  for (; j < text.size(); ++j) {
    if (text[j] == '\\') {
      ++j;
      continue;
    }
    if (text[j] == '/') return std::string::npos;
    if (text[j] == ']') return j;
  }
  return std::string::npos;
}

std::vector<std::string> SplitPath(std::string_view rel) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= rel.size()) {
    size_t slash = rel.find('/', start);
    if (slash == std::string_view::npos) slash = rel.size();
    if (slash > start) out.emplace_back(rel.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

bool MatchComponent(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

}  // namespace

Result<PathGlob> PathGlob::Parse(const std::string& text) {
  if (text.empty()) return BadPattern(text, "empty");
  for (char ch : text)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
      return BadPattern(text,
                        "holds a control character; write ? to match one");
  // gitignore drops trailing spaces; here they would be part of the name,
  // so a pattern with them hides or protects something else than it seems.
  if (text.back() == ' ') {
    size_t escapes = 0;  // backslashes right before the last space
    for (size_t i = text.size() - 1; i > 0 && text[i - 1] == '\\'; --i)
      ++escapes;
    if (escapes % 2 == 0)
      return BadPattern(text,
                        "ends with a space; write '\\ ' for a name that "
                        "ends with one");
  }
  if (text[0] == '!')
    return BadPattern(text,
                      "'!' negation is not supported; write '\\!' "
                      "for a name that starts with '!'");
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      if (i + 1 == text.size()) return BadPattern(text, "trailing backslash");
      ++i;
    } else if (text[i] == '[') {
      size_t end = ClassEnd(text, i);
      if (end == std::string::npos)
        return BadPattern(text, "'[' without its closing ']'");
      i = end;
    }
  }
  PathGlob g;
  g.text_ = text;
  std::string body = text;
  if (body.back() == '/') {
    g.dir_only_ = true;
    body.pop_back();
  }
  if (!body.empty() && body[0] == '/') {
    g.anchored_ = true;
    body.erase(0, 1);
  }
  if (body.empty()) return BadPattern(text, "matches no name");
  if (body.find('/') != std::string::npos) g.anchored_ = true;
  size_t start = 0;
  for (;;) {
    size_t slash = body.find('/', start);
    std::string part = body.substr(
        start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty()) return BadPattern(text, "empty path component");
    if (part == "." || part == "..")
      return BadPattern(text, "'.' and '..' components are not allowed");
    g.parts_.push_back(part);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return g;
}

bool PathGlob::MatchFrom(size_t part, const std::vector<std::string>& comps,
                         size_t n, size_t comp) const {
  if (part == parts_.size()) return comp == n;
  if (parts_[part] == "**") {
    for (size_t c = comp; c <= n; ++c)
      if (MatchFrom(part + 1, comps, n, c)) return true;
    return false;
  }
  if (comp == n) return false;
  return MatchComponent(parts_[part], comps[comp]) &&
         MatchFrom(part + 1, comps, n, comp + 1);
}

bool PathGlob::Matches(std::string_view rel, bool is_dir) const {
  if (dir_only_ && !is_dir) return false;
  std::vector<std::string> comps = SplitPath(rel);
  if (comps.empty()) return false;
  return MatchesComponents(comps, comps.size(), is_dir);
}

bool PathGlob::MatchesComponents(const std::vector<std::string>& comps,
                                 size_t n, bool is_dir) const {
  if (dir_only_ && !is_dir) return false;
  if (!anchored_) return MatchComponent(parts_[0], comps[n - 1]);
  return MatchFrom(0, comps, n, 0);
}

Result<Policy> Policy::Make(const std::vector<std::string>& hide,
                            const std::vector<std::string>& read_only,
                            uint64_t quota_bytes, bool own_git,
                            const std::vector<std::string>& own_modules) {
  Policy p;
  p.own_git_ = own_git;
  for (const std::string& m : own_modules) {
    if (m.rfind(".git/modules/", 0) != 0 || m.back() == '/' ||
        m.find("//") != std::string::npos)
      return Error::Of(EINVAL, "not a submodule's git directory", m);
    if (own_git) p.own_modules_.push_back(m);
  }
  std::sort(p.own_modules_.begin(), p.own_modules_.end());
  for (const auto& h : hide) {
    auto g = PathGlob::Parse(h);
    if (!g) return g.error();
    p.hide_.push_back(std::move(*g));
  }
  for (const auto& r : read_only) {
    auto g = PathGlob::Parse(r);
    if (!g) return g.error();
    p.read_only_.push_back(std::move(*g));
  }
  p.quota_bytes_ = quota_bytes;
  return p;
}

const std::vector<std::string>& Policy::SecretPatterns() {
  static const std::vector<std::string> kSecrets = {
      ".env",    ".env.*",         "*.pem",   "*.key",     "*.p12",
      "*.pfx",   "id_rsa*",        "id_dsa*", "id_ecdsa*", "id_ed25519*",
      ".npmrc",  ".pypirc",        ".netrc",  ".pgpass",   ".git-credentials",
      ".aws/",   ".ssh/",          ".gnupg/", ".docker/",  ".kube/",
      ".azure/", ".config/gcloud/"};
  return kSecrets;
}

bool Policy::AnyMatches(const std::vector<PathGlob>& globs,
                        std::string_view rel, bool is_dir) {
  if (globs.empty()) return false;
  std::vector<std::string> comps = SplitPath(rel);  // once for every glob
  if (comps.empty()) return false;
  for (const auto& g : globs)
    if (g.MatchesComponents(comps, comps.size(), is_dir)) return true;
  return false;
}

bool Policy::MatchesWithAncestors(const std::vector<PathGlob>& globs,
                                  std::string_view rel, bool is_dir) {
  if (globs.empty()) return false;
  std::vector<std::string> comps = SplitPath(rel);
  // Each ancestor (a directory), then the path itself.
  for (size_t n = 1; n <= comps.size(); ++n) {
    bool dir = n < comps.size() || is_dir;
    for (const auto& g : globs)
      if (g.MatchesComponents(comps, n, dir)) return true;
  }
  return false;
}

bool Policy::OwnGitHides(std::string_view rel) {
  constexpr std::string_view kGit = ".git/";
  if (rel.substr(0, kGit.size()) != kGit) return false;
  std::string_view name = rel.substr(kGit.size());
  if (name.empty() || name.find('/') != std::string_view::npos) return false;
  return name != "objects" && name != "lfs" && name != "modules";
}

bool Policy::OwnModuleHides(std::string_view rel) const {
  if (own_modules_.empty()) return false;
  const size_t slash = rel.rfind('/');
  if (slash == std::string_view::npos) return false;
  const std::string_view parent = rel.substr(0, slash);
  const std::string_view name = rel.substr(slash + 1);
  if (!std::binary_search(own_modules_.begin(), own_modules_.end(), parent))
    return false;
  return !name.empty() && name != "objects" && name != "lfs" &&
         name != "modules";
}

bool Policy::HidesLower(std::string_view rel, bool is_dir) const {
  if (own_git_ && (OwnGitHides(rel) || OwnModuleHides(rel))) return true;
  return AnyMatches(hide_, rel, is_dir);
}

bool Policy::HiddenPath(std::string_view rel, bool is_dir) const {
  return MatchesWithAncestors(hide_, rel, is_dir);
}

bool Policy::ReadOnly(std::string_view rel, bool is_dir) const {
  return MatchesWithAncestors(read_only_, rel, is_dir);
}

Result<uint64_t> ParseSize(const std::string& text) {
  auto bad = [&](const std::string& why) -> Error {
    return Error::Of(EINVAL, "not a size: " + why, "'" + text + "'");
  };
  size_t i = 0;
  while (i < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return bad("expected a number such as 500M or 2G");
  std::string number = text.substr(0, i);
  std::string unit = text.substr(i);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(number.c_str(), &end);
  if (errno != 0 || end != number.c_str() + number.size())
    return bad("not a number");
  double mult = 1;
  if (!unit.empty()) {
    char u =
        static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    std::string rest = unit.substr(1);
    const std::string kUnits = "KMGT";
    size_t k = kUnits.find(u);
    if (u == 'B' && rest.empty()) {
      mult = 1;
    } else if (k != std::string::npos &&
               (rest.empty() || rest == "B" || rest == "iB" || rest == "ib")) {
      mult = std::pow(1024.0, static_cast<double>(k + 1));
    } else {
      return bad("unknown unit; use K, M, G or T");
    }
  }
  if (mult == 1 && number.find('.') != std::string::npos)
    return bad("a number of bytes is whole; use K, M, G or T for fractions");
  double bytes = std::floor(v * mult);
  if (!(bytes >= 1)) return bad("must be at least one byte");
  if (bytes >= 1.8e19) return bad("too large");
  return static_cast<uint64_t>(bytes);
}

}  // namespace acqfs
