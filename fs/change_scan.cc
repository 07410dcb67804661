// ChangeScan (stub until implemented).
#include "fs/change_scan.h"

namespace acqfs {
char ChangeCode(PathChange::Kind) { return '?'; }
const char* ChangeKindName(PathChange::Kind) { return "?"; }
Result<std::vector<PathChange>> ScanChanges(const Layers&,
                                            const ChangeScanOptions&) {
  return Error::Of(ENOSYS, "scan changes", "");
}
}  // namespace acqfs
