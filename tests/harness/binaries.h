// Where the programs under test and the test tools are. Each is compiled in
// by CMake and can be overridden by an environment variable of the same name
// (ACQFS_BIN, ACQFS_MOUNT_HELPER, ACQFS_SNAPSHOT_TOOL), e.g. to test an
// installed build.
// Thread-safety: stateless functions.
#ifndef ACQFS_TESTS_HARNESS_BINARIES_H_
#define ACQFS_TESTS_HARNESS_BINARIES_H_

#include <string>

namespace acqfs::test {

std::string AcqfsBinary();         // the `acqfs` CLI
std::string MountHelperBinary();   // `mount.fuse.acqfs`
std::string SnapshotToolBinary();  // `acqfs_snapshot_tool` (this directory)

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_BINARIES_H_
