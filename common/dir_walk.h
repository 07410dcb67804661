// Walking a directory tree with a bounded number of descriptors, however
// deep or wide the tree is.
//
// DirStack is the path of open directories from a root down to the current
// one (the top). It keeps at most `max_open` of them open, always the
// deepest ones: going deeper closes the shallowest open one; coming back up
// reopens a parent through ".." of its child and checks that it is the
// directory it left (same device and inode), so a rename during the walk is
// an error, never a walk of another tree. Only the top is guaranteed open.
// Each Push and Pop costs O(1) system calls and O(length of the name), however
// deep the stack is (the shown path is kept, not rebuilt), so a walk of a
// chain of 100,000 directories is linear. `kPathOnly` stacks hold O_PATH
// descriptors (no read permission needed on the directories themselves; a
// listing opens its own descriptor), the default ones O_RDONLY.
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
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "common/sys.h"

namespace acqfs {

class DirStack {
 public:
  enum Mode { kReadable, kPathOnly };
  // `root` is borrowed and stays open; `shown` names it in messages.
  DirStack(int root, std::string shown, size_t max_open = 8,
           Mode mode = kReadable)
      : root_(root),
        shown_(std::move(shown)),
        max_open_(max_open < 1 ? 1 : max_open),
        mode_(mode) {}
  DirStack(const DirStack&) = delete;
  DirStack& operator=(const DirStack&) = delete;

  // Enters the subdirectory `name` of the top (never a symlink as its last
  // component; EINVAL for "", "." and ".."). A walk's first Push may name a
  // path (RemoveTree(AT_FDCWD, "/abs/dir")); every later one is one
  // component read from the directory above. With
  // `make_enterable`, a directory the caller may not enter or change is
  // given mode 0700 first (for removal; kReadable stacks only).
  Status Push(const std::string& name, bool make_enterable = false);
  // Goes back to the parent of the top.
  Status Pop();
  // Goes to the directory `rel` below the root ('/'-separated components,
  // "" = the root): up to the deepest level the current path shares with
  // it, then down. Costs what the two paths do not share, so a walk that
  // visits paths in sorted order pays for each directory about once.
  Status GoTo(std::string_view rel);

  int top() const { return levels_.empty() ? root_ : levels_.back().fd.get(); }
  size_t depth() const { return levels_.size(); }
  // The name of the `i`-th level below the root (0-based).
  const std::string& name(size_t i) const { return levels_[i].name; }
  // The top's path for messages.
  const std::string& Shown() const { return shown_; }
  std::string ShownChild(const std::string& name) const {
    return shown_ + "/" + name;
  }
  // How many descriptors the stack holds now (for tests).
  size_t open() const { return levels_.size() - first_open_; }

 private:
  struct Level {
    std::string name;
    size_t shown_end = 0;  // shown_'s length before "/<name>"
    UniqueFd fd;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  int OpenAt(int parent, const std::string& name) const;

  int root_;
  std::string shown_;  // the root's shown name, then "/<name>" per level
  size_t max_open_;
  Mode mode_;
  std::vector<Level> levels_;
  // The open levels are levels_[first_open_, size): the deepest ones.
  size_t first_open_ = 0;
};

// The callbacks get the path of the directory they are about, for
// messages, and build an entry's path (`dir_shown + "/" + name`) only when
// they need it: a walk of a chain 100,000 directories deep that built it for
// every entry would copy O(depth) bytes per entry.
struct TreeVisitor {
  // Each entry of the directory open as `dirfd` (shown as `dir_shown`);
  // returns true to walk into it (it must be a directory). Entries are
  // visited in directory order.
  std::function<Result<bool>(int dirfd, const sys::DirEntry& e,
                             const std::string& dir_shown)>
      entry;
  // After everything below the directory `name` was visited, with its
  // parent open as `parent` (shown as `parent_shown`; not called for the
  // walk's root). Optional.
  std::function<Status(int parent, const std::string& name,
                       const std::string& parent_shown)>
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
