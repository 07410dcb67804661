// acqfs ls: every sandbox of the state directory (a folder holding a readable
// meta.json; anything else is skipped), sorted by name, with its lower, its
// mountpoint, its state (see liveness.h), the disk its upper layer uses, how
// many paths it changed (fs/change_scan.h), when it was last exported, and
// whether exported work still waits for `git fetch sandbox-<name>` on the
// host (only for a lower that is a git checkout).
//
// Text: a header line, then one line per sandbox in aligned columns:
//   NAME  STATE  UPPER  CHANGES  EXPORTED  UNFETCHED  LOWER  MOUNTPOINT
// UPPER is human-readable (0, 512, 12K, 3.4M; powers of 1024, rounded up),
// EXPORTED is local time "YYYY-MM-DD HH:MM" or "never", UNFETCHED is "yes",
// "no" or "-" (not a git checkout).
// --json: an array of objects
//   {"name", "lower", "mountpoint",
//    "state": "mounted" | "not-mounted" | "stale",
//    "upper_bytes": n, "changed_paths": n,
//    "last_export": unix seconds (0: never),
//    "last_export_utc": "YYYY-MM-DDTHH:MM:SSZ" or null,
//    "unfetched": true | false | null (not a git checkout),
//    "transport": "io_uring" | "/dev/fuse" | null (not mounted, or its
//    daemon did not answer), the FUSE transport its daemon serves on,
//    "passthrough_opens": n | null (off, or not mounted), the opens its
//    daemon passed through to the upper files (FUSE passthrough),
//    "audit": {"written": n, "lost": n, "incomplete": bool} | null (off,
//    or not mounted), its audit log's records since the mount}.
// A value that cannot be found out shows as "?" (text) or null (JSON); it
// never stops the listing. Folders that hold no sandbox (one of a sandbox's
// name without meta.json whose lock is free; a fork's .fork+NAME or an
// rm's .trash+ID, docs/stack.md) are named on stderr, not listed. A missing or
// empty state directory lists nothing (text: no output; JSON: []). Exit 0, or 2
// when the state directory cannot be read (1 when it is not a directory).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/sandbox.h"
#include "cli/stack_command.h"
#include "common/handle.h"
#include "fs/change_scan.h"
#include "fs/layer_format.h"
#include "fs/quota.h"
#include "gitbridge/export.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"
#include "state/liveness.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

struct Row {
  std::string name, lower, mountpoint;
  std::optional<MountState> state;
  std::optional<uint64_t> upper_bytes;
  std::optional<uint64_t> changed_paths;
  int64_t last_export = 0;
  bool git = false;
  std::optional<bool> unfetched;  // when git
  PolicyRecord policy;
  std::optional<uint64_t> quota_used;         // when the policy sets a quota
  std::optional<std::string> transport;       // the daemon's, when mounted
  std::optional<uint64_t> passthrough_opens;  // the same, when on
  nlohmann::json audit;  // the daemon's audit log counts, or null
  gitbridge::GitBase base;
};

// What the quota counts now (fs/quota.h): the blocks of the upper layer
// (`upper`, measured by the scan below) and of work/acqfs-tmp, as on disk. A
// mounted sandbox's daemon also counts the nameless files it keeps for
// processes that hold them, which no directory shows.
std::optional<uint64_t> QuotaUse(const SandboxPaths& paths, uint64_t upper) {
  const std::string tmp = paths.work + "/" + LayerFormat::kTempDirName;
  UniqueFd tfd(
      ::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!tfd)
    return errno == ENOENT ? std::optional<uint64_t>(upper) : std::nullopt;
  auto parked = Quota::Measure(tfd.get(), tmp);
  if (!parked) return std::nullopt;
  return upper + *parked;
}

// The one walk of the upper layer (fs/change_scan.h): the paths changed, and
// on the way the disk the upper uses (each inode's blocks once: `all` as
// Quota::Measure counts, `own` only on the upper's file system, as
// DiskUsage and du -x count).
struct UpperScan {
  std::optional<uint64_t> changed_paths;
  std::optional<uint64_t> own, all;
};
UpperScan ScanUpperOnce(const Sandbox& sandbox) {
  UpperScan r;
  auto layers = sandbox.OpenLayers();
  if (!layers) return r;
  uint64_t own = 0, all = 0;
  std::optional<dev_t> dev;
  std::set<std::pair<dev_t, ino_t>> linked;  // inodes with nlink > 1 seen
  ChangeScanOptions options;
  options.each_upper = [&](const struct stat& st) {
    if (!dev) dev = st.st_dev;  // the upper root comes first
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1 &&
        !linked.insert({st.st_dev, st.st_ino}).second)
      return;  // a hard link counted already
    const uint64_t bytes = static_cast<uint64_t>(st.st_blocks) * 512;
    all += bytes;
    if (st.st_dev == *dev) own += bytes;
  };
  auto changes = ScanChanges(*layers, options);
  if (!changes) return r;
  r.changed_paths = changes->size();
  r.own = own;
  r.all = all;
  return r;
}

Row Describe(const Sandbox& sandbox) {
  const SandboxPaths& paths = sandbox.paths();
  const SandboxMeta& meta = sandbox.meta();
  Row r;
  r.name = paths.name;
  r.lower = meta.lower;
  r.mountpoint = meta.mountpoint;
  r.last_export = meta.last_export;
  if (auto live = sandbox.Probe()) {
    r.state = live->state;
    // The daemon's FUSE transport, from its control socket.
    if (live->state == MountState::kMounted)
      if (auto info = AskDaemon(sandbox, {{"op", "info"}})) {
        if (info->contains("transport") && (*info)["transport"].is_string() &&
            !(*info)["transport"].get<std::string>().empty())
          r.transport = (*info)["transport"].get<std::string>();
        if (info->contains("passthrough_opens") &&
            (*info)["passthrough_opens"].is_number_unsigned())
          r.passthrough_opens = (*info)["passthrough_opens"].get<uint64_t>();
        if (info->contains("audit") && (*info)["audit"].is_object())
          r.audit = (*info)["audit"];
      }
  }
  UpperScan scan = ScanUpperOnce(sandbox);
  r.changed_paths = scan.changed_paths;
  r.upper_bytes = scan.own;
  if (!scan.own) {  // the layers cannot be scanned: measure the upper alone
    if (auto bytes = DiskUsage(paths.upper)) r.upper_bytes = *bytes;
  }
  // Its frozen layers are its disk too (the stats a frozen layer caches:
  // no walk; a layer a fork shares counts for both).
  uint64_t frozen_bytes = 0;
  for (const auto& ref : sandbox.stack().frozen)
    if (auto st = sandbox.store().StatsOf(ref)) frozen_bytes += st->bytes;
  if (r.upper_bytes) *r.upper_bytes += frozen_bytes;
  r.policy = meta.policy;
  r.base = meta.base;
  if (meta.policy.quota_bytes) {
    if (!scan.all) {
      UniqueFd fd(::open(paths.upper.c_str(),
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (fd)
        if (auto used = Quota::Measure(fd.get(), paths.upper)) scan.all = *used;
    }
    if (scan.all) r.quota_used = QuotaUse(paths, *scan.all + frozen_bytes);
  }
  r.git = sandbox.IsGit();
  if (r.git) {
    auto config = sandbox.ExportConfig();
    if (auto u = config ? gitbridge::Unfetched(*config)
                        : Result<std::vector<std::string>>(config.error()))
      r.unfetched = !u->empty();
  }
  return r;
}

// The sandboxes in `state`, sorted by name; an error when it cannot be read.
// Also the folders no sandbox is in: a fork's or an rm's (`debris`), and
// those of a sandbox's name without meta.json whose lock is free
// (`unfinished`).
Result<std::vector<Row>> ListSandboxes(const std::string& state,
                                       std::vector<std::string>* debris,
                                       std::vector<std::string>* unfinished) {
  std::vector<Row> rows;
  UniqueDir dir(::opendir(state.c_str()));
  if (!dir) {
    if (errno == ENOENT) return rows;
    return Error::Errno("read directory", state);
  }
  for (;;) {
    errno = 0;
    struct dirent* e = ::readdir(dir.get());
    if (!e) {
      if (errno != 0) return Error::Errno("read directory", state);
      break;
    }
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    // A fork being built (.fork+NAME) or a sandbox being removed
    // (.trash+ID): no sandbox (docs/stack.md, "Commit points").
    if (!ValidSandboxName(name)) {
      if (IsForkFolderName(name) || IsTrashFolderName(name))
        debris->push_back(name);
      continue;
    }
    Sandbox sandbox(state, name);
    struct stat st;
    if (::lstat(sandbox.paths().dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      continue;
    if (!sandbox.HasMeta()) {
      // What an interrupted command left (while one still makes it, its
      // lock is held).
      auto held = sandbox.LockHeld();
      if (held && !*held) unfinished->push_back(name);
      continue;
    }
    if (!sandbox.Load()) continue;
    rows.push_back(Describe(sandbox));
  }
  std::sort(debris->begin(), debris->end());
  std::sort(unfinished->begin(), unfinished->end());
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.name < b.name; });
  return rows;
}

// 0, 512, 4.0K, 12K, 3.4M: powers of 1024, rounded up as du -h does.
std::string HumanBytes(uint64_t n) {
  if (n < 1024) return std::to_string(n);
  static const char kUnits[] = "KMGTPE";
  double v = static_cast<double>(n);
  int unit = -1;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    unit++;
  }
  v = v < 10 ? std::ceil(v * 10) / 10 : std::ceil(v);
  if (v >= 1024 && unit < 5) {
    v = 1.0;
    unit++;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.1f%c" : "%.0f%c", v, kUnits[unit]);
  return buf;
}

std::string FormatTime(int64_t t, bool utc) {
  std::time_t tt = static_cast<std::time_t>(t);
  struct tm tm;
  if ((utc ? ::gmtime_r(&tt, &tm) : ::localtime_r(&tt, &tm)) == nullptr)
    return "?";
  char buf[64];
  if (std::strftime(buf, sizeof buf,
                    utc ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%d %H:%M", &tm) == 0)
    return "?";
  return buf;
}

void PrintJson(const std::vector<Row>& rows) {
  using Json = nlohmann::ordered_json;
  Json out = Json::array();
  for (const Row& r : rows) {
    Json j;
    j["name"] = r.name;
    j["lower"] = r.lower;
    j["mountpoint"] = r.mountpoint;
    j["state"] = r.state ? Json(MountStateJsonName(*r.state)) : Json();
    j["upper_bytes"] = r.upper_bytes ? Json(*r.upper_bytes) : Json();
    j["changed_paths"] = r.changed_paths ? Json(*r.changed_paths) : Json();
    j["last_export"] = r.last_export;
    j["last_export_utc"] =
        r.last_export > 0 ? Json(FormatTime(r.last_export, true)) : Json();
    j["unfetched"] = r.unfetched ? Json(*r.unfetched) : Json();
    if (!r.policy.restricts()) {
      j["policy"] = Json();
    } else {
      j["policy"] = {{"hide", r.policy.hide},
                     {"read_only", r.policy.read_only},
                     {"quota_bytes", r.policy.quota_bytes},
                     {"hide_secrets", r.policy.hide_secrets}};
    }
    j["quota_used_bytes"] = r.quota_used ? Json(*r.quota_used) : Json();
    j["transport"] = r.transport ? Json(*r.transport) : Json();
    j["passthrough_opens"] =
        r.passthrough_opens ? Json(*r.passthrough_opens) : Json();
    j["audit"] = r.audit;
    // What the sandbox started from (docs/git-bridge.md, "The base").
    j["base"] = r.base.recorded() ? Json(BaseJson(r.base)) : Json();
    out.push_back(std::move(j));
  }
  std::printf("%s\n",
              out.dump(2, ' ', false, Json::error_handler_t::replace).c_str());
}

void PrintText(const std::vector<Row>& rows) {
  if (rows.empty()) return;
  std::vector<std::vector<std::string>> table = {
      {"NAME", "STATE", "UPPER", "QUOTA", "CHANGES", "EXPORTED", "UNFETCHED",
       "LOWER", "MOUNTPOINT", "POLICY"}};
  for (const Row& r : rows) {
    std::string unfetched = !r.git         ? "-"
                            : !r.unfetched ? "?"
                            : *r.unfetched ? "yes"
                                           : "no";
    std::string quota =
        !r.policy.quota_bytes
            ? "-"
            : (r.quota_used ? HumanBytes(*r.quota_used) : std::string("?")) +
                  "/" + HumanBytes(r.policy.quota_bytes);
    table.push_back(
        {r.name, r.state ? MountStateName(*r.state) : "?",
         r.upper_bytes ? HumanBytes(*r.upper_bytes) : "?", quota,
         r.changed_paths ? std::to_string(*r.changed_paths) : "?",
         r.last_export > 0 ? FormatTime(r.last_export, false) : "never",
         unfetched, r.lower, r.mountpoint, r.policy.Summary()});
  }
  std::vector<size_t> width(table[0].size(), 0);
  for (const auto& line : table)
    for (size_t c = 0; c < line.size(); c++)
      width[c] = std::max(width[c], line[c].size());
  for (const auto& line : table) {
    std::string out;
    for (size_t c = 0; c < line.size(); c++) {
      out += line[c];
      if (c + 1 < line.size())
        out += std::string(width[c] - line[c].size() + 2, ' ');
    }
    std::printf("%s\n", out.c_str());
  }
}

}  // namespace

int RunLs(const LsArgs& a) {
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  std::vector<std::string> debris, unfinished;
  auto rows = ListSandboxes(state, &debris, &unfinished);
  if (!rows) {
    int code = rows.err() == ENOTDIR ? kExitBadInput : kExitFailed;
    return Fail(code, "ls", rows.error());
  }
  // On stderr: the listing (and its JSON) is of sandboxes only.
  for (const std::string& n : unfinished)
    std::fprintf(stderr,
                 "acqfs: ls: %s/%s: no sandbox (no meta.json; an interrupted "
                 "command left it): `acqfs rm --force %s` removes it\n",
                 state.c_str(), n.c_str(), n.c_str());
  if (!debris.empty())
    std::fprintf(stderr,
                 "acqfs: ls: %zu folder%s of forks or removals under way or "
                 "interrupted (%s%s): `acqfs gc` removes those no command is "
                 "at work on\n",
                 debris.size(), debris.size() == 1 ? "" : "s",
                 debris[0].c_str(), debris.size() > 1 ? ", ..." : "");
  if (a.json)
    PrintJson(*rows);
  else
    PrintText(*rows);
  return 0;
}

}  // namespace acqfs::cli
