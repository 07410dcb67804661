#include "gitbridge/git_names.h"

#include <cstdio>
#include <cstring>
#include <unordered_set>

namespace acqfs::gitbridge {
namespace {

char AsciiLower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// ---- HFS+ ----------------------------------------------------------------
// HFS+ ignores some code points in names and folds case, so git treats
// ".g\u200cit" and ".GIT" as ".git". Names are compared code point by code
// point, the ignorable ones skipped; bytes that are not UTF-8 end the
// comparison as the end of the name would.

constexpr int32_t kInvalid = -1;

// The code point at s[*i] (advancing *i), 0 at the end, kInvalid for bytes
// that are not UTF-8 (overlong forms, surrogates, U+FFFE, U+FFFF and values
// past U+10FFFF included).
int32_t DecodeUtf8(std::string_view s, size_t* i) {
  if (*i >= s.size()) return 0;
  auto at = [&](size_t k) -> unsigned char {
    return *i + k < s.size() ? static_cast<unsigned char>(s[*i + k]) : 0;
  };
  auto cont = [&](size_t k) { return (at(k) & 0xC0) == 0x80; };
  unsigned char b0 = at(0);
  int32_t cp;
  size_t n;
  if (b0 < 0x80) {
    cp = b0;
    n = 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    if (!cont(1) || b0 < 0xC2) return kInvalid;
    cp = ((b0 & 0x1F) << 6) | (at(1) & 0x3F);
    n = 2;
  } else if ((b0 & 0xF0) == 0xE0) {
    if (!cont(1) || !cont(2)) return kInvalid;
    if (b0 == 0xE0 && at(1) < 0xA0) return kInvalid;   // overlong
    if (b0 == 0xED && at(1) >= 0xA0) return kInvalid;  // surrogate
    if (b0 == 0xEF && at(1) == 0xBF && at(2) >= 0xBE) return kInvalid;
    cp = ((b0 & 0x0F) << 12) | ((at(1) & 0x3F) << 6) | (at(2) & 0x3F);
    n = 3;
  } else if ((b0 & 0xF8) == 0xF0) {
    if (!cont(1) || !cont(2) || !cont(3)) return kInvalid;
    if (b0 == 0xF0 && at(1) < 0x90) return kInvalid;  // overlong
    if (b0 > 0xF4 || (b0 == 0xF4 && at(1) >= 0x90)) return kInvalid;
    cp = ((b0 & 0x07) << 18) | ((at(1) & 0x3F) << 12) | ((at(2) & 0x3F) << 6) |
         (at(3) & 0x3F);
    n = 4;
  } else {
    return kInvalid;
  }
  *i += n;
  return cp;
}

bool HfsIgnorable(int32_t cp) {
  return (cp >= 0x200C && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x206A && cp <= 0x206F) || cp == 0xFEFF;
}

int32_t NextHfsChar(std::string_view s, size_t* i) {
  for (;;) {
    int32_t cp = DecodeUtf8(s, i);
    if (cp <= 0 || !HfsIgnorable(cp)) return cp;
  }
}

// Is `name` "." + `needle` (lower case ASCII) to HFS+, up to a '/'?
bool HfsDot(std::string_view name, std::string_view needle) {
  size_t i = 0;
  if (NextHfsChar(name, &i) != '.') return false;
  for (char want : needle) {
    int32_t cp = NextHfsChar(name, &i);
    if (cp <= 0 || cp > 127 || AsciiLower(static_cast<char>(cp)) != want)
      return false;
  }
  int32_t after = NextHfsChar(name, &i);
  return after <= 0 || after == '/';
}

// ---- NTFS ----------------------------------------------------------------
// NTFS drops trailing dots and spaces, starts a stream name at ':', takes
// '\' as a separator and gives long names 8.3 short names.

bool AnyOf(char c, const char* set) {
  return c != '\0' && std::strchr(set, c) != nullptr;
}

// From `from` on, only dots and spaces up to the end or one of `stops`?
bool OnlyDotsAndSpaces(std::string_view s, size_t from, const char* stops) {
  for (size_t i = from; i < s.size(); ++i) {
    if (AnyOf(s[i], stops)) return true;
    if (s[i] != '.' && s[i] != ' ') return false;
  }
  return true;
}

bool EqualsIgnoringCase(std::string_view s, size_t at, std::string_view lower) {
  if (s.size() < at + lower.size()) return false;
  for (size_t k = 0; k < lower.size(); ++k)
    if (AsciiLower(s[at + k]) != lower[k]) return false;
  return true;
}

// ".git" or its short name "git~1", to NTFS.
bool NtfsDotGit(std::string_view name) {
  size_t rest;
  if (EqualsIgnoringCase(name, 0, ".git"))
    rest = 4;
  else if (EqualsIgnoringCase(name, 0, "git") && name.size() >= 5 &&
           name[3] == '~' && name[4] == '1')
    rest = 5;
  else
    return false;
  return OnlyDotsAndSpaces(name, rest, "/\\:");
}

// "." + `long_name` to NTFS: itself, its usual short name (the first six
// characters, '~', 1 to 4), or the short name NTFS falls back to, made of
// up to six characters of `short_prefix` (a hash git hard-codes), '~', a
// digit 1-9 and digits up to eight characters.
bool NtfsDot(std::string_view name, std::string_view long_name,
             std::string_view short_prefix) {
  if (!name.empty() && name[0] == '.' && EqualsIgnoringCase(name, 1, long_name))
    return OnlyDotsAndSpaces(name, 1 + long_name.size(), ":");
  if (EqualsIgnoringCase(name, 0, long_name.substr(0, 6)) && name.size() >= 8 &&
      name[6] == '~' && name[7] >= '1' && name[7] <= '4')
    return OnlyDotsAndSpaces(name, 8, ":");
  if (name.size() < 8) return false;
  bool tilde = false;
  for (size_t i = 0; i < 8; ++i) {
    char c = name[i];
    if (tilde) {
      if (c < '0' || c > '9') return false;
    } else if (c == '~') {
      ++i;
      if (name[i] < '1' || name[i] > '9') return false;
      tilde = true;
    } else if (i >= 6 || (static_cast<unsigned char>(c) & 0x80) ||
               AsciiLower(c) != short_prefix[i]) {
      return false;
    }
  }
  return OnlyDotsAndSpaces(name, 8, ":");
}

// Does `test` hold for `name` or for a part of it after a '\' (NTFS reads
// "a\.git" as the path a/.git)?
template <class Test>
bool NameOrAfterBackslash(std::string_view name, Test test) {
  if (test(name)) return true;
  for (size_t b = name.find('\\'); b != std::string_view::npos;
       b = name.find('\\', b + 1))
    if (test(name.substr(b + 1))) return true;
  return false;
}

bool IsDotGit(std::string_view name) {
  return HfsDot(name, "git") || NameOrAfterBackslash(name, NtfsDotGit);
}

bool IsDotGitmodules(std::string_view name) {
  return HfsDot(name, "gitmodules") ||
         NameOrAfterBackslash(name, [](std::string_view n) {
           return NtfsDot(n, "gitmodules", "gi7eba");
         });
}

bool IsDotGitattributes(std::string_view name) {
  return HfsDot(name, "gitattributes") ||
         NtfsDot(name, "gitattributes", "gi7d29");
}

bool IsDotGitignore(std::string_view name) {
  return HfsDot(name, "gitignore") || NtfsDot(name, "gitignore", "gi250a");
}

bool IsDotMailmap(std::string_view name) {
  return HfsDot(name, "mailmap") || NtfsDot(name, "mailmap", "maba30");
}

// ---- Tree objects --------------------------------------------------------

std::string Octal(uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%o", mode);
  return buf;
}

bool KnownMode(uint32_t mode) {
  switch (mode) {
    case kModeTree:
    case kModeBlob:
    case kModeExecutable:
    case kModeLink:
    case kModeGitlink:
    case 0100664:  // an old git's; fsck accepts it unless --strict
      return true;
    default:
      return false;
  }
}

std::string EntryPath(const std::string& where, std::string_view name) {
  std::string out = where;
  if (!out.empty() && out.back() != ':') out += '/';
  out += name;
  return out;
}

Error Refuse(std::string_view name, const std::string& why,
             const std::string& where) {
  return Error::Of(
      EPERM, "refused tree entry '" + PrintableName(name) + "' (" + why + ")",
      EntryPath(where, name));
}

// Git's order of tree entries: bytewise, a tree's name as if it ended in
// '/'. Negative, zero (the same name) or positive.
int CompareEntries(std::string_view a, uint32_t mode_a, std::string_view b,
                   uint32_t mode_b) {
  size_t n = std::min(a.size(), b.size());
  int c = n ? std::memcmp(a.data(), b.data(), n) : 0;
  if (c != 0) return c;
  if (a.size() == b.size()) return 0;
  auto next = [n](std::string_view s, uint32_t mode) -> unsigned char {
    if (s.size() > n) return static_cast<unsigned char>(s[n]);
    return (mode & 0170000) == kModeTree ? '/' : '\0';
  };
  return static_cast<int>(next(a, mode_a)) - static_cast<int>(next(b, mode_b));
}

}  // namespace

std::string PrintableName(std::string_view name) {
  std::string out;
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

std::string UnsafeTreeEntry(std::string_view name, uint32_t mode) {
  if (name.empty()) return "an empty name (fsck: emptyName)";
  if (name == ".") return "'.' (fsck: hasDot)";
  if (name == "..") return "'..' (fsck: hasDotdot)";
  if (name.find('/') != std::string_view::npos)
    return "a '/' in the name (fsck: fullPathname)";
  if (name.find('\0') != std::string_view::npos) return "a NUL in the name";
  if (!KnownMode(mode))
    return "file mode " + Octal(mode) + " (fsck: badFilemode)";
  const uint32_t type = mode & 0170000;
  const bool link = type == kModeLink;
  const bool file = type == 0100000;
  if (IsDotGit(name)) return "a spelling of .git (fsck: hasDotgit)";
  if (IsDotGitmodules(name)) {
    if (link) return ".gitmodules as a symlink (fsck: gitmodulesSymlink)";
    if (!file) return ".gitmodules that is not a file (fsck: gitmodulesBlob)";
  }
  if (IsDotGitattributes(name)) {
    if (link) return ".gitattributes as a symlink (fsck: gitattributesSymlink)";
    if (!file)
      return ".gitattributes that is not a file (fsck: gitattributesBlob)";
  }
  if (link && IsDotGitignore(name))
    return ".gitignore as a symlink (fsck: gitignoreSymlink)";
  if (link && IsDotMailmap(name))
    return ".mailmap as a symlink (fsck: mailmapSymlink)";
  return "";
}

Status CheckTreeEntry(std::string_view name, uint32_t mode,
                      const std::string& where) {
  std::string why = UnsafeTreeEntry(name, mode);
  if (why.empty()) return Ok();
  return Error::Of(
      EPERM, "refused tree entry '" + PrintableName(name) + "' (" + why + ")",
      where);
}

std::optional<SkippedPath> UnsafeTreePath(std::string_view path,
                                          uint32_t mode) {
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    bool last = slash == std::string_view::npos;
    size_t end = last ? path.size() : slash;
    std::string why = UnsafeTreeEntry(path.substr(start, end - start),
                                      last ? mode : kModeTree);
    if (!why.empty())
      return SkippedPath{std::string(path.substr(0, end)), std::move(why)};
    if (last) return std::nullopt;
    start = slash + 1;
  }
}

Status CheckRawTree(const char* data, size_t size, const std::string& where) {
  constexpr size_t kIdSize = 20;  // SHA-1, as libgit2 1.5 writes
  auto unparsable = [&](size_t at) {
    return Error::Of(
        EIO, "tree cannot be parsed (entry at byte " + std::to_string(at) + ")",
        where);
  };
  std::unordered_set<std::string_view> names;
  std::string_view prev;
  uint32_t prev_mode = 0;
  bool first = true;
  for (size_t pos = 0; pos < size;) {
    const size_t entry = pos;
    uint32_t mode = 0;
    size_t digits = 0;
    while (pos < size && data[pos] >= '0' && data[pos] <= '7' && digits < 7) {
      mode = mode * 8 + static_cast<uint32_t>(data[pos] - '0');
      ++pos;
      ++digits;
    }
    if (digits == 0 || pos >= size || data[pos] != ' ')
      return unparsable(entry);
    const void* nul = std::memchr(data + pos + 1, '\0', size - pos - 1);
    if (!nul) return unparsable(entry);
    std::string_view name(data + pos + 1,
                          static_cast<const char*>(nul) - (data + pos + 1));
    pos = static_cast<size_t>(static_cast<const char*>(nul) - data) + 1;
    if (size - pos < kIdSize) return unparsable(entry);
    bool null_id = true;
    for (size_t k = 0; k < kIdSize; ++k)
      null_id = null_id && data[pos + k] == 0;
    pos += kIdSize;
    if (data[entry] == '0')
      return Refuse(name, "zero-padded file mode (fsck: zeroPaddedFilemode)",
                    where);
    if (std::string why = UnsafeTreeEntry(name, mode); !why.empty())
      return Refuse(name, why, where);
    if (null_id)
      return Refuse(name, "the null object id (fsck: nullSha1)", where);
    if (!names.insert(name).second)
      return Refuse(name, "the name twice (fsck: duplicateEntries)", where);
    if (!first && CompareEntries(prev, prev_mode, name, mode) >= 0)
      return Refuse(name, "out of git's order (fsck: treeNotSorted)", where);
    prev = name;
    prev_mode = mode;
    first = false;
  }
  return Ok();
}

std::string BadBranchName(std::string_view name) {
  if (name.empty()) return "an empty branch name";
  if (name[0] == '-') return "a branch name may not start with '-'";
  if (name == "HEAD") return "HEAD is not a branch name";
  // check-ref-format's rules, for refs/heads/<name>.
  size_t start = 0;
  for (;;) {
    size_t slash = name.find('/', start);
    size_t end = slash == std::string_view::npos ? name.size() : slash;
    std::string_view comp = name.substr(start, end - start);
    if (comp.empty()) return "an empty path component (\"//\" or a final '/')";
    char last = '\0';
    for (char ch : comp) {
      auto c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c == 0x7f) return "a control character";
      if (AnyOf(ch, " ~^:?*[\\"))
        return std::string("the character '") + ch + "'";
      if (ch == '.' && last == '.') return "\"..\"";
      if (ch == '{' && last == '@') return "\"@{\"";
      last = ch;
    }
    if (comp[0] == '.') return "a path component that starts with '.'";
    if (comp.size() >= 5 && comp.substr(comp.size() - 5) == ".lock")
      return "a path component that ends with \".lock\"";
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (name.back() == '.') return "a name that ends with '.'";
  return "";
}

}  // namespace acqfs::gitbridge
