// acqfs apply NAME [PATH...] [--check] [--json]: the sandbox's work (its
// commits and its uncommitted changes since the base) as uncommitted edits
// in the host's working tree, each path a 3-way merge against the base
// (gitbridge/apply.h). All or nothing: a conflict writes nothing.
//
// Text output: a line per path, "M path" (written), "M path (merged with
// the host's changes)", "A path", "D path", "= path (the host has it
// already)"; conflicts as "C path: why". --json prints
//   {"sandbox": NAME, "written": bool, "check": bool,
//    "paths": [{"path", "action": "write"|"remove"|"nothing",
//               "merged": bool, "conflict": why or null}]}
//
// Exit status: 0 applied (or, with --check, it would apply); 1 a conflict
// (nothing written), or a refusal (the host mid-merge, mid-rebase or its
// index locked; a PATH outside the checkout; a conflict marker in a host
// file it would touch); 2 a failure.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/sandbox.h"
#include "gitbridge/apply.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

void PrintJson(const std::string& name, bool check,
               const gitbridge::ApplyResult& r) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : r.entries)
    list.push_back(
        {{"path", e.path},
         {"action", e.nothing  ? "nothing"
                    : e.remove ? "remove"
                               : "write"},
         {"merged", e.merged},
         {"conflict",
          e.conflict.empty() ? nlohmann::json() : nlohmann::json(e.conflict)}});
  nlohmann::json j = {{"sandbox", name},
                      {"written", r.written},
                      {"check", check},
                      {"paths", list}};
  std::printf(
      "%s\n",
      j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void PrintText(const std::string& name, bool check,
               const gitbridge::ApplyResult& r) {
  if (r.conflicts()) {
    std::printf("acqfs: apply %s: %s, nothing written:\n", name.c_str(),
                check ? "would conflict" : "conflicts");
    for (const auto& e : r.entries)
      if (!e.conflict.empty())
        std::printf("  C %s: %s\n", QuotePath(e.path).c_str(),
                    e.conflict.c_str());
    return;
  }
  std::printf("acqfs: apply %s: %s%zu paths\n", name.c_str(),
              check ? "would apply cleanly, " : "", r.entries.size());
  for (const auto& e : r.entries) {
    const std::string p = QuotePath(e.path);
    if (e.nothing)
      std::printf("  = %s (the host has it already)\n", p.c_str());
    else if (e.remove)
      std::printf("  D %s\n", p.c_str());
    else if (e.merged)
      std::printf("  M %s (merged with the host's changes)\n", p.c_str());
    else
      std::printf("  W %s\n", p.c_str());
  }
}

}  // namespace

int RunApply(const ApplyArgs& a) {
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  auto found = Sandbox::FindByName(state, a.name);
  if (!found) return FailFind("apply", a.name, found.error());
  SandboxMeta& meta = found->meta();
  if (Status st = found->StackOk(); !st)
    return Fail(kExitBadInput, "apply", st.error());
  if (!found->IsGit())
    return Fail(kExitBadInput, "apply", meta.lower,
                "not a git checkout: nothing to apply against");
  gitbridge::ApplyOptions o;
  o.paths = a.paths;
  o.check = a.check;
  // A recorded policy that cannot be built refuses, naming meta.json.
  auto config = found->ExportConfig();
  if (!config) return Fail(kExitBadInput, "apply", config.error());
  auto r = gitbridge::Apply(*config, o);
  if (!r) {
    const int code =
        r.err() == EBUSY || r.err() == EINVAL ? kExitBadInput : kExitFailed;
    return Fail(code, "apply " + a.name, r.error());
  }
  if (a.json)
    PrintJson(a.name, a.check, *r);
  else
    PrintText(a.name, a.check, *r);
  return r->conflicts() ? kExitBadInput : 0;
}

}  // namespace acqfs::cli
