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
// Pinned entries (OpenFile::pinned) are a class of their own, with their
// own capacity and LRU: the host's git object store's packs and graphs,
// which git maps for as long as it runs while the host's `git gc` deletes
// them. The kernel reads a mapped page through the node long after the
// open, and once the host deleted the file only the descriptor still
// reaches its data: so the ordinary traffic (a `git grep` reads thousands
// of files) never evicts them, and they go when the node does (Take),
// beyond their capacity, or at DropAll. (A file the host deletes or
// replaces keeps its node and its descriptor, Overlay::StatLocked: the
// name gets a new node.)
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
  // A file of the host's object store that git maps (FileCache, pinned).
  bool pinned = false;
  // The node began to follow the host file now at its path
  // (Overlay::OpenDataLocked): the kernel's cached attributes are stale.
  bool followed = false;
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
  explicit FileCache(size_t capacity, size_t pinned_capacity = 0)
      : capacity_(capacity < 1 ? 1 : capacity),
        pinned_capacity_(pinned_capacity) {}
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
  // Evicts least recently used unpinned entries until at most `keep`
  // remain; returns how many it evicted. Pinned ones stay.
  size_t Shrink(size_t keep);
  // Evicts every entry, pinned ones too; returns how many.
  size_t DropAll();

  size_t size() const;    // all entries
  size_t pinned() const;  // pinned entries
  size_t capacity() const { return capacity_; }
  // Set before serving (not thread-safe against the other methods).
  void set_capacity(size_t n, size_t pinned) {
    capacity_ = n < 1 ? 1 : n;
    pinned_capacity_ = pinned;
  }

 private:
  struct Entry {
    FileLease file;
    bool pinned;
    std::list<const void*>::iterator pos;  // in lru_ or pinned_lru_
  };
  std::list<const void*>& ListOf(const Entry& e) {
    return e.pinned ? pinned_lru_ : lru_;
  }
  // Erases `it` and returns its lease (mu_ held; the caller drops it once
  // the lock is released).
  FileLease EraseLocked(std::unordered_map<const void*, Entry>::iterator it);
  // Moves entries of `list` beyond `keep` into `out` (mu_ held).
  void EvictLocked(std::list<const void*>* list, size_t keep,
                   std::vector<FileLease>* out);

  size_t capacity_;
  size_t pinned_capacity_;  // 0: nothing is pinned (treated as ordinary)
  mutable std::mutex mu_;
  std::list<const void*> lru_;         // mu_; unpinned, most recent first
  std::list<const void*> pinned_lru_;  // mu_; pinned, most recent first
  std::unordered_map<const void*, Entry> entries_;  // mu_
};

}  // namespace acqfs

#endif  // ACQFS_FS_FILE_CACHE_H_
