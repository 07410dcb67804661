// The queries of `acqfs log` (issue 36): which records of a sandbox's audit
// log a Filter keeps, a Summary of them (counts by operation and by
// process), and the human forms of a record and of a summary.
//
// A Filter keeps a record when every test it sets passes:
//   layers        the record's layer is one of them (nullopt: any);
//   paths         one of the globs (fs/policy.h's PathGlob, gitignore-style)
//                 matches the record's path or path2, or a directory above
//                 either (as in .gitignore, a match on a directory covers
//                 everything below it: "build/" keeps "build/a/b.o");
//                 the path itself counts as a directory for kMkdir, kRmdir
//                 and kList; empty: any;
//   ops           the record's op is one of them (empty: any);
//   pids          the record's pid is one of them (empty: any);
//   refused_only  the record's result is not 0.
// The records about the log itself (kMount, kDropped, kRotated) pass the
// paths, ops and pids tests when include_meta is true, so that a filtered
// listing still shows where the daemon started and where records were
// lost; with include_meta false they are tested like any other record (a
// path filter then drops them: their path is ""; an ops filter naming
// kDropped keeps them). The layers and refused_only tests apply to them
// either way.
//
// FormatRecord makes one line of a record, whatever bytes its strings
// hold: control bytes, a backslash and bytes that are not valid UTF-8 are
// escaped ("\n", "\t", "\\", "\xHH"), so the line has no '\n' and is valid
// UTF-8.
//
// Thread-safety: plain values and pure functions.
#ifndef ACQFS_AUDIT_QUERY_H_
#define ACQFS_AUDIT_QUERY_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "audit/record.h"
#include "fs/policy.h"

namespace acqfs::audit {

struct Filter {
  // Records whose layer is one of these; nullopt: any.
  std::optional<std::set<std::string>> layers;
  // Any matches path or path2 (or a directory above them); empty: any.
  std::vector<PathGlob> paths;
  std::set<Op> ops;           // empty: any
  std::set<int32_t> pids;     // empty: any
  bool refused_only = false;  // result != 0
  bool include_meta = true;   // kMount/kDropped/kRotated pass paths, ops,
                              // pids
};

bool Matches(const Filter& f, const Record& r);

// Is `op` a record about the log itself (kMount, kDropped, kRotated)?
bool IsMetaOp(Op op);

struct Summary {
  uint64_t records = 0;  // records other than kMount/kDropped/kRotated
  uint64_t refused = 0;  // of them, those whose result is not 0
  std::map<std::string, uint64_t> by_op;  // OpName -> records
  // "comm[pid]", "exe[pid]" when comm is "", "?[pid]" when both are,
  // "kernel" for pid 0 -> records.
  std::map<std::string, uint64_t> by_process;
  uint64_t dropped = 0;  // the counts of kDropped and kRotated records
};

// Counts `r` in *s. kMount, kDropped and kRotated count only into dropped
// (kMount adds nothing).
void AddToSummary(const Record& r, Summary* s);

// One line, without a '\n':
//   <local time, microseconds> <pid>/<comm> <op> <path>[ -> <path2>]
//   <ok | ENAME (strerror)>[ boundary=<b>][ (<details>)] layer=<layer>
// e.g. "2024-05-01 12:34:56.123456 1234/make write src/a.o ok (3 ranges,
// 4096 bytes) layer=0003". Details: a write's ranges and bytes ("ranges
// unknown" when not seen), a truncate's size, a chmod's or create's mode,
// a chown's owner, an xattr's name, a kDropped/kRotated's count and times.
std::string FormatRecord(const Record& r);
// Three lines, each ending in '\n': the totals, the records by op and by
// process (each sorted by count, descending; the 20 largest processes).
std::string FormatSummary(const Summary& s);
// {"records": N, "refused": N, "dropped": N, "by_op": {"write": N, ...},
//  "by_process": {"make[1234]": N, ...}}; names that are not valid UTF-8
// have their bad bytes replaced by U+FFFD.
nlohmann::json SummaryJson(const Summary& s);

// `bytes` made printable on one line, as FormatRecord shows strings.
std::string EscapeForDisplay(std::string_view bytes);
// The errno's name ("ENOENT"), or "E<number>" when unknown.
std::string ErrnoName(int err);

}  // namespace acqfs::audit

#endif  // ACQFS_AUDIT_QUERY_H_
