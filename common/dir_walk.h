// Walking a directory tree with a bounded number of descriptors, however
// deep or wide the tree is.
//
// DirStack is the path of open directories from a root down to the current
// one (the top). It keeps at most `max_open` of them open: going deeper
// closes the shallowest; coming back up reopens a parent through ".." of
// its child and checks that it is the directory it left (same device and
// inode), so a rename during the walk is an error, never a walk of another
// tree. Only the top is guaranteed open.
//
// WalkTree visits every entry below one directory depth first on a
// DirStack, remembering the subdirectories still to visit by name (memory,
// not descriptors), and calls `leave` for a directory once everything
// below it was visited (so removal and attribute copies can run bottom-up).
// Thread-safety: a DirStack is used by one thread; the functions are
// reentrant.
#ifndef ACQFS_COMMON_DIR_WALK_H_
#define ACQFS_COMMON_DIR_WALK_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "common/sys.h"

namespace acqfs {

class DirStack {
 public:
  // `root` is borrowed and stays open; `shown` names it in messages.
  DirStack(int root, std::string shown, size_t max_open = 8)
      : root_(root), shown_(std::move(shown)), max_open_(max_open) {}
  DirStack(const DirStack&) = delete;
  DirStack& operator=(const DirStack&) = delete;

  // Enters the subdirectory `name` of the top (never a symlink). With
  // `make_enterable`, a directory the caller may not enter or change is
  // given mode 0700 first (for removal).
  Status Push(const std::string& name, bool make_enterable = false);
  // Goes back to the parent of the top.
  Status Pop();

  int top() const { return levels_.empty() ? root_ : levels_.back().fd.get(); }
  size_t depth() const { return levels_.size(); }
  // The top's path for messages.
  std::string Shown() const;
  std::string ShownChild(const std::string& name) const {
    return Shown() + "/" + name;
  }
  // How many descriptors the stack holds now (for tests).
  size_t open() const { return open_; }

 private:
  struct Level {
    std::string name;
    UniqueFd fd;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  int root_;
  std::string shown_;
  size_t max_open_;
  std::vector<Level> levels_;
  size_t open_ = 0;
};

struct TreeVisitor {
  // Each entry of the directory open as `dirfd`; returns true to walk into
  // it (it must be a directory). Entries are visited in directory order.
  std::function<Result<bool>(int dirfd, const sys::DirEntry& e,
                             const std::string& shown)>
      entry;
  // After everything below the directory `name` was visited, with its
  // parent open as `parent` (not called for the walk's root). Optional.
  std::function<Status(int parent, const std::string& name,
                       const std::string& shown)>
      leave;
  // Passed to DirStack::Push.
  bool make_enterable = false;
};

// Walks below the directory `name` in `dirfd` ("" for `dirfd` itself),
// calling `visit.leave` for it too when `name` is not "".
Status WalkTree(int dirfd, const std::string& name, const std::string& shown,
                const TreeVisitor& visit, size_t max_open = 8);

}  // namespace acqfs

#endif  // ACQFS_COMMON_DIR_WALK_H_
