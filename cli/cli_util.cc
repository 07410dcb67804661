#include "cli/cli_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

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

}  // namespace acqfs::cli
