// PublishRule: the one answer to "does an export publish this path of the
// sandbox, and if not, why" (docs/git-bridge.md, "What an export
// publishes"), and to the same question for a branch name. Export's delta
// scan (delta_scan.h), its working-tree snapshot (worktree_snapshot.h) and
// its branch plan (export.cc) ask it; `acqfs status` and `acqfs diff` ask
// its policy part (PolicyVerdict), so that what they list is never what
// the policy keeps out of the export.
//
// A path is not published for the first of these reasons that applies:
//   kInsideGit     a component is named ".git": git records no such entry
//                  (the sandbox's own repository goes out as branches);
//   kHidden        the policy hides it, or a directory above it (--hide,
//                  --hide-secrets, the own-git rule): the sandbox never saw
//                  the host's object there, and what it wrote there stays
//                  in the sandbox;
//   kReadOnly      the policy makes it, or a directory above it, read-only;
//   kInSubmodule   it is a gitlink of the base tree or lies below one: the
//                  submodule is kept as the base has it;
//   kSpecialFile   a fifo, socket or device: git records none (it still
//                  hides the host's object of its name: a deletion);
//   kIgnored       untracked (the base tree has no file there) and the
//                  sandbox's ignore rules ignore it (ignore.h), as `git add
//                  -A` leaves it out;
//   kRefusedName   a component is a name git refuses in a tree
//                  (git_names.h: ".GIT", "git~1", a symlinked ".gitmodules");
//                  the export names it in its report (`skipped`).
// A deletion (the host's object at the path is gone) is judged by the first
// three reasons and kInSubmodule only, with the host object's type.
// A walk that judges each directory before entering it (the delta scan)
// asks EntryVerdict per entry and PolicyVerdict per path, and the snapshot
// adds what needs the base tree and the ignore rules (BaseVerdict); Judge
// asks all of it for one path.
// Thread-safety: the free functions are pure; a PublishRule is used by one
// thread (its ignore rules keep a cursor).
#ifndef ACQFS_GITBRIDGE_PUBLISH_RULE_H_
#define ACQFS_GITBRIDGE_PUBLISH_RULE_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fs/change_scan.h"
#include "fs/layer.h"
#include "fs/policy.h"
#include "gitbridge/ignore.h"

namespace acqfs::gitbridge {

enum class PublishVerdict {
  kPublished,
  kInsideGit,
  kHidden,
  kReadOnly,
  kInSubmodule,
  kSpecialFile,
  kIgnored,
  kRefusedName,
};

// "published", "inside .git", "hidden by the policy", ... (for messages).
const char* PublishVerdictName(PublishVerdict v);

// What the base tree holds at a path (worktree_snapshot.cc reads it).
struct BaseAt {
  bool tracked = false;     // a file, symlink or gitlink is recorded there
  bool in_gitlink = false;  // the path is a gitlink or lies below one
};

// The verdict on one entry named `name` of type `mode` (st_mode) whose
// parent directories were judged already: kInsideGit, kSpecialFile,
// kRefusedName (then `*why` says what git calls it) or kPublished.
PublishVerdict EntryVerdict(std::string_view name, mode_t mode,
                            std::string* why = nullptr);

// The policy's verdict on `path` (null policy: none): kHidden, kReadOnly or
// kPublished. `mode` is the type of the object judged (st_mode; only
// S_ISDIR matters, for the patterns that match directories only).
PublishVerdict PolicyVerdict(const Policy* policy, std::string_view path,
                             mode_t mode);

// Leaves out of `changes` (fs/change_scan.h: what `acqfs status` and `acqfs
// diff` list) every change the policy keeps out of an export: PolicyVerdict
// is not kPublished for the path with its old or its new type. (ScanChanges
// leaves hidden paths out itself; this adds the read-only ones.)
void DropPolicyRefused(const Policy* policy, std::vector<PathChange>* changes);

// Why an export does not publish the sandbox's branch `name` (the part
// after refs/heads/): the name is reserved for the working-tree commit, or
// `git check-ref-format --branch` refuses it. "" when it is published (the
// objects it reaches are then checked tree by tree, git_names.h).
std::string RefusedBranch(std::string_view name);

class PublishRule {
 public:
  // The rule of `layers`: their policy and their ignore rules (read from
  // the merged view).
  explicit PublishRule(const Layers& layers);
  PublishRule(const PublishRule&) = delete;
  PublishRule& operator=(const PublishRule&) = delete;

  // The verdicts that need the base tree and the ignore rules, for an object
  // of the sandbox of type `mode` whose entries and policy are judged
  // already (a change the scan reported): kInSubmodule, kIgnored or
  // kPublished. Reading the ignore rules may fail (an error naming the
  // .gitignore).
  Result<PublishVerdict> BaseVerdict(const std::string& path, mode_t mode,
                                     const BaseAt& base);

  // The whole rule for the sandbox's object at `path`, of type `mode`
  // (st_mode; 0 for a deletion of the host's object, whose type is then
  // `lower_mode`). `*why` gets kRefusedName's reason.
  Result<PublishVerdict> Judge(const std::string& path, mode_t mode,
                               const BaseAt& base, mode_t lower_mode = 0,
                               std::string* why = nullptr);

  const Policy* policy() const { return policy_; }

 private:
  const Policy* policy_;  // null: none
  IgnoreRules ignore_;
};

}  // namespace acqfs::gitbridge

#endif  // ACQFS_GITBRIDGE_PUBLISH_RULE_H_
