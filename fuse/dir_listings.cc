#include "fuse/dir_listings.h"

#include <dirent.h>

#include <utility>

namespace acqfs {

Status ListInto(Overlay* ov, Node* dir, DirListing* out) {
  auto list = ov->ReadDir(dir);
  if (!list) return list.error();
  out->entries.clear();
  out->entries.reserve(list->size() + 2);
  out->entries.push_back(ListedEntry{".", DT_DIR, dir->ino});
  out->entries.push_back(ListedEntry{"..", DT_DIR, ov->ParentIno(dir)});
  for (auto& e : *list) out->entries.push_back(std::move(e));
  out->listed = true;
  return Ok();
}

Result<std::shared_ptr<const DirListing>> ListingCache::Get(
    const Node* dir, off_t off, const Lister& list) {
  if (off != 0) {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = dirs_.find(dir); it != dirs_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.age);
      return it->second.listing;
    }
  }
  auto made = std::make_shared<DirListing>();
  if (Status s = list(made.get()); !s) return s.error();
  const size_t size = made->entries.size();
  std::vector<std::shared_ptr<const DirListing>> evicted;  // freed unlocked
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = dirs_.find(dir); it != dirs_.end()) EraseLocked(it, &evicted);
  while (!lru_.empty() &&
         (dirs_.size() >= max_listings_ || entries_ + size > max_entries_))
    EraseLocked(dirs_.find(lru_.back()), &evicted);
  lru_.push_front(dir);
  dirs_.emplace(dir, Slot{made, lru_.begin()});
  entries_ += size;
  return std::shared_ptr<const DirListing>(std::move(made));
}

void ListingCache::Drop(const Node* dir) {
  std::vector<std::shared_ptr<const DirListing>> gone;  // freed unlocked
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = dirs_.find(dir); it != dirs_.end()) EraseLocked(it, &gone);
}

size_t ListingCache::listings() const {
  std::lock_guard<std::mutex> l(mu_);
  return dirs_.size();
}

size_t ListingCache::entries() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_;
}

void ListingCache::EraseLocked(
    std::unordered_map<const Node*, Slot>::iterator it,
    std::vector<std::shared_ptr<const DirListing>>* out) {
  entries_ -= it->second.listing->entries.size();
  lru_.erase(it->second.age);
  out->push_back(std::move(it->second.listing));
  dirs_.erase(it);
}

}  // namespace acqfs
