#include "harness/binaries.h"

#include <cstdlib>

#ifndef ACQFS_BIN
#error "ACQFS_BIN must be defined by the build (path of the acqfs binary)"
#endif
#ifndef ACQFS_MOUNT_HELPER
#error "ACQFS_MOUNT_HELPER must be defined by the build"
#endif
#ifndef ACQFS_SNAPSHOT_TOOL
#error "ACQFS_SNAPSHOT_TOOL must be defined by the build"
#endif

namespace acqfs::test {
namespace {

std::string FromEnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

}  // namespace

std::string AcqfsBinary() { return FromEnvOr("ACQFS_BIN", ACQFS_BIN); }

std::string MountHelperBinary() {
  return FromEnvOr("ACQFS_MOUNT_HELPER", ACQFS_MOUNT_HELPER);
}

std::string SnapshotToolBinary() {
  return FromEnvOr("ACQFS_SNAPSHOT_TOOL", ACQFS_SNAPSHOT_TOOL);
}

}  // namespace acqfs::test
