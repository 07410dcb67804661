// Directory listings as READDIR serves them, in both file modes.
//
// DirListing is one directory's merged listing, "." and ".." first, the
// rest in the order of their cookies. An entry's READDIR offset (d_off, the
// position after it) is its cookie: 1 for ".", 2 for "..", else a 63-bit
// hash of its name, so it means the same in every listing of the directory
// made since. A READDIR at offset `off` goes on at the first entry whose
// cookie is larger, in whichever listing serves it: a listing made afresh
// after a create or unlink (another open's, the kernel's readdir cache
// giving way to the daemon mid-way) still returns every entry that was
// neither added nor removed exactly once, as POSIX asks and ext4's hash
// cookies do. An index into one listing (the offset until 2026-12-03) did
// not: names made before a reader's position moved the rest along, so it
// saw entries twice or not at all (OneDirectoryRace.*). Two names with one
// hash would lose the second at a resume between them: one chance in 2^63
// per pair.
//   - With directory handles (-o handles), each OPENDIR makes one, owned by
//     the kernel's handle from a successful reply to RELEASEDIR (fh holds
//     its address: HandleOf at OPENDIR, BorrowHandle per READDIR, TakeHandle
//     at RELEASEDIR).
//   - Handle-less (the default: no OPENDIR, the kernel caches listings),
//     READDIRs come without a handle, and ListingCache keeps the listings
//     they read from.
//
// ListingCache is memory only, no descriptors, and bounded: at most
// `max_listings` directories and `max_entries` entries in all, evicting the
// least recently used; one directory larger than `max_entries` is still
// kept, alone. Offset 0 lists the directory afresh (rewinddir sees
// changes); a later offset reads the newest listing, or lists afresh when it
// was evicted. A listing handed out stays valid for its holder after
// eviction (shared ownership).
//
// Thread-safety: ListingCache is safe from any thread (its own mutex, a
// leaf lock; listing happens outside it). A DirListing is used by one
// request at a time (the kernel serialises READDIRs of one open directory).
#ifndef ACQFS_FUSE_DIR_LISTINGS_H_
#define ACQFS_FUSE_DIR_LISTINGS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "fs/overlay.h"

namespace acqfs {

// Compact, for ListingCache holds up to kMaxEntries entries: an entry is 16
// bytes plus its name's, where a vector of ListedEntry took 48 plus a heap
// block for a name longer than 15 bytes (docs/architecture.md, "Memory").
class DirListing {
 public:
  struct Entry {
    std::string_view name;  // NUL-terminated: name.data() is a C string
    unsigned char type;     // DT_*
    uint64_t ino;
  };
  bool listed = false;

  size_t size() const { return slots_.size(); }
  Entry at(size_t i) const {
    const Slot& s = slots_[i];
    return Entry{std::string_view(names_.data() + s.name_at, s.name_size),
                 s.type, s.ino};
  }
  void clear() {
    slots_.clear();
    names_.clear();
  }
  // Room for `entries` more entries whose names take `name_bytes` in all.
  void reserve(size_t entries, size_t name_bytes) {
    slots_.reserve(slots_.size() + entries);
    names_.reserve(names_.size() + name_bytes + entries);
  }
  void Add(std::string_view name, unsigned char type, uint64_t ino);
  // Puts the entries after the first two in the order of their cookies
  // (ListInto does, once it has added every entry).
  void Seal();
  // The READDIR offset that follows entry i, and the entry a READDIR at
  // offset `off` starts at (size() when none is left).
  uint64_t CookieAt(size_t i) const;
  size_t IndexAfter(uint64_t off) const;
  // A name's cookie: 3 to 2^63 - 1, the same in every listing.
  static uint64_t CookieOf(std::string_view name);

 private:
  struct Slot {
    uint64_t ino;
    uint32_t name_at;    // into names_
    uint16_t name_size;  // names are at most NAME_MAX (255) bytes
    unsigned char type;
  };
  std::vector<Slot> slots_;  // "." and ".." first
  std::string names_;        // every name, each followed by a NUL
};

// Fills `out` with the merged listing of `dir`.
Status ListInto(Overlay* ov, Node* dir, DirListing* out);

// The fh of a directory handle owns its listing: HandleOf names it before
// the reply (release the unique_ptr once the reply succeeded), TakeHandle
// takes it back at RELEASEDIR; BorrowHandle is null for fh 0.
inline uint64_t HandleOf(const DirListing* l) {
  return reinterpret_cast<uint64_t>(l);
}
inline DirListing* BorrowHandle(uint64_t fh) {
  return reinterpret_cast<DirListing*>(fh);
}
inline std::unique_ptr<DirListing> TakeHandle(uint64_t fh) {
  return std::unique_ptr<DirListing>(BorrowHandle(fh));
}

class ListingCache {
 public:
  static constexpr size_t kMaxListings = 512;
  static constexpr size_t kMaxEntries = 1 << 20;
  // Lists the directory into the listing given.
  using Lister = std::function<Status(DirListing*)>;

  explicit ListingCache(size_t max_listings = kMaxListings,
                        size_t max_entries = kMaxEntries)
      : max_listings_(max_listings), max_entries_(max_entries) {}
  ListingCache(const ListingCache&) = delete;
  ListingCache& operator=(const ListingCache&) = delete;

  // The listing of `dir` for a READDIR at `off`, made with `list` when the
  // offset is 0 or none is cached. A failed listing caches nothing.
  Result<std::shared_ptr<const DirListing>> Get(const Node* dir, off_t off,
                                                const Lister& list);
  // Forgets the listing of `dir` (the kernel forgot the node).
  void Drop(const Node* dir);

  size_t listings() const;
  size_t entries() const;

 private:
  struct Slot {
    std::shared_ptr<const DirListing> listing;
    std::list<const Node*>::iterator age;  // into lru_
  };
  // Takes the slot of `dir` out (mu_ held); its listing goes to `out`.
  void EraseLocked(std::unordered_map<const Node*, Slot>::iterator it,
                   std::vector<std::shared_ptr<const DirListing>>* out);

  const size_t max_listings_;
  const size_t max_entries_;
  mutable std::mutex mu_;
  std::unordered_map<const Node*, Slot> dirs_;  // mu_
  std::list<const Node*> lru_;                  // mu_: most recently used first
  size_t entries_ = 0;  // mu_: entries of the listings in dirs_
};

}  // namespace acqfs

#endif  // ACQFS_FUSE_DIR_LISTINGS_H_
