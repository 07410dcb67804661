// One record of a sandbox's audit log (issue 36; docs/audit.md): an
// operation the daemon saw change the sandbox, a refusal of one of its
// boundaries, a read the policy asked to record, or a record about the log
// itself (records dropped, the log rotated, the daemon started).
//
// On disk a record is one JSON object on one line (EncodeRecord). Paths are
// kept byte for byte: a path that is not valid UTF-8 is written twice, as
// "path" with each bad byte replaced by U+FFFD (for reading) and as
// "path_hex" with its exact bytes (DecodeRecord takes it back from there).
// A newline or any control byte in a path is escaped by JSON, so a record
// is always exactly one line.
//
// Thread-safety: plain values and pure functions.
#ifndef ACQFS_AUDIT_RECORD_H_
#define ACQFS_AUDIT_RECORD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace acqfs::audit {

enum class Op : uint8_t {
  // Changes (result 0), or their refusals (result an errno).
  kCreate,  // a regular file made (create, or mknod of a regular file)
  kMkdir,
  kMknod,    // a special file (device, fifo, socket)
  kSymlink,  // path2: the link's target
  kLink,     // path: the new name, path2: the existing one
  kRename,   // path: from, path2: to
  kUnlink,
  kRmdir,
  kTruncate,  // size: the new size
  kChmod,     // mode: the new mode
  kChown,     // owner_uid / owner_gid: the new owner (-1: unchanged)
  kUtimes,
  kSetXattr,     // name: the attribute
  kRemoveXattr,  // name: the attribute
  kWrite,        // ranges: the byte ranges written, merged; size: bytes
  // Looks, recorded when refused by a boundary (hidden), or for reads when
  // the path matches --audit-reads.
  kLookup,    // a name looked up
  kList,      // a directory listed
  kOpenRead,  // a file opened for reading (--audit-reads)
  // Records about the log itself.
  kMount,    // the daemon started serving the sandbox
  kDropped,  // count records lost between from_ns and to_ns (the
             // queue was full, or the disk refused them)
  kRotated,  // the log rotated: count older records removed, which
             // were written between from_ns and to_ns
};

// "create", "mkdir", ..., "write", "lookup", "list", "open_read", "mount",
// "dropped", "rotated".
std::string_view OpName(Op op);
std::optional<Op> OpFromName(std::string_view name);

// Which boundary refused an operation ("" when none did).
inline constexpr char kBoundaryHidden[] = "hidden";       // --hide
inline constexpr char kBoundaryReadOnly[] = "read_only";  // --read-only
inline constexpr char kBoundaryQuota[] = "quota";         // EDQUOT
inline constexpr char kBoundarySpecial[] = "special";     // a refused
                                                          // special file

struct Record {
  uint64_t seq = 0;     // 1, 2, 3, ... in the order written (AuditWriter)
  int64_t time_ns = 0;  // CLOCK_REALTIME, nanoseconds since the epoch
  Op op = Op::kCreate;
  // The caller: the process (thread group) and thread, its ids, and the
  // process's comm and /proc/PID/exe target ("" when unknown: the process
  // had gone, or a record about the log).
  int32_t pid = 0;
  int32_t tid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string comm;
  std::string exe;
  // Paths relative to the mount's root, without a leading slash ("" is
  // the root itself); bytes as the caller gave them.
  std::string path;
  std::string path2;
  std::string name;        // kSetXattr, kRemoveXattr: the attribute's name
  int result = 0;          // 0, or the errno the caller got
  std::string boundary;    // kBoundary*, or ""
  uint64_t size = 0;       // kWrite: bytes written; kTruncate: new size
  uint32_t mode = 0;       // kChmod, kCreate, kMkdir, kMknod: the mode
  int64_t owner_uid = -1;  // kChown
  int64_t owner_gid = -1;  // kChown
  // kWrite: the byte ranges [first, second) written, merged and sorted.
  // Empty with ranges_known false when the daemon did not see the data
  // (a file the kernel writes itself: FUSE passthrough).
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  bool ranges_known = true;
  // The layer the change landed in: the id of the upper layer at the time
  // (its directory's name under the state folder's .layers/).
  std::string layer;
  // kDropped, kRotated: how many records, and the times of the first and
  // last of them.
  uint64_t count = 0;
  int64_t from_ns = 0;
  int64_t to_ns = 0;
};

// One line of JSON, ending in '\n'. Fields at their default value are left
// out, except seq, time_ns and op.
std::string EncodeRecord(const Record& r);
// The record of one line (with or without its '\n'). EINVAL, naming what is
// wrong, for a line that is not a record.
Result<Record> DecodeRecord(std::string_view line);

}  // namespace acqfs::audit

#endif  // ACQFS_AUDIT_RECORD_H_
