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
  auto& list = ListOf(it->second);
  list.splice(list.begin(), list, it->second.pos);
  return it->second.file;
}

FileLease FileCache::Put(const void* key, OpenFile file) {
  const bool pinned = file.pinned && pinned_capacity_ > 0;
  FileLease lease(std::make_shared<const OpenFile>(std::move(file)));
  std::vector<FileLease> dropped;  // closed after the lock
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) dropped.push_back(EraseLocked(it));
    auto& list = pinned ? pinned_lru_ : lru_;
    list.push_front(key);
    entries_.emplace(key, Entry{lease, pinned, list.begin()});
    EvictLocked(&list, pinned ? pinned_capacity_ : capacity_, &dropped);
  }
  return lease;
}

FileLease FileCache::Take(const void* key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  return EraseLocked(it);
}

size_t FileCache::Shrink(size_t keep) {
  std::vector<FileLease> evicted;
  {
    std::lock_guard<std::mutex> l(mu_);
    EvictLocked(&lru_, keep, &evicted);
  }
  return evicted.size();
}

size_t FileCache::DropAll() {
  std::vector<FileLease> evicted;
  {
    std::lock_guard<std::mutex> l(mu_);
    EvictLocked(&lru_, 0, &evicted);
    EvictLocked(&pinned_lru_, 0, &evicted);
  }
  return evicted.size();
}

size_t FileCache::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

size_t FileCache::pinned() const {
  std::lock_guard<std::mutex> l(mu_);
  return pinned_lru_.size();
}

FileLease FileCache::EraseLocked(
    std::unordered_map<const void*, Entry>::iterator it) {
  FileLease f = std::move(it->second.file);
  ListOf(it->second).erase(it->second.pos);
  entries_.erase(it);
  return f;
}

void FileCache::EvictLocked(std::list<const void*>* list, size_t keep,
                            std::vector<FileLease>* out) {
  while (list->size() > keep)
    out->push_back(EraseLocked(entries_.find(list->back())));
}

}  // namespace acqfs
