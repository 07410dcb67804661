// LayerFormat: the single owner of the upper layer's on-disk format, which is
// the Linux kernel overlayfs format (Documentation/filesystems/overlayfs.rst):
//   - a whiteout is a character device with device number 0/0;
//   - an opaque directory carries "<ns>overlay.opaque" = "y";
//   - "<ns>overlay.opaque" = "x" marks a directory that may hold xattr
//     whiteouts: zero-size regular files carrying "<ns>overlay.whiteout"
//     (read, never written, by acqfs);
//   - <ns> is "trusted." for privileged mounts and "user." for unprivileged
//     ones (the kernel's `userxattr` option).
// acqfs's own temporary entries live in <workdir>/acqfs-tmp, never in
// <workdir>/work, which belongs to the kernel.
// Thread-safety: immutable after construction.
#ifndef ACQFS_FS_LAYER_FORMAT_H_
#define ACQFS_FS_LAYER_FORMAT_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace acqfs {

enum class XattrNamespace { kTrusted, kUser };

// What a directory's opaque marker says.
enum class OpaqueMark { kNone, kOpaque, kMayHoldXattrWhiteouts };

class LayerFormat {
 public:
  explicit LayerFormat(XattrNamespace ns) : ns_(ns) {}

  // The namespace a daemon with these privileges uses: trusted when it runs
  // as root (and userxattr is not forced), user otherwise.
  static XattrNamespace DefaultNamespace(bool force_user);

  XattrNamespace ns() const { return ns_; }
  // "trusted.overlay." or "user.overlay.".
  std::string Prefix() const;
  std::string OpaqueKey() const { return Prefix() + "opaque"; }
  std::string WhiteoutKey() const { return Prefix() + "whiteout"; }
  // acqfs's own marker on an upper object made from a lower one (copy-up,
  // materialisation): the lower object's st_ino, so the object keeps
  // reporting it wherever it moves and across remounts. The kernel ignores
  // it and hides it like every "<ns>overlay." xattr.
  std::string OriginKey() const { return Prefix() + "acqfs.origin"; }
  static std::string MakeOriginValue(uint64_t ino);
  // acqfs's mark on an upper file whose copy-up kept its source (the host's
  // file as the copy started from it, fs/copy_up_source.h): the key of that
  // source in the sandbox's store.
  std::string SourceKey() const { return Prefix() + "acqfs.source"; }
  static uint64_t ParseOriginValue(std::string_view v);  // 0 if invalid

  // True for xattrs owned by the overlay format; they are hidden from users
  // of the mount and cannot be set through it.
  bool IsPrivateXattr(std::string_view name) const;

  // The marker value <-> meaning. Parse(Make(m)) == m.
  static std::string MakeOpaqueValue(OpaqueMark m);
  static OpaqueMark ParseOpaqueValue(std::string_view v);

  // A whiteout in the device form: of an lstat, or of the mode and device
  // number a mknod would make (one that would read back as a whiteout).
  static bool IsWhiteout(mode_t mode, dev_t rdev) {
    return S_ISCHR(mode) && rdev == 0;
  }
  static bool IsWhiteout(const struct stat& st) {
    return IsWhiteout(st.st_mode, st.st_rdev);
  }
  static constexpr mode_t kWhiteoutMode = S_IFCHR | 0;

  // Creates a 0/0 whiteout called `name` in `dirfd`.
  static Status MakeWhiteout(int dirfd, const std::string& name,
                             const std::string& shown);

  // Reads the opaque marker of `name` in `dirfd` (a directory).
  Result<OpaqueMark> ReadOpaque(int dirfd, const std::string& name,
                                const std::string& shown) const;
  Status SetOpaque(int dirfd, const std::string& name,
                   const std::string& shown) const;
  // Reads the origin marker of `name` in `dirfd`; 0 when there is none.
  Result<uint64_t> ReadOrigin(int dirfd, const std::string& name,
                              const std::string& shown) const;
  // Sets it where the file type allows (user.* xattrs exist only on regular
  // files and directories; elsewhere the marker is skipped).
  Status SetOrigin(int dirfd, const std::string& name, uint64_t ino,
                   const std::string& shown) const;
  // The same for an open regular file (a copy-up not yet given a name).
  Status SetOriginFd(int fd, uint64_t ino, const std::string& shown) const;
  // For a zero-size regular file: does it carry the whiteout xattr?
  Result<bool> IsXattrWhiteout(int dirfd, const std::string& name,
                               const std::string& shown) const;
  // The whiteout test every reader of the upper layer uses: is the entry
  // `name` of the upper directory `dirfd` (its lstat `st`) a whiteout in
  // either form? A 0/0 character device, or, when the directory's opaque
  // marker is "x" (`dir_holds_xattr_whiteouts`), a zero-size regular file
  // carrying the whiteout xattr (read only then: one getxattr at most).
  Result<bool> IsWhiteoutEntry(int dirfd, const std::string& name,
                               const struct stat& st,
                               bool dir_holds_xattr_whiteouts,
                               const std::string& shown) const;
  // The format's own xattrs in either namespace ("trusted.overlay.*",
  // "user.overlay.*": this format's markers and the kernel's): never part
  // of what a user changed, whichever namespace the layers are read in.
  static bool IsOverlayXattr(std::string_view name);

  // The work directory's private subdirectory for acqfs temporaries.
  static constexpr const char* kTempDirName = "acqfs-tmp";
  // Prefix of temporary names inside it.
  static constexpr const char* kTempPrefix = "#acqfs.";

 private:
  XattrNamespace ns_;
};

}  // namespace acqfs

#endif  // ACQFS_FS_LAYER_FORMAT_H_
