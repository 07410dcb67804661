// acqfs log: a sandbox's audit log (docs/audit.md): the records its daemon
// wrote, filtered by checkpoint interval, path, operation, process and
// refusal; one line each, one JSON object each (--json), a summary per
// checkpoint (--summary), or as they come (--follow).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "audit/log_file.h"
#include "audit/query.h"
#include "audit/record.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/sandbox.h"
#include "cli/stack_command.h"
#include "common/sys.h"
#include "fs/policy.h"
#include "stack/manifest.h"

namespace acqfs::cli {
namespace {

// The id records name a layer by: its directory's name.
std::string LayerId(const std::string& layer) { return sys::Basename(layer); }

const Checkpoint* FindCheckpoint(const StackManifest& m, uint32_t n) {
  for (const auto& c : m.checkpoints)
    if (c.number == n) return &c;
  return nullptr;
}

// The ids of the layers a checkpoint's tree is made of: the intervals up to
// it.
std::set<std::string> IdsOf(const Checkpoint& c) {
  std::set<std::string> ids;
  for (const auto& l : c.layers) ids.insert(LayerId(l));
  return ids;
}

std::string KnownOps() {
  std::string all;
  for (int i = 0; i <= static_cast<int>(audit::Op::kRotated); ++i)
    all += (all.empty() ? "" : ", ") +
           std::string(audit::OpName(static_cast<audit::Op>(i)));
  return all;
}

void Print(const audit::Record& r, bool json) {
  if (json) {
    std::fputs(audit::EncodeRecord(r).c_str(), stdout);
  } else {
    std::printf("%s\n", audit::FormatRecord(r).c_str());
  }
}

}  // namespace

int RunLog(const LogArgs& a) {
  int rc = 0;
  auto s = FindSandbox("log", a.state_dir, a.name, &rc);
  if (!s) return rc;
  const std::string what = "log " + s->name();
  audit::Filter f;
  for (const auto& g : a.paths) {
    auto p = PathGlob::Parse(g);
    if (!p) return Fail(kExitBadInput, what, "--path " + g, p.error().op);
    f.paths.push_back(std::move(*p));
  }
  // --op takes OP or OP,OP,... (as often as wanted).
  for (const auto& list : a.ops) {
    std::stringstream ss(list);
    for (std::string o; std::getline(ss, o, ',');) {
      auto op = audit::OpFromName(o);
      if (!op)
        return Fail(kExitBadInput, what, "--op " + o,
                    "not an operation (known: " + KnownOps() + ")");
      f.ops.insert(*op);
    }
  }
  for (int pid : a.pids) f.pids.insert(pid);
  f.refused_only = a.refused;

  // A mounted sandbox's daemon writes what it holds first: the records of
  // the writes to files still open, and its queue.
  if (auto live = s->Probe(); live && live->state == MountState::kMounted)
    if (auto r = AskDaemon(*s, {{"op", "audit_flush"}}); !r)
      std::fprintf(stderr,
                   "acqfs log: %s: the daemon did not write its pending "
                   "records (%s); the log may lack the latest\n",
                   s->name().c_str(), r.error().Message().c_str());
  auto dir = sys::OpenBelow(s->state_dir(), s->paths().dir,
                            O_DIRECTORY | O_RDONLY, "open the audit log's");
  if (!dir) return Fail(kExitFailed, what, dir.error());
  // Opened first, so that no record written while the log is read is
  // missed; those read already are skipped by their sequence number.
  std::optional<audit::Follower> follower;
  if (a.follow) {
    auto fo = audit::Follower::Open(dir->get(), s->paths().dir);
    if (!fo) return Fail(kExitFailed, what, fo.error());
    follower.emplace(std::move(*fo));
  }
  auto log = audit::ReadLog(dir->get(), s->paths().dir);
  if (!log) return Fail(kExitFailed, what, log.error());

  // The checkpoint intervals: --since N keeps what came after checkpoint
  // N (records in layers its tree is not made of), --until N what came up
  // to it.
  const StackManifest* m = s->has_stack() ? &s->stack() : nullptr;
  auto checkpoint = [&](uint32_t n, const char* flag) -> const Checkpoint* {
    const Checkpoint* c = m ? FindCheckpoint(*m, n) : nullptr;
    if (c == nullptr)
      Fail(kExitBadInput, what, std::string(flag) + " " + std::to_string(n),
           "no such checkpoint (see `acqfs checkpoints " + s->name() + "`)");
    return c;
  };
  if (a.since || a.until) {
    std::set<std::string> all;
    for (const auto& r : log->records) all.insert(r.layer);
    std::set<std::string> keep = all;
    if (a.since) {
      const Checkpoint* c = checkpoint(*a.since, "--since");
      if (c == nullptr) return kExitBadInput;
      for (const auto& id : IdsOf(*c)) keep.erase(id);
    }
    if (a.until) {
      const Checkpoint* c = checkpoint(*a.until, "--until");
      if (c == nullptr) return kExitBadInput;
      const std::set<std::string> upto = IdsOf(*c);
      for (auto it = keep.begin(); it != keep.end();)
        it = upto.count(*it) ? std::next(it) : keep.erase(it);
    }
    f.layers = keep;
  }

  uint64_t lost = 0;
  for (const auto& r : log->records)
    if (r.op == audit::Op::kDropped || r.op == audit::Op::kRotated)
      lost += r.count;
  if (lost > 0 || log->damaged_lines > 0)
    std::fprintf(stderr,
                 "acqfs log: the log of %s is incomplete: %llu records lost "
                 "(dropped or rotated away), %llu damaged lines skipped\n",
                 s->name().c_str(), static_cast<unsigned long long>(lost),
                 static_cast<unsigned long long>(log->damaged_lines));

  if (a.summary) {
    // One summary per interval: each checkpoint's own layer, the live
    // upper, and any other layer (rewound away, squashed).
    struct Interval {
      std::string title;
      nlohmann::json key;
      audit::Summary sum;
    };
    std::vector<Interval> intervals;
    std::map<std::string, size_t> by_layer;
    if (m != nullptr) {
      for (const auto& c : m->checkpoints) {
        by_layer[LayerId(c.layers.back())] = intervals.size();
        intervals.push_back(
            {"checkpoint " + std::to_string(c.number) +
                 (c.message.empty() ? "" : " (" + c.message + ")"),
             c.number,
             {}});
      }
    }
    by_layer[LayerId(s->paths().upper)] = intervals.size();
    intervals.push_back({"since the last checkpoint", "live", {}});
    const size_t other = intervals.size();
    intervals.push_back(
        {"other layers (rewound away or squashed)", "other", {}});
    for (const auto& r : log->records) {
      if (!audit::Matches(f, r)) continue;
      auto it = by_layer.find(r.layer);
      audit::AddToSummary(
          r, &intervals[it == by_layer.end() ? other : it->second].sum);
    }
    if (a.json) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& i : intervals)
        if (i.sum.records > 0 || i.sum.dropped > 0)
          list.push_back(
              {{"interval", i.key}, {"summary", audit::SummaryJson(i.sum)}});
      nlohmann::json j{{"sandbox", s->name()},
                       {"intervals", list},
                       {"lost", lost},
                       {"damaged_lines", log->damaged_lines}};
      std::printf("%s\n", j.dump(2, ' ', false,
                                 nlohmann::json::error_handler_t::replace)
                              .c_str());
    } else {
      for (const auto& i : intervals) {
        if (i.sum.records == 0 && i.sum.dropped == 0) continue;
        std::printf("%s:\n%s", i.title.c_str(),
                    audit::FormatSummary(i.sum).c_str());
      }
    }
    return 0;
  }

  uint64_t last_seq = 0;
  for (const auto& r : log->records) {
    last_seq = std::max(last_seq, r.seq);
    if (audit::Matches(f, r)) Print(r, a.json);
  }
  std::fflush(stdout);
  if (!follower) return 0;
  for (;;) {
    auto more = follower->Poll();
    if (!more) return Fail(kExitFailed, what, more.error());
    for (const auto& r : *more) {
      if (r.seq <= last_seq) continue;
      last_seq = r.seq;
      if (audit::Matches(f, r)) Print(r, a.json);
    }
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace acqfs::cli
