// NameLink and NameTable: the node table's names, in as little memory as
// the daemon can keep them (docs/architecture.md, "Memory").
//
// A NameLink is one name of a node: its parent and the name's bytes, stored
// in the link itself when they fit (kInline bytes; most file names do) and
// else in one heap block of exactly their size. A Node is a NameLink (its
// position); a hard link's other names are Aliases (fs/node_table.h), which
// are NameLinks too.
//
// A NameTable is one directory's children: a set of NameLinks keyed by
// their own names, so the name is stored once, in the link, not again as a
// key. Open addressing with linear probing over a power-of-two array of
// pointers, at most 3/4 full, one allocation (none while empty, so an empty
// table is one null pointer); an erase shifts the entries after it back,
// so there are no tombstones, and the array shrinks when it is 1/8 full.
//
// Neither has a lock: the node table's locks guard them (fs/node_table.h).
#ifndef ACQFS_FS_NAME_TABLE_H_
#define ACQFS_FS_NAME_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace acqfs {

struct Node;

class NameLink {
 public:
  // Bytes of a name stored in the link itself.
  static constexpr size_t kInline = 22;

  NameLink() : len_(0), alias_(false) {}
  ~NameLink() { FreeName(); }
  NameLink(const NameLink&) = delete;
  NameLink& operator=(const NameLink&) = delete;

  // The directory this name is in; null for a node without a position
  // (the root, an unlinked node).
  Node* parent = nullptr;

  std::string_view name() const {
    if (len_ != kOnHeap) return std::string_view(bytes_, len_);
    Heap h = heap();
    return std::string_view(h.bytes, h.size);
  }
  // Never while the link is in a NameTable (its key would change under it).
  void SetName(std::string_view name);
  // Is the name's storage a heap block of its own?
  bool name_on_heap() const { return len_ == kOnHeap; }
  // An Alias (fs/node_table.h), not a Node's own position.
  bool is_alias() const { return alias_; }

 protected:
  explicit NameLink(bool alias) : len_(0), alias_(alias) {}

 private:
  static constexpr uint8_t kOnHeap = 0xff;
  // A name on the heap: its block and length, kept in bytes_ (copied in
  // and out, so that bytes_ needs no pointer alignment and the link packs
  // into 32 bytes).
  struct Heap {
    char* bytes;
    uint32_t size;
  };
  Heap heap() const;
  void FreeName();

  // The name when inline, else a Heap.
  char bytes_[kInline];
  uint8_t len_;  // the length when inline, kOnHeap when on the heap
  const bool alias_;
};
static_assert(sizeof(NameLink) == 32, "a NameLink is 32 bytes");
static_assert(NameLink::kInline < 0xff, "kOnHeap is no inline length");

// The hash NameTable places names by.
size_t NameHash(std::string_view name);

class NameTable {
 public:
  NameTable() = default;
  ~NameTable();
  NameTable(const NameTable&) = delete;
  NameTable& operator=(const NameTable&) = delete;

  // The link named `name`, or null.
  NameLink* Find(std::string_view name) const;
  // Puts `link` in under its name. A link already there under that name is
  // taken out and returned (else null): the caller decides what it was.
  NameLink* Insert(NameLink* link);
  // Takes `link` out if it is the one there under its name; says whether
  // it was.
  bool Erase(const NameLink* link);
  // Puts `to`, which has the same name, in the place of `from` if `from` is
  // the one there under that name; says whether it was.
  bool Replace(const NameLink* from, NameLink* to);

  bool empty() const { return block_ == nullptr; }
  size_t size() const { return block_ ? block_->size : 0; }
  // Slots allocated (a power of two, 0 while empty).
  size_t capacity() const { return block_ ? size_t{block_->mask} + 1 : 0; }
  // The bytes its allocation takes (0 while empty).
  size_t bytes() const;
  // Some link in the table, or null when it is empty.
  NameLink* First() const;
  // Calls `fn(link)` for every link; `fn` must not change the table.
  template <class Fn>
  void ForEach(Fn fn) const {
    if (!block_) return;
    NameLink* const* s = Slots();
    for (size_t i = 0; i <= block_->mask; ++i)
      if (s[i]) fn(s[i]);
  }

 private:
  static constexpr size_t kMinCapacity = 2;
  struct Block {
    uint32_t size;  // links held
    uint32_t mask;  // slots - 1
    // followed by the slots: NameLink*[mask + 1]
  };
  NameLink** Slots() const { return reinterpret_cast<NameLink**>(block_ + 1); }
  // The slot holding `name`, or the empty slot where it would go.
  size_t SlotOf(std::string_view name) const;
  void Resize(size_t capacity);
  static size_t CapacityFor(size_t links);
  void EraseAt(size_t slot);

  Block* block_ = nullptr;
};

}  // namespace acqfs

#endif  // ACQFS_FS_NAME_TABLE_H_
