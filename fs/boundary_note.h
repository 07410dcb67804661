// Which boundary of the policy refused the operation the current thread is
// carrying out: noted by the Overlay where it refuses (a hidden name looked
// up, a read-only path changed, the quota full, a refused special file),
// taken by the FUSE layer after the operation returns its error, for the
// audit log (fuse/audit_sink.h, docs/audit.md). The Overlay runs each
// request on the thread that received it, so a thread-local note belongs
// to that request; ClearBoundaryNote starts each request afresh.
//
// Thread-safety: thread-local; nothing shared.
#ifndef ACQFS_FS_BOUNDARY_NOTE_H_
#define ACQFS_FS_BOUNDARY_NOTE_H_

#include <string>
#include <string_view>

namespace acqfs {

// The names the audit log gives the boundaries (audit/record.h).
inline constexpr char kRefusedHidden[] = "hidden";
inline constexpr char kRefusedReadOnly[] = "read_only";
inline constexpr char kRefusedQuota[] = "quota";
inline constexpr char kRefusedSpecial[] = "special";

struct BoundaryNote {
  const char* boundary = nullptr;  // one of kRefused*, or null: none
  std::string rel;                 // the path it refused, from the root
};

// Notes that `boundary` refused `rel` (the first note of a request wins:
// it is the refusal the caller's error came from).
void NoteBoundary(const char* boundary, std::string_view rel);
// Is there a note (without taking it)?
bool BoundaryNoted();
// Takes (and clears) this thread's note.
BoundaryNote TakeBoundaryNote();
// Forgets any note (the start of a request).
void ClearBoundaryNote();

}  // namespace acqfs

#endif  // ACQFS_FS_BOUNDARY_NOTE_H_
