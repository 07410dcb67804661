// IndexFile: a git index file (gitformat-index(5), versions 2 to 4, SHA-1)
// read in place from its bytes, without loading its entries: the entries
// one at a time, and the two extensions that name objects, the cache tree
// (TREE: which directories of the index are known trees) and resolve-undo
// (REUC: the stages of conflicts resolved since). Used to find the objects
// the base's copy of the host's index names (gitbridge/index_objects.h)
// without a read of the whole index into memory: an index of 1,000,000
// paths is 88 MB on disk and ten times that in libgit2's structures.
// Every offset is bounds-checked: a damaged or hostile index is refused
// with EINVAL naming the file, never read past its end.
// Thread-safety: immutable after Parse; the bytes must outlive it.
#ifndef ACQFS_GITBRIDGE_INDEX_FILE_H_
#define ACQFS_GITBRIDGE_INDEX_FILE_H_

#include <git2.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace acqfs::gitbridge {

struct IndexEntry {
  std::string_view path;  // valid during the callback only
  uint32_t mode = 0;      // 0100644, 0100755, 0120000, 0160000, 040000
  git_oid id{};
  unsigned stage = 0;  // 0, or 1 to 3 in a conflict
  bool intent_to_add = false;
  bool skip_worktree = false;
};

// One node of the cache tree: a directory of the index (its path from the
// top, "" for the top) and, when valid, the tree that its entries make.
struct CacheTreeNode {
  std::string path;
  bool valid = false;
  git_oid id{};
};

class IndexFile {
 public:
  // Checks the header, walks the entries to find the extensions, and reads
  // TREE and REUC. `shown` names the file in errors.
  static Result<IndexFile> Parse(std::string_view bytes, std::string shown);

  uint32_t version() const { return version_; }
  uint32_t entry_count() const { return count_; }
  // A split index ("link" extension): most entries are in a shared index
  // file beside it, which ForEach does not read.
  bool split() const { return split_; }
  // The cache tree's nodes, top-down and depth-first (as stored); empty
  // when the index has none.
  const std::vector<CacheTreeNode>& cache_tree() const { return tree_; }
  // The objects of resolve-undo's stages.
  const std::vector<git_oid>& resolve_undo() const { return reuc_; }

  // Calls `visit` for every entry in index order; stops at its first
  // failure, which it returns.
  Status ForEach(const std::function<Status(const IndexEntry&)>& visit) const;

 private:
  IndexFile(std::string_view bytes, std::string shown)
      : bytes_(bytes), shown_(std::move(shown)) {}
  // Reads the entry at `*pos` (advancing it) into `e`, its path into
  // `path` (which, for version 4, holds the previous entry's path).
  Status ReadEntry(size_t* pos, std::string* path, IndexEntry* e) const;
  Status SkipEntry(size_t* pos) const;
  // A version 2 or 3 entry's path at `start` + `fixed`: its length (from
  // `flags`, or up to its NUL when that is 0xfff) and where the entry,
  // padded to 8 bytes, ends.
  Status PaddedName(size_t start, size_t fixed, uint16_t flags, size_t* len,
                    size_t* next) const;
  Status ReadExtensions(size_t pos);
  Status ReadCacheTree(std::string_view ext);
  Status ReadResolveUndo(std::string_view ext);
  Error Damaged(const std::string& what) const;

  std::string_view bytes_;
  std::string shown_;
  uint32_t version_ = 0;
  uint32_t count_ = 0;
  size_t entries_end_ = 0;
  bool split_ = false;
  std::vector<CacheTreeNode> tree_;
  std::vector<git_oid> reuc_;
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_INDEX_FILE_H_
