// VanishHook: makes one directory entry vanish at a chosen moment of a walk,
// without a race, for the tests of what the layer code does with an entry
// listed and then gone (fs/layer_chain.h). The test executable that links
// vanish_hook.cc interposes fstatat(2): while a hook is armed, the first
// fstatat of `name` in the directory `dir` renames the entry away (into
// `graveyard`, on the same file system), before the stat (the name was
// listed but is gone when stat'ed) or after it (the stat saw it; the next
// read of it, a getxattr or an open, finds it gone). It fires once.
// Only code in the same executable as vanish_hook.cc is affected, and only
// while a hook lives.
// Thread-safety: one hook at a time; fstatat may be called from any thread.
#ifndef ACQFS_TESTS_FS_VANISH_HOOK_H_
#define ACQFS_TESTS_FS_VANISH_HOOK_H_

#include <string>

namespace acqfs::test {

enum class VanishWhen { kBeforeStat, kAfterStat };

class VanishHook {
 public:
  // `dir`: the entry's directory, as readlink of /proc/self/fd/N names it
  // (an absolute path without symlinks).
  VanishHook(const std::string& dir, const std::string& name, VanishWhen when,
             const std::string& graveyard);
  ~VanishHook();  // disarms
  VanishHook(const VanishHook&) = delete;
  VanishHook& operator=(const VanishHook&) = delete;

  bool fired() const;
};

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_FS_VANISH_HOOK_H_
