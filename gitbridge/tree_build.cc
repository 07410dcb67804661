#include "gitbridge/tree_build.h"

#include <map>

#include "common/git_ptr.h"
#include "common/sys.h"
#include "gitbridge/git_names.h"

namespace acqfs::gitbridge {
namespace {

// The edits below one path, applied in order: what replaces the base entry
// there and what changes below it.
struct EditNode {
  bool clear = false;     // the base entry here is discarded
  bool made_dir = false;  // a kPut below needs a directory here
  bool has_leaf = false;  // a kPut placed a non-tree entry here
  git_filemode_t mode = GIT_FILEMODE_BLOB;
  git_oid id{};
  std::map<std::string, EditNode> children;
};

// What a rebuilt path becomes in its parent tree.
struct Outcome {
  enum Kind { kKeep, kRemove, kSet };
  Kind kind = kKeep;
  git_filemode_t mode = GIT_FILEMODE_TREE;
  git_oid id{};
};

Result<std::vector<std::string>> SplitEditPath(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    size_t end = slash == std::string::npos ? path.size() : slash;
    std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..")
      return Error::Of(EINVAL, "tree edit (bad path component)", path);
    parts.push_back(std::move(part));
    if (slash == std::string::npos) return parts;
    start = slash + 1;
  }
}

Status CheckPut(const TreeEdit& e) {
  switch (e.mode) {
    case GIT_FILEMODE_BLOB:
    case GIT_FILEMODE_BLOB_EXECUTABLE:
    case GIT_FILEMODE_COMMIT:
    case GIT_FILEMODE_LINK:
      break;
    default:
      return Error::Of(EINVAL, "tree edit (bad file mode)", e.path);
  }
  // git_treebuilder refuses only some of what git refuses (and then fails
  // with a bare "invalid name"): the bridge's one rule set is applied here.
  if (auto bad = UnsafeTreePath(e.path, static_cast<uint32_t>(e.mode)))
    return Error::Of(EPERM,
                     "tree edit (" + PrintableName(sys::Basename(bad->path)) +
                         ": " + bad->reason + ")",
                     bad->path);
  return Ok();
}

// Records one edit in the trie rooted at `root`.
Status AddEdit(EditNode* root, const TreeEdit& e) {
  auto parts = SplitEditPath(e.path);
  if (!parts) return parts.error();
  if (e.kind == TreeEdit::kPut) ACQFS_TRY(CheckPut(e));
  EditNode* node = root;
  for (size_t i = 0; i + 1 < parts->size(); ++i) {
    EditNode* child = &node->children[(*parts)[i]];
    if (e.kind == TreeEdit::kRemove && child->has_leaf) return Ok();  // no-op
    if (e.kind == TreeEdit::kPut) {
      child->has_leaf = false;  // an earlier kPut's file becomes a directory
      child->made_dir = true;
    }
    node = child;
  }
  EditNode& last = node->children[parts->back()];
  last = EditNode{};
  last.clear = true;
  if (e.kind == TreeEdit::kPut) {
    last.has_leaf = true;
    last.mode = e.mode;
    last.id = e.id;
  }
  return Ok();
}

Result<Outcome> BuildNode(git_repository* repo, const EditNode& node,
                          const git_tree_entry* base, const std::string& path);

// Rebuilds one tree from `base` (null: empty) and the edits below it.
// Returns kRemove when the result has no entries, unless `write_empty` (the
// root, which is written even when empty).
Result<Outcome> BuildTree(git_repository* repo, const EditNode& node,
                          const git_tree* base, const std::string& path,
                          bool write_empty) {
  git_treebuilder* raw = nullptr;
  int rc = git_treebuilder_new(&raw, repo, base);
  GitTreeBuilder bld(raw);
  if (rc < 0) return GitError(rc, "git_treebuilder_new", path);
  for (const auto& [name, child] : node.children) {
    std::string child_path = sys::Join(path, name);
    const git_tree_entry* entry =
        base ? git_tree_entry_byname(base, name.c_str()) : nullptr;
    auto out = BuildNode(repo, child, entry, child_path);
    if (!out) return out.error();
    if (out->kind == Outcome::kSet) {
      rc = git_treebuilder_insert(nullptr, bld.get(), name.c_str(), &out->id,
                                  out->mode);
      if (rc < 0) return GitError(rc, "git_treebuilder_insert", child_path);
    } else if (out->kind == Outcome::kRemove &&
               git_treebuilder_get(bld.get(), name.c_str()) != nullptr) {
      rc = git_treebuilder_remove(bld.get(), name.c_str());
      if (rc < 0) return GitError(rc, "git_treebuilder_remove", child_path);
    }
  }
  Outcome result;
  if (git_treebuilder_entrycount(bld.get()) == 0 && !write_empty) {
    result.kind = Outcome::kRemove;  // empty subtrees are dropped
    return result;
  }
  rc = git_treebuilder_write(&result.id, bld.get());
  if (rc < 0) return GitError(rc, "git_treebuilder_write", path);
  result.kind = Outcome::kSet;
  return result;
}

// What the edits in `node` make of the base entry `base` (null: none).
Result<Outcome> BuildNode(git_repository* repo, const EditNode& node,
                          const git_tree_entry* base, const std::string& path) {
  Outcome out;
  if (node.has_leaf) {
    out.kind = Outcome::kSet;
    out.mode = node.mode;
    out.id = node.id;
    return out;
  }
  bool base_is_tree = base && git_tree_entry_type(base) == GIT_OBJECT_TREE;
  // Removals below a file (or gitlink) remove nothing; only a kPut below it
  // turns it into a directory.
  if (base && !base_is_tree && !node.clear && !node.made_dir) return out;
  GitTree subtree;
  if (base_is_tree && !node.clear) {
    git_tree* raw = nullptr;
    int rc = git_tree_lookup(&raw, repo, git_tree_entry_id(base));
    subtree.reset(raw);
    if (rc < 0) return GitError(rc, "git_tree_lookup", path);
  }
  return BuildTree(repo, node, subtree.get(), path, false);
}

}  // namespace

Result<git_oid> ApplyTreeEdits(git_repository* repo, const git_oid* base,
                               const std::vector<TreeEdit>& edits) {
  EditNode root;
  for (const TreeEdit& e : edits) ACQFS_TRY(AddEdit(&root, e));
  GitTree base_tree;
  if (base) {
    git_tree* raw = nullptr;
    int rc = git_tree_lookup(&raw, repo, base);
    base_tree.reset(raw);
    if (rc < 0) return GitError(rc, "git_tree_lookup", OidHex(*base));
  }
  auto out = BuildTree(repo, root, base_tree.get(), "", true);
  if (!out) return out.error();
  return out->id;
}

}  // namespace acqfs::gitbridge
