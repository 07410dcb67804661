#include "fs/name_table.h"

#include <stdio.h>
#include <stdlib.h>

#include <cstring>
#include <functional>
#include <new>

namespace acqfs {

// ---------------------------------------------------------------- NameLink

NameLink::Heap NameLink::heap() const {
  Heap h;
  std::memcpy(&h.bytes, bytes_, sizeof h.bytes);
  std::memcpy(&h.size, bytes_ + sizeof h.bytes, sizeof h.size);
  return h;
}

void NameLink::FreeName() {
  if (len_ == kOnHeap) delete[] heap().bytes;
  len_ = 0;
}

void NameLink::SetName(std::string_view name) {
  FreeName();
  if (name.size() <= kInline) {
    if (!name.empty()) std::memcpy(bytes_, name.data(), name.size());
    len_ = static_cast<uint8_t>(name.size());
    return;
  }
  if (name.size() > UINT32_MAX) {
    // No file system has such names (NAME_MAX is 255, the kernel sends at
    // most 1,024 bytes): only a bug in the daemon gets here.
    ::fprintf(stderr, "acqfs: node table: a name of %zu bytes\n", name.size());
    ::abort();
  }
  Heap h{new char[name.size()], static_cast<uint32_t>(name.size())};
  std::memcpy(h.bytes, name.data(), name.size());
  std::memcpy(bytes_, &h.bytes, sizeof h.bytes);
  std::memcpy(bytes_ + sizeof h.bytes, &h.size, sizeof h.size);
  len_ = kOnHeap;
}

// ---------------------------------------------------------------- NameTable

size_t NameHash(std::string_view name) {
  return std::hash<std::string_view>{}(name);
}

NameTable::~NameTable() { ::free(block_); }

size_t NameTable::CapacityFor(size_t links) {
  size_t c = kMinCapacity;
  while (links * 4 > c * 3) c *= 2;
  return c;
}

size_t NameTable::bytes() const {
  return block_ ? sizeof(Block) + capacity() * sizeof(NameLink*) : 0;
}

size_t NameTable::SlotOf(std::string_view name) const {
  NameLink* const* s = Slots();
  size_t i = NameHash(name) & block_->mask;
  // Never full (at most 3/4), so an empty slot ends every probe.
  while (s[i] && s[i]->name() != name) i = (i + 1) & block_->mask;
  return i;
}

NameLink* NameTable::Find(std::string_view name) const {
  if (!block_) return nullptr;
  return Slots()[SlotOf(name)];
}

NameLink* NameTable::First() const {
  NameLink* first = nullptr;
  ForEach([&](NameLink* l) {
    if (!first) first = l;
  });
  return first;
}

void NameTable::Resize(size_t capacity) {
  Block* old = block_;
  const size_t old_capacity = old ? size_t{old->mask} + 1 : 0;
  void* mem = ::calloc(1, sizeof(Block) + capacity * sizeof(NameLink*));
  if (!mem) throw std::bad_alloc();  // as operator new would
  block_ = static_cast<Block*>(mem);
  block_->mask = static_cast<uint32_t>(capacity - 1);
  block_->size = 0;
  if (!old) return;
  NameLink** s = Slots();
  NameLink* const* from = reinterpret_cast<NameLink* const*>(old + 1);
  for (size_t i = 0; i < old_capacity; ++i) {
    if (!from[i]) continue;
    s[SlotOf(from[i]->name())] = from[i];
    ++block_->size;
  }
  ::free(old);
}

NameLink* NameTable::Insert(NameLink* link) {
  if (!block_) Resize(kMinCapacity);
  size_t i = SlotOf(link->name());
  NameLink** s = Slots();
  if (NameLink* there = s[i]) {
    s[i] = link;
    return there;
  }
  if ((size_t{block_->size} + 1) * 4 > capacity() * 3) {
    Resize(capacity() * 2);
    i = SlotOf(link->name());
    s = Slots();
  }
  s[i] = link;
  ++block_->size;
  return nullptr;
}

bool NameTable::Replace(const NameLink* from, NameLink* to) {
  if (!block_) return false;
  size_t i = SlotOf(from->name());
  if (Slots()[i] != from) return false;
  Slots()[i] = to;
  return true;
}

bool NameTable::Erase(const NameLink* link) {
  if (!block_) return false;
  size_t i = SlotOf(link->name());
  if (Slots()[i] != link) return false;
  EraseAt(i);
  return true;
}

void NameTable::EraseAt(size_t slot) {
  NameLink** s = Slots();
  const size_t mask = block_->mask;
  // Backward shift: each later entry of the probe run whose home slot is
  // not between the hole and itself (cyclically) moves into the hole, so a
  // probe for it still meets no empty slot before it.
  size_t hole = slot;
  for (size_t j = (hole + 1) & mask; s[j]; j = (j + 1) & mask) {
    size_t home = NameHash(s[j]->name()) & mask;
    // Does the run from `home` to `j` pass through `hole`?
    const bool passes =
        hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
    if (passes) {
      s[hole] = s[j];
      hole = j;
    }
  }
  s[hole] = nullptr;
  if (--block_->size == 0) {
    ::free(block_);
    block_ = nullptr;
    return;
  }
  if (capacity() > kMinCapacity && size_t{block_->size} * 8 <= capacity())
    Resize(CapacityFor(block_->size));
}

}  // namespace acqfs
