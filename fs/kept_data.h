// Kept data: the data of a file that lost its last name while the kernel
// may still read or write it (an open file that was unlinked or renamed
// over). POSIX keeps such a file's data until its last close; so does
// acqfs, whatever the file mode, without one descriptor per file.
//
// KeptData is the one value that says where such data lives:
//   kDescriptor  an O_PATH descriptor of the upper inode, which has no name
//                left anywhere (at most `fd_budget` of these at a time);
//   kTmpName     an entry of <work>/acqfs-tmp/ (beyond the budget, and for
//                a lower file once something changes it);
//   kLower       the lower file: an O_PATH descriptor of its inode within
//                the budget (so the data survives the host deleting or
//                replacing the file meanwhile), else its path, which the
//                sandbox cannot change; nothing is copied until a change
//                needs it.
// KeptStore makes, opens, stats and gives up kept data. It keeps at most
// `fd_budget` descriptors, and as many again only when acqfs-tmp has no
// room (ENOSPC, EDQUOT: a full disk must still let files be unlinked), so
// the daemon's descriptors stay bounded (docs/architecture.md,
// "Descriptors"). Past both it refuses with ENOSPC rather than lose the
// data of a file a process may hold.
//
// Thread-safety: a KeptData is owned by one Node and guarded by the
// Overlay's locks (written with the tree lock exclusive). KeptStore is
// safe from any thread: the budget is atomic, the doomed lists have their
// own mutex (a leaf lock: nothing is acquired while it is held).
#ifndef ACQFS_FS_KEPT_DATA_H_
#define ACQFS_FS_KEPT_DATA_H_

#include <sys/stat.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/handle.h"

namespace acqfs {

struct Layers;

class KeptData {
 public:
  enum class Where : uint8_t { kNowhere, kDescriptor, kTmpName, kLower };

  KeptData() = default;
  // A moved-from KeptData is empty.
  KeptData(KeptData&& o) noexcept
      : where_(std::exchange(o.where_, Where::kNowhere)),
        layer_(o.layer_),
        fd_(std::move(o.fd_)),
        name_(std::move(o.name_)) {}
  KeptData& operator=(KeptData&& o) noexcept {
    where_ = std::exchange(o.where_, Where::kNowhere);
    layer_ = o.layer_;
    fd_ = std::move(o.fd_);
    name_ = std::move(o.name_);
    return *this;
  }
  KeptData(const KeptData&) = delete;
  KeptData& operator=(const KeptData&) = delete;

  Where where() const { return where_; }
  // kLower: the lower layer holding the data, and its new number when the
  // stack's frozen layers are renumbered (a squash while mounted).
  unsigned layer() const { return layer_; }
  void set_layer(unsigned layer) { layer_ = static_cast<uint8_t>(layer); }
  bool empty() const { return where_ == Where::kNowhere; }
  // The data is the lower file's (nothing was copied).
  bool in_lower() const { return where_ == Where::kLower; }
  // kTmpName: the name in acqfs-tmp; "" otherwise.
  const std::string& tmp_name() const {
    static const std::string kNone;
    return where_ == Where::kTmpName ? name_ : kNone;
  }

 private:
  friend class KeptStore;
  Where where_ = Where::kNowhere;
  uint8_t layer_ = 0;  // kLower: the lower layer (fs/layer.h; 0: the host)
  UniqueFd fd_;        // kDescriptor, and kLower within the budget
  std::string name_;   // kTmpName: name in acqfs-tmp; kLower: lower path
};

class KeptStore {
 public:
  // `layers` must outlive the store. `fd_budget`: descriptors it may hold.
  KeptStore(const Layers* layers, size_t fd_budget)
      : layers_(layers), budget_(fd_budget) {}
  KeptStore(const KeptStore&) = delete;
  KeptStore& operator=(const KeptStore&) = delete;
  ~KeptStore() { Reap(); }

  void set_budget(size_t n) { budget_ = n; }
  // Descriptors held now.
  size_t descriptors() const { return fds_.load(); }

  // Keeps the upper object `name` in `dirfd` and removes that name: an
  // O_PATH descriptor and an unlink within the budget, else one rename
  // into acqfs-tmp. Either way `name` is gone when it returns Ok.
  Result<KeptData> KeepAndRemove(int dirfd, const std::string& name,
                                 const std::string& shown);
  // Keeps the upper object `name` in `dirfd`, whose name the caller is
  // about to replace (rename over it, a whiteout): a descriptor within the
  // budget, else a hard link in acqfs-tmp. The name is left as it is.
  Result<KeptData> Keep(int dirfd, const std::string& name,
                        const std::string& shown);
  // Keeps the file `name` of acqfs-tmp, which the caller made there (an
  // O_TMPFILE's data, Overlay::CreateTmpfile), by that name.
  KeptData AdoptTmpName(std::string name);
  // Keeps a lower file (`rel` from the layer roots, in lower layer `layer`):
  // by a descriptor of its inode within the budget, else by its path (a
  // frozen layer never changes; the host may).
  KeptData KeepLower(std::string rel, unsigned layer = 0);

  // Turns lower-kept data into a copy of its own in acqfs-tmp (data,
  // owner, mode, times, xattrs, origin marker), so that it can be changed.
  // A no-op for data already in the upper.
  Status MakeChangeable(KeptData* k);

  // Opens the kept data with open(2) `flags` (O_PATH included). Writing
  // lower-kept data is refused (EROFS): MakeChangeable first.
  Result<UniqueFd> Open(const KeptData& k, int flags) const;
  Result<struct stat> Stat(const KeptData& k) const;
  // What the upper layer frees when `k` is given up: the blocks its inode
  // holds (st_blocks in bytes) when no other name of it is left; nothing
  // when one is, or for lower-kept data.
  std::optional<uint64_t> FreedByRelease(const KeptData& k) const;

  // Gives the data up. What it held is closed or removed by Reap(), which
  // the caller runs once it has released its locks: the last reference to
  // an inode with no name left makes the file system free it, which is slow.
  void Release(KeptData k);
  void Reap();

 private:
  Result<UniqueFd> OpenPath(int dirfd, const std::string& name,
                            const std::string& shown) const;
  // One descriptor of the budget (or, with `reserve`, of twice it).
  bool TakeBudget(bool reserve);
  Result<KeptData> KeepAndRemove(int dirfd, const std::string& name,
                                 const std::string& shown, bool reserve);
  void GiveBudget() { fds_.fetch_sub(1); }

  const Layers* layers_;
  size_t budget_;
  std::atomic<size_t> fds_{0};
  std::mutex mu_;  // guards the two lists below
  std::vector<UniqueFd> doomed_fds_;
  std::vector<std::string> doomed_names_;
  std::atomic<bool> doomed_{false};  // either list is not empty
};

}  // namespace acqfs

#endif  // ACQFS_FS_KEPT_DATA_H_
