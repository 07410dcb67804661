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
size_t AddNamedClass(std::string_view p, size_t i, CharClass* cc) {
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
CharClass ParseClass(std::string_view p, size_t start) {
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
// Until the first '*' is reached the match cannot branch, so the memo (one
// byte per pattern position and text position) is made only then: a
// pattern that fails on its literal prefix costs nothing in proportion to
// the text, however long the path.
class Matcher {
 public:
  Matcher(std::string_view p, std::string_view t) : p_(p), t_(t) {}

  bool Match(size_t pi, size_t ti) {
    if (memo_.empty()) return Compute(pi, ti);
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
    if (memo_.empty())
      memo_.assign((p_.size() + 1) * (t_.size() + 1), kUnknown);
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

  std::string_view p_;
  std::string_view t_;
  std::vector<char> memo_;
};

// ---------------------------------------------------------------------------
// Matching one pattern against a path

// `base_name` is the last component of `path`.
bool PatternMatches(const IgnorePattern& p, std::string_view path,
                    std::string_view base_name, bool is_dir) {
  if (p.dir_only && !is_dir) return false;
  if (!p.anchored) return WildMatch(p.pattern, base_name);
  if (p.base.empty()) return WildMatch(p.pattern, path);
  if (path.size() <= p.base.size() + 1 ||
      path.compare(0, p.base.size(), p.base) != 0 || path[p.base.size()] != '/')
    return false;
  return WildMatch(p.pattern, path.substr(p.base.size() + 1));
}

std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Patterns of a .gitignore-format file text, or none for a missing file or
// one that is not a regular file (git does not follow a symlinked
// .gitignore).
Result<std::vector<IgnorePattern>> PatternsOfText(Result<std::string> text,
                                                  const std::string& base) {
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

bool WildMatch(std::string_view pattern, std::string_view text) {
  Matcher m(pattern, text);
  return m.Match(0, 0);
}

IgnoreRules::IgnoreRules(const Layers& layers) : tree_(layers) {}

std::string_view IgnoreRules::NameOf(size_t i) const {
  size_t start = i == 1 ? 0 : levels_[i - 1].end + 1;
  return std::string_view(path_).substr(start, levels_[i].end - start);
}

Status IgnoreRules::PushRoot() {
  while (tree_.depth() > 0) ACQFS_TRY(tree_.Leave());
  auto patterns = PatternsOfText(tree_.ReadChildFile(".gitignore"), "");
  if (!patterns) return patterns.error();
  Level root;
  root.patterns = std::move(*patterns);
  root.nearest = root.patterns.empty() ? -1 : 0;
  root.entered = true;
  path_.clear();
  levels_.push_back(std::move(root));
  return Ok();
}

// Adds the directory `name` below the deepest level: ignored when the
// level is or a pattern above says so (then nothing below it is read),
// else entered with the cursor and its .gitignore read.
Status IgnoreRules::PushLevel(std::string_view name) {
  const size_t parent = levels_.size() - 1;
  if (!path_.empty()) path_.push_back('/');
  path_.append(name);
  Level level;
  level.end = path_.size();
  level.nearest = levels_[parent].nearest;
  level.ignored =
      levels_[parent].ignored || Match(parent, path_, /*is_dir=*/true) == 1;
  if (!level.ignored && levels_[parent].entered) {
    const std::string dir(name);
    ACQFS_TRY(tree_.Enter(dir, &level.entered));
    if (level.entered) {
      auto patterns = PatternsOfText(tree_.ReadChildFile(".gitignore"), path_);
      if (!patterns) return patterns.error();
      level.patterns = std::move(*patterns);
      if (!level.patterns.empty())
        level.nearest = static_cast<int>(levels_.size());
    }
  }
  levels_.push_back(std::move(level));
  return Ok();
}

Status IgnoreRules::PopLevel() {
  if (levels_.back().entered) ACQFS_TRY(tree_.Leave());
  levels_.pop_back();
  path_.resize(levels_.size() > 1 ? levels_.back().end : 0);
  return Ok();
}

int IgnoreRules::Match(size_t dir, std::string_view path, bool is_dir) const {
  // Sources from the highest priority down: the deepest .gitignore first,
  // the root's last, then .git/info/exclude; in each, the last line wins.
  const std::string_view base_name = BaseName(path);
  for (int i = levels_[dir].nearest; i >= 0;
       i = i > 0 ? levels_[i - 1].nearest : -1) {
    const auto& list = levels_[i].patterns;
    for (auto p = list.rbegin(); p != list.rend(); ++p) {
      if (PatternMatches(*p, path, base_name, is_dir))
        return p->negate ? -1 : 1;
    }
  }
  for (auto p = exclude_.rbegin(); p != exclude_.rend(); ++p) {
    if (PatternMatches(*p, path, base_name, is_dir)) return p->negate ? -1 : 1;
  }
  return 0;
}

Result<bool> IgnoreRules::IsIgnored(const std::string& path, bool is_dir) {
  // The exclude file is read with the first query (and again after a
  // failure).
  if (!exclude_read_) {
    MergedTree tree(tree_.layers());
    auto exclude = PatternsOfText(tree.ReadFile(kExcludeFile), "");
    if (!exclude) return exclude.error();
    exclude_ = std::move(*exclude);
    exclude_read_ = true;
  }
  if (levels_.empty()) ACQFS_TRY(PushRoot());
  // The directories of `path`: keep those the last query shared, then go
  // down. A failure leaves the levels consistent (or empty, re-read next).
  std::vector<std::string_view> dirs;
  const std::string_view p(path);
  for (size_t start = 0;;) {
    size_t slash = p.find('/', start);
    if (slash == std::string_view::npos) break;
    dirs.push_back(p.substr(start, slash - start));
    start = slash + 1;
  }
  size_t keep = 0;
  while (keep < dirs.size() && keep + 1 < levels_.size() &&
         NameOf(keep + 1) == dirs[keep])
    ++keep;
  Status moved = Ok();
  while (moved && levels_.size() > keep + 1) moved = PopLevel();
  for (size_t i = keep; moved && i < dirs.size(); ++i)
    moved = PushLevel(dirs[i]);
  if (!moved) {
    levels_.clear();
    path_.clear();
    return moved.error();
  }
  // A path below an ignored directory is ignored, whatever re-includes it.
  if (levels_.back().ignored) return true;
  return Match(levels_.size() - 1, p, is_dir) == 1;
}

}  // namespace acqfs::gitbridge
