#include "gitbridge/ignore.h"

#include <cctype>
#include <cstring>
#include <string_view>

#include "common/sys.h"

namespace acqfs::gitbridge {
namespace {

// ---------------------------------------------------------------------------
// Parsing

// Removes trailing spaces that are not escaped with a backslash. A pattern
// ending in a lone backslash is left as it is.
void TrimTrailingSpaces(std::string* line) {
  size_t keep = line->size();
  bool in_spaces = false;
  for (size_t i = 0; i < line->size(); ++i) {
    char c = (*line)[i];
    if (c == ' ') {
      if (!in_spaces) keep = i;
      in_spaces = true;
      continue;
    }
    in_spaces = false;
    if (c == '\\') {
      if (i + 1 == line->size()) return;
      ++i;  // the escaped character is kept, whatever it is
    }
  }
  if (in_spaces) line->resize(keep);
}

// Parses one line (without its newline); false when it holds no pattern.
bool ParseLine(std::string line, const std::string& base, IgnorePattern* out) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty() || line[0] == '#') return false;
  TrimTrailingSpaces(&line);
  IgnorePattern p;
  p.base = base;
  std::string_view s = line;
  if (!s.empty() && s[0] == '!') {
    p.negate = true;
    s.remove_prefix(1);
  }
  if (!s.empty() && s.back() == '/') {
    p.dir_only = true;
    s.remove_suffix(1);
  }
  if (s.find('/') != std::string_view::npos) p.anchored = true;
  if (!s.empty() && s[0] == '/') s.remove_prefix(1);
  if (s.empty()) return false;
  p.pattern = std::string(s);
  *out = std::move(p);
  return true;
}

// ---------------------------------------------------------------------------
// Wildmatch

// One "[...]" class: where it ends and which bytes it accepts.
struct CharClass {
  size_t end = 0;  // index just past the closing ']'
  bool negated = false;
  bool ok = false;  // false: malformed, the whole pattern matches nothing
  bool accepts[256] = {};
};

// Tests a named class ("alpha", ...) against c; false in *known when the
// name is not one of POSIX's.
bool NamedClassHas(std::string_view name, unsigned char c, bool* known) {
  *known = true;
  if (name == "alnum") return std::isalnum(c);
  if (name == "alpha") return std::isalpha(c);
  if (name == "blank") return c == ' ' || c == '\t';
  if (name == "cntrl") return std::iscntrl(c);
  if (name == "digit") return std::isdigit(c);
  if (name == "graph") return std::isgraph(c);
  if (name == "lower") return std::islower(c);
  if (name == "print") return std::isprint(c);
  if (name == "punct") return std::ispunct(c);
  if (name == "space") return std::isspace(c);
  if (name == "upper") return std::isupper(c);
  if (name == "xdigit") return std::isxdigit(c);
  *known = false;
  return false;
}

// Adds "[:name:]" starting at p[i] (p[i] == '[', p[i+1] == ':'); returns the
// index after it, or npos when it is not a complete or known class.
size_t AddNamedClass(const std::string& p, size_t i, CharClass* cc) {
  size_t close = p.find(":]", i + 2);
  if (close == std::string::npos) return std::string::npos;
  std::string_view name(p.data() + i + 2, close - i - 2);
  for (int c = 0; c < 256; ++c) {
    bool known = true;
    if (NamedClassHas(name, static_cast<unsigned char>(c), &known))
      cc->accepts[c] = true;
    if (!known) return std::string::npos;
  }
  return close + 2;
}

// Parses the class whose '[' is at p[start].
CharClass ParseClass(const std::string& p, size_t start) {
  CharClass cc;
  size_t i = start + 1;
  if (i < p.size() && (p[i] == '!' || p[i] == '^')) {
    cc.negated = true;
    ++i;
  }
  bool first = true;
  while (i < p.size() && (p[i] != ']' || first)) {
    first = false;
    if (p[i] == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      i = AddNamedClass(p, i, &cc);
      if (i == std::string::npos) return cc;  // malformed
      continue;
    }
    unsigned char lo = p[i];
    if (lo == '\\' && ++i < p.size()) lo = p[i];
    ++i;
    unsigned char hi = lo;
    if (i + 1 < p.size() && p[i] == '-' && p[i + 1] != ']') {
      i += 1;
      hi = p[i];
      if (hi == '\\' && ++i < p.size()) hi = p[i];
      ++i;
    }
    for (int c = lo; c <= hi; ++c) cc.accepts[c] = true;
  }
  if (i >= p.size()) return cc;  // no closing ']'
  cc.end = i + 1;
  cc.ok = true;
  return cc;
}

// A memoised matcher of one pattern against one text (WM_PATHNAME rules).
class Matcher {
 public:
  Matcher(const std::string& p, const std::string& t)
      : p_(p), t_(t), memo_((p.size() + 1) * (t.size() + 1), kUnknown) {}

  bool Match(size_t pi, size_t ti) {
    char& m = memo_[pi * (t_.size() + 1) + ti];
    if (m == kUnknown) m = Compute(pi, ti) ? kYes : kNo;
    return m == kYes;
  }

 private:
  static constexpr char kUnknown = 0, kYes = 1, kNo = 2;

  bool Compute(size_t pi, size_t ti) {
    if (pi == p_.size()) return ti == t_.size();
    bool has_t = ti < t_.size();
    switch (p_[pi]) {
      case '*':
        return Star(pi, ti);
      case '?':
        return has_t && t_[ti] != '/' && Match(pi + 1, ti + 1);
      case '[': {
        CharClass cc = ParseClass(p_, pi);
        if (!cc.ok || !has_t || t_[ti] == '/') return false;
        bool in = cc.accepts[static_cast<unsigned char>(t_[ti])];
        return in != cc.negated && Match(cc.end, ti + 1);
      }
      case '\\':
        if (pi + 1 == p_.size()) return false;
        return has_t && t_[ti] == p_[pi + 1] && Match(pi + 2, ti + 1);
      default:
        return has_t && t_[ti] == p_[pi] && Match(pi + 1, ti + 1);
    }
  }

  // A run of '*' starting at p_[pi].
  bool Star(size_t pi, size_t ti) {
    size_t qi = pi;
    while (qi < p_.size() && p_[qi] == '*') ++qi;
    bool starts_component = pi == 0 || p_[pi - 1] == '/';
    bool ends_component = qi == p_.size() || p_[qi] == '/';
    if (qi - pi >= 2 && starts_component && ends_component)
      return GlobStar(qi, ti);
    // A plain star: any run of characters within one component.
    for (size_t k = ti; k <= t_.size(); ++k) {
      if (Match(qi, k)) return true;
      if (k < t_.size() && t_[k] == '/') return false;
    }
    return false;
  }

  // "**" as a whole component; p_[qi] is '/' or the end of the pattern.
  bool GlobStar(size_t qi, size_t ti) {
    if (qi == p_.size()) return true;  // trailing "/**": everything below
    // "**/": zero or more whole directories.
    if (Match(qi + 1, ti)) return true;
    for (size_t k = ti; k < t_.size(); ++k) {
      if (t_[k] == '/' && Match(qi + 1, k + 1)) return true;
    }
    return false;
  }

  const std::string& p_;
  const std::string& t_;
  std::vector<char> memo_;
};

// ---------------------------------------------------------------------------
// Matching one pattern against a path

bool PatternMatches(const IgnorePattern& p, const std::string& path,
                    bool is_dir) {
  if (p.dir_only && !is_dir) return false;
  if (!p.anchored) return WildMatch(p.pattern, sys::Basename(path));
  if (p.base.empty()) return WildMatch(p.pattern, path);
  if (path.size() <= p.base.size() + 1 ||
      path.compare(0, p.base.size(), p.base) != 0 || path[p.base.size()] != '/')
    return false;
  return WildMatch(p.pattern, path.substr(p.base.size() + 1));
}

// Reads a .gitignore-format file of the merged view; a missing file, or one
// that is not a regular file (git does not follow a symlinked .gitignore),
// holds no patterns.
Result<std::vector<IgnorePattern>> LoadPatterns(const MergedTree& tree,
                                                const std::string& file,
                                                const std::string& base) {
  auto text = tree.ReadFile(file);
  if (!text) {
    int e = text.err();
    if (e == ENOENT || e == ENOTDIR || e == EISDIR || e == EINVAL)
      return std::vector<IgnorePattern>{};
    return text.error();
  }
  return ParseIgnoreFile(*text, base);
}

const char kExcludeFile[] = ".git/info/exclude";

}  // namespace

std::vector<IgnorePattern> ParseIgnoreFile(const std::string& text,
                                           const std::string& base) {
  std::vector<IgnorePattern> out;
  size_t start = 0;
  // A UTF-8 byte order mark before the first line is not part of it.
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) start = 3;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    size_t end = nl == std::string::npos ? text.size() : nl;
    IgnorePattern p;
    if (ParseLine(text.substr(start, end - start), base, &p))
      out.push_back(std::move(p));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

bool WildMatch(const std::string& pattern, const std::string& text) {
  Matcher m(pattern, text);
  return m.Match(0, 0);
}

IgnoreRules::IgnoreRules(const MergedTree& tree) : tree_(tree) {}

Result<const std::vector<IgnorePattern>*> IgnoreRules::PatternsOf(
    const std::string& dir) {
  auto it = by_dir_.find(dir);
  if (it != by_dir_.end()) return &it->second;
  auto patterns = LoadPatterns(tree_, sys::Join(dir, ".gitignore"), dir);
  if (!patterns) return patterns.error();
  return &by_dir_.emplace(dir, std::move(*patterns)).first->second;
}

Result<int> IgnoreRules::Match(const std::string& path, bool is_dir) {
  // Sources from the highest priority down: the deepest .gitignore first,
  // the root's last, then .git/info/exclude; in each, the last line wins.
  std::vector<const std::vector<IgnorePattern>*> sources;
  std::string dir = sys::Dirname(path);
  for (;;) {
    auto patterns = PatternsOf(dir);
    if (!patterns) return patterns.error();
    sources.push_back(*patterns);
    if (dir.empty()) break;
    dir = sys::Dirname(dir);
  }
  sources.push_back(&exclude_);
  for (const auto* list : sources) {
    for (auto p = list->rbegin(); p != list->rend(); ++p) {
      if (PatternMatches(*p, path, is_dir)) return p->negate ? -1 : 1;
    }
  }
  return 0;
}

Result<bool> IgnoreRules::IsIgnored(const std::string& path, bool is_dir) {
  // The exclude file is read with the first query. Every query caches the
  // root's .gitignore, so an empty cache means "not read yet" (or a
  // previous attempt failed, and is retried).
  if (by_dir_.empty()) {
    auto exclude = LoadPatterns(tree_, kExcludeFile, "");
    if (!exclude) return exclude.error();
    exclude_ = std::move(*exclude);
  }
  // A path below an ignored directory is ignored, whatever re-includes it.
  for (size_t slash = path.find('/'); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    auto m = Match(path.substr(0, slash), true);
    if (!m) return m.error();
    if (*m == 1) return true;
  }
  auto m = Match(path, is_dir);
  if (!m) return m.error();
  return *m == 1;
}

}  // namespace acqfs::gitbridge
