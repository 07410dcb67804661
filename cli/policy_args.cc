#include "cli/policy_args.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/handle.h"
#include "common/sys.h"
#include "fs/policy.h"

namespace acqfs::cli {
namespace {

// A policy file is a few lines of JSON; this much is a mistake.
constexpr size_t kMaxPolicyFile = 1 << 20;

void AddUnique(std::vector<std::string>* to,
               const std::vector<std::string>& from) {
  for (const auto& s : from)
    if (std::find(to->begin(), to->end(), s) == to->end()) to->push_back(s);
}

// `value` as the shell would need it typed, so that an empty or blank value
// shows: '' or ' 5M'.
std::string Quoted(const std::string& value) {
  std::string out = "'";
  for (char c : value)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Every refusal names the option and the value it was given, and says why:
// "acqfs: mount: --quota '': Invalid argument (size: expected a number ...)".
Error BadOption(const std::string& option, const std::string& value,
                const std::string& why) {
  return Error::Of(EINVAL, why, option + " " + Quoted(value));
}

Error BadFile(const std::string& file, const std::string& why) {
  return Error::Of(EINVAL, "policy file: " + why, "--policy " + Quoted(file));
}

// The same check for a value wherever it comes from: a pattern or a size
// from the command line or from the policy file.
Status CheckPattern(const std::string& pattern, const std::string& option,
                    const std::string& file) {
  auto g = PathGlob::Parse(pattern);
  if (g) return Ok();
  if (file.empty()) return BadOption(option, pattern, g.error().op);
  return BadFile(
      file, "\"" + option + "\": " + Quoted(pattern) + ": " + g.error().op);
}

Result<uint64_t> CheckSize(const std::string& size, const std::string& file) {
  auto bytes = ParseSize(size);
  if (bytes) return bytes;
  if (file.empty()) return BadOption("--quota", size, bytes.error().op);
  return BadFile(file, "\"quota\": " + Quoted(size) + ": " + bytes.error().op);
}

// Reads a string list; `key` names it in errors.
Result<std::vector<std::string>> StringList(const nlohmann::json& v,
                                            const std::string& key,
                                            const std::string& file) {
  if (!v.is_array()) return BadFile(file, "\"" + key + "\" must be a list");
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string())
      return BadFile(file, "\"" + key + "\" must list strings");
    out.push_back(e.get<std::string>());
    ACQFS_TRY(CheckPattern(out.back(), key, file));
  }
  return out;
}

// The file's text: a regular file or a pipe (`--policy <(...)`), at most
// kMaxPolicyFile bytes. Errors name the option and the file.
Result<std::string> ReadPolicyFile(const std::string& f) {
  if (f.empty()) return BadFile(f, "no file name given");
  int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return Error::Errno("policy file: open", "--policy " + Quoted(f));
  UniqueFd owned(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return Error::Errno("policy file: fstat", "--policy " + Quoted(f));
  if (S_ISDIR(st.st_mode))
    return Error::Of(EISDIR, "policy file: a directory",
                     "--policy " + Quoted(f));
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
    return BadFile(f, "not a regular file");
  auto text = sys::ReadAll(fd, kMaxPolicyFile, "--policy " + Quoted(f));
  if (!text && text.err() == EFBIG)
    return Error::Of(EFBIG, "policy file: larger than 1 MiB",
                     "--policy " + Quoted(f));
  if (!text)
    return Error::Of(text.err(), "policy file: read", "--policy " + Quoted(f));
  return text;
}

constexpr uint64_t kLeastAuditMax = uint64_t{1} << 20;

struct FilePolicy {
  std::vector<std::string> hide, read_only, audit_reads;
  std::optional<std::string> quota, audit_max;
  bool hide_secrets = false;
};

Result<FilePolicy> ParsePolicyFile(const std::string& f) {
  auto text = ReadPolicyFile(f);
  if (!text) return text.error();
  if (text->find_first_not_of(" \t\r\n") == std::string::npos)
    return BadFile(f, "empty; write {} for a policy with no rules");
  // A key given twice would have its first value dropped without a word.
  std::set<std::string> top_keys;
  std::string twice;
  nlohmann::json::parser_callback_t cb =
      [&](int depth, nlohmann::json::parse_event_t event,
          nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
            parsed.is_string() &&
            !top_keys.insert(parsed.get<std::string>()).second && twice.empty())
          twice = parsed.get<std::string>();
        return true;
      };
  nlohmann::json j = nlohmann::json::parse(*text, cb, false);
  if (j.is_discarded()) return BadFile(f, "not valid JSON");
  if (!j.is_object()) return BadFile(f, "expected a JSON object");
  if (!twice.empty()) return BadFile(f, "the key \"" + twice + "\" twice");
  FilePolicy p;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "hide") {
      auto l = StringList(*it, key, f);
      if (!l) return l.error();
      p.hide = *l;
    } else if (key == "read_only") {
      auto l = StringList(*it, key, f);
      if (!l) return l.error();
      p.read_only = *l;
    } else if (key == "quota") {
      if (it->is_string())
        p.quota = it->get<std::string>();
      else if (it->is_number_unsigned())
        p.quota = std::to_string(it->get<uint64_t>());
      else
        return BadFile(f, "\"quota\" must be a size such as \"500M\"");
      auto bytes = CheckSize(*p.quota, f);
      if (!bytes) return bytes.error();
    } else if (key == "audit_reads") {
      auto l = StringList(*it, key, f);
      if (!l) return l.error();
      p.audit_reads = *l;
    } else if (key == "audit_max") {
      if (it->is_string())
        p.audit_max = it->get<std::string>();
      else if (it->is_number_unsigned())
        p.audit_max = std::to_string(it->get<uint64_t>());
      else
        return BadFile(f, "\"audit_max\" must be a size such as \"64M\"");
      auto bytes = CheckSize(*p.audit_max, f);
      if (!bytes) return bytes.error();
    } else if (key == "hide_secrets") {
      if (!it->is_boolean())
        return BadFile(f, "\"hide_secrets\" must be true or false");
      p.hide_secrets = it->get<bool>();
    } else {
      return BadFile(f, "unknown key \"" + key +
                            "\"; known: hide, read_only, quota, "
                            "hide_secrets, audit_reads, audit_max");
    }
  }
  return p;
}

}  // namespace

Result<PolicyRecord> ResolvePolicy(const PolicyArgs& args) {
  // Every value given is checked, whichever one wins.
  for (const auto& g : args.hide) ACQFS_TRY(CheckPattern(g, "--hide", ""));
  for (const auto& g : args.read_only)
    ACQFS_TRY(CheckPattern(g, "--read-only", ""));
  for (const auto& g : args.audit_reads)
    ACQFS_TRY(CheckPattern(g, "--audit-reads", ""));
  std::optional<uint64_t> flag_audit_max;
  if (args.audit_max) {
    auto bytes = CheckSize(*args.audit_max, "");
    if (!bytes) return bytes.error();
    flag_audit_max = *bytes;
  }
  std::optional<uint64_t> flag_quota;
  if (args.quota) {
    auto bytes = CheckSize(*args.quota, "");
    if (!bytes) return bytes.error();
    flag_quota = *bytes;
  }
  FilePolicy file;
  if (args.policy_file) {
    auto p = ParsePolicyFile(*args.policy_file);
    if (!p) return p.error();
    file = std::move(*p);
  }
  PolicyRecord r;
  r.hide_secrets = args.hide_secrets || file.hide_secrets;
  if (r.hide_secrets) AddUnique(&r.hide, Policy::SecretPatterns());
  AddUnique(&r.hide, file.hide);
  AddUnique(&r.hide, args.hide);
  AddUnique(&r.read_only, file.read_only);
  AddUnique(&r.read_only, args.read_only);
  AddUnique(&r.audit_reads, file.audit_reads);
  AddUnique(&r.audit_reads, args.audit_reads);
  if (flag_audit_max) {
    r.audit_max = *flag_audit_max;
  } else if (file.audit_max) {
    auto bytes = ParseSize(*file.audit_max);
    if (!bytes) return bytes.error();
    r.audit_max = *bytes;
  }
  if (flag_quota) {
    r.quota_bytes = *flag_quota;
  } else if (file.quota) {
    auto bytes = ParseSize(*file.quota);
    if (!bytes) return bytes.error();
    r.quota_bytes = *bytes;
  }
  if (r.audit_max != 0 && r.audit_max < kLeastAuditMax)
    return Error::Of(EINVAL,
                     "audit log bound (at least 1M: two halves of "
                     "512 KiB, between which it rotates)",
                     flag_audit_max ? "--audit-max " + *args.audit_max
                                    : "--policy " + *args.policy_file);
  auto p = Policy::Make(r.hide, r.read_only, r.quota_bytes);
  if (!p) return p.error();
  return r;
}

}  // namespace acqfs::cli
