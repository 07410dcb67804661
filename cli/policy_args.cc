#include "cli/policy_args.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fs/policy.h"

namespace acqfs::cli {
namespace {

void AddUnique(std::vector<std::string>* to,
               const std::vector<std::string>& from) {
  for (const auto& s : from)
    if (std::find(to->begin(), to->end(), s) == to->end()) to->push_back(s);
}

Error BadFile(const std::string& file, const std::string& why) {
  return Error::Of(EINVAL, "policy file (" + why + ")", file);
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
  }
  return out;
}

}  // namespace

Result<PolicyRecord> ResolvePolicy(const PolicyArgs& args) {
  std::vector<std::string> hide, read_only;
  std::string quota;
  bool hide_secrets = args.hide_secrets;
  if (!args.policy_file.empty()) {
    const std::string& f = args.policy_file;
    std::ifstream in(f);
    if (!in) return Error::Errno("read policy file", f);
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
    if (j.is_discarded()) return BadFile(f, "not valid JSON");
    if (!j.is_object()) return BadFile(f, "expected a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      if (key == "hide") {
        auto l = StringList(*it, key, f);
        if (!l) return l.error();
        hide = *l;
      } else if (key == "read_only") {
        auto l = StringList(*it, key, f);
        if (!l) return l.error();
        read_only = *l;
      } else if (key == "quota") {
        if (it->is_string())
          quota = it->get<std::string>();
        else if (it->is_number_unsigned())
          quota = std::to_string(it->get<uint64_t>());
        else
          return BadFile(f, "\"quota\" must be a size such as \"500M\"");
      } else if (key == "hide_secrets") {
        if (!it->is_boolean())
          return BadFile(f, "\"hide_secrets\" must be true or false");
        hide_secrets = hide_secrets || it->get<bool>();
      } else {
        return BadFile(f, "unknown key \"" + key +
                              "\"; known: hide, read_only, quota, "
                              "hide_secrets");
      }
    }
  }
  PolicyRecord r;
  r.hide_secrets = hide_secrets;
  if (hide_secrets) AddUnique(&r.hide, Policy::SecretPatterns());
  AddUnique(&r.hide, hide);
  AddUnique(&r.hide, args.hide);
  AddUnique(&r.read_only, read_only);
  AddUnique(&r.read_only, args.read_only);
  if (!args.quota.empty()) quota = args.quota;
  if (!quota.empty()) {
    auto bytes = ParseSize(quota);
    if (!bytes) return bytes.error();
    r.quota_bytes = *bytes;
  }
  auto p = Policy::Make(r.hide, r.read_only, r.quota_bytes);
  if (!p) return p.error();
  return r;
}

}  // namespace acqfs::cli
