#include "fs/file_cache.h"

namespace acqfs {

FileLease FileCache::Find(const void* key, bool write, bool in_upper) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  const OpenFile& f = *it->second.file;
  bool serves =
      write ? f.writable : (f.readable && !(in_upper && f.from_lower));
  if (!serves) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
  return it->second.file;
}

FileLease FileCache::Put(const void* key, OpenFile file) {
  FileLease lease(std::make_shared<const OpenFile>(std::move(file)));
  std::vector<FileLease> evicted;  // dropped after the lock
  FileLease replaced;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      replaced = std::move(it->second.file);
      it->second.file = lease;
      lru_.splice(lru_.begin(), lru_, it->second.pos);
    } else {
      lru_.push_front(key);
      entries_.emplace(key, Entry{lease, lru_.begin()});
      EvictLocked(capacity_, &evicted);
    }
  }
  return lease;
}

FileLease FileCache::Take(const void* key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  FileLease f = std::move(it->second.file);
  lru_.erase(it->second.pos);
  entries_.erase(it);
  return f;
}

FileLease FileCache::TakeIfLowerReplaced(const void* key, uint64_t ino) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  const OpenFile& f = *it->second.file;
  if (!f.from_lower || f.lower_ino == 0 || f.lower_ino == ino) return nullptr;
  FileLease out = std::move(it->second.file);
  lru_.erase(it->second.pos);
  entries_.erase(it);
  return out;
}

size_t FileCache::Shrink(size_t keep) {
  std::vector<FileLease> evicted;
  {
    std::lock_guard<std::mutex> l(mu_);
    EvictLocked(keep, &evicted);
  }
  return evicted.size();
}

size_t FileCache::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

void FileCache::EvictLocked(size_t keep, std::vector<FileLease>* out) {
  while (entries_.size() > keep) {
    auto it = entries_.find(lru_.back());
    out->push_back(std::move(it->second.file));
    entries_.erase(it);
    lru_.pop_back();
  }
}

}  // namespace acqfs
