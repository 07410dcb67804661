// ScopedHandle<T, Traits>: move-only owner of a C handle (after Chromium's
// base/scoped_generic.h). UniqueFd owns a file descriptor; closing an fd that
// is already closed (EBADF) is a bug and aborts.
// Thread-safety: a handle object is not synchronised; the fd it holds may be
// used from several threads as the kernel allows.
#ifndef ACQFS_COMMON_HANDLE_H_
#define ACQFS_COMMON_HANDLE_H_

#include <dirent.h>

#include <utility>

namespace acqfs {

template <class T, class Traits>
class ScopedHandle {
 public:
  ScopedHandle() = default;
  explicit ScopedHandle(T v) : v_(v) {}
  ScopedHandle(const ScopedHandle&) = delete;
  ScopedHandle& operator=(const ScopedHandle&) = delete;
  ScopedHandle(ScopedHandle&& o) noexcept : v_(o.release()) {}
  ScopedHandle& operator=(ScopedHandle&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~ScopedHandle() { reset(); }

  T get() const { return v_; }
  bool is_valid() const { return v_ != Traits::Invalid(); }
  explicit operator bool() const { return is_valid(); }
  void reset(T v = Traits::Invalid()) {
    if (is_valid()) Traits::Free(v_);
    v_ = v;
  }
  [[nodiscard]] T release() { return std::exchange(v_, Traits::Invalid()); }

 private:
  T v_ = Traits::Invalid();
};

struct FdTraits {
  static int Invalid() { return -1; }
  static void Free(int fd);
};
using UniqueFd = ScopedHandle<int, FdTraits>;

struct DirTraits {
  static DIR* Invalid() { return nullptr; }
  static void Free(DIR* d);
};
using UniqueDir = ScopedHandle<DIR*, DirTraits>;

}  // namespace acqfs

#endif  // ACQFS_COMMON_HANDLE_H_
