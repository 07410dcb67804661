#include "gitbridge/tree_build.h"

#include <map>
#include <vector>

#include "common/git_ptr.h"
#include "common/sys.h"
#include "gitbridge/git_names.h"

namespace acqfs::gitbridge {
namespace {

// The edits below one path, applied in order: what replaces the base entry
// there and what changes below it. The trie is as deep as the deepest
// edited path (100,000 levels is a legal tree on ext4), so it is destroyed
// without recursion.
struct EditNode {
  bool clear = false;     // the base entry here is discarded
  bool made_dir = false;  // a kPut below needs a directory here
  bool has_leaf = false;  // a kPut placed a non-tree entry here
  git_filemode_t mode = GIT_FILEMODE_BLOB;
  git_oid id{};
  std::map<std::string, EditNode> children;

  EditNode() = default;
  EditNode(EditNode&&) = default;
  EditNode& operator=(EditNode&&) = default;
  ~EditNode() {
    // Takes every descendant's children out before they are destroyed, so
    // each node dies with no children of its own.
    if (children.empty()) return;
    std::vector<std::map<std::string, EditNode>> pending(1);
    pending.back().swap(children);
    while (!pending.empty()) {
      std::map<std::string, EditNode> level;
      level.swap(pending.back());
      pending.pop_back();
      for (auto& entry : level) {
        if (entry.second.children.empty()) continue;
        pending.emplace_back();
        pending.back().swap(entry.second.children);
      }
    }
  }
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

// One tree being rebuilt: the edits below it, the base it starts from (null:
// empty), its builder, and the next edited child to build.
struct BuildFrame {
  const EditNode* node = nullptr;
  const git_tree* base = nullptr;  // owned by `owned_base` or the caller
  GitTree owned_base;
  GitTreeBuilder bld;
  std::map<std::string, EditNode>::const_iterator next;
  std::string name;          // its name in the parent tree ("" for the root)
  size_t path_len = 0;       // the walk's path length at this tree
  bool write_empty = false;  // written even when empty (the root)
};

// What the edits in `node` make of the base entry `base` (null: none),
// when that needs no rebuilt tree: a leaf placed there, or a file kept.
// Otherwise *rebuild is set, with the base subtree to start from in
// *subtree (null: empty).
// `parent` and `name` give the path, built only for a failure.
Status Decide(git_repository* repo, const EditNode& node,
              const git_tree_entry* base, const std::string& parent,
              const std::string& name, Outcome* out, bool* rebuild,
              GitTree* subtree) {
  *rebuild = false;
  if (node.has_leaf) {
    out->kind = Outcome::kSet;
    out->mode = node.mode;
    out->id = node.id;
    return Ok();
  }
  bool base_is_tree = base && git_tree_entry_type(base) == GIT_OBJECT_TREE;
  // Removals below a file (or gitlink) remove nothing; only a kPut below it
  // turns it into a directory.
  if (base && !base_is_tree && !node.clear && !node.made_dir) return Ok();
  if (base_is_tree && !node.clear) {
    git_tree* raw = nullptr;
    int rc = git_tree_lookup(&raw, repo, git_tree_entry_id(base));
    subtree->reset(raw);
    if (rc < 0) return GitError(rc, "git_tree_lookup", sys::Join(parent, name));
  }
  *rebuild = true;
  return Ok();
}

// Puts what the child `name` became into its parent's builder (`parent`
// the parent's path, for a failure).
Status Place(git_treebuilder* bld, const std::string& parent,
             const std::string& name, const Outcome& out) {
  if (out.kind == Outcome::kSet) {
    int rc =
        git_treebuilder_insert(nullptr, bld, name.c_str(), &out.id, out.mode);
    if (rc < 0)
      return GitError(rc, "git_treebuilder_insert", sys::Join(parent, name));
  } else if (out.kind == Outcome::kRemove &&
             git_treebuilder_get(bld, name.c_str()) != nullptr) {
    int rc = git_treebuilder_remove(bld, name.c_str());
    if (rc < 0)
      return GitError(rc, "git_treebuilder_remove", sys::Join(parent, name));
  }
  return Ok();
}

// Starts rebuilding the tree of `node` from `base`.
Status PushFrame(git_repository* repo, std::vector<BuildFrame>* stack,
                 const EditNode& node, const git_tree* base, GitTree owned,
                 const std::string& name, const std::string& path,
                 bool write_empty) {
  BuildFrame f;
  f.node = &node;
  f.owned_base = std::move(owned);
  f.base = f.owned_base ? f.owned_base.get() : base;
  git_treebuilder* raw = nullptr;
  int rc = git_treebuilder_new(&raw, repo, f.base);
  f.bld.reset(raw);
  if (rc < 0) return GitError(rc, "git_treebuilder_new", path);
  f.next = node.children.begin();
  f.name = name;
  f.path_len = path.size();
  f.write_empty = write_empty;
  stack->push_back(std::move(f));
  return Ok();
}

// Writes a finished tree; kRemove when it has no entries, unless it is
// written even when empty.
Result<Outcome> FinishFrame(BuildFrame* f, const std::string& path) {
  Outcome result;
  if (git_treebuilder_entrycount(f->bld.get()) == 0 && !f->write_empty) {
    result.kind = Outcome::kRemove;  // empty subtrees are dropped
    return result;
  }
  int rc = git_treebuilder_write(&result.id, f->bld.get());
  if (rc < 0) return GitError(rc, "git_treebuilder_write", path);
  result.kind = Outcome::kSet;
  return result;
}

// Rebuilds the root tree from `base` and the edit trie, depth first and
// iteratively (an explicit stack: an edited path 100,000 directories deep
// needs no C++ stack in proportion); each tree on the current path holds
// its builder until its edited children are built. One path string, the
// current tree's, names failures.
Result<git_oid> BuildRoot(git_repository* repo, const EditNode& root,
                          const git_tree* base) {
  std::vector<BuildFrame> stack;
  std::string path;
  ACQFS_TRY(PushFrame(repo, &stack, root, base, GitTree(), "", path, true));
  for (;;) {
    BuildFrame& f = stack.back();
    if (f.next != f.node->children.end()) {
      const std::string& name = f.next->first;
      const EditNode& child = f.next->second;
      ++f.next;
      const git_tree_entry* entry =
          f.base ? git_tree_entry_byname(f.base, name.c_str()) : nullptr;
      Outcome out;
      bool rebuild = false;
      GitTree subtree;
      ACQFS_TRY(
          Decide(repo, child, entry, path, name, &out, &rebuild, &subtree));
      if (!rebuild) {
        ACQFS_TRY(Place(f.bld.get(), path, name, out));
        continue;
      }
      if (!path.empty()) path.push_back('/');
      path += name;
      // `f` is stale once the child's frame is pushed.
      ACQFS_TRY(PushFrame(repo, &stack, child, nullptr, std::move(subtree),
                          name, path, false));
      continue;
    }
    auto out = FinishFrame(&f, path);
    if (!out) return out.error();
    if (stack.size() == 1) return out->id;
    const std::string name = std::move(f.name);
    stack.pop_back();
    path.resize(stack.back().path_len);
    ACQFS_TRY(Place(stack.back().bld.get(), path, name, *out));
  }
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
  return BuildRoot(repo, root, base_tree.get());
}

}  // namespace acqfs::gitbridge
