// IgnoreRules: git's ignore rules as the sandbox has them, read from the
// merged view (so an agent's edit of .gitignore counts), without a mount and
// without libgit2's workdir-based ignore code (which would read the host's
// files). Sources, lowest priority first: .git/info/exclude, then the
// .gitignore of every directory from the root down to the path's directory
// (gitignore(5): "!" negation, trailing "/" matches directories only, a
// pattern with a "/" other than at its end is anchored to its .gitignore's
// directory, "**" spans directories, "\" escapes; the last matching pattern
// wins; a file below an ignored directory is ignored, whatever re-includes
// it). core.excludesFile is not read (it belongs to a user's config outside
// the sandbox).
//
// Cost. IgnoreRules keeps the directories of its last query, root first,
// each with its parsed .gitignore and whether it is ignored, on a cursor of
// its own (a MergedTree, fs/layer_walk.h: bounded descriptors). A query
// goes up to the deepest directory it shares with the last one and down
// from there, reading each new directory's .gitignore relative to its
// parent's descriptors; below an ignored directory nothing is read. So the
// queries of one export, which come in path order, read each .gitignore
// once, and a query costs O(length of its path) plus the patterns that
// apply, not O(depth) opens from the layer root per ancestor. A pattern is
// matched only against the directories of the .gitignore files that hold
// patterns.
// Thread-safety: one thread (the cursor and the kept directories are state).
#ifndef ACQFS_GITBRIDGE_IGNORE_H_
#define ACQFS_GITBRIDGE_IGNORE_H_

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "gitbridge/merged_tree.h"

namespace acqfs::gitbridge {

// One parsed pattern line; exposed for tests.
struct IgnorePattern {
  std::string pattern;  // without the leading "!" or "/" and trailing "/"
  bool negate = false;
  bool dir_only = false;
  bool anchored = false;  // matched against the path relative to `base`
  std::string base;       // directory of the .gitignore ("" = root)
};

// Parses a .gitignore-format text whose patterns apply below `base`.
std::vector<IgnorePattern> ParseIgnoreFile(const std::string& text,
                                           const std::string& base);
// git's wildmatch with WM_PATHNAME: "*" and "?" do not match "/", "**/"
// matches zero or more directories, "[...]" classes, "\" escapes.
bool WildMatch(std::string_view pattern, std::string_view text);

class IgnoreRules {
 public:
  explicit IgnoreRules(const Layers& layers);
  // The rules of `tree`'s layers (on a cursor of their own).
  explicit IgnoreRules(const MergedTree& tree) : IgnoreRules(tree.layers()) {}
  IgnoreRules(const IgnoreRules&) = delete;
  IgnoreRules& operator=(const IgnoreRules&) = delete;

  // Is `path` ignored? `is_dir` says whether it names a directory. A path
  // inside an ignored directory is ignored.
  Result<bool> IsIgnored(const std::string& path, bool is_dir);

 private:
  // One directory of the last query's path, root first.
  struct Level {
    size_t end = 0;  // path_'s length up to and including this directory
    std::vector<IgnorePattern> patterns;  // its .gitignore
    // The deepest level at or above this one with patterns, or -1.
    int nearest = -1;
    bool ignored = false;  // it, or a directory above it, is ignored
    bool entered = false;  // the cursor went into it (it exists, and no
                           // directory above it is ignored)
  };
  // The name of level `i` (> 0) in path_.
  std::string_view NameOf(size_t i) const;
  Status PushRoot();
  Status PushLevel(std::string_view name);
  Status PopLevel();
  // Decision of the patterns of level `dir` and above, then the exclude
  // file, for `path` in that directory (no parent check): 1 ignored, -1
  // re-included, 0 no pattern matched.
  int Match(size_t dir, std::string_view path, bool is_dir) const;

  MergedTree tree_;
  bool exclude_read_ = false;
  std::vector<IgnorePattern> exclude_;  // .git/info/exclude
  std::string path_;                    // the deepest level's path
  std::vector<Level> levels_;           // levels_[0] is the root
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_IGNORE_H_
