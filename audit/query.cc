#include "audit/query.h"

#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

namespace acqfs::audit {
namespace {

// The length of the valid UTF-8 sequence at s[i] (its code point in *cp),
// or 0 when the bytes there are not one (overlong forms, surrogates and
// code points past U+10FFFF are not).
size_t Utf8Sequence(std::string_view s, size_t i, uint32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len;
  uint32_t v;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, v = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, v = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, v = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

void AppendHex(unsigned char b, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\x");
  out->push_back(kHex[b >> 4]);
  out->push_back(kHex[b & 0xF]);
}

// Valid UTF-8: bad bytes replaced by U+FFFD (for JSON, which must be
// UTF-8).
std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    size_t n = Utf8Sequence(s, i, &cp);
    if (n == 0) {
      out.append("\xEF\xBF\xBD");
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// The strerror text of `err`, with either strerror_r (GNU or XSI).
[[maybe_unused]] const char* PickStrerror(int rc, const char* buf) {
  return rc == 0 ? buf : nullptr;
}
[[maybe_unused]] const char* PickStrerror(const char* text, const char*) {
  return text;
}
std::string StrError(int err) {
  char buf[256] = {};
  const char* text = PickStrerror(::strerror_r(err, buf, sizeof(buf)), buf);
  if (text == nullptr || *text == '\0') return "error " + std::to_string(err);
  return text;
}

// "2024-05-01 12:34:56.123456" in local time.
std::string FormatTime(int64_t ns) {
  int64_t sec = ns / 1'000'000'000;
  int64_t rem = ns % 1'000'000'000;
  if (rem < 0) {
    rem += 1'000'000'000;
    --sec;
  }
  const time_t t = static_cast<time_t>(sec);
  struct tm tm;
  char date[64];
  if (::localtime_r(&t, &tm) == nullptr ||
      ::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm) == 0)
    return "@" + std::to_string(ns);
  char usec[16];
  std::snprintf(usec, sizeof(usec), ".%06" PRId64, rem / 1000);
  return std::string(date) + usec;
}

std::string Plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string Octal(uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode));
  return buf;
}

std::string Id(int64_t id) { return id < 0 ? "-" : std::to_string(id); }

std::string Details(const Record& r) {
  std::vector<std::string> d;
  switch (r.op) {
    case Op::kWrite:
      if (r.ranges_known) {
        d.push_back(Plural(r.ranges.size(), "range", "ranges"));
        d.push_back(Plural(r.size, "byte", "bytes"));
      } else if (r.ranges.empty()) {
        d.push_back("data not seen");
      } else {
        d.push_back(Plural(r.ranges.size(), "range", "ranges"));
        d.push_back(Plural(r.size, "byte", "bytes") + " seen, more not seen");
      }
      break;
    case Op::kTruncate:
      d.push_back("to " + Plural(r.size, "byte", "bytes"));
      break;
    case Op::kCreate:
    case Op::kMkdir:
    case Op::kMknod:
    case Op::kChmod:
      if (r.mode != 0 || r.op == Op::kChmod)
        d.push_back("mode " + Octal(r.mode));
      break;
    case Op::kChown:
      d.push_back("owner " + Id(r.owner_uid) + ":" + Id(r.owner_gid));
      break;
    case Op::kSetXattr:
    case Op::kRemoveXattr:
      d.push_back("name " + EscapeForDisplay(r.name));
      break;
    case Op::kDropped:
    case Op::kRotated:
      d.push_back(Plural(r.count, "record", "records"));
      d.push_back("from " + FormatTime(r.from_ns));
      d.push_back("to " + FormatTime(r.to_ns));
      break;
    default:
      break;
  }
  std::string out;
  for (const std::string& s : d) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

// Does a glob match `path` or a directory above it?
bool GlobMatches(const PathGlob& g, const std::string& path, bool is_dir) {
  if (path.empty()) return false;
  std::vector<std::string> comps;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) comps.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  for (size_t n = 1; n <= comps.size(); ++n)
    if (g.MatchesComponents(comps, n, n < comps.size() || is_dir)) return true;
  return false;
}

std::vector<std::pair<std::string, uint64_t>> ByCount(
    const std::map<std::string, uint64_t>& m) {
  std::vector<std::pair<std::string, uint64_t>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second > b.second;
  });
  return v;
}

std::string CountList(const std::map<std::string, uint64_t>& m, size_t limit) {
  if (m.empty()) return "none";
  std::vector<std::pair<std::string, uint64_t>> v = ByCount(m);
  std::string out;
  for (size_t i = 0; i < v.size() && i < limit; ++i) {
    if (i > 0) out += ", ";
    out += EscapeForDisplay(v[i].first) + " " + std::to_string(v[i].second);
  }
  if (v.size() > limit)
    out += ", and " + std::to_string(v.size() - limit) + " more";
  return out;
}

}  // namespace

bool IsMetaOp(Op op) {
  return op == Op::kMount || op == Op::kDropped || op == Op::kRotated;
}

bool Matches(const Filter& f, const Record& r) {
  if (f.layers && f.layers->count(r.layer) == 0) return false;
  if (f.refused_only && r.result == 0) return false;
  if (f.include_meta && IsMetaOp(r.op)) return true;
  if (!f.ops.empty() && f.ops.count(r.op) == 0) return false;
  if (!f.pids.empty() && f.pids.count(r.pid) == 0) return false;
  if (!f.paths.empty()) {
    const bool is_dir =
        r.op == Op::kMkdir || r.op == Op::kRmdir || r.op == Op::kList;
    bool any = false;
    for (const PathGlob& g : f.paths) {
      // path2 is a name in the mount for kLink and kRename, a symlink's
      // target (any text) for kSymlink: matched as a path either way.
      if (GlobMatches(g, r.path, is_dir) || GlobMatches(g, r.path2, is_dir)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  return true;
}

void AddToSummary(const Record& r, Summary* s) {
  if (IsMetaOp(r.op)) {
    if (r.op != Op::kMount) s->dropped += r.count;
    return;
  }
  ++s->records;
  if (r.result != 0) ++s->refused;
  ++s->by_op[std::string(OpName(r.op))];
  std::string who;
  if (r.pid == 0) {
    who = "kernel";
  } else {
    const std::string pid = "[" + std::to_string(r.pid) + "]";
    who = !r.comm.empty()  ? r.comm + pid
          : !r.exe.empty() ? r.exe + pid
                           : "?" + pid;
  }
  ++s->by_process[who];
}

std::string EscapeForDisplay(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    switch (b) {
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      default:
        break;
    }
    if (b < 0x20 || b == 0x7F) {
      AppendHex(b, &out);
      ++i;
      continue;
    }
    uint32_t cp;
    const size_t n = Utf8Sequence(bytes, i, &cp);
    // Bad bytes, and the C1 controls and line and paragraph separators,
    // which a terminal or a viewer may act on, are shown as bytes.
    if (n == 0) {
      AppendHex(b, &out);
      ++i;
    } else if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029) {
      for (size_t k = 0; k < n; ++k)
        AppendHex(static_cast<unsigned char>(bytes[i + k]), &out);
      i += n;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string ErrnoName(int err) {
#if defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* name = ::strerrorname_np(err)) return name;
#endif
  return "E" + std::to_string(err);
}

std::string FormatRecord(const Record& r) {
  std::string line = FormatTime(r.time_ns);
  const bool meta = IsMetaOp(r.op);
  if (r.pid == 0) {
    if (!meta) line += " kernel";
  } else {
    line += " " + std::to_string(r.pid) + "/";
    if (!r.comm.empty()) {
      line += EscapeForDisplay(r.comm);
    } else if (!r.exe.empty()) {
      const size_t slash = r.exe.rfind('/');
      line += EscapeForDisplay(
          slash == std::string::npos ? r.exe : r.exe.substr(slash + 1));
    } else {
      line += "?";
    }
  }
  line += " ";
  line += OpName(r.op);
  if (!meta || !r.path.empty()) {
    line += " ";
    line += r.path.empty() ? std::string(".") : EscapeForDisplay(r.path);
  }
  if (!r.path2.empty()) line += " -> " + EscapeForDisplay(r.path2);
  if (!meta || r.result != 0) {
    line += " ";
    line += r.result == 0
                ? std::string("ok")
                : ErrnoName(r.result) + " (" + StrError(r.result) + ")";
  }
  if (!r.boundary.empty()) line += " boundary=" + EscapeForDisplay(r.boundary);
  const std::string details = Details(r);
  if (!details.empty()) line += " (" + details + ")";
  if (!r.layer.empty()) line += " layer=" + EscapeForDisplay(r.layer);
  return line;
}

std::string FormatSummary(const Summary& s) {
  std::string out = Plural(s.records, "record", "records") + ", " +
                    std::to_string(s.refused) + " refused, " +
                    std::to_string(s.dropped) + " dropped or rotated away\n";
  out += "by op: " + CountList(s.by_op, s.by_op.size()) + "\n";
  out += "by process: " + CountList(s.by_process, 20) + "\n";
  return out;
}

nlohmann::json SummaryJson(const Summary& s) {
  nlohmann::json by_op = nlohmann::json::object();
  for (const auto& [op, n] : s.by_op) by_op[ValidUtf8(op)] = n;
  nlohmann::json by_process = nlohmann::json::object();
  for (const auto& [who, n] : s.by_process) {
    // Two names that differ only in bad bytes may meet: add them up.
    nlohmann::json& slot = by_process[ValidUtf8(who)];
    slot = (slot.is_null() ? 0 : slot.get<uint64_t>()) + n;
  }
  return nlohmann::json{{"records", s.records},
                        {"refused", s.refused},
                        {"dropped", s.dropped},
                        {"by_op", std::move(by_op)},
                        {"by_process", std::move(by_process)}};
}

}  // namespace acqfs::audit
