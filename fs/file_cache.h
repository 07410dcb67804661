// FileCache: the descriptors through which the daemon reads and writes file
// data, at most one per node and at most `capacity` in all, least recently
// used out beyond that. Open handles do not own descriptors (in either file
// mode): every READ, WRITE, FSYNC, ... asks the cache for the node's, and a
// node whose descriptor was evicted is opened again through the Overlay
// (by its path, or through its kept data once it has no name). So the
// number of data descriptors does not depend on how many files are open.
//
// A lookup hands out a FileLease, a shared owner: an evicted descriptor
// closes when the last request using it ends, so at most `capacity` plus
// one per request in flight are open.
//
// Thread-safety: all methods may be called from any thread. mu_ is a leaf
// lock: no other lock is taken and no descriptor is opened or closed while
// it is held (evicted leases are dropped after it is released, or handed to
// the caller).
#ifndef ACQFS_FS_FILE_CACHE_H_
#define ACQFS_FS_FILE_CACHE_H_

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/handle.h"

namespace acqfs {

// One open descriptor of a file's data.
struct OpenFile {
  UniqueFd fd;
  bool readable = false;
  bool writable = false;
  bool from_lower = false;  // it reads the lower copy (never written)
  // The lower inode it reads (from_lower, while the node has a name): the
  // host may replace the file at that path by another (a rename over it,
  // as git, sed -i and editors write), and the node's stat then follows
  // the new one (FileCache::TakeIfLowerReplaced).
  uint64_t lower_ino = 0;
};

// A shared owner of an OpenFile: the descriptor stays open while any lease
// on it lives, even after the cache evicted it.
class FileLease {
 public:
  FileLease() = default;
  explicit FileLease(std::shared_ptr<const OpenFile> f) : f_(std::move(f)) {}
  FileLease(std::nullptr_t) {}  // NOLINT: "no lease"

  int get() const { return f_ ? f_->fd.get() : -1; }
  bool is_valid() const { return f_ && f_->fd.is_valid(); }
  explicit operator bool() const { return f_ != nullptr; }
  const OpenFile* operator->() const { return f_.get(); }
  const OpenFile& operator*() const { return *f_; }
  void reset() { f_.reset(); }

 private:
  std::shared_ptr<const OpenFile> f_;
};

class FileCache {
 public:
  explicit FileCache(size_t capacity)
      : capacity_(capacity < 1 ? 1 : capacity) {}
  FileCache(const FileCache&) = delete;
  FileCache& operator=(const FileCache&) = delete;

  // The cached descriptor of `key` if it serves the request: writable for
  // `write`, else readable and, when the file is in the upper now
  // (`in_upper`), not a lower one. Null otherwise. Marks it recently used.
  FileLease Find(const void* key, bool write, bool in_upper);
  // Caches `file` for `key`, replacing what was there; returns its lease.
  // Entries beyond the capacity are evicted (closed once unused).
  FileLease Put(const void* key, OpenFile file);
  // Removes `key`'s entry and returns it (null when none), for the caller
  // to drop once it holds no lock (the node is going away).
  FileLease Take(const void* key);
  // The same when the entry reads a lower inode other than `ino`: the
  // host replaced the file at the node's path, and its data must come
  // from the inode its stat comes from.
  FileLease TakeIfLowerReplaced(const void* key, uint64_t ino);
  // Evicts least recently used entries until at most `keep` remain;
  // returns how many it evicted.
  size_t Shrink(size_t keep);

  size_t size() const;
  size_t capacity() const { return capacity_; }
  void set_capacity(size_t n) { capacity_ = n < 1 ? 1 : n; }

 private:
  struct Entry {
    FileLease file;
    std::list<const void*>::iterator pos;
  };
  // Moves entries beyond `keep` into `out` (mu_ held).
  void EvictLocked(size_t keep, std::vector<FileLease>* out);

  size_t capacity_;
  mutable std::mutex mu_;
  std::list<const void*> lru_;                      // mu_; most recent first
  std::unordered_map<const void*, Entry> entries_;  // mu_
};

}  // namespace acqfs

#endif  // ACQFS_FS_FILE_CACHE_H_
