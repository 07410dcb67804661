// A sandbox's boundaries (docs/sandboxes.md, "Policy"): lower paths the
// sandbox cannot see, paths it may read but not change, and a cap on the
// size of its upper layer. The patterns are gitignore-style globs over paths
// relative to the layer roots. No FUSE here: the lookup rules (fs/layer),
// the overlay, the change scan and the git bridge all consult one Policy.
// Thread-safety: immutable after construction; share freely.
#ifndef ACQFS_FS_POLICY_H_
#define ACQFS_FS_POLICY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace acqfs {

// One gitignore-style pattern:
//   - without a slash (a trailing one aside) it matches a name at any depth:
//     "*.pem", ".env.*";
//   - with a slash elsewhere it matches the whole relative path, anchored at
//     the root ("config/prod.json"; a leading slash only anchors: "/build");
//   - a trailing slash matches directories only: ".ssh/";
//   - "*" and "?" never match '/', "[...]" is a character class, "\" quotes
//     the next character, and "**" as a whole component matches any number
//     of components (none included): "**/id_rsa", "secrets/**", "a/**/b".
// A match on a directory covers everything below it (see Policy).
// Refused (EINVAL naming the pattern): an empty pattern, "!" negation, "."
// or ".." components, an unclosed "[", a trailing backslash, a control
// character (NUL, newline, tab, ...), an unescaped space at the end (which
// gitignore would drop).
class PathGlob {
 public:
  static Result<PathGlob> Parse(const std::string& text);

  // `rel`: a path relative to the root without a leading slash.
  bool Matches(std::string_view rel, bool is_dir) const;
  // The same for the path made of the first `n` (>= 1) of `comps`, a path
  // already split into its components.
  bool MatchesComponents(const std::vector<std::string>& comps, size_t n,
                         bool is_dir) const;
  const std::string& text() const { return text_; }

 private:
  bool MatchFrom(size_t part, const std::vector<std::string>& comps, size_t n,
                 size_t comp) const;

  std::string text_;
  std::vector<std::string> parts_;  // components; "**" matches any number
  bool anchored_ = false;
  bool dir_only_ = false;
};

class Policy {
 public:
  // Builds a policy; EINVAL naming the first pattern that does not parse.
  static Result<Policy> Make(const std::vector<std::string>& hide,
                             const std::vector<std::string>& read_only,
                             uint64_t quota_bytes, bool own_git = false,
                             const std::vector<std::string>& own_modules = {});

  // The patterns `--hide-secrets` adds (docs/sandboxes.md lists them).
  static const std::vector<std::string>& SecretPatterns();

  // Does a hide pattern match the lower object at `rel`, or is it one of
  // the host's git files that an own-git sandbox does not see (OwnGitHides)?
  // Only the object itself is tested: the lookup rules never reach below a
  // hidden directory. See HiddenPath for a whole path.
  bool HidesLower(std::string_view rel, bool is_dir) const;
  // A sandbox whose git is its own (docs/git-bridge.md, "The base"): its
  // .git was copied into its upper layer at the mount, so every entry of
  // the host's .git but the append-only object stores (`objects`, `lfs`,
  // `modules`) is hidden, whatever the host writes there later: the host's
  // HEAD, index, refs, reflogs, config, MERGE_HEAD and lock files. Only
  // the host's layer is affected, and HiddenPath does not report them.
  static bool OwnGitHides(std::string_view rel);
  // The same rule for the submodules' repositories the first mount copied
  // too (`own_modules`, paths such as ".git/modules/lib/x"): every entry of
  // each but its object stores (`objects`, `lfs`, its own `modules`).
  bool OwnModuleHides(std::string_view rel) const;
  bool own_git() const { return own_git_; }
  const std::vector<std::string>& own_modules() const { return own_modules_; }
  // Is `rel` hidden, itself or through a hidden ancestor directory?
  bool HiddenPath(std::string_view rel, bool is_dir) const;
  // Is `rel`, or a directory above it, read-only?
  bool ReadOnly(std::string_view rel, bool is_dir) const;

  bool hides_anything() const { return !hide_.empty() || own_git_; }
  // Hide patterns alone (the own-git rule hides nothing a directory's link
  // count could reveal: the .git it applies to merges two layers anyway).
  bool hides_patterns() const { return !hide_.empty(); }
  bool has_read_only() const { return !read_only_.empty(); }
  uint64_t quota_bytes() const { return quota_bytes_; }
  bool empty() const {
    return hide_.empty() && read_only_.empty() && quota_bytes_ == 0 &&
           !own_git_;
  }

  const std::vector<PathGlob>& hide() const { return hide_; }
  const std::vector<PathGlob>& read_only() const { return read_only_; }

 private:
  static bool AnyMatches(const std::vector<PathGlob>& globs,
                         std::string_view rel, bool is_dir);
  static bool MatchesWithAncestors(const std::vector<PathGlob>& globs,
                                   std::string_view rel, bool is_dir);

  std::vector<PathGlob> hide_, read_only_;
  uint64_t quota_bytes_ = 0;
  bool own_git_ = false;
  std::vector<std::string> own_modules_;  // sorted
};

// Parses a size such as "500M", "2G", "1.5GiB", "4096" (bytes; K/M/G/T
// suffixes are powers of 1024, an optional "B" or "iB" after them).
// EINVAL naming the text when it is not a positive size: empty, blanks,
// signs, exponents, a fraction of a byte, an unknown unit.
Result<uint64_t> ParseSize(const std::string& text);

}  // namespace acqfs

#endif  // ACQFS_FS_POLICY_H_
