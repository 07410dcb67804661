// Error and Result<T>: how every module reports failure.
//
// An Error carries the errno (FUSE replies with it), the operation that failed
// and the path it failed on, so every message names what went wrong and where.
// Result<T> is a small stand-in for C++23's std::expected. Nothing here throws.
// Thread-safety: value types, safe to copy between threads.
#ifndef ACQFS_COMMON_ERROR_H_
#define ACQFS_COMMON_ERROR_H_

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace acqfs {

struct Error {
  int err = EIO;     // errno value, always > 0
  std::string op;    // e.g. "openat2", "copy up"
  std::string path;  // the path the operation was about ("" when none)

  // Captures the current errno.
  static Error Errno(std::string op, std::string path) {
    return Error{errno ? errno : EIO, std::move(op), std::move(path)};
  }
  static Error Of(int err, std::string op, std::string path) {
    return Error{err, std::move(op), std::move(path)};
  }
  // "<op>: <path>: <strerror>"
  std::string Message() const;
};

// Does `err` say that the object a path named went away or was replaced
// while it was being read (a sandbox changing under a scan of its layers)?
// The name is gone (ENOENT), a directory on the way became something else
// (ENOTDIR, or ELOOP: a symlink under RESOLVE_NO_SYMLINKS), the file became
// a whiteout (ENXIO: a 0/0 device was opened) or a directory (EISDIR), or a
// descriptor went stale (ESTALE).
inline bool ChangedUnderfoot(int err) {
  return err == ENOENT || err == ENOTDIR || err == ELOOP || err == ENXIO ||
         err == EISDIR || err == ESTALE;
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit
  Result(Error error) : v_(std::move(error)) {}  // NOLINT: implicit
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }
  int err() const { return ok() ? 0 : error().err; }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }
  int err() const { return ok_ ? 0 : error_.err; }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;
inline Status Ok() { return Status(); }

}  // namespace acqfs

// Propagates a failed Result/Status from the enclosing function.
#define ACQFS_TRY(expr)                                  \
  do {                                                   \
    auto acqfs_try_r_ = (expr);                          \
    if (!acqfs_try_r_.ok()) return acqfs_try_r_.error(); \
  } while (0)

#endif  // ACQFS_COMMON_ERROR_H_
