#include "fuse/dir_listings.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
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

uint64_t DirListing::CookieOf(std::string_view name) {
  // FNV-1a, 64 bits: fixed, so a cookie means the same in every listing.
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= h >> 29;  // FNV's low bits mix poorly; folded before the range
  constexpr uint64_t kMax = (1ull << 63) - 1;  // off_t stays positive
  return 3 + h % (kMax - 2);
}

void DirListing::Seal() {
  if (slots_.size() <= 3) return;
  std::vector<std::pair<uint64_t, Slot>> keyed;
  keyed.reserve(slots_.size() - 2);
  for (size_t i = 2; i < slots_.size(); i++)
    keyed.emplace_back(CookieOf(at(i).name), slots_[i]);
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < keyed.size(); i++) slots_[i + 2] = keyed[i].second;
}

uint64_t DirListing::CookieAt(size_t i) const {
  if (i < 2) return i + 1;
  return CookieOf(at(i).name);
}

size_t DirListing::IndexAfter(uint64_t off) const {
  if (off < 2) return std::min<size_t>(off, slots_.size());
  // The first entry past the first two whose cookie exceeds `off`.
  size_t lo = std::min<size_t>(2, slots_.size()), hi = slots_.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (CookieOf(at(mid).name) <= off)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
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
  out->Seal();
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
