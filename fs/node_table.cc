#include "fs/node_table.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

namespace acqfs {

using TableLock = std::lock_guard<std::mutex>;

const KeptData Node::kNoData;
const Node::Aliases Node::kNone;
// docs/architecture.md, "Memory": a node is 120 bytes, its name included
// when it is at most NameLink::kInline bytes long, which malloc serves in a
// 128-byte chunk (a request of up to 120 bytes, plus its 8-byte header).
static_assert(sizeof(Node) <= 120, "a Node grew past 120 bytes");

NodeTable::~NodeTable() {
  Reap();
  while (nodes_) {
    Node* next = nodes_->next_node;
    delete nodes_;
    nodes_ = next;
  }
}

Node* NodeTable::AddRoot(std::unique_ptr<Node> root) {
  root_ = root.get();
  TableLock t(table_mu_);
  AddNodeLocked(std::move(root));
  return root_;
}

void NodeTable::AddNodeLocked(std::unique_ptr<Node> node) {
  Node* n = node.release();
  n->next_node = nodes_;
  if (nodes_) nodes_->prev_node = n;
  nodes_ = n;
  ++node_count_;
}

void NodeTable::DeleteNodeLocked(Node* node) {
  if (node->prev_node) node->prev_node->next_node = node->next_node;
  if (node->next_node) node->next_node->prev_node = node->prev_node;
  if (nodes_ == node) nodes_ = node->next_node;
  --node_count_;
  delete node;
  if (++freed_since_trim_ >= kTrimAfterFreed) doomed_pending_ = true;
}

size_t NodeTable::node_count() {
  TableLock t(table_mu_);
  return node_count_;
}

uint64_t NodeTable::clamped_forgets() {
  TableLock t(table_mu_);
  return clamped_forgets_;
}

uint64_t NodeTable::clamped_releases() {
  TableLock t(table_mu_);
  return clamped_releases_;
}

// A name goes into a directory's table under `link`; a link the table held
// under the same name is taken out (it was stale: a caller drops a stale
// node's name before it gives the name to another), as the map this table
// replaced overwrote its entry.
static void PutChild(Node* parent, NameLink* link) {
  parent->children.Insert(link);
}

void NodeTable::AttachLocked(Node* node, Node* parent, std::string_view name) {
  if (!node->parent && !node->unlinked && node != root_) {
    node->parent = parent;
    node->SetName(name);
    PutChild(parent, node);
  } else {
    auto alias = std::make_unique<Alias>(node);
    alias->parent = parent;
    alias->SetName(name);
    PutChild(parent, alias.get());
    node->MutableLinks().aliases.push_back(std::move(alias));
  }
}

void NodeTable::DetachNameLocked(Node* node, Node* parent,
                                 std::string_view name) {
  if (node->parent == parent && node->name() == name) {
    parent->children.Erase(node);
    if (node->HasAliases()) {
      // The last alias takes the position's place, in its table too.
      Node::Aliases& aliases = node->links_->aliases;
      std::unique_ptr<Alias> last = std::move(aliases.back());
      aliases.pop_back();
      // Out of the table while its name is copied (SetName).
      const bool listed = last->parent->children.Erase(last.get());
      node->parent = last->parent;
      node->SetName(last->name());
      if (listed) PutChild(node->parent, node);
    } else {
      node->parent = nullptr;
      node->SetName({});
      node->unlinked = true;
    }
    return;
  }
  if (!node->HasAliases()) return;
  Node::Aliases& aliases = node->links_->aliases;
  for (auto a = aliases.begin(); a != aliases.end(); ++a) {
    if ((*a)->parent == parent && (*a)->name() == name) {
      parent->children.Erase(a->get());
      aliases.erase(a);
      return;
    }
  }
}

void NodeTable::MoveNameLocked(Node* node, Node* parent, std::string_view name,
                               Node* new_parent, std::string_view new_name) {
  NameLink* link = nullptr;
  if (node->parent == parent && node->name() == name) {
    link = node;
  } else if (node->HasAliases()) {
    for (auto& a : node->links_->aliases)
      if (a->parent == parent && a->name() == name) link = a.get();
  }
  if (!link) {
    // Not a name of this node: the table forgets the name as ever, and the
    // new name leads to the node.
    if (parent->Child(name) == node)
      parent->children.Erase(parent->children.Find(name));
    auto alias = std::make_unique<Alias>(node);
    alias->parent = new_parent;
    alias->SetName(new_name);
    PutChild(new_parent, alias.get());
    node->MutableLinks().aliases.push_back(std::move(alias));
    return;
  }
  parent->children.Erase(link);
  // `new_name` may be a view of the link's own name: copied first.
  std::string copy(new_name);
  link->parent = new_parent;
  link->SetName(copy);
  PutChild(new_parent, link);
}

Node* NodeTable::UpperLinkLocked(uint64_t upper_ino) const {
  auto it = upper_links_.find(upper_ino);
  return it == upper_links_.end() ? nullptr : it->second;
}

void NodeTable::SetUpperLinkLocked(Node* node, uint64_t upper_ino) {
  node->MutableLinks().upper_ino = upper_ino;
  upper_links_[upper_ino] = node;
}

void NodeTable::ClearUpperLinksLocked() {
  for (auto& [ino, node] : upper_links_) node->links_->upper_ino = 0;
  upper_links_.clear();
}

void NodeTable::EraseUpperLinkLocked(Node* node) {
  if (!node->upper_ino()) return;
  auto it = upper_links_.find(node->upper_ino());
  if (it != upper_links_.end() && it->second == node) upper_links_.erase(it);
}

namespace {

// "/a/b/name" of `node` by its positions' names (the root is ""), or "(no
// name left)"; table_mu_ held (positions change under it).
std::string PathOfLocked(const Node* node, const Node* root) {
  if (node == root) return "/";
  if (!node->parent) return "(no name left)";
  std::vector<std::string_view> names;
  for (const Node* n = node; n && n != root; n = n->parent) {
    if (!n->parent) return "(below a node with no name left)";
    names.push_back(n->name());
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    path += '/';
    path += *it;
  }
  return path;
}

}  // namespace

void NodeTable::CountUnderflowLocked(Node* node, uint64_t count, uint64_t held,
                                     const char* what, uint64_t* clamped,
                                     bool* logged) {
  if (check_ == CountCheck::kAbort) {
    ::fprintf(stderr,
              "acqfs: node table: %llu %s on node %p "
              "(ino %llu, name \"%.*s\"), which holds %llu (path %s)\n",
              static_cast<unsigned long long>(count), what,
              static_cast<const void*>(node),
              static_cast<unsigned long long>(node->ino),
              static_cast<int>(node->name().size()), node->name().data(),
              static_cast<unsigned long long>(held),
              PathOfLocked(node, root_).c_str());
    ::abort();
  }
  ++*clamped;
  if (*logged) return;
  *logged = true;
  spdlog::warn(
      "node table: {} {} on the node of ino {} ({}), which holds {}: counted "
      "as zero (a bug in the counting; further ones are only counted)",
      count, what, node->ino, PathOfLocked(node, root_), held);
}

void NodeTable::UncountLookupsLocked(Node* node, uint64_t count) {
  if (count <= node->nlookup) {
    node->nlookup -= count;
    return;
  }
  CountUnderflowLocked(node, count, node->nlookup, "lookups given back",
                       &clamped_forgets_, &logged_forgets_);
  node->nlookup = 0;
}

void NodeTable::ReleaseOpenLocked(Node* node) {
  if (node->opens > 0) {
    node->opens--;
    return;
  }
  CountUnderflowLocked(node, 1, 0, "opens released", &clamped_releases_,
                       &logged_releases_);
}

void NodeTable::MaybeFreeLocked(Node* node) {
  while (node && node != root_ && node->nlookup == 0 && node->opens == 0 &&
         !node->HasChildren()) {
    Node* parent = node->parent;
    for (const auto& a : node->aliases()) a->parent->children.Erase(a.get());
    if (parent) parent->children.Erase(node);
    EraseUpperLinkLocked(node);
    // The node's descriptors and kept data go after the locks (Reap).
    if (node->quota_owed && quota_) quota_->Freed(&node->charged, 0);
    if (node->has_kept()) {
      if (quota_) {
        if (auto freed = kept_->FreedByRelease(node->kept()))
          quota_->Freed(&node->charged, *freed);
      }
      kept_->Release(node->take_kept());
    }
    if (FileLease f = files_->Take(node)) {
      // The quota sees a forgotten upper file once more, through its cached
      // descriptor, for what it grew unseen (Reap).
      uint64_t record = node->charged;  // nothing else can reach the node
      if (quota_ && !node->unlinked && record != Quota::kUnseen &&
          !f->from_lower && node->upper)
        doomed_seen_.emplace_back(f, record);
      doomed_files_.push_back(std::move(f));
      doomed_pending_ = true;
    }
    DeleteNodeLocked(node);
    node = parent;
  }
}

void NodeTable::DropStaleNameLocked(Node* node, Node* parent,
                                    std::string_view name) {
  DetachNameLocked(node, parent, name);
  if (node->unlinked) {
    // Its upper inode is no longer reached by the name a hard link's lookup
    // would attach to it.
    if (node->upper_ino()) {
      EraseUpperLinkLocked(node);
      node->links_->upper_ino = 0;
    }
    // The children's paths led through the lost name: they lose theirs too
    // (an unlinked node has no children; PathLocked would resolve them
    // from the root).
    // By name from a list made first (NameTable::First scans from the
    // start each time: quadratic over a large directory); each name is
    // looked up again, as dropping one child may free another (the parent
    // of a node whose alias was here).
    std::vector<std::string> names;
    names.reserve(node->children.size());
    node->children.ForEach([&](NameLink* l) { names.emplace_back(l->name()); });
    for (const std::string& child_name : names)
      if (Node* child = node->Child(child_name))
        DropStaleNameLocked(child, node, child_name);
  }
  MaybeFreeLocked(node);
}

void NodeTable::Reap() {
  kept_->Reap();
  if (!doomed_pending_.load(std::memory_order_acquire)) return;
  std::vector<FileLease> files;
  std::vector<std::pair<FileLease, uint64_t>> seen;
  bool trim = false;
  {
    TableLock t(table_mu_);
    files.swap(doomed_files_);
    seen.swap(doomed_seen_);
    doomed_pending_ = false;
    if (freed_since_trim_ >= kTrimAfterFreed) {
      freed_since_trim_ = 0;
      trim = true;
    }
  }
  for (auto& [f, record] : seen) {
    // Best effort, with no one to tell: a file that cannot be seen now is
    // seen at its next call or removal.
    struct stat st;
    if (::fstat(f.get(), &st) == 0) quota_->CatchUp(&record, Quota::Bytes(st));
  }
  seen.clear();
  files.clear();  // closes them (unless a request still uses one)
  // The kernel forgot many nodes (its caches shrank): give the memory they
  // held back to the system, which free() alone does not.
  if (trim) ::malloc_trim(0);
}

}  // namespace acqfs
