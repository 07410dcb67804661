// CopyUpSources: what a copy-up of a host file started from, kept when the
// host changed that file after the sandbox's base (docs/git-bridge.md, "A
// host edit the sandbox then wrote over").
//
// The sandbox sees the host's working tree live. A host file the host edits
// after the base and the sandbox then writes is copied up with the host's
// edit in it, so the upper file holds both. A clone made at the base would
// hold only the agent's. To let the export tell the two apart, such a
// copy-up keeps the bytes it started from (its *source*):
//   - only for a regular file of the host (layer 0) whose ctime, read after
//     the copy, is not before `changed_since_ns` (the base's instant): a
//     file the host left alone since the base needs nothing, since the
//     base's version is what the copy started from;
//   - the source goes into the store, a directory of the sandbox's state
//     folder (never inside the layers, never inside the mount), as one file
//     named by a random key: a header (the path copied and its mode) and
//     the bytes. It is written and synced before the copy-up is published,
//     so a published copy never names a source that is not complete;
//   - the copy is marked with the key (LayerFormat::SourceKey, a private
//     "<ns>overlay." xattr: hidden from the mount's users, ignored by the
//     kernel overlayfs). The mark travels with the file: a copy-up from a
//     frozen layer and a squash's copy carry it, a hard link shares it.
// Files larger than kMaxKept keep no source (the export then keeps the
// sandbox's file whole, host edit included, as before).
// Thread-safety: immutable after Open; Keep and Read may run on any thread.
#ifndef ACQFS_FS_COPY_UP_SOURCE_H_
#define ACQFS_FS_COPY_UP_SOURCE_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/handle.h"
#include "fs/layer_format.h"

namespace acqfs {

class CopyUpSources {
 public:
  static constexpr uint64_t kMaxKept = uint64_t{64} << 20;
  // The store at `dir`. `create`: made (0700) when missing, for a daemon
  // that keeps sources of host files whose ctime is at or after
  // `changed_since_ns`, which also removes the temporaries a writer killed
  // mid-way left. A reader passes create=false and 0: ENOENT when the store
  // does not exist.
  static Result<std::shared_ptr<const CopyUpSources>> Open(
      const std::string& dir, int64_t changed_since_ns, bool create);

  // Keeps a source for the host file `host_fd` (read only for its ctime and
  // mode, after the copy) when the host changed it since the base: the
  // bytes of `content_fd` (the finished copy of it, or the host file
  // itself; any access mode, it is reopened for reading) and the host
  // file's mode, recorded as the source of `rel`. Returns its key, or
  // nullopt for a file that needs none (unchanged since the base, not a
  // regular file, over kMaxKept). The caller marks the file (Mark).
  Result<std::optional<std::string>> Keep(int host_fd, int content_fd,
                                          const std::string& rel,
                                          bool sync) const;
  // Marks the own layer's file `fd` with `key`.
  static Status Mark(const LayerFormat& format, int fd, const std::string& key,
                     const std::string& shown);

  struct Source {
    std::string path;  // the path the copy-up was made at
    mode_t mode = 0;   // the host file's mode then (permission bits)
    std::string data;  // its bytes then
  };
  // The source `key` names; ENOENT when it is not in the store, EINVAL when
  // the key or the file is malformed.
  Result<Source> Read(const std::string& key) const;

  const std::string& dir() const { return dir_; }

 private:
  CopyUpSources(UniqueFd dir, std::string path, int64_t since)
      : dirfd_(std::move(dir)), dir_(std::move(path)), since_ns_(since) {}
  UniqueFd dirfd_;
  std::string dir_;
  int64_t since_ns_;  // 0: keeps nothing
};

// The source key a file of an own layer is marked with (open, not O_PATH);
// nullopt when it has none or the mark is not a valid key.
Result<std::optional<std::string>> SourceKeyOf(const LayerFormat& format,
                                               int fd,
                                               const std::string& shown);
// Copies the mark of `src_fd` (a file of a frozen layer) onto `dst_fd`.
Status CarrySourceKey(const LayerFormat& format, int src_fd, int dst_fd,
                      const std::string& shown);

}  // namespace acqfs

#endif  // ACQFS_FS_COPY_UP_SOURCE_H_
