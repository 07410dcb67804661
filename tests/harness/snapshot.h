// TreeSnapshot: what a directory tree looks like, entry by entry, so that two
// trees (a lower layer and a FUSE view, a FUSE view and a kernel overlayfs
// view, a tree before and after a workload) can be compared and their
// differences printed.
//
// Snapshot() walks without following symlinks and records, per path relative
// to the root ("." is the root itself): type, permission bits, size, an
// XXH3-64 hash of regular files' content, symlink target, device numbers of
// device nodes, and, as SnapshotOptions select, owner, times, inode number,
// link count, hard-link groups and extended attributes. Fields that are not
// selected stay zero/empty, so two snapshots taken with the same options
// compare field by field. Read errors do not abort the walk; they are kept in
// `errors` and make SnapshotsEqual() fail.
// Thread-safety: value types; Snapshot() is reentrant.
#ifndef ACQFS_TESTS_HARNESS_SNAPSHOT_H_
#define ACQFS_TESTS_HARNESS_SNAPSHOT_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace acqfs::test {

struct SnapshotOptions {
  bool content = true;  // hash regular files' content
  bool owner = true;    // uid and gid
  bool mtime = true;
  bool ctime = false;
  bool atime = false;
  bool ino = false;          // st_ino of non-directories
  bool nlink = false;        // st_nlink of non-directories
  bool link_groups = false;  // for nlink > 1: first path sharing the inode
  bool dir_size = false;     // st_size of directories (filesystem specific)
  bool dir_times = true;     // record the selected times for directories too
  bool xattrs = true;
  bool user_xattrs_only = false;  // only the "user." namespace
  std::vector<std::string> skip;  // relative paths left out with their subtree

  // Everything but atime: for "the host tree was not touched".
  static SnapshotOptions Everything();
  // What two views of one merged tree must agree on: names, types, modes,
  // sizes, content, symlink targets, owners and user.* xattrs.
  static SnapshotOptions MergedView();
  // A checkout's files outside .git, everything but atime: for "a command
  // left the host checkout as it was".
  static SnapshotOptions CheckoutOutsideGit();
  // The content, modes and owners inside a .git, without times and inode
  // numbers: `acqfs mount` registers the sandbox-<name> remote in
  // .git/config and `rm` removes it, which replaces the file (same bytes).
  static SnapshotOptions GitDirContent();
};

struct EntryInfo {
  char type = '?';    // f d l p s c b ?
  uint32_t mode = 0;  // st_mode & 07777
  uint64_t size = 0;
  uint64_t content_hash = 0;
  std::string target;  // symlink target
  std::string rdev;    // "major,minor" for device nodes
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  int64_t atime_ns = 0;
  uint64_t ino = 0;
  uint64_t nlink = 0;
  std::string link_group;  // see SnapshotOptions::link_groups
  std::map<std::string, std::string> xattrs;

  bool operator==(const EntryInfo&) const = default;
};

struct TreeSnapshot {
  std::string root;                          // what was walked (for messages)
  std::map<std::string, EntryInfo> entries;  // relative path -> entry
  std::vector<std::string> errors;           // "path: op: error"

  // A line-based text form (see snapshot.cc), e.g. to pass a snapshot taken
  // in another process (acqfs_snapshot_tool) back to a test.
  std::string Serialize() const;
  // Parses Serialize()'s output; problems land in `errors`.
  static TreeSnapshot Parse(const std::string& text, const std::string& root);
  // The entry at `rel`, or nullptr.
  const EntryInfo* Find(const std::string& rel) const;
};

TreeSnapshot Snapshot(const std::string& root,
                      const SnapshotOptions& options = {});

// The part of `snap` at and below `rel`, with paths made relative to `rel`
// (so a moved directory can be compared with its original).
TreeSnapshot Subtree(const TreeSnapshot& snap, const std::string& rel);

// Up to `max_lines` differences, one per line ("only in A: p", "p: mode 0644 !=
// 0755"), followed by a count of those left out; "" when equal. Errors
// recorded in either snapshot are listed too and count as differences.
std::string DiffSnapshots(const TreeSnapshot& a, const TreeSnapshot& b,
                          size_t max_lines = 25);

// For EXPECT_TRUE(SnapshotsEqual(a, b)): fails with DiffSnapshots' text.
::testing::AssertionResult SnapshotsEqual(const TreeSnapshot& a,
                                          const TreeSnapshot& b,
                                          size_t max_lines = 25);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_SNAPSHOT_H_
