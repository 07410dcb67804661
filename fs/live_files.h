// Upper files the kernel may write without the daemon: the backing files of
// FUSE passthrough (fuse/passthrough.h). The kernel keeps an open file's
// backing file, and writes it, for as long as the process holds the file:
// after the daemon's death (kill -9), after a lazy unmount. Such a writer
// must never write a layer the daemon no longer guards (a checkpoint made
// afterwards would freeze the file it still writes).
//
// LiveFileRecord keeps, in <workdir>/acqfs-live, the inode number of each
// upper file the daemon made a backing file of, for as long as the kernel
// may use it: one 8-byte slot each, 0 when free. FenceLiveFiles, run by
// whatever claims the layers next (LayersClaim::Take: a daemon, an
// unmounted checkpoint, rewind or squash), replaces every upper file the
// record lists by a copy of it (data, extended attributes, owner, mode,
// times, every name), so that a writer left over writes a file of no name.
// The record's slots are written with pwrite and never synced: the kernel
// keeps them through a daemon's death, and a machine's crash ends the
// writers too.
//
// Thread-safety: LiveFileRecord's members may be called from any thread
// (`mu_`, a leaf lock, guards the slot map and the file's offsets).
#ifndef ACQFS_FS_LIVE_FILES_H_
#define ACQFS_FS_LIVE_FILES_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/handle.h"

namespace acqfs {

inline constexpr char kLiveFileRecordName[] = "acqfs-live";

class LiveFileRecord {
 public:
  // Opens (making it if needed) the record in the work directory
  // `work_fd` (`work_path` names it in errors).
  static Result<LiveFileRecord> Open(int work_fd, const std::string& work_path);
  LiveFileRecord(LiveFileRecord&& o) noexcept
      : fd_(std::move(o.fd_)),
        shown_(std::move(o.shown_)),
        used_(std::move(o.used_)) {}

  // Records `ino`; returns its slot.
  Result<uint32_t> Add(uint64_t ino);
  // Frees a slot Add returned.
  void Remove(uint32_t slot);

 private:
  LiveFileRecord(UniqueFd fd, std::string shown)
      : fd_(std::move(fd)), shown_(std::move(shown)) {}
  UniqueFd fd_;
  std::string shown_;
  std::mutex mu_;
  std::vector<bool> used_;  // guarded by mu_
};

// An exact copy of the regular file `src` (data, every extended attribute,
// the overlay's own included, owner, mode, times) made as `dirfd`/`name`,
// which must not exist; nothing is left on failure.
Status ReplicateFile(int src, int dirfd, const std::string& name,
                     const std::string& shown);

// Makes `dst_dirfd`/`dst_name` another name of `src_dirfd`/`src_name`,
// replacing what it named in one rename (a hard link made under a temporary
// name first; nothing is left on failure).
Status LinkOver(int src_dirfd, const std::string& src_name, int dst_dirfd,
                const std::string& dst_name, const std::string& shown);

// Replaces every regular file of the upper layer `upper_fd` whose inode
// number the record in `work_fd` lists by a copy of it, then empties the
// record. Nothing is done (one read of an empty file) when it lists none.
// `fenced`, if given, receives how many files were replaced.
Status FenceLiveFiles(int upper_fd, const std::string& upper_path, int work_fd,
                      const std::string& work_path, size_t* fenced = nullptr);

}  // namespace acqfs

#endif  // ACQFS_FS_LIVE_FILES_H_
