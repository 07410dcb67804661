#include "gitbridge/merged_tree.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/sys.h"

namespace acqfs::gitbridge {
namespace {

const std::string kNoName;  // `shown` for the sys helpers

// Splits a relative path into its components. "" is the root (no
// components); an empty, "." or ".." component is EINVAL.
Result<std::vector<std::string>> SplitPath(const std::string& rel) {
  std::vector<std::string> parts;
  if (rel.empty()) return parts;
  size_t start = 0;
  for (;;) {
    size_t slash = rel.find('/', start);
    std::string part = rel.substr(
        start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty() || part == "." || part == "..")
      return Error::Of(EINVAL, "resolve merged path", rel);
    parts.push_back(std::move(part));
    if (slash == std::string::npos) return parts;
    start = slash + 1;
  }
}

// The node of the merged root: the upper root directory, with its view.
Result<MergedNode> RootNode(const Layers& layers) {
  MergedNode node;
  auto view = RootView(layers);
  if (!view) return view.error();
  auto st = layers.upper.Stat("");
  if (!st) return st.error();
  node.exists = true;
  node.in_upper = true;
  node.st = *st;
  node.dir = std::move(*view);
  return node;
}

}  // namespace

MergedTree::MergedTree(const Layers& layers)
    : layers_(layers), stack_(layers) {}

Status MergedTree::EnsureRoot() {
  if (rooted_) return Ok();
  auto view = RootView(layers_);
  if (!view) return view.error();
  view_ = std::move(*view);
  rooted_ = true;
  return Ok();
}

Status MergedTree::Enter(const std::string& name, bool* entered) {
  *entered = false;
  ACQFS_TRY(EnsureRoot());
  auto c = ResolveChildAt(layers_, view_, stack_.upper(), lower_fds(), name);
  if (!c) return c.error();
  if (!c->exists || !c->is_dir()) return Ok();
  DirView child = c->AsDir("");
  // An upper directory needs an upper parent, a merged one a merged parent:
  // the stack has both descriptors on this path.
  ACQFS_TRY(stack_.Push(name, child.upper, child.lower));
  Level level;
  level.name = name;
  level.parent_len = view_.path.size();
  level.parent_upper = view_.upper;
  level.parent_lower = view_.lower;
  level.parent_lower_xw = view_.lower_xw;
  level.parent_xwhiteouts = view_.xwhiteouts;
  levels_.push_back(std::move(level));
  if (!view_.path.empty()) view_.path.push_back('/');
  view_.path += name;
  view_.upper = child.upper;
  view_.lower = child.lower;
  view_.lower_xw = child.lower_xw;
  view_.xwhiteouts = child.xwhiteouts;
  *entered = true;
  return Ok();
}

Status MergedTree::Leave() {
  if (levels_.empty()) return Ok();
  ACQFS_TRY(stack_.Pop());
  const Level& level = levels_.back();
  view_.path.resize(level.parent_len);
  view_.upper = level.parent_upper;
  view_.lower = level.parent_lower;
  view_.lower_xw = level.parent_lower_xw;
  view_.xwhiteouts = level.parent_xwhiteouts;
  levels_.pop_back();
  return Ok();
}

Status MergedTree::MoveTo(const std::vector<std::string>& parts, size_t n,
                          bool* found) {
  *found = false;
  ACQFS_TRY(EnsureRoot());
  size_t keep = 0;
  while (keep < n && keep < levels_.size() && levels_[keep].name == parts[keep])
    ++keep;
  while (levels_.size() > keep) ACQFS_TRY(Leave());
  for (size_t i = keep; i < n; ++i) {
    bool entered = false;
    ACQFS_TRY(Enter(parts[i], &entered));
    if (!entered) return Ok();
  }
  *found = true;
  return Ok();
}

Result<MergedNode> MergedTree::Child(const std::string& name) {
  ACQFS_TRY(EnsureRoot());
  auto c = ResolveChildAt(layers_, view_, stack_.upper(), lower_fds(), name);
  if (!c) return c.error();
  if (!c->exists) return MergedNode{};
  MergedNode node;
  node.exists = true;
  node.in_upper = c->upper;
  node.lower_layer = c->lower_layer;
  node.st = c->upper ? c->upper_st : c->lower_st;
  if (S_ISDIR(node.st.st_mode))
    node.dir = c->AsDir(sys::Join(view_.path, name));
  return node;
}

Result<MergedNode> MergedTree::Resolve(const std::string& rel) {
  auto parts = SplitPath(rel);
  if (!parts) return parts.error();
  if (parts->empty()) return RootNode(layers_);
  bool found = false;
  ACQFS_TRY(MoveTo(*parts, parts->size() - 1, &found));
  if (!found) return MergedNode{};
  return Child(parts->back());
}

Result<UniqueFd> MergedTree::OpenChild(const std::string& name,
                                       const MergedNode& node) {
  const Layer& layer = LayerOf(node);
  const int dirfd = DirFdOf(node);
  // O_NONBLOCK: a file swapped for a fifo meanwhile must not block us.
  const int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK;
  auto fd = sys::OpenBeneath(dirfd, name, flags | O_NOATIME, 0, kNoName);
  if (!fd && fd.err() == EPERM)
    fd = sys::OpenBeneath(dirfd, name, flags, 0, kNoName);
  if (!fd) {
    Error e = fd.error();
    e.path = layer.Shown(sys::Join(view_.path, name));
    return e;
  }
  return fd;
}

Result<UniqueFd> MergedTree::OpenFile(const std::string& rel) {
  auto node = Resolve(rel);
  if (!node) return node.error();
  if (!node->exists) return Error::Of(ENOENT, "open merged file", rel);
  if (S_ISDIR(node->st.st_mode))
    return Error::Of(EISDIR, "open merged file", rel);
  if (!S_ISREG(node->st.st_mode))
    return Error::Of(EINVAL, "open merged file (not a regular file)", rel);
  return OpenChild(sys::Basename(rel), *node);
}

namespace {

// Reads the regular file open as `fd` (`shown` names it in errors).
Result<std::string> ReadRegular(int fd, size_t limit,
                                const std::string& shown) {
  // The file may have been swapped since it was resolved (a sandbox still
  // running): read it only if the descriptor is still a regular file.
  auto st = sys::Fstat(fd, shown);
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode))
    return Error::Of(EINVAL, "read merged file (not a regular file)", shown);
  return sys::ReadAll(fd, limit, shown);
}

}  // namespace

Result<std::string> MergedTree::ReadFile(const std::string& rel, size_t limit) {
  auto fd = OpenFile(rel);
  if (!fd) return fd.error();
  return ReadRegular(fd->get(), limit, rel);
}

Result<std::string> MergedTree::ReadChildFile(const std::string& name,
                                              size_t limit) {
  auto node = Child(name);
  if (!node) return node.error();
  auto shown = [&] { return sys::Join(view_.path, name); };
  if (!node->exists) return Error::Of(ENOENT, "open merged file", shown());
  if (S_ISDIR(node->st.st_mode))
    return Error::Of(EISDIR, "open merged file", shown());
  if (!S_ISREG(node->st.st_mode))
    return Error::Of(EINVAL, "open merged file (not a regular file)", shown());
  auto fd = OpenChild(name, *node);
  if (!fd) return fd.error();
  auto text = ReadRegular(fd->get(), limit, kNoName);
  if (!text) {
    Error e = text.error();
    e.path = shown();
    return e;
  }
  return text;
}

Result<std::string> MergedTree::ReadLink(const std::string& rel) {
  auto node = Resolve(rel);
  if (!node) return node.error();
  if (!node->exists) return Error::Of(ENOENT, "read merged link", rel);
  if (!S_ISLNK(node->st.st_mode))
    return Error::Of(EINVAL, "read merged link (not a symlink)", rel);
  const Layer& layer = LayerOf(*node);
  const int dirfd = DirFdOf(*node);
  return sys::ReadLinkAt(dirfd, sys::Basename(rel), layer.Shown(rel));
}

Result<std::vector<MergedEntry>> MergedTree::List(const std::string& rel) {
  auto node = Resolve(rel);
  if (!node) return node.error();
  if (!node->exists) return Error::Of(ENOENT, "list merged directory", rel);
  if (!S_ISDIR(node->st.st_mode))
    return Error::Of(ENOTDIR, "list merged directory", rel);
  auto parts = SplitPath(rel);
  if (!parts) return parts.error();
  bool found = false;  // the cursor goes into `rel` itself
  ACQFS_TRY(MoveTo(*parts, parts->size(), &found));
  if (!found)  // replaced since it was resolved
    return Error::Of(ENOENT, "list merged directory", rel);
  return ListMergedAt(layers_, view_, stack_.upper(), lower_fds());
}

}  // namespace acqfs::gitbridge
