#include "fuse/dir_listings.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include <utility>

namespace acqfs {

void DirListing::Add(std::string_view name, unsigned char type, uint64_t ino) {
  if (name.size() > UINT16_MAX || names_.size() + name.size() >= UINT32_MAX) {
    // No directory entry has such a name, nor a listing 4 GiB of names.
    ::fprintf(stderr, "acqfs: listing: a name of %zu bytes after %zu\n",
              name.size(), names_.size());
    ::abort();
  }
  slots_.push_back(Slot{ino, static_cast<uint32_t>(names_.size()),
                        static_cast<uint16_t>(name.size()), type});
  names_.append(name);
  names_.push_back('\0');
}

Status ListInto(Overlay* ov, Node* dir, DirListing* out) {
  auto list = ov->ReadDir(dir);
  if (!list) return list.error();
  size_t name_bytes = 3;  // "." and ".."
  for (const auto& e : *list) name_bytes += e.name.size();
  out->clear();
  out->reserve(list->size() + 2, name_bytes);
  out->Add(".", DT_DIR, dir->ino);
  out->Add("..", DT_DIR, ov->ParentIno(dir));
  for (const auto& e : *list) out->Add(e.name, e.type, e.ino);
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
  const size_t size = made->size();
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
  entries_ -= it->second.listing->size();
  lru_.erase(it->second.age);
  out->push_back(std::move(it->second.listing));
  dirs_.erase(it);
}

}  // namespace acqfs
