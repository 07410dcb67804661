#include "audit/record.h"

#include <array>
#include <cstdint>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>

namespace acqfs::audit {
namespace {

constexpr std::array<std::string_view, 21> kOpNames = {
    "create",   "mkdir",       "mknod",    "symlink", "link",  "rename",
    "unlink",   "rmdir",       "truncate", "chmod",   "chown", "utimes",
    "setxattr", "removexattr", "write",    "lookup",  "list",  "open_read",
    "mount",    "dropped",     "rotated"};
static_assert(kOpNames.size() == static_cast<size_t>(Op::kRotated) + 1,
              "a name for every Op");

using Json = nlohmann::json;
// Encoding keeps the fields in the order written (seq, time_ns, op first).
using OrderedJson = nlohmann::ordered_json;

// The length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 when
// the byte there does not start one (overlong forms, surrogates and code
// points past U+10FFFF are not well formed).
size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong form
    if (c == 0xED) hi = 0x9F;  // no surrogate
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // no overlong form
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return len;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// `s` with each byte that is not part of a well-formed sequence replaced by
// U+FFFD.
std::string LossyUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string ToHex(std::string_view s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xF];
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::optional<std::string> FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexDigit(hex[i]), lo = HexDigit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi << 4 | lo);
  }
  return out;
}

// A path-like field: written as is when it is valid UTF-8, else as the
// lossy string plus "<key>_hex" with its exact bytes.
void PutBytes(OrderedJson& j, const char* key, const std::string& v) {
  if (v.empty()) return;
  if (IsValidUtf8(v)) {
    j[key] = v;
    return;
  }
  j[key] = LossyUtf8(v);
  j[std::string(key) + "_hex"] = ToHex(v);
}

template <class T>
void PutIfNot(OrderedJson& j, const char* key, T v, T def) {
  if (v != def) j[key] = v;
}

}  // namespace

std::string_view OpName(Op op) { return kOpNames[static_cast<size_t>(op)]; }

std::optional<Op> OpFromName(std::string_view name) {
  for (size_t i = 0; i < kOpNames.size(); ++i)
    if (kOpNames[i] == name) return static_cast<Op>(i);
  return std::nullopt;
}

std::string EncodeRecord(const Record& r) {
  OrderedJson j = OrderedJson::object();
  j["seq"] = r.seq;
  j["time_ns"] = r.time_ns;
  j["op"] = std::string(OpName(r.op));
  PutIfNot(j, "pid", r.pid, 0);
  PutIfNot(j, "tid", r.tid, 0);
  PutIfNot(j, "uid", r.uid, 0u);
  PutIfNot(j, "gid", r.gid, 0u);
  PutBytes(j, "comm", r.comm);
  PutBytes(j, "exe", r.exe);
  PutBytes(j, "path", r.path);
  PutBytes(j, "path2", r.path2);
  PutBytes(j, "name", r.name);
  PutIfNot(j, "result", r.result, 0);
  // Our own constants: dump() below replaces any bad byte.
  if (!r.boundary.empty()) j["boundary"] = r.boundary;
  PutIfNot(j, "size", r.size, uint64_t{0});
  PutIfNot(j, "mode", r.mode, 0u);
  PutIfNot(j, "owner_uid", r.owner_uid, int64_t{-1});
  PutIfNot(j, "owner_gid", r.owner_gid, int64_t{-1});
  if (!r.ranges.empty()) {
    OrderedJson ranges = OrderedJson::array();
    for (const auto& [first, second] : r.ranges)
      ranges.push_back(OrderedJson::array({first, second}));
    j["ranges"] = std::move(ranges);
  }
  if (!r.ranges_known) j["ranges_known"] = false;
  if (!r.layer.empty()) j["layer"] = r.layer;
  PutIfNot(j, "count", r.count, uint64_t{0});
  PutIfNot(j, "from_ns", r.from_ns, int64_t{0});
  PutIfNot(j, "to_ns", r.to_ns, int64_t{0});
  std::string line =
      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  return line;
}

namespace {

Error Invalid(const std::string& what) {
  return Error::Of(EINVAL, "decode audit record (" + what + ")", "");
}

// An integer field of type T: absent leaves *out alone; a value that is not
// an integer or does not fit T is an error.
template <class T>
std::optional<Error> GetInt(const Json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      return Invalid(std::string(key) + " out of range");
    *out = static_cast<T>(v);
    return std::nullopt;
  }
  if (it->is_number_integer()) {
    const int64_t v = it->get<int64_t>();
    if (!std::numeric_limits<T>::is_signed ||
        v < static_cast<int64_t>(std::numeric_limits<T>::min()))
      return Invalid(std::string(key) + " out of range");
    *out = static_cast<T>(v);
    return std::nullopt;
  }
  return Invalid(std::string(key) + " is not an integer");
}

std::optional<Error> GetString(const Json& j, const std::string& key,
                               std::string* out) {
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (!it->is_string()) return Invalid(key + " is not a string");
  *out = it->get<std::string>();
  return std::nullopt;
}

// A path-like field: "<key>_hex" (the exact bytes) when there, else "<key>".
std::optional<Error> GetBytes(const Json& j, const std::string& key,
                              std::string* out) {
  std::string hex;
  if (auto e = GetString(j, key + "_hex", &hex)) return e;
  if (j.contains(key + "_hex")) {
    auto bytes = FromHex(hex);
    if (!bytes) return Invalid(key + "_hex is not lowercase hex");
    *out = std::move(*bytes);
    // "<key>" must still be a string if present.
    std::string ignored;
    return GetString(j, key, &ignored);
  }
  return GetString(j, key, out);
}

std::optional<Error> GetRanges(const Json& j, Record* r) {
  auto it = j.find("ranges");
  if (it == j.end()) return std::nullopt;
  if (!it->is_array()) return Invalid("ranges is not an array");
  for (const Json& pair : *it) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_unsigned() ||
        !pair[1].is_number_unsigned())
      return Invalid("ranges holds something not a [first, second] pair");
    r->ranges.emplace_back(pair[0].get<uint64_t>(), pair[1].get<uint64_t>());
  }
  return std::nullopt;
}

std::optional<Error> DecodeFields(const Json& j, Record* r) {
  for (const char* key : {"seq", "time_ns", "op"})
    if (!j.contains(key)) return Invalid(std::string("no ") + key);
  const Json& op = j["op"];
  if (!op.is_string()) return Invalid("op is not a string");
  auto known = OpFromName(op.get_ref<const std::string&>());
  if (!known) return Invalid("unknown op \"" + op.get<std::string>() + "\"");
  r->op = *known;
  std::optional<Error> e;
  if ((e = GetInt(j, "seq", &r->seq)) ||
      (e = GetInt(j, "time_ns", &r->time_ns)) ||
      (e = GetInt(j, "pid", &r->pid)) || (e = GetInt(j, "tid", &r->tid)) ||
      (e = GetInt(j, "uid", &r->uid)) || (e = GetInt(j, "gid", &r->gid)) ||
      (e = GetBytes(j, "comm", &r->comm)) ||
      (e = GetBytes(j, "exe", &r->exe)) ||
      (e = GetBytes(j, "path", &r->path)) ||
      (e = GetBytes(j, "path2", &r->path2)) ||
      (e = GetBytes(j, "name", &r->name)) ||
      (e = GetInt(j, "result", &r->result)) ||
      (e = GetString(j, "boundary", &r->boundary)) ||
      (e = GetInt(j, "size", &r->size)) || (e = GetInt(j, "mode", &r->mode)) ||
      (e = GetInt(j, "owner_uid", &r->owner_uid)) ||
      (e = GetInt(j, "owner_gid", &r->owner_gid)) || (e = GetRanges(j, r)) ||
      (e = GetString(j, "layer", &r->layer)) ||
      (e = GetInt(j, "count", &r->count)) ||
      (e = GetInt(j, "from_ns", &r->from_ns)) ||
      (e = GetInt(j, "to_ns", &r->to_ns)))
    return e;
  if (auto it = j.find("ranges_known"); it != j.end()) {
    if (!it->is_boolean()) return Invalid("ranges_known is not a boolean");
    r->ranges_known = it->get<bool>();
  }
  return std::nullopt;
}

}  // namespace

Result<Record> DecodeRecord(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.find('\n') != std::string_view::npos)
    return Invalid("more than one line");
  try {
    // Without exceptions: a line that is not JSON (invalid UTF-8 included)
    // parses to a discarded value.
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Invalid("not JSON");
    if (!j.is_object()) return Invalid("not a JSON object");
    Record r;
    if (auto e = DecodeFields(j, &r)) return *e;
    return r;
  } catch (const std::exception& ex) {
    // Not expected (every access above is checked), but never thrown on.
    return Invalid(ex.what());
  }
}

}  // namespace acqfs::audit
