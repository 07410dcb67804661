// acqfs status: what a sandbox changed relative to its lower directory, read
// from its layers alone (so it works mounted or not, over a git checkout or
// any directory). See fs/change_scan.h for what counts as a change.
//
// Text output: one line per change, "X path", X being A (added), M
// (modified), D (deleted), T (type changed) or m (metadata only: mode,
// owner, xattrs); a directory (the merged object's type, or the lower's for
// a deletion) gets a trailing '/'. A path holding a control character, DEL,
// '"', '\' or bytes that are not UTF-8 is printed C-quoted as git does
// ("a\tb", "\303(" with octal escapes), the whole display form in quotes;
// valid UTF-8 and spaces are printed as they are (like git with
// core.quotePath=false). With -z each entry is "X path\0" and never quoted.
//
// --json prints one object:
//   {"sandbox": NAME, "lower": DIR, "changes": [{"path", "kind", "code",
//    "dir", "old_mode", "new_mode", "old_size", "new_size", "metadata"}],
//    "counts": {"added": n, "modified": n, "deleted": n, "type-changed": n,
//    "metadata": n}}
// where modes are 6-digit octal strings ("100644") or null for a missing
// side and "metadata" lists "mode", "owner", "xattrs". JSON strings are
// UTF-8: a path that is not gets U+FFFD for its bad bytes in "path" and its
// exact C-quoted form in "path_quoted".
//
// Exit status: 0 (with or without changes), 1 for an unknown sandbox, 2 when
// the layers cannot be read.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/sandbox.h"
#include "fs/change_scan.h"
#include "fs/layer.h"
#include "gitbridge/host_changes.h"
#include "gitbridge/publish_rule.h"
#include "state/state.h"

namespace acqfs::cli {

namespace {

using Json = nlohmann::ordered_json;

bool IsDirChange(const PathChange& c) {
  return S_ISDIR(c.new_mode != 0 ? c.new_mode : c.old_mode);
}

Json ModeJson(mode_t mode) {
  if (mode == 0) return nullptr;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%06o", static_cast<unsigned>(mode));
  return buf;
}

// The host's changes since the base, by the sandbox's path.
using HostChanges = std::map<std::string, std::vector<gitbridge::HostChange>>;

Json HostJson(const std::vector<gitbridge::HostChange>& v) {
  Json list = Json::array();
  for (const auto& h : v) {
    Json j = {{"change", h.how}, {"path", h.host_path}};
    if (!h.renamed_to.empty()) j["renamed_to"] = h.renamed_to;
    list.push_back(j);
  }
  return list;
}

Json ChangeJson(const PathChange& c, const HostChanges& host) {
  Json meta = Json::array();
  if (c.meta & PathChange::kMode) meta.push_back("mode");
  if (c.meta & PathChange::kOwner) meta.push_back("owner");
  if (c.meta & PathChange::kXattrs) meta.push_back("xattrs");
  Json j = {{"path", c.path},
            {"kind", ChangeKindName(c.kind)},
            {"code", std::string(1, ChangeCode(c.kind))},
            {"dir", IsDirChange(c)},
            {"old_mode", ModeJson(c.old_mode)},
            {"new_mode", ModeJson(c.new_mode)},
            {"old_size", c.old_size},
            {"new_size", c.new_size},
            {"metadata", meta}};
  if (!IsUtf8(c.path)) j["path_quoted"] = QuotePath(c.path);
  auto h = host.find(c.path);
  j["host"] = h == host.end() ? Json() : HostJson(h->second);
  return j;
}

void PrintJson(const std::string& name, const std::string& lower,
               const PolicyRecord& policy, const gitbridge::GitBase& base,
               const std::vector<PathChange>& changes,
               const HostChanges& host) {
  constexpr PathChange::Kind kKinds[] = {
      PathChange::kAdded, PathChange::kModified, PathChange::kDeleted,
      PathChange::kTypeChanged, PathChange::kMetadata};
  std::map<PathChange::Kind, uint64_t> count;
  Json list = Json::array();
  for (const PathChange& c : changes) {
    list.push_back(ChangeJson(c, host));
    ++count[c.kind];
  }
  Json counts = Json::object();
  for (PathChange::Kind k : kKinds) counts[ChangeKindName(k)] = count[k];
  Json j = {{"sandbox", name},
            {"lower", lower},
            {"changes", list},
            {"counts", counts}};
  j["base"] = base.recorded() ? Json(BaseJson(base)) : Json();
  if (!policy.restricts()) {
    j["policy"] = Json();
  } else {
    j["policy"] = {{"hide", policy.hide},
                   {"read_only", policy.read_only},
                   {"quota_bytes", policy.quota_bytes},
                   {"hide_secrets", policy.hide_secrets}};
  }
  std::string text = j.dump(2, ' ', false, Json::error_handler_t::replace);
  text += '\n';
  std::fwrite(text.data(), 1, text.size(), stdout);
}

void PrintLines(const std::vector<PathChange>& changes, bool nul,
                const HostChanges& host) {
  for (const PathChange& c : changes) {
    std::string shown = c.path + (IsDirChange(c) ? "/" : "");
    std::string line(1, ChangeCode(c.kind));
    line += ' ';
    line += nul ? shown : QuotePath(shown);
    // The host changed it too since the base: merging meets it there.
    auto h = host.find(c.path);
    if (!nul && h != host.end()) {
      line += "  (host: ";
      for (size_t i = 0; i < h->second.size(); ++i)
        line += (i ? "; " : "") + gitbridge::DescribeHostChange(h->second[i]);
      line += ")";
    }
    line += nul ? '\0' : '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
}

}  // namespace

int RunStatus(const StatusArgs& a) {
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  auto found = Sandbox::Find(state, a.name);
  if (!found) return FailFind("status", a.name, found.error());
  const SandboxPaths& paths = found->paths();
  const SandboxMeta& meta = found->meta();
  if (Status st = found->StackOk(); !st)
    return Fail(kExitBadInput, "status", st.error());
  auto layers = found->OpenLayers();
  if (!layers) return Fail(kExitFailed, "status", layers.error());
  ChangeScanOptions options;
  options.include_git_dir = a.include_git_dir;
  Progress progress("status " + paths.name);
  options.progress = [&](uint64_t n) { progress.Update("scanning", n); };
  auto changes = ScanChanges(*layers, options);
  progress.Finish();
  if (!changes) return Fail(kExitFailed, "status", changes.error());
  // What the policy keeps out of an export is not listed either.
  gitbridge::DropPolicyRefused(layers->policy.get(), &*changes);
  HostChanges host;
  if (meta.base.recorded()) {
    std::vector<std::string> changed;
    for (const PathChange& c : *changes)
      if (c.path != ".git" && c.path.rfind(".git/", 0) != 0)
        changed.push_back(c.path);
    auto moved = gitbridge::HostChangesSince(meta.lower, meta.base, changed);
    // The host's repository cannot be read (gone, another user's): the
    // changes are still the layers'; say why the marks are missing.
    if (!moved)
      Fail(0, "status: what the host changed since the base", moved.error());
    else
      for (auto& h : *moved) host[h.path].push_back(std::move(h));
  }
  if (a.json) {
    PrintJson(paths.name, meta.lower, meta.policy, meta.base, *changes, host);
  } else {
    // A sandbox with a policy says so first, as a comment line (paths
    // it hides or makes read-only are never listed as changed).
    if (meta.policy.restricts() && !a.null_terminated)
      std::printf("# policy: %s\n", meta.policy.Summary().c_str());
    PrintLines(*changes, a.null_terminated, host);
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return Fail(kExitFailed, "status", Error::Errno("write", "stdout"));
  return 0;
}

}  // namespace acqfs::cli
