// acqfs checkpoints: lists a sandbox's checkpoints (docs/stack.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "audit/log_file.h"
#include "audit/query.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/sandbox.h"
#include "cli/stack_command.h"
#include "common/sys.h"
#include "fs/layer.h"
#include "stack/manifest.h"
#include "stack/store.h"

namespace acqfs::cli {

int RunCheckpoints(const CheckpointsArgs& a) {
  int rc = 0;
  auto s = FindSandbox("checkpoints", a.state_dir, a.name, &rc);
  if (!s) return rc;
  const StackManifest& m = s->stack();
  LayerStore store(s->state_dir());
  // The audit log's records of each checkpoint's interval (docs/audit.md):
  // those that landed in the layer it froze.
  std::map<std::string, uint64_t> records;
  auto dir = sys::OpenBelow(s->state_dir(), s->paths().dir,
                            O_DIRECTORY | O_RDONLY, "open the audit log's");
  if (!dir) return Fail(kExitFailed, "checkpoints " + s->name(), dir.error());
  auto log = audit::ReadLog(dir->get(), s->paths().dir);
  if (!log) return Fail(kExitFailed, "checkpoints " + s->name(), log.error());
  for (const auto& r : log->records)
    if (!audit::IsMetaOp(r.op)) ++records[r.layer];
  auto records_of = [&](const Checkpoint& c) -> uint64_t {
    auto it = records.find(sys::Basename(c.layers.back()));
    return it == records.end() ? 0 : it->second;
  };
  nlohmann::json list = nlohmann::json::array();
  if (!a.json)
    std::printf("%4s  %-20s  %-12s  %8s  %10s  %8s  %s\n", "#", "TIME", "KIND",
                "PATHS", "BYTES", "RECORDS", "MESSAGE");
  for (const auto& c : m.checkpoints) {
    auto stats = store.StatsOf(c.layers.back());
    if (!stats)
      return Fail(kExitFailed, "checkpoints " + s->name(), stats.error());
    const bool current = c.number == m.base;
    if (a.json) {
      list.push_back({{"number", c.number},
                      {"time", Iso(c.time_ns)},
                      {"time_ns", c.time_ns},
                      {"kind", std::string(KindName(c.kind))},
                      {"message", c.message},
                      {"paths", stats->paths},
                      {"bytes", stats->bytes},
                      {"layers", c.layers.size()},
                      {"records", records_of(c)},
                      {"current", current}});
    } else {
      std::printf("%3u%c  %-20s  %-12s  %8llu  %10s  %8llu  %s\n", c.number,
                  current ? '*' : ' ', Iso(c.time_ns).c_str(),
                  std::string(KindName(c.kind)).c_str(),
                  static_cast<unsigned long long>(stats->paths),
                  FormatBytes(stats->bytes).c_str(),
                  static_cast<unsigned long long>(records_of(c)),
                  c.message.c_str());
    }
  }
  if (a.json) {
    nlohmann::json j{
        {"sandbox", s->name()}, {"base", m.base}, {"checkpoints", list}};
    std::printf("%s\n",
                j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                    .c_str());
  }
  return 0;
}

}  // namespace acqfs::cli
