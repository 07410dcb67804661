// NodeTable: the lifetime of the Overlay's Nodes (fs/overlay.h). It owns
// every node (an intrusive list), gives each its names (Attach, DetachName,
// MoveName; a hard link's other names are aliases, and the upper hard-link
// map finds the node of an upper inode with several names), keeps the
// kernel's lookup counts and the open counts, and frees a node once the
// kernel holds neither and no child keeps it.
//
// Three words, used for these things only (in fs/overlay* and here):
//   unlinked   a node with no name left (Node::unlinked): no parent and no
//              alias. The kernel may still hold it (a lookup, an open), so
//              it lives on until the kernel lets it go; so do the nodes
//              below a directory whose name was lost (DropStaleNameLocked).
//   kept data  where an unlinked file's data lives meanwhile (Node::kept,
//              KeptData; fs/kept_data.h). The overlay reaches it only
//              through KeptStore: Keep*, Open, Stat, MakeChangeable,
//              FreedByRelease, Release.
//   doomed     what freed nodes leave to do on the disk (closing the
//              descriptors the file cache held for them, removing kept data
//              released): queued while the locks are held and done by Reap
//              once they are released (a Reaper declared before the lock
//              guards does it), as the last reference to an inode with no
//              name left makes the file system free it, which is slow.
//
// Locking: the table has no lock of its own. It is guarded by the Overlay's
// two locks, whose order is tree_mu_ before table_mu_; each member says
// which it needs. table_mu_ is the Overlay's, passed in; tree_mu_ is only
// stated (the caller holds it).
#ifndef ACQFS_FS_NODE_TABLE_H_
#define ACQFS_FS_NODE_TABLE_H_

#include <sys/stat.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fs/file_cache.h"
#include "fs/kept_data.h"
#include "fs/name_table.h"
#include "fs/quota.h"

namespace acqfs {

struct Node;

// A hard link's name besides the node's position: (parent, name) of
// another name of the same node. Owned by the node (Node::aliases()).
struct Alias : NameLink {
  explicit Alias(Node* node_) : NameLink(/*alias=*/true), node(node_) {}
  Node* const node;
};

// Memory (docs/architecture.md, "Memory"): the daemon holds one Node per
// object the kernel remembers, so every byte here counts a million times
// on a large tree. The position's name is stored in the node (NameLink),
// its parent's NameTable holds only a pointer to it, and what few nodes
// need (hard links' aliases and upper inode) is behind one pointer.
struct Node : NameLink {
  Node(uint64_t ino_, mode_t type_)
      : ino(ino_), type(static_cast<uint16_t>(type_ & S_IFMT)) {}
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // The node a name in a directory's table leads to.
  static Node* Of(NameLink* link) {
    if (!link) return nullptr;
    return link->is_alias() ? static_cast<Alias*>(link)->node
                            : static_cast<Node*>(link);
  }

  // Position (NameLink: parent, name()). Written with tree_mu_ exclusive
  // (or shared, for a lookup attaching a fresh node) and table_mu_ held,
  // through NodeTable only. parent is null for the root and for unlinked
  // nodes.

  const uint64_t ino;  // reported st_ino
  uint32_t opens = 0;  // table_mu_: handles the kernel will RELEASE (the
                       // handles mode)
  // Layers. Written with tree_mu_ exclusive.
  // The lower layers at this path (a LowerMask, fs/layer.h): for a
  // directory, those whose directory shows through when the upper one (if
  // any) is not opaque, and in lower_xw those of them that may hold xattr
  // whiteouts; for anything else, the bit of the layer holding the lower
  // object it reads while it has no upper one (0: no lower object).
  uint32_t lower = 0;
  uint32_t lower_xw = 0;
  const uint16_t type;  // S_IFMT bits
  std::atomic<bool> upper{false};
  // The five flags share one byte (bit-fields): each is written only with
  // tree_mu_ exclusive, so no two writers ever meet.
  bool opaque : 1 = false;
  bool xwhiteouts : 1 = false;
  // The upper regular file lost its last name (no data kept): the quota
  // gives back its record when the node goes (the file cache may hold the
  // data until then). Written with tree_mu_ exclusive.
  bool quota_owed : 1 = false;
  // No name left (no position, no alias). Written with tree_mu_ exclusive
  // and table_mu_ held.
  bool unlinked : 1 = false;
  // An open(O_TMPFILE) file without O_EXCL that never had a name: a link
  // may give it its first (Overlay::Link), as the kernel's I_LINKABLE
  // lets it. Written with tree_mu_ exclusive.
  bool linkable : 1 = false;
  // Whether a data descriptor was ever opened for the node
  // (Overlay::OpenDataLocked; once one was, the kernel may hold its pages
  // and a process may map them), and which host inode a host file's node
  // follows: kNeverOpened; kOpened; or the number (> kOpened, fitting 32
  // bits as ext4's do) of the host file that replaced the node's own before
  // its data was first opened, which the node then follows (opened too).
  // Written under tree_mu_ (shared), hence atomic; never goes back.
  static constexpr uint32_t kNeverOpened = 0, kOpened = 1;
  std::atomic<uint32_t> data_state{kNeverOpened};
  uint32_t followed_ino() const {
    uint32_t s = data_state.load();
    return s > kOpened ? s : 0;
  }
  // The size the kernel was last told for the node (a lookup's, a
  // listing's or a getattr's reply), kUnknownSize when none was or it does
  // not fit: what the kernel caches as the file's size. Written by the
  // FUSE layer with no lock, hence atomic.
  static constexpr uint32_t kUnknownSize = UINT32_MAX;
  std::atomic<uint32_t> told_size{kUnknownSize};

  bool is_dir() const { return S_ISDIR(type); }
  // A lower directory at this path shows through.
  bool merged() const {
    return is_dir() && lower != 0 && !(upper.load() && opaque);
  }
  // The lower layer of a non-directory that has no upper object (0: the
  // host).
  unsigned lower_layer() const {
    return lower ? 31 - static_cast<unsigned>(__builtin_clz(lower)) : 0;
  }

  // Guarded by table_mu_ (and `opens` above).
  uint64_t nlookup = 0;
  // The quota's record of an upper regular file: its st_blocks in bytes
  // when the daemon last saw it, Quota::kUnseen before (fs/quota.h).
  // Guarded by the quota's stripe lock for its address (Quota methods).
  uint64_t charged = Quota::kUnseen;
  // The node table's list of every node (NodeTable::nodes_). table_mu_.
  Node* prev_node = nullptr;
  Node* next_node = nullptr;

  // The children the kernel knows, by name: directories only (the NameTable
  // holds their NameLinks: positions and aliases). table_mu_ held; changed
  // through NodeTable only.
  Node* Child(std::string_view n) const { return Of(children.Find(n)); }
  bool HasChildren() const { return !children.empty(); }
  NameTable children;

  // Hard links. table_mu_ held (and tree_mu_ exclusive, or shared for a
  // lookup, to change aliases); changed through NodeTable only.
  using Aliases = std::vector<std::unique_ptr<Alias>>;
  // The node's other names, if any; the last one takes the position's
  // place when the position goes.
  const Aliases& aliases() const { return links_ ? links_->aliases : kNone; }
  bool HasAliases() const { return links_ && !links_->aliases.empty(); }
  // Upper st_ino for an upper hard link in the table's map, else 0.
  uint64_t upper_ino() const { return links_ ? links_->upper_ino : 0; }

  // A directory that lost its last name (rmdir, or a rename over it): the
  // attributes and xattrs it had then, with st_nlink 0, which it keeps
  // while the kernel holds it (an open descriptor, a working directory),
  // as a removed directory does on ext4; a chmod, chown, utimes or xattr
  // change of it changes them (Overlay::SetAttr, SetXattr). Null for every
  // other node. The pointer is set with tree_mu_ exclusive and table_mu_
  // held, its contents changed with tree_mu_ exclusive; read with tree_mu_
  // held.
  struct RemovedDir {
    struct stat st;
    std::vector<std::pair<std::string, std::string>> xattrs;  // name, value
  };
  const RemovedDir* removed_dir() const {
    return links_ ? links_->removed_dir.get() : nullptr;
  }
  RemovedDir* mutable_removed_dir() {
    return links_ ? links_->removed_dir.get() : nullptr;
  }
  void set_removed_dir(RemovedDir d) {
    MutableLinks().removed_dir = std::make_unique<RemovedDir>(std::move(d));
  }

  // The node's kept data (below): what KeptStore keeps, opens, stats and
  // releases for it. tree_mu_ held (exclusive to change).
  bool has_kept() const { return kept_data_ != nullptr; }
  const KeptData& kept() const { return kept_data_ ? *kept_data_ : kNoData; }
  KeptData* mutable_kept() { return kept_data_.get(); }
  void set_kept(KeptData k) {
    if (k.empty())
      kept_data_.reset();
    else
      kept_data_ = std::make_unique<KeptData>(std::move(k));
  }
  KeptData take_kept() {
    KeptData k;
    if (kept_data_) k = std::move(*kept_data_);
    kept_data_.reset();
    return k;
  }

 private:
  friend class NodeTable;
  struct Links {
    Aliases aliases;
    uint64_t upper_ino = 0;
    std::unique_ptr<RemovedDir> removed_dir;  // removed_dir()
  };
  Links& MutableLinks() {
    if (!links_) links_ = std::make_unique<Links>();
    return *links_;
  }

  static const KeptData kNoData;
  static const Aliases kNone;
  // Made at a node's first alias or upper hard-link number, or when a
  // directory is removed (removed_dir). table_mu_.
  std::unique_ptr<Links> links_;
  // Where the data lives once the node is unlinked while the kernel may
  // still use it (fs/kept_data.h); null while it has a name. Written with
  // tree_mu_ exclusive (or while the node is freed, when nothing can reach
  // it); read with tree_mu_ held.
  std::unique_ptr<KeptData> kept_data_;
};

// What the table does when a node is asked to give back more lookups than
// it holds (a FORGET of more than was looked up), or to release an open it
// does not hold, which is a bug in the counting: the kernel's or, far
// likelier, the daemon's.
enum class CountCheck {
  kAbort,  // abort, naming the node (ino, name, path) and both counts
  // count zero, count it (clamped_forgets, clamped_releases) and log the
  // first one of each kind (spdlog::warn, naming the node and its path)
  kClamp,
};
// Debug builds fail loudly; release builds clamp, as they always did.
#ifdef NDEBUG
inline constexpr CountCheck kDefaultCountCheck = CountCheck::kClamp;
#else
inline constexpr CountCheck kDefaultCountCheck = CountCheck::kAbort;
#endif

class NodeTable {
 public:
  // `table_mu`, `files` and `kept` must outlive the table.
  NodeTable(std::mutex* table_mu, FileCache* files, KeptStore* kept,
            CountCheck check = kDefaultCountCheck)
      : table_mu_(*table_mu), files_(files), kept_(kept), check_(check) {}
  NodeTable(const NodeTable&) = delete;
  NodeTable& operator=(const NodeTable&) = delete;
  // Reaps, then deletes every node left.
  ~NodeTable();

  // The quota that freed nodes give their blocks back to; set once, before
  // any node is freed (null: none).
  void set_quota(Quota* quota) { quota_ = quota; }

  // Calls `fn` for every node the table holds (tree_mu_ exclusive and
  // table_mu_ held; `fn` must not add or free nodes).
  template <class Fn>
  void ForEachNodeLocked(Fn fn) {
    for (Node* n = nodes_; n; n = n->next_node) fn(n);
  }
  // Forgets every upper hard link (the upper became a frozen layer; its
  // hard-linked files are lower files now). table_mu_ held.
  void ClearUpperLinksLocked();

  // Puts the root in the table, which owns it and never frees it. Once,
  // before any other call.
  Node* AddRoot(std::unique_ptr<Node> root);
  // Set once by AddRoot; no lock.
  Node* root() const { return root_; }

  // Puts a new node in the table (which then owns it). table_mu_ held.
  void AddNodeLocked(std::unique_ptr<Node> node);

  // Names. tree_mu_ exclusive (or shared, for a lookup attaching a name it
  // found on the disk) and table_mu_ held.
  // Gives `node` the name `name` in `parent`: its position if it has none,
  // else an alias (another hard link).
  void AttachLocked(Node* node, Node* parent, std::string_view name);
  // Takes the name from `node`; an alias takes the place of a lost
  // position, and a node left without any name becomes unlinked.
  void DetachNameLocked(Node* node, Node* parent, std::string_view name);
  void MoveNameLocked(Node* node, Node* parent, std::string_view name,
                      Node* new_parent, std::string_view new_name);
  // Takes the name `name` in `parent` from `node`, whose object no longer
  // is there on the disk (it was removed or replaced outside the daemon),
  // so that the name resolves afresh. A node left without a name becomes
  // unlinked, and so do the nodes known below it (their paths led through
  // it); each is freed once the kernel no longer holds it. tree_mu_
  // exclusive and table_mu_ held.
  void DropStaleNameLocked(Node* node, Node* parent, std::string_view name);

  // The upper hard-link map: the node of an upper inode with more than one
  // name, by its upper st_ino (Node::upper_ino()). table_mu_ held.
  Node* UpperLinkLocked(uint64_t upper_ino) const;
  void SetUpperLinkLocked(Node* node, uint64_t upper_ino);

  // Lookup and open counts. table_mu_ held.
  void AddLookupLocked(Node* node) { node->nlookup++; }
  // Gives back `count` lookups of `node`, checked (CountCheck); does not
  // free it (MaybeFreeLocked does).
  void UncountLookupsLocked(Node* node, uint64_t count);
  void AddOpenLocked(Node* node) { node->opens++; }
  // Gives back an open of `node`, checked (CountCheck) as lookups are.
  void ReleaseOpenLocked(Node* node);
  // Might the kernel still read or write `node`, or open it? Every file that
  // loses its last name while this holds keeps its data (Node::kept) until
  // it no longer does. In both file modes: besides the handles counted, the
  // kernel may OPEN a node it still holds after its last name went (a
  // reopen through /proc/PID/fd of an O_PATH descriptor, an open racing an
  // unlink), as ext4 lets it. The handle-less mode has no counted handles
  // at all.
  bool MayBeOpenLocked(const Node* node) const {
    return node->opens > 0 || node->nlookup > 0;
  }

  // Frees `node` if the kernel holds no lookup or open of it and no child
  // keeps it, then its parent on the same terms, and so on up; what the
  // freed nodes leave on the disk is doomed (Reap). tree_mu_ and table_mu_
  // held.
  void MaybeFreeLocked(Node* node);

  // Does the doomed work: closes freed nodes' descriptors (the quota sees
  // each upper file once more first), reaps the kept data given back, and
  // after kTrimAfterFreed nodes freed gives memory back to the system.
  // Takes table_mu_ briefly; call it with no lock held.
  void Reap();
  // Reaps when it goes out of scope: declared before a method's lock guards.
  class Reaper {
   public:
    explicit Reaper(NodeTable* table) : table_(table) {}
    ~Reaper() { table_->Reap(); }
    Reaper(const Reaper&) = delete;
    Reaper& operator=(const Reaper&) = delete;

   private:
    NodeTable* table_;
  };

  // Nodes held. Takes table_mu_.
  size_t node_count();
  // FORGETs of more lookups than a node held, clamped (kClamp). Takes
  // table_mu_.
  uint64_t clamped_forgets();
  // RELEASEs of an open a node did not hold, ignored (kClamp). Takes
  // table_mu_.
  uint64_t clamped_releases();

 private:
  // Takes the node out of the list and deletes it. table_mu_ held.
  void DeleteNodeLocked(Node* node);
  // Takes `node` out of the hard-link map if it is there. table_mu_ held.
  void EraseUpperLinkLocked(Node* node);
  // A count of `node` asked to give back `count` while it holds `held`
  // (`what` names the count): aborts or clamps as check_ says, adding one
  // to `*clamped` and logging once per `*logged`. table_mu_ held.
  void CountUnderflowLocked(Node* node, uint64_t count, uint64_t held,
                            const char* what, uint64_t* clamped, bool* logged);

  std::mutex& table_mu_;
  FileCache* const files_;  // its own lock
  KeptStore* const kept_;   // its own lock
  Quota* quota_ = nullptr;  // set before use; its own locks
  const CountCheck check_;
  Node* root_ = nullptr;  // set once by AddRoot

  // Every node, owned: a list through Node::prev_node/next_node (a node is
  // freed by MaybeFreeLocked). table_mu_.
  Node* nodes_ = nullptr;
  size_t node_count_ = 0;  // table_mu_
  // Nodes freed since memory was last given back (Reap). table_mu_.
  static constexpr size_t kTrimAfterFreed = 1 << 16;
  size_t freed_since_trim_ = 0;
  uint64_t clamped_forgets_ = 0;   // table_mu_
  uint64_t clamped_releases_ = 0;  // table_mu_
  bool logged_forgets_ = false;    // table_mu_: the first clamp was logged
  bool logged_releases_ = false;   // table_mu_
  std::unordered_map<uint64_t, Node*> upper_links_;  // table_mu_
  std::vector<FileLease> doomed_files_;  // table_mu_; freed nodes' files
  // table_mu_: freed upper files the quota sees once more (their descriptor
  // and record), for what they grew unseen (Reap).
  std::vector<std::pair<FileLease, uint64_t>> doomed_seen_;
  // doomed_files_ is not empty, or memory is to be given back.
  std::atomic<bool> doomed_pending_{false};
};

}  // namespace acqfs

#endif  // ACQFS_FS_NODE_TABLE_H_
