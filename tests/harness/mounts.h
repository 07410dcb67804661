// What is mounted where (from /proc/self/mountinfo), and forceful unmounting
// for cleanup paths.
// Thread-safety: stateless functions.
#ifndef ACQFS_TESTS_HARNESS_MOUNTS_H_
#define ACQFS_TESTS_HARNESS_MOUNTS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace acqfs::test {

struct MountEntry {
  std::string mount_point;    // unescaped absolute path
  std::string mount_options;  // per-mount options, e.g. "rw,nosuid,nodev"
  std::string fs_type;        // e.g. "fuse.acqfs", "overlay"
  std::string source;         // e.g. "acqfs"
  std::string super_options;  // per-superblock options

  // True when the comma-separated per-mount options contain `option`.
  bool HasMountOption(const std::string& option) const;
};

// Every mount visible to this process, in mount order.
std::vector<MountEntry> ReadMountInfo();

// The topmost mount whose mount point is exactly `path` (made absolute and
// symlink-free when it exists), if any.
std::optional<MountEntry> FindMount(const std::string& path);

// Mount points at or below `dir`, deepest first.
std::vector<MountEntry> MountsBelow(const std::string& dir);

// Best-effort unmount of `path` for cleanup: FUSE mounts with
// `fusermount3 -u -z`, then umount2(MNT_DETACH). Returns "" when `path` is no
// longer a mount point afterwards, otherwise what was tried and failed.
std::string ForceUnmount(const std::string& path);

// Unmounts `path` with ForceUnmount() on destruction if it is still a mount
// point then: the RAII guard for mounts a test makes itself (a kernel
// overlayfs, a FUSE mount made through the mount helper). Failures are
// reported as non-fatal test failures.
class MountGuard {
 public:
  explicit MountGuard(std::string path) : path_(std::move(path)) {}
  ~MountGuard();
  MountGuard(const MountGuard&) = delete;
  MountGuard& operator=(const MountGuard&) = delete;

 private:
  std::string path_;
};

// Absolute, symlink-free form of `path`; `path` itself when it does not exist.
std::string RealPath(const std::string& path);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_MOUNTS_H_
