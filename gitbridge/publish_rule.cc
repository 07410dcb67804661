// PublishRule (see publish_rule.h): the reasons in their one order.
#include "gitbridge/publish_rule.h"

#include <sys/stat.h>

#include <algorithm>

#include "gitbridge/git_names.h"
#include "gitbridge/remote.h"

namespace acqfs::gitbridge {
namespace {

// The mode git records for an object of `st_mode`.
uint32_t GitMode(mode_t st_mode) {
  if (S_ISDIR(st_mode)) return kModeTree;
  if (S_ISLNK(st_mode)) return kModeLink;
  return (st_mode & S_IXUSR) ? kModeExecutable : kModeBlob;
}

bool Recorded(mode_t mode) {
  return S_ISDIR(mode) || S_ISREG(mode) || S_ISLNK(mode);
}

// Does a component of `path` equal ".git"?
bool HasGitComponent(std::string_view path) {
  for (size_t start = 0; start <= path.size();) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (path.substr(start, slash - start) == ".git") return true;
    start = slash + 1;
  }
  return false;
}

}  // namespace

const char* PublishVerdictName(PublishVerdict v) {
  switch (v) {
    case PublishVerdict::kPublished:
      return "published";
    case PublishVerdict::kInsideGit:
      return "inside .git";
    case PublishVerdict::kHidden:
      return "hidden by the policy";
    case PublishVerdict::kReadOnly:
      return "read-only by the policy";
    case PublishVerdict::kInSubmodule:
      return "inside a submodule";
    case PublishVerdict::kSpecialFile:
      return "a fifo, socket or device";
    case PublishVerdict::kIgnored:
      return "ignored";
    case PublishVerdict::kRefusedName:
      return "a name git refuses";
  }
  return "?";
}

PublishVerdict EntryVerdict(std::string_view name, mode_t mode,
                            std::string* why) {
  if (name == ".git") return PublishVerdict::kInsideGit;
  if (!Recorded(mode)) return PublishVerdict::kSpecialFile;
  std::string refused = UnsafeTreeEntry(name, GitMode(mode));
  if (refused.empty()) return PublishVerdict::kPublished;
  if (why) *why = std::move(refused);
  return PublishVerdict::kRefusedName;
}

PublishVerdict PolicyVerdict(const Policy* policy, std::string_view path,
                             mode_t mode) {
  if (!policy) return PublishVerdict::kPublished;
  const bool dir = S_ISDIR(mode);
  if (policy->HiddenPath(path, dir)) return PublishVerdict::kHidden;
  if (policy->ReadOnly(path, dir)) return PublishVerdict::kReadOnly;
  return PublishVerdict::kPublished;
}

void DropPolicyRefused(const Policy* policy, std::vector<PathChange>* changes) {
  if (!policy) return;
  auto refused = [policy](const PathChange& c) {
    for (mode_t mode : {c.old_mode, c.new_mode})
      if (mode != 0 &&
          PolicyVerdict(policy, c.path, mode) != PublishVerdict::kPublished)
        return true;
    return false;
  };
  changes->erase(std::remove_if(changes->begin(), changes->end(), refused),
                 changes->end());
}

std::string RefusedBranch(std::string_view name) {
  const std::string_view reserved = kWorktreeBranchName;
  if (name == reserved || (name.size() > reserved.size() &&
                           name.substr(0, reserved.size()) == reserved &&
                           name[reserved.size()] == '/'))
    return "the name is reserved for the working tree commit";
  if (std::string why = BadBranchName(name); !why.empty())
    return why + " (git check-ref-format --branch refuses it)";
  return "";
}

PublishRule::PublishRule(const Layers& layers)
    : policy_(layers.policy.get()), ignore_(layers) {}

Result<PublishVerdict> PublishRule::BaseVerdict(const std::string& path,
                                                mode_t mode,
                                                const BaseAt& base) {
  if (base.in_gitlink) return PublishVerdict::kInSubmodule;
  if (!Recorded(mode)) return PublishVerdict::kSpecialFile;
  if (base.tracked) return PublishVerdict::kPublished;
  auto ignored = ignore_.IsIgnored(path, S_ISDIR(mode));
  if (!ignored) return ignored.error();
  return *ignored ? PublishVerdict::kIgnored : PublishVerdict::kPublished;
}

Result<PublishVerdict> PublishRule::Judge(const std::string& path, mode_t mode,
                                          const BaseAt& base, mode_t lower_mode,
                                          std::string* why) {
  if (HasGitComponent(path)) return PublishVerdict::kInsideGit;
  const bool deletion = mode == 0;
  PublishVerdict v = PolicyVerdict(policy_, path, deletion ? lower_mode : mode);
  if (v != PublishVerdict::kPublished) return v;
  if (deletion)
    return base.in_gitlink ? PublishVerdict::kInSubmodule
                           : PublishVerdict::kPublished;
  auto b = BaseVerdict(path, mode, base);
  if (!b || *b != PublishVerdict::kPublished) return b;
  auto refused = UnsafeTreePath(path, GitMode(mode));
  if (!refused) return PublishVerdict::kPublished;
  if (why) *why = refused->path + ": " + refused->reason;
  return PublishVerdict::kRefusedName;
}

}  // namespace acqfs::gitbridge
