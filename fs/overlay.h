// Overlay: the merged filesystem as a tree of Nodes, with every operation
// the FUSE adapter needs, and no dependency on FUSE.
//
// A Node stands for one object of the merged view as the kernel knows it. It
// sits at a position (parent + name; extra names for hard links) and knows
// which layers hold it at that position: `upper` (an upper object exists),
// `lower` (the lower layers holding a directory there, or the one holding
// a non-directory), `opaque`. A non-directory without `upper` is read from
// its lower layer at the same path: a lower object never moves without
// being copied up first (files) or materialised (directories), so the
// merged path is also its lower path.
//
// Identity: Node::ino is the st_ino reported; it is the lower object's st_ino
// when a lower object exists at the node's path (a copied-up file keeps its
// number), else the upper st_ino. The kernel's node id is the Node's address.
//
// Locking (order: freeze_mu_, then tree_mu_, then table_mu_):
//   freeze_mu_ shared for a data write through a cached descriptor (all of
//             it); exclusive for Freeze.
//   tree_mu_  shared for lookups, getattr, readdir, reads; exclusive for any
//             change of the namespace or of a node's layers (copy-up), and
//             for taking a name from a node whose object is gone from the
//             disk (DropStaleNameLocked).
//   table_mu_ guards children tables, lookup/open counts, node ownership, and
//             (together with an exclusive tree_mu_) parent/name/aliases:
//             the node table's state (fs/node_table.h, which names the lock
//             of each member).
// Every public method takes the locks it needs.
#ifndef ACQFS_FS_OVERLAY_H_
#define ACQFS_FS_OVERLAY_H_

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/handle.h"
#include "fs/file_cache.h"
#include "fs/kept_data.h"
#include "fs/layer.h"
#include "fs/node_table.h"
#include "fs/quota.h"

namespace acqfs {

struct Creds {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct SetAttrRequest {
  bool set_mode = false, set_uid = false, set_gid = false, set_size = false;
  bool set_atime = false, set_mtime = false;
  bool atime_now = false, mtime_now = false;
  mode_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  off_t size = 0;
  struct timespec atime {
  }, mtime{};
  // Set-id bits to take away once the rest is done (after a chown, which
  // may itself drop some on the upper): the daemon's own clearing, decided
  // in fuse/setid.h.
  mode_t clear_setid = 0;
};

struct ListedEntry {
  std::string name;
  unsigned char type;  // DT_*
  uint64_t ino;
};

class Overlay {
 public:
  // For a writer the kernel did not check (WriteData): the set-id bits a
  // file with `mode` and group `gid` must lose when it writes (0: none).
  using SetIdRule = std::function<mode_t(mode_t mode, gid_t gid)>;

  static Result<std::unique_ptr<Overlay>> Create(Layers layers);
  Overlay(const Overlay&) = delete;
  Overlay& operator=(const Overlay&) = delete;
  ~Overlay();

  Node* root() { return table_.root(); }
  const Layers& layers() const { return layers_; }
  // The upper layer's quota, when the policy sets one (else null). Writes
  // made through descriptors the adapter holds go through Quota::Charged.
  Quota* quota() { return quota_.get(); }

  // What the kernel may cache of a host entry that just changed
  // (fs/host_watch.h): the node of the directory `dir` (null when the
  // kernel knows none), and of its entry `name` (null when none, or when it
  // no longer reads the host: copied up, unlinked). `dir_shows_host`: the
  // host's directory shows through the merged one (so a change of its
  // entries changes the merged listing). The pointers are only to be
  // passed to the kernel as ids: the nodes may go at any time after.
  struct HostChangeNodes {
    Node* dir = nullptr;
    Node* entry = nullptr;
    bool dir_shows_host = false;
  };
  HostChangeNodes NodesOfHostChange(const std::string& dir,
                                    const std::string& name);

  // Every method returning a Node* counts one lookup on it (the FUSE
  // contract); Forget gives them back.
  Result<Node*> Lookup(Node* parent, const std::string& name);
  // The same, also filling `*st` with what GetAttr would say, from the
  // stat the lookup rule already made when the node is new (one path walk
  // less per first lookup). `*host_object` (when given) says whether the
  // node is a file of the host's git object store (a loose object, a pack
  // or its companions, a commit graph, read from the host): the host's gc
  // deletes such files while the sandbox's git runs, and git must find
  // them gone when it opens them (ENOENT: it then looks in the packs), not
  // open a name the kernel cached and fail on the read (in the handle-less
  // mode an open never reaches the daemon; a mapping's read failing is
  // SIGBUS). The adapter lets the kernel cache their entries for no time,
  // and a LOOKUP of one opens its data at once (FileFor), so the host's
  // unlink no longer takes it from under a reader.
  Result<Node*> Lookup(Node* parent, const std::string& name, struct stat* st,
                       bool* host_object = nullptr);
  void Forget(Node* node, uint64_t count);

  // The node's attributes. `by_path`: the caller reached the node by a
  // name the kernel cached (a GETATTR without a handle: stat(2), not
  // fstat(2)); a host file the host replaced since (StatLocked) then
  // answers ESTALE, on which the kernel looks the name up again
  // (LOOKUP_REVAL) and finds the new file. Otherwise the node's own file.
  Result<struct stat> GetAttr(Node* node, bool by_path = false);
  Result<std::vector<ListedEntry>> ReadDir(Node* dir);
  Result<std::string> ReadLink(Node* node);
  Result<struct statvfs> StatFs();

  Result<Node*> Mkdir(Node* parent, const std::string& name, mode_t mode,
                      Creds creds);
  Result<Node*> Mknod(Node* parent, const std::string& name, mode_t mode,
                      dev_t rdev, Creds creds);
  Result<Node*> Symlink(Node* parent, const std::string& name,
                        const std::string& target, Creds creds);
  Result<Node*> Link(Node* node, Node* parent, const std::string& name);
  // Creates a regular file and opens it (counted as an open handle, see
  // AddOpen); `flags` as for open(2), of which only the create flags
  // matter: the descriptor, cached for the node, is always read-write.
  Result<std::pair<Node*, FileLease>> Create(Node* parent,
                                             const std::string& name,
                                             mode_t mode, int flags,
                                             Creds creds);
  // open(O_TMPFILE) in `parent`: a regular file with no name, its data in
  // acqfs-tmp (kept data, as an unlinked file's) until a link gives it one
  // (Link), unless `flags` has O_EXCL. Returned opened and looked up once,
  // as Create's.
  Result<std::pair<Node*, FileLease>> CreateTmpfile(Node* parent, mode_t mode,
                                                    int flags, Creds creds);
  Status Unlink(Node* parent, const std::string& name);
  Status Rmdir(Node* parent, const std::string& name);
  // flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE.
  Status Rename(Node* parent, const std::string& name, Node* new_parent,
                const std::string& new_name, unsigned flags);

  // An open(2) of the file as a handle the kernel will RELEASE: checks,
  // copies up for writing (or O_TRUNC), truncates, counts the open
  // (ReleaseOpen gives it back) and returns the node's cached descriptor
  // (FileFor). The lease's from_lower says it reads the lower copy.
  Result<FileLease> Open(Node* node, int flags,
                         const SetIdRule& setid = nullptr);
  // The descriptor to read (`write` false) or write the file's data with,
  // from the file cache, opened on a miss: by its path, or through its kept
  // data once it has no name (the first write of a lower file copies it
  // up). Not counted as an open.
  // When this call made the node follow the host's replacement of its file
  // (OpenDataLocked), the kernel's cached attributes are stale: with
  // `followed` null they are dropped at once (SetAttrInvalidator), else
  // *followed is set and the caller drops them (DropCachedAttrs) when it
  // is right to (OpRead: a read under way must not lose the size its short
  // reply sets).
  Result<FileLease> FileFor(Node* node, bool write, bool* followed = nullptr);
  void DropCachedAttrs(Node* node) {
    if (attr_invalidator_) attr_invalidator_(node);
  }
  // Counts an open handle; ReleaseOpen drops it.
  void AddOpen(Node* node);
  void ReleaseOpen(Node* node);

  // `fh_fd` is the handle's descriptor when the request came with one and it
  // is an upper descriptor, or -1. A lower descriptor must never be passed.
  Result<struct stat> SetAttr(Node* node, const SetAttrRequest& req, int fh_fd);

  Result<std::string> GetXattr(Node* node, const std::string& name);
  Result<std::vector<std::string>> ListXattr(Node* node);
  Status SetXattr(Node* node, const std::string& name, const std::string& value,
                  int flags);
  Status RemoveXattr(Node* node, const std::string& name);

  // A checkpoint while mounted (docs/stack.md): waits for the writes in
  // flight and holds off new ones and every other request; then runs
  // `commit` (which records on disk the stack with the upper frozen), and,
  // if that succeeds, makes the upper the topmost frozen layer and the
  // empty directory `new_upper` the upper. Every node's layers are
  // described anew (nothing in the merged view changes), the descriptors
  // into the old upper are retired (the file cache is emptied: the next
  // write copies up into the new upper), and hard links in the old upper
  // become separate lower files: the other names of such a file are
  // returned, for the kernel to forget.
  struct StaleName {
    Node* parent;
    std::string name;
  };
  Result<std::vector<StaleName>> Freeze(const std::string& new_upper,
                                        const std::function<Status()>& commit);
  // A rewind while mounted (docs/stack.md): at the same quiescent point as
  // Freeze, runs `commit`, then serves the stack `frozen` (bottom first)
  // under the empty upper `new_upper`. Every name the table knows is
  // forgotten (the nodes become unlinked, with no data kept: a file open
  // across the rewind reads and writes nothing any more, ESTALE): the names
  // and the nodes the kernel holds are returned, for the kernel to forget
  // and to drop their caches.
  struct Restacked {
    std::vector<StaleName> names;
    std::vector<Node*> nodes;
  };
  Result<Restacked> Restack(const std::vector<std::string>& frozen,
                            const std::string& new_upper,
                            const std::function<Status()>& commit);
  // A squash while mounted (docs/stack.md): at the same quiescent point as
  // Freeze, runs `commit`, then serves the directory `merged` (made by
  // SquashLayers of frozen layers 1..count, fs/layer_squash.h) in their
  // place. Nothing in the merged view changes and no name is forgotten:
  // files were hard-linked, so what the kernel and the daemon hold stays
  // the same inodes; only the layers are numbered anew.
  Status ReplaceFrozen(unsigned count, const std::string& merged,
                       const std::function<Status()>& commit);
  // The one way a file's data is written (a write, fallocate,
  // copy_file_range, the truncate of an O_TRUNC open): holds the freeze
  // gate (HoldOffFreeze) from the lease of `node`'s writable descriptor to
  // the last byte, so that no byte lands in a layer a checkpoint froze
  // meanwhile; runs `op` on that descriptor through the quota with
  // `charge` (EDQUOT naming the node's path, and `op` does not run, when it
  // would pass the quota), settling the node's record to what the file
  // holds after. `op` returns a byte count or -errno, which is returned.
  // The caller moves the bytes only. For a writer the kernel did not check
  // (the truncate of an O_TRUNC open), `setid` says
  // which set-id bits of a file with that mode and group it must lose
  // (the adapter knows the caller: fuse/setid.h); they are cleared first,
  // behind the same gate. Null: the kernel cleared them (its write path
  // does, O_DIRECT included: fuse/fuse_ops.cc's SetOpenInfo).
  enum class DataOp { kWrite, kFallocate, kCopyFileRange, kTruncate };
  Result<int64_t> WriteData(Node* node, DataOp what, Quota::Charge charge,
                            const std::function<int64_t(int fd)>& op,
                            const SetIdRule& setid = nullptr);
  // fsync (fdatasync with `datasync`) of `node`'s data; the blocks the file
  // system allocated on the way (ext4's extent tree) count from here
  // (Quota::CatchUp). A file still read from a lower layer has nothing to
  // write back.
  Status Fsync(Node* node, bool datasync);
  // Held (shared) by every request that writes a file's data through a
  // descriptor of the file cache, from getting the descriptor to the last
  // byte written, so that Freeze finds no write in flight (WriteData takes
  // it). Taken before any other lock of the Overlay.
  std::shared_lock<std::shared_mutex> HoldOffFreeze();
  // The upper layer's directory (it changes with Freeze).
  std::string UpperRootPath() {
    std::shared_lock<std::shared_mutex> l(tree_mu_);
    return layers_.upper.root_path();
  }

  // Makes sure the node exists in the upper layer (copying it and its
  // parents up). Public for tests and the adapter's fallocate path.
  Status CopyUp(Node* node);

  // st_ino of the directory's parent (its own for the root), for "..".
  uint64_t ParentIno(Node* dir);

  // The node's path relative to the layer roots (for logs and tests).
  std::string PathOf(Node* node);

  // The descriptor budgets (docs/architecture.md, "Descriptors"): at most
  // `files` in the file cache and `pinned` in its pinned class (the host's
  // object-store files git maps), at most `kept` keeping unlinked files'
  // data (beyond that their data is kept in acqfs-tmp).
  void SetDescriptorBudget(size_t files, size_t kept, size_t pinned = 0) {
    files_.set_capacity(files, pinned);
    kept_.set_budget(kept);
  }
  // Called (on the requesting thread, with no lock held) when a node
  // starts to follow a host file that replaced its own before its data was
  // first opened (OpenDataLocked): the kernel's cached attributes of the
  // node (the old file's size) must go before the data request is
  // answered. Set before serving requests.
  void SetAttrInvalidator(std::function<void(Node*)> f) {
    attr_invalidator_ = std::move(f);
  }
  // FUSE passthrough (fuse/passthrough.h). A descriptor of `node`'s upper
  // file for the kernel to read and write it through, when it may be one:
  // a regular file whose data is in the upper layer under one name (its
  // other names would keep sharing it once a checkpoint freezes them).
  // EXDEV otherwise. Takes the tree lock shared, never the write gate.
  Result<UniqueFd> PassthroughSource(Node* node);
  // The nodes whose upper file the kernel reads and writes through an open
  // file of its own: a checkpoint leaves a copy in the layer it freezes
  // and carries the open file into the new upper; a rewind leaves a copy
  // in the upper it retires and keeps the open file nowhere (as an
  // unlinked one). Called at the quiescent point (every lock of the
  // Overlay's held). Set before serving requests.
  void SetLiveBackings(std::function<std::vector<const void*>()> f) {
    live_backings_ = std::move(f);
  }
  // Nodes the table holds (the kernel's lookups, open files, their
  // ancestors).
  size_t node_count() { return table_.node_count(); }
  // Descriptors held now in the file cache and for kept data.
  size_t cached_files() const { return files_.size(); }
  size_t kept_descriptors() const { return kept_.descriptors(); }
  // Gives descriptors back under pressure (EMFILE): evicts the file cache
  // down to `keep` entries. Takes no lock but the cache's own.
  size_t ShrinkFiles(size_t keep) { return files_.Shrink(keep); }

  // The gate: while it is closed, the lookup of the root's directory
  // `name` (its attributes: a READDIRPLUS of the root looks it up too),
  // lookups in it and listings of it wait until OpenGate(). The daemon
  // closes it before the mount for a file it then puts in that directory
  // in the background, which the sandbox must never see missing (the base's
  // copy of the host's index, gitbridge/git_base.h), nor the directory
  // change under it (putting the file there changes the directory's
  // ctime: a `tar` of the mount started at once said "file changed as we
  // read it").
  void CloseGate(const std::string& name);
  void OpenGate();
  // Publishes a copy of the regular file `src_fd` (data, mode, owner,
  // times, xattrs) at `rel` in the upper layer, whose parent directory
  // must be in the upper and which must not exist there (EEXIST): built in
  // acqfs-tmp and renamed into place. Its blocks are charged to the quota
  // whatever its limit (a file of acqfs's own, not the agent's). For a path
  // no node stands for yet (behind the gate).
  Status InstallUpperFile(const std::string& rel, int src_fd);

  // Is `node` one of the directories of the checkout's git object store
  // that the host's git rewrites under the sandbox (.git/objects, its
  // pack/ and info/, its loose objects' fan-out directories: a `git gc`,
  // even an automatic one, packs loose objects and deletes them), or of a
  // submodule's store the sandbox has its own repository of? The adapter
  // lets the kernel cache their attributes (and so their listings) for no
  // time: the sandbox's git, rescanning pack/ for an object gone loose,
  // sees the new pack at once. Takes tree_mu_ shared (not held on entry).
  bool SharedObjectStoreDir(Node* node) const;

 private:
  explicit Overlay(Layers layers);
  // Waits while the gate is closed and `dir` is the gated directory.
  void WaitAtGate(Node* dir);
  // Waits while the gate is closed and `name` in `parent` is the gated
  // directory's name in the root.
  void WaitAtGatedName(Node* parent, const std::string& name);
  // Notes the node a lookup of the gated name in the root gave (and the
  // object store's directories, NoteObjectStore).
  void NoteGatedDir(Node* parent, const std::string& name, Node* node);
  void NoteObjectStore(Node* parent, const std::string& name, Node* node);
  void NoteModuleStore(Node* parent, Node* node);
  // Is `node` one of the submodules' store directories, of slot
  // `first_slot` (0: objects) or after?
  bool ModuleStore(const Node* node, size_t first_slot) const;
  // What `node` is to the host's object store: not its file; a loose
  // object (in a fan-out directory); or a file git maps for as long as it
  // runs (a pack, its index, reverse index, the multi-pack index, a commit
  // graph), whose descriptor is pinned in the file cache, as the kernel
  // reads a mapping's pages through the node, not a handle. Only files read
  // from the host count. tree_mu_ held (shared is enough).
  enum class StoreFile { kNone, kLoose, kMapped };
  StoreFile ObjectStoreFileLocked(const Node* node) const;

  // Locked helpers: the caller holds tree_mu_ (shared is enough unless the
  // name says it changes something, then exclusive).
  std::string PathLocked(const Node* node) const;
  DirView ViewOf(const Node* dir) const;
  // With `st`, a node the table already holds for the name is checked
  // against the disk (its stat fills `*st`). When its object is gone from
  // there (removed or replaced outside the daemon: the host's `git gc`
  // pruning a lower directory), a caller holding tree_mu_ shared passes
  // `stale` and gets the error with `*stale` set, to retry exclusive; with
  // `stale` null the caller holds tree_mu_ exclusive, and the stale node
  // loses the name (DropStaleNameLocked) before the name is resolved afresh.
  Result<Node*> LookupLocked(Node* parent, const std::string& name, bool count,
                             struct stat* st = nullptr, bool* stale = nullptr);
  Result<Node*> NodeForChild(Node* parent, const std::string& name,
                             const ChildInfo& c, bool count);
  uint64_t InoFor(const ChildInfo& c) const;
  uint64_t UpperEntryIno(const DirView& view, int upper_dir,
                         const MergedEntry& e);
  uint64_t TagUpper(uint64_t ino) const;
  Node* FindAlias(const StaleName& s) const;
  // The point where Freeze, Restack and ReplaceFrozen change the stack
  // (fs/overlay_stack.cc).
  class QuiescentPoint;
  // A file the kernel writes through on its own (SetLiveBackings), at the
  // quiescent point: its path and its other names, in the upper.
  struct LiveFile {
    Node* node;
    std::string rel;
    std::vector<std::string> other_names;
    std::string copy;  // its copy in acqfs-tmp (CopyLiveFiles)
  };
  std::vector<LiveFile> LiveFilesLocked();
  // Before a checkpoint's commit: an exact copy of each, in acqfs-tmp
  // (none is left when one fails).
  Status CopyLiveFiles(std::vector<LiveFile>* live);
  // At a checkpoint's or rewind's quiescent point: the live files and
  // their copies (so that no room for them refuses it before anything is
  // recorded), then `commit` and the claim of `new_upper`; on failure no
  // copy is left.
  Result<std::vector<LiveFile>> CommitWithLiveCopies(
      const std::function<Status()>& commit, const std::string& new_upper);
  // After the switch of layers: the open file into the new upper, its copy
  // into the frozen layer (under all its names).
  Status CarryIntoNewUpper(const LiveFile& f);
  // Before a rewind's switch: its copy takes its names in the upper, which
  // the undo point keeps; the open file is left with the copy's name in
  // acqfs-tmp (the caller removes it).
  Status LeaveNameless(const LiveFile& f);
  // The number of a listed entry that has no upper object.
  uint64_t LowerEntryIno(const DirView& view, const MergedEntry& e);
  // The layer holding the object of a node that has a name (the upper, or
  // its topmost lower layer).
  const Layer& LayerOf(const Node* node) const {
    return node->upper ? layers_.upper
                       : layers_.LowerLayer(node->lower_layer());
  }
  // Who asks StatLocked: a lookup, a stat(2) through a name the kernel
  // cached, or a holder of the node (fstat(2), a read, the daemon itself).
  enum class StatFor { kHolder, kPath, kLookup };
  // The node's attributes. A host file (layer 0, no upper copy) whose path
  // now holds another inode (the host renamed a new file over it, as git,
  // sed -i and editors write) is no longer the node's: for a lookup that
  // is ENOENT, so the name gets a node of its own for the new inode; for a
  // stat by path ESTALE, on which the kernel looks the name up again; for
  // a holder the old inode's attributes, through the data descriptor the
  // file cache holds (ESTALE when it holds none), as ext4 keeps a replaced
  // file for its holders.
  Result<struct stat> StatLocked(Node* node, StatFor who = StatFor::kHolder);
  // Is `node` a host file whose path now holds the inode `path_st` says,
  // not its own?
  bool HostReplacedLocked(const Node* node, const struct stat& path_st) const;
  // The attributes of the data the file cache holds for `node` (a node
  // whose name the host took away: deleted or replaced); ENOENT when none.
  Result<struct stat> StatCachedData(Node* node, const std::string& what);
  void FixStat(const Node* node, struct stat* st) const;
  Result<UniqueFd> UpperDir(const Node* dir);
  Result<bool> LowerHas(const Node* parent, const std::string& name,
                        bool* is_dir);
  // What the lower layers hold under `name` of `parent` (the lower half
  // of ResolveChild, the policy not applied).
  Result<ChildInfo> LowerAt(const Node* parent, const std::string& name);

  // EROFS naming `rel` when the policy makes it read-only (itself, or a
  // directory above it).
  Status CheckWritable(const std::string& rel, bool is_dir,
                       const char* op) const;
  // The same for a directory about to move: refused when anything below it
  // is read-only (a move would change those paths).
  Status CheckMovable(Node* dir, const char* op);
  Status EnsureUpper(Node* node);
  // EnsureUpper, or for a node without a name, a copy of its own of kept
  // lower data: what any change of the node needs first (exclusive).
  Status MakeChangeable(Node* node);
  // `estimate`: what the copy is sure to take, reserved first.
  Status Materialise(Node* dir, uint64_t estimate);
  void MarkMaterialised(Node* dir);
  Status PrepareToMove(Node* node);
  // A rename of the sandbox's regular file `src_name` (in the upper
  // directory `src_dirfd`) over the host's file at `dst_rel`, which the
  // host changed since the base (`sed -i`, an editor, git: a new file
  // renamed over the one they read): keeps the host's file as the source
  // of the file that takes its name (fs/copy_up_source.h), unless that
  // file has one of its own. Best effort: without it the export compares
  // with the host's file at the time of the export. Tree lock exclusive.
  void KeepReplacedHostFile(int src_dirfd, const std::string& src_name,
                            const std::string& dst_rel);
  Status ClearUpperDir(Quota::Change* ch, int pfd, const std::string& name,
                       const std::string& shown);
  // Marks the directory `name` in `dirfd` opaque, counting the block the
  // marker may take in `ch`.
  Status SetOpaqueCounted(Quota::Change* ch, int dirfd, const std::string& name,
                          const std::string& shown);
  struct RenameOp;
  Status CheckRename(const RenameOp& op);
  Status PrepareRename(Quota::Change* ch, RenameOp& op, int pfd, int npfd);
  Status MoveInUpper(const RenameOp& op, int pfd, int npfd);
  void RecordRenameLocked(const RenameOp& op);
  // Unlink and Rmdir, which differ only as `how` says.
  struct Removal;
  Status Remove(Node* parent, const std::string& name, const Removal& how);
  // What a directory about to lose its last name shows (its attributes and
  // xattrs), for RemovedDirLocked (tree_mu_ exclusive).
  Result<Node::RemovedDir> ReadRemovedDir(Node* node);
  Result<Node*> LinkTmpfile(Node* node, Node* parent, const std::string& name,
                            const std::string& shown);
  // Records what the directory `node`, which a rmdir or a rename over it
  // has just taken the last name of, keeps showing: `d`, read before, with
  // st_nlink 0 (Node::removed_dir). Without it (the read failed), a stat of
  // it fails with ENOENT. tree_mu_ exclusive, table_mu_ held.
  void RemovedDirLocked(Node* node, Result<Node::RemovedDir> d);
  // A chmod, chown or utimes of such a directory (tree_mu_ exclusive).
  Result<struct stat> SetRemovedDirAttr(Node* node, const SetAttrRequest& req);
  Status SetRemovedDirXattr(Node* node, const std::string& name,
                            const std::string* value, int flags);
  // Does losing the name `parent`/`name` leave `node` without any name
  // while it may be open, so that its data must be kept?
  bool MustKeep(Node* node);
  // Keeps the data of `node`, whose last name `name` in the upper
  // directory `pfd` is about to be replaced (tree_mu_ exclusive).
  Status KeepBeforeReplacing(Node* node, int pfd, const std::string& name,
                             const std::string& shown);
  // Opens the data of `node` for `write` (tree_mu_ held; exclusive when
  // `write`, which may copy up).
  Result<OpenFile> OpenDataLocked(Node* node, bool write);
  Result<UniqueFd> OpenAccess(const std::string& rel, int flags);
  Result<UniqueFd> OpenKept(Node* node, int flags);
  struct XattrTarget;
  // `borrow`: the directory's descriptor comes from the calling thread's
  // DirFd cache (valid until its next DirFd call; tree_mu_ held).
  Result<XattrTarget> XattrTargetOf(Node* node, const Layer& layer,
                                    bool borrow = false);
  FileLease UpperFileOf(Node* node);
  Result<UniqueFd> OpenAttrTarget(Node* node, int fh_fd);
  // Runs the xattr change `op` on the upper object of `node` through the
  // quota (Quota::Charged); returns `*done`, the change's own status, when
  // the quota let it run.
  Status XattrCharged(Node* node, const XattrTarget& t, Quota::Charge charge,
                      const std::function<int64_t()>& op, const Status* done);

  // Creates an entry named `name` in `parent` with `make(dirfd, name)`,
  // replacing a whiteout atomically (opaque for directories).
  using Maker = std::function<Status(int dirfd, const std::string& name)>;
  // `mode`: the mode the new entry must have exactly (0: as made).
  // `made`, when given, gets what the new entry holds (its blocks), for the
  // quota.
  Status Publish(Node* parent, const std::string& name, bool is_dir,
                 const Creds* creds, mode_t mode, const Maker& make,
                 uint64_t* made = nullptr);
  Status FixNewMode(int dirfd, const std::string& name, mode_t mode,
                    const std::string& shown);
  Status ChownNew(int dirfd, const std::string& name, int pfd,
                  const Creds& creds, const std::string& shown);

  // Frees the node once a lookup it counted is given back, when the
  // lookup then failed (tree_mu_ held).
  void MaybeFreeAfterLookup(Node* node);
  using Reaper = NodeTable::Reaper;

  // Calls `visit` for every object of the merged tree below `dir` (not
  // `dir` itself), each directory before what it holds; stops at the first
  // failure.
  using BelowVisitor =
      std::function<Status(const std::string& rel, const ChildInfo& c)>;
  Status ForEachBelow(Node* dir, const BelowVisitor& visit);
  // What materialising `dir` is sure to add to the upper: the copies of the
  // lower objects below it that are not in the upper yet (CopyEstimate).
  Result<uint64_t> CopyEstimateBelow(Node* dir);
  // Gives back what the upper object `st` of `node`, whose name was just
  // removed, held, when that was its last name: anything but a regular file
  // in `ch`; a regular file's record when the node goes (quota_owed).
  void GiveBack(Quota::Change* ch, Node* node, const struct stat& st);

  Layers layers_;
  std::unique_ptr<Quota> quota_;
  mode_t daemon_umask_ = 022;       // set once in Create
  bool owns_owner_access_ = false;  // set once in Create: it enabled it
  FileCache files_{64};             // its own lock
  std::function<void(Node*)> attr_invalidator_;  // set before serving
  std::function<std::vector<const void*>()> live_backings_;  // the same
  KeptStore kept_{&layers_, 64};                             // its own lock
  // Moves on with every change that may rename, replace or remove a
  // directory of a layer (overlay_internal.h, ExclusiveLock); 0 is never
  // used (it means "do not cache" to Layer::DirFd).
  // The gate (CloseGate): gate_closed_ is read without a lock on every
  // lookup and listing; gate_name_ is written under gate_mu_ before
  // gate_closed_ is set and not changed while it is; gate_dir_ (the node
  // the last lookup of that name gave, only compared, never followed) is
  // written under gate_mu_; waiters sleep on gate_cv_.
  std::atomic<bool> gate_closed_{false};
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  std::string gate_name_;
  std::atomic<Node*> gate_dir_{nullptr};
  // The nodes of .git, .git/objects, .git/objects/pack and .../info as the
  // last lookups gave them (only compared, never followed; a stale one
  // only shortens a cache time).
  std::atomic<Node*> git_dir_{nullptr}, objects_dir_{nullptr},
      pack_dir_{nullptr}, info_dir_{nullptr}, graphs_dir_{nullptr};
  // The same for the submodules' repositories the sandbox has its own copy
  // of (Policy::own_modules(), docs/git-bridge.md): .git/modules, and for
  // submodule i, kModuleSlots nodes from module_stores_[i * kModuleSlots]:
  // its objects, pack, info and commit-graphs directories. Sized at
  // Create, never resized.
  static constexpr size_t kModuleSlots = 4;
  std::atomic<Node*> modules_dir_{nullptr};
  std::vector<std::string> module_store_paths_;  // i * kModuleSlots + slot
  std::unique_ptr<std::atomic<Node*>[]> module_stores_;
  std::atomic<uint64_t> tree_gen_{1};
  uint64_t Gen() const { return tree_gen_.load(std::memory_order_relaxed); }

  // The write gate (HoldOffFreeze, Freeze): acquired before tree_mu_.
  std::shared_mutex freeze_mu_;
  mutable std::shared_mutex tree_mu_;
  std::mutex table_mu_;  // acquired after tree_mu_
  // The nodes (fs/node_table.h), guarded by tree_mu_ and table_mu_ as each
  // of its members says; after files_ and kept_, which freed nodes give
  // their descriptors back to.
  NodeTable table_{&table_mu_, &files_, &kept_};
};

}  // namespace acqfs

#endif  // ACQFS_FS_OVERLAY_H_
