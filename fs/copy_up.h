// Copy-up and its relatives: every way acqfs builds a new upper entry from
// an existing one. Each builds in <workdir>/acqfs-tmp and publishes with a
// single linkat (a regular file, built in a nameless O_TMPFILE inode) or
// renameat (the rest), so a crash at any instant leaves either no upper
// entry or a complete one (plus, for the named kind, junk in acqfs-tmp,
// removed at the next mount).
// Thread-safety: the functions are reentrant; callers serialise changes to
// the same upper path (the overlay's tree lock does).
#ifndef ACQFS_FS_COPY_UP_H_
#define ACQFS_FS_COPY_UP_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/error.h"

namespace acqfs {

struct Layers;
struct DirView;

// Called after a copy is complete in the work area and before it is
// published; a failure aborts the copy-up. Tests use it to interrupt.
using CopyUpHook = std::function<Status(const std::string& rel)>;
void SetCopyUpHookForTesting(CopyUpHook hook);

// Which lower layer a copy is made from (fs/layer.h: 0 is the host), and
// the origin marker it gets: the number the object is reported with
// (ChildInfo::lower_ino; 0: the source's st_ino, right for the host).
struct LowerSource {
  unsigned layer = 0;
  uint64_t origin = 0;
};

// Copies the lower object at `rel` (any type; a directory without its
// children) into the upper layer at the same path. The upper parent must
// exist and `rel` must not exist in the upper.
Status CopyUp(const Layers& layers, const std::string& rel,
              LowerSource from = {});

// Copies the lower object at `rel` (any type; a directory without its
// children), with its attributes and origin marker, to `dst_dirfd`/`dst_name`
// (which must not exist). Nothing is published: the caller owns the copy.
Status CopyLowerTo(const Layers& layers, const std::string& rel, int dst_dirfd,
                   const std::string& dst_name, LowerSource from = {});

// The same for a lower regular file reached by a descriptor (any kind,
// O_PATH included) rather than a path: a lower file kept open by the daemon
// after its name was deleted, even if the host removed it meanwhile. EINVAL
// for anything but a regular file.
Status CopyLowerFdTo(const Layers& layers, int src_fd, int dst_dirfd,
                     const std::string& dst_name, const std::string& shown);

// Builds in `dst_dirfd`/`dst_name` a full, independent copy of the merged
// directory `dir`: upper non-directories are hard-linked (keeping their
// inodes), lower ones copied, directories rebuilt recursively, whiteouts
// dropped, metadata copied. Used to materialise a directory before a rename.
// Every copy carries the origin marker of what it was made from, the new
// directory `origin` (0: none), so st_ino survives the move.
Status BuildMergedCopy(const Layers& layers, const DirView& dir, int dst_dirfd,
                       const std::string& dst_name, uint64_t origin);

// Copies xattrs (except the overlay's private ones), owner (when
// privileged), mode and times of `src_st` / the source entry onto the
// destination entry. Never follows symlinks.
Status CopyAttrs(const Layers& layers, int src_dirfd,
                 const std::string& src_name, const struct stat& src_st,
                 int dst_dirfd, const std::string& dst_name,
                 const std::string& shown);

// Copies all bytes of `in` to `out`: FICLONE, else copy_file_range, else
// read/write.
Status CopyData(int in, int out, const std::string& shown);

}  // namespace acqfs

#endif  // ACQFS_FS_COPY_UP_H_
