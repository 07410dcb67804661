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
// Thread-safety: not thread-safe (caches parsed .gitignore files).
#ifndef ACQFS_GITBRIDGE_IGNORE_H_
#define ACQFS_GITBRIDGE_IGNORE_H_

#include <map>
#include <memory>
#include <string>
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
bool WildMatch(const std::string& pattern, const std::string& text);

class IgnoreRules {
 public:
  explicit IgnoreRules(const MergedTree& tree);
  // Is `path` ignored? `is_dir` says whether it names a directory. A path
  // inside an ignored directory is ignored.
  Result<bool> IsIgnored(const std::string& path, bool is_dir);

 private:
  Result<const std::vector<IgnorePattern>*> PatternsOf(const std::string& dir);
  // Decision of the patterns alone for one path (no parent check):
  // 1 ignored, -1 re-included, 0 no pattern matched.
  Result<int> Match(const std::string& path, bool is_dir);

  const MergedTree& tree_;
  std::vector<IgnorePattern> exclude_;  // .git/info/exclude
  std::map<std::string, std::vector<IgnorePattern>> by_dir_;
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_IGNORE_H_
