// acqfs export: publishes a sandbox's branches and working tree in its bridge
// repository and says how to fetch them.
#include <fcntl.h>

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "audit/log_file.h"
#include "audit/query.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/sandbox.h"
#include "common/sys.h"
#include "gitbridge/export.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

std::string Short(const std::string& id) { return id.substr(0, 12); }

void PrintText(const std::string& name, const gitbridge::ExportResult& r) {
  if (r.nothing_new())
    std::printf("acqfs: export %s: nothing new to publish\n", name.c_str());
  for (const auto& u : r.updates) {
    if (u.new_id.empty())
      std::printf("  deleted   %s (was %s)\n", u.ref.c_str(),
                  Short(u.old_id).c_str());
    else if (u.old_id.empty())
      std::printf("  created   %s at %s\n", u.ref.c_str(),
                  Short(u.new_id).c_str());
    else
      std::printf("  updated   %s %s..%s\n", u.ref.c_str(),
                  Short(u.old_id).c_str(), Short(u.new_id).c_str());
  }
  if (!r.worktree_commit.empty())
    std::printf("  working tree: %s (parent %s, %llu changed paths)\n",
                Short(r.worktree_commit).c_str(),
                Short(r.worktree_parent).c_str(),
                static_cast<unsigned long long>(r.changed_paths));
  if (!r.base_commit.empty())
    std::printf("  base: %s (the host's HEAD when the sandbox was made)\n",
                Short(r.base_commit).c_str());
  for (const auto& h : r.host_changed)
    std::printf("  the host changed it too: %s (%s)\n",
                QuotePath(h.path).c_str(),
                gitbridge::DescribeHostChange(h).c_str());
  if (r.host_edits_separated)
    std::printf(
        "  left out: the host's edits of %llu file(s) the sandbox wrote "
        "over (the working tree holds only the sandbox's change)\n",
        static_cast<unsigned long long>(r.host_edits_separated));
  for (const auto& k : r.host_edits_kept)
    std::printf("  holds a host edit: %s (%s)\n", QuotePath(k.path).c_str(),
                k.why.c_str());
  if (!r.host_changed_error.empty())
    std::fprintf(stderr,
                 "acqfs: export: what the host changed since the base: %s\n",
                 r.host_changed_error.c_str());
  for (const auto& why : r.refused)
    std::fprintf(stderr, "acqfs: export: refused: %s\n", why.c_str());
  for (const auto& k : r.skipped)
    std::fprintf(stderr, "acqfs: export: left out of the %s: %s: %s\n",
                 k.host ? "host's working state" : "working tree",
                 QuotePath(k.path).c_str(), k.reason.c_str());
  std::printf("fetch with: %s\n", r.fetch_command.c_str());
}

nlohmann::json HostChangedJson(const gitbridge::ExportResult& r) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& h : r.host_changed) {
    nlohmann::json j = {
        {"path", h.path}, {"change", h.how}, {"host_path", h.host_path}};
    if (!h.renamed_to.empty()) j["renamed_to"] = h.renamed_to;
    list.push_back(j);
  }
  return list;
}

// The audit log's summary of what happened since `since_s` (the previous
// export, unix seconds; 0: ever), for `export --json` (docs/audit.md). A
// log that cannot be read gives its error instead.
nlohmann::json AuditSince(const Sandbox& s, int64_t since_s) {
  auto dir = sys::OpenBelow(s.state_dir(), s.paths().dir,
                            O_DIRECTORY | O_RDONLY, "open the audit log's");
  if (!dir) return {{"error", dir.error().Message()}};
  auto log = audit::ReadLog(dir->get(), s.paths().dir);
  if (!log) return {{"error", log.error().Message()}};
  audit::Summary sum;
  const int64_t since_ns = since_s * 1'000'000'000;
  for (const auto& r : log->records)
    if (r.time_ns >= since_ns) audit::AddToSummary(r, &sum);
  nlohmann::json j = audit::SummaryJson(sum);
  j["since"] = since_s;
  j["damaged_lines"] = log->damaged_lines;
  return j;
}

void PrintJson(const std::string& name, const gitbridge::ExportResult& r,
               const nlohmann::json& audit_summary) {
  nlohmann::json updates = nlohmann::json::array();
  for (const auto& u : r.updates)
    updates.push_back({{"ref", u.ref}, {"old", u.old_id}, {"new", u.new_id}});
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& k : r.skipped)
    skipped.push_back({{"path", k.path},
                       {"reason", k.reason},
                       {"from", k.host ? "host" : "sandbox"}});
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& k : r.host_edits_kept)
    kept.push_back({{"path", k.path}, {"why", k.why}});
  nlohmann::json j = {{"sandbox", name},
                      {"updates", updates},
                      {"refused", r.refused},
                      {"skipped", skipped},
                      {"worktree_commit", r.worktree_commit},
                      {"worktree_parent", r.worktree_parent},
                      {"base_commit", r.base_commit},
                      {"host_changed", HostChangedJson(r)},
                      {"host_edits_separated", r.host_edits_separated},
                      {"host_edits_kept", kept},
                      {"changed_paths", r.changed_paths},
                      {"nothing_new", r.nothing_new()},
                      {"fetch_command", r.fetch_command},
                      {"audit", audit_summary}};
  // Names that are not UTF-8 (a branch or path may hold any bytes) are
  // printed with U+FFFD, as `acqfs status --json` prints them.
  std::printf(
      "%s\n",
      j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace

int ExportAndReport(const std::string& what, const std::string& name,
                    const std::string& state_dir, bool json) {
  std::string state = Absolute(ResolveStateDir(state_dir));
  auto found = Sandbox::Find(state, name);
  if (!found) return FailFind(what, name, found.error());
  const SandboxPaths& paths = found->paths();
  SandboxMeta& meta = found->meta();
  if (Status st = found->StackOk(); !st)
    return Fail(kExitBadInput, what, st.error());
  // A policy that no longer parses is never dropped silently: no export.
  auto built = found->ExportConfig();
  if (!built) return Fail(kExitBadInput, what, built.error());
  gitbridge::ExportConfig config = std::move(*built);
  Progress progress(what + " " + paths.name);
  config.progress = [&](const std::string& phase, uint64_t n) {
    progress.Update(phase, n);
  };
  auto r = gitbridge::Export(config);
  progress.Finish();
  if (!r) {
    int code = r.err() == ENOENT && r.error().path == meta.lower ? kExitBadInput
                                                                 : kExitFailed;
    return Fail(code, what, r.error());
  }
  // What the log says happened since the previous export, read before
  // its time moves.
  nlohmann::json audit_summary;
  if (json) audit_summary = AuditSince(*found, meta.last_export);
  // The export happened; a failure to note its time only loses that note.
  meta.last_export = static_cast<int64_t>(std::time(nullptr));
  if (Status s = found->Save(); !s)
    Fail(0, what + ": record the export time", s.error());
  if (json)
    PrintJson(paths.name, *r, audit_summary);
  else
    PrintText(paths.name, *r);
  // Something the sandbox holds was not published: say so by the status.
  bool lost = !r->refused.empty();
  for (const auto& k : r->skipped) lost = lost || !k.host;
  return lost ? kExitRefused : 0;
}

int RunExport(const ExportArgs& a) {
  return ExportAndReport("export", a.name, a.state_dir, a.json);
}

}  // namespace acqfs::cli
