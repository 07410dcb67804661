#include "gitbridge/merged_tree.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/sys.h"

namespace acqfs::gitbridge {
namespace {

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

// Opens `rel` read-only in `layer`, without atime updates where permitted.
Result<UniqueFd> OpenNoAtime(const Layer& layer, const std::string& rel) {
  // O_NONBLOCK: a file swapped for a fifo meanwhile must not block us.
  return layer.OpenForReading(rel, O_NONBLOCK);
}

}  // namespace

Result<MergedNode> MergedTree::Resolve(const std::string& rel) const {
  auto parts = SplitPath(rel);
  if (!parts) return parts.error();
  auto node = RootNode(layers_);
  if (!node) return node.error();
  std::string path;
  for (const std::string& name : *parts) {
    if (!S_ISDIR(node->st.st_mode)) return MergedNode{};
    path = sys::Join(path, name);
    auto child = ResolveChild(layers_, node->dir, name);
    if (!child) return child.error();
    if (!child->exists) return MergedNode{};
    MergedNode next;
    next.exists = true;
    next.in_upper = child->upper;
    next.st = child->upper ? child->upper_st : child->lower_st;
    if (S_ISDIR(next.st.st_mode)) next.dir = child->AsDir(path);
    *node = std::move(next);
  }
  return node;
}

Result<UniqueFd> MergedTree::OpenFile(const std::string& rel) const {
  auto node = Resolve(rel);
  if (!node) return node.error();
  if (!node->exists) return Error::Of(ENOENT, "open merged file", rel);
  if (S_ISDIR(node->st.st_mode))
    return Error::Of(EISDIR, "open merged file", rel);
  if (!S_ISREG(node->st.st_mode))
    return Error::Of(EINVAL, "open merged file (not a regular file)", rel);
  return OpenNoAtime(node->in_upper ? layers_.upper : layers_.lower, rel);
}

Result<std::string> MergedTree::ReadFile(const std::string& rel,
                                         size_t limit) const {
  auto fd = OpenFile(rel);
  if (!fd) return fd.error();
  // The file may have been swapped since it was resolved (a sandbox still
  // running): read it only if the descriptor is still a regular file.
  auto st = sys::Fstat(fd->get(), rel);
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode))
    return Error::Of(EINVAL, "read merged file (not a regular file)", rel);
  return sys::ReadAll(fd->get(), limit, rel);
}

Result<std::string> MergedTree::ReadLink(const std::string& rel) const {
  auto node = Resolve(rel);
  if (!node) return node.error();
  if (!node->exists) return Error::Of(ENOENT, "read merged link", rel);
  if (!S_ISLNK(node->st.st_mode))
    return Error::Of(EINVAL, "read merged link (not a symlink)", rel);
  const Layer& layer = node->in_upper ? layers_.upper : layers_.lower;
  auto dir = layer.OpenDir(sys::Dirname(rel));
  if (!dir) return dir.error();
  return sys::ReadLinkAt(dir->get(), sys::Basename(rel), layer.Shown(rel));
}

Result<std::vector<MergedEntry>> MergedTree::List(
    const std::string& rel) const {
  auto node = Resolve(rel);
  if (!node) return node.error();
  if (!node->exists) return Error::Of(ENOENT, "list merged directory", rel);
  if (!S_ISDIR(node->st.st_mode))
    return Error::Of(ENOTDIR, "list merged directory", rel);
  return ListMerged(layers_, node->dir);
}

}  // namespace acqfs::gitbridge
