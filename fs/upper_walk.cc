// UpperWalk (see upper_walk.h). One frame per directory on the current path,
// each holding that directory's listing and how far the walk got in it. An
// own frame lists the merged own directory: the directories of its chain
// (the own layers whose directory at that path is part of it, topmost
// first), each name once, with the topmost own layer that holds it. When it
// is opaque with respect to the host (or below such a one) and the host has
// a directory at its path, the frame then turns into a lower frame listing
// the host names it did not show. A lower-only frame (below a host directory
// the own layers removed) lists the host alone. All of them sit on one
// LayerStack, so entering and leaving a directory is O(1) system calls (per
// layer) and the descriptors stay bounded.
// The sys and format helpers are called with an empty `shown`; failures get
// the absolute path of the entry in its layer (Named), built only then.
#include "fs/upper_walk.h"

#include <cerrno>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/sys.h"
#include "fs/layer_chain.h"
#include "fs/layer_walk.h"

namespace acqfs {
namespace {

constexpr uint64_t kProgressEvery = 1000;
const std::string kNoName;

Error Named(Error e, const Layer& layer, const std::string& rel) {
  e.path = layer.Shown(rel);
  return e;
}

void AppendName(std::string* path, const std::string& name) {
  if (!path->empty()) path->push_back('/');
  path->append(name);
}

// A set of layers by Layers::At number (0 the host, up to upper_number(),
// which may be 32: wider than a LowerMask).
using LayerSet = uint64_t;
inline LayerSet Bit(unsigned i) { return LayerSet{1} << i; }
inline unsigned TopOf(LayerSet s) {
  return 63 - static_cast<unsigned>(__builtin_clzll(s));
}

class Walker {
 public:
  Walker(const Layers& layers, const UpperWalkOptions& options,
         const UpperVisitor& visit)
      : layers_(layers),
        options_(options),
        visit_(visit),
        stack_(layers),
        up_(layers.upper_number()) {}
  Walker(const Walker&) = delete;
  Walker& operator=(const Walker&) = delete;

  Result<uint64_t> Run();

 private:
  struct Frame {
    std::vector<sys::DirEntry> entries;
    // Own frames of more than one layer: the own layer of each entry (else
    // empty: all of them are the top layer's).
    std::vector<uint8_t> entry_layer;
    size_t next = 0;
    size_t path_len = 0;  // path_'s length in this directory
    bool upper = true;    // entries are the own layers' (else the host's)
    bool merged = false;  // own frames: the host directory shows
    LayerSet own = 0;     // own frames: the chain's layers
    LayerSet xw = 0;      // those whose directory may hold xattr whiteouts
    bool in_git = false;  // the directory is a .git or below one
    bool lower_listed = false;
    // Own frames that will list the host: the names the own view shows.
    std::unordered_set<std::string> shown;
  };
  // Where the entry just visited asks the walk to go.
  struct Descent {
    bool into = false;
    LayerSet own = 0;     // the own directories to enter (the new chain)
    LayerSet xw = 0;      // of those, the ones that may hold xattr whiteouts
    bool lower = false;   // enter the host directory of the name
    bool merged = false;  // the new own frame merges with the host's
    bool in_git = false;
  };

  // The current directory's descriptor in own layer `i`.
  int OwnFd(unsigned i) const {
    return i == up_ ? stack_.upper() : stack_.lower(i);
  }
  Status PushFrame(const Descent& d);
  Status NextPhaseOrPop();
  Status UpperStep(const std::string& name, unsigned layer, Descent* d);
  Status Chain(const std::string& name, unsigned layer, const LayerEntry& top,
               Descent* d);
  Status LowerStep(const std::string& name, Descent* d);
  Status Descend(const std::string& name, const Descent& d);
  bool Wanted() const { return !options_.wanted || options_.wanted(path_); }

  const Layers& layers_;
  const UpperWalkOptions& options_;
  const UpperVisitor& visit_;
  LayerStack stack_;
  const unsigned up_;          // the upper's number
  std::vector<Frame> frames_;  // root first
  std::string path_;           // the current entry's (or directory's) path
  uint64_t visited_ = 0;
};

Result<uint64_t> Walker::Run() {
  auto root = RootView(layers_);
  if (!root) return root.error();
  // The roots' chain: the upper's, then the frozen layers' RootView found
  // showing through; the host's when none of them is opaque.
  Descent d;
  d.own = Bit(up_);
  d.xw = root->xwhiteouts ? Bit(up_) : 0;
  d.merged = (root->lower & LowerBit(0)) != 0;
  for (unsigned i = 1; i < up_; ++i) {
    if (root->lower & LowerBit(i)) d.own |= Bit(i);
    if (root->lower_xw & LowerBit(i)) d.xw |= Bit(i);
  }
  ACQFS_TRY(PushFrame(d));
  while (!frames_.empty()) {
    Frame& f = frames_.back();
    if (f.next == f.entries.size()) {
      ACQFS_TRY(NextPhaseOrPop());
      continue;
    }
    const unsigned layer = !f.upper                ? 0
                           : f.entry_layer.empty() ? TopOf(f.own)
                                                   : f.entry_layer[f.next];
    const std::string name = std::move(f.entries[f.next++].name);
    if (name == ".git" && options_.git_dirs == GitDirs::kSkip) continue;
    const size_t len = f.path_len;
    AppendName(&path_, name);
    Descent next;
    ACQFS_TRY(f.upper ? UpperStep(name, layer, &next) : LowerStep(name, &next));
    if (next.into) {
      ACQFS_TRY(Descend(name, next));  // `f` may be stale from here
      continue;
    }
    path_.resize(len);
  }
  return visited_;
}

// Lists the stack's current directory (path_) into a new frame: the merged
// own directory of `d.own` for an own frame, the host's for a lower-only
// frame (d.own empty).
Status Walker::PushFrame(const Descent& d) {
  Frame f;
  f.upper = d.own != 0;
  f.merged = d.merged;
  f.own = d.own;
  f.xw = d.xw;
  f.in_git = d.in_git;
  f.path_len = path_.size();
  f.lower_listed = !f.upper;
  if (!f.upper) {
    auto ents = sys::ReadDir(stack_.lower(), kNoName);
    if (!ents) return Named(ents.error(), layers_.lower, path_);
    f.entries = std::move(*ents);
  } else {
    const unsigned top = TopOf(d.own);
    auto ents = sys::ReadDir(OwnFd(top), kNoName);
    if (!ents) return Named(ents.error(), layers_.At(top), path_);
    f.entries = std::move(*ents);
    LayerSet below = d.own & ~Bit(top);
    if (below) {
      // Each name once, with the topmost layer that has an entry of it.
      std::unordered_set<std::string> seen;
      f.entry_layer.assign(f.entries.size(), static_cast<uint8_t>(top));
      for (const sys::DirEntry& e : f.entries) seen.insert(e.name);
      while (below) {
        const unsigned i = TopOf(below);
        below &= ~Bit(i);
        auto more = sys::ReadDir(OwnFd(i), kNoName);
        if (!more) return Named(more.error(), layers_.At(i), path_);
        for (sys::DirEntry& e : *more) {
          if (!seen.insert(e.name).second) continue;
          f.entries.push_back(std::move(e));
          f.entry_layer.push_back(static_cast<uint8_t>(i));
        }
      }
    }
  }
  frames_.push_back(std::move(f));
  if (options_.listed) options_.listed(path_);
  return Ok();
}

// The current frame's entries are all visited: an own frame that hides
// the host's directory goes on with the host names it did not show; any
// other frame is done, and the walk is back in the parent.
Status Walker::NextPhaseOrPop() {
  Frame& f = frames_.back();
  if (!f.lower_listed && !f.merged && stack_.lower() >= 0) {
    f.lower_listed = true;
    auto ents = sys::ReadDir(stack_.lower(), kNoName);
    // A host directory removed underneath since its open lists nothing.
    if (!ents && ents.err() == ENOENT) ents = std::vector<sys::DirEntry>{};
    if (!ents) return Named(ents.error(), layers_.lower, path_);
    f.entries.clear();
    f.entry_layer.clear();
    for (sys::DirEntry& e : *ents)
      if (!f.shown.count(e.name)) f.entries.push_back(std::move(e));
    f.shown.clear();
    f.next = 0;
    f.upper = false;
    return Ok();
  }
  frames_.pop_back();
  if (frames_.empty()) return Ok();
  ACQFS_TRY(stack_.Pop());
  path_.resize(frames_.back().path_len);
  return Ok();
}

// An entry of a merged own listing, the topmost own entry of its name, in
// own layer `layer` (path_ is its path).
Status Walker::UpperStep(const std::string& name, unsigned layer, Descent* d) {
  if (!Wanted()) return Ok();
  Frame& f = frames_.back();
  const Layer& own = layers_.At(layer);
  const int fd = OwnFd(layer);
  UpperEntry e(UpperEntry::kUpper, path_, name);
  e.layer = layer;
  const EntryRead how{.xattr_whiteouts = (f.xw & Bit(layer)) != 0};
  auto entry = ReadLayerEntry(layers_.format, fd, name, how, kNoName);
  if (!entry) return Named(entry.error(), own, path_);
  if (entry->kind == LayerEntry::kAbsent) return Ok();  // gone since listed
  if (++visited_ % kProgressEvery == 0 && options_.progress)
    options_.progress(visited_);
  e.upper = entry->st;
  const bool whiteout = entry->kind == LayerEntry::kWhiteout;
  if (whiteout) e.kind = UpperEntry::kWhiteout;
  e.in_git = f.in_git || name == ".git";
  e.upper_dir = fd;
  const bool is_dir = entry->kind == LayerEntry::kDir;
  e.opaque = entry->opaque;
  // In an opaque directory a whiteout hides nothing of its own: the lower
  // names the directory lacks are listed after its own entries.
  const int host = stack_.lower();
  if (host >= 0 && (f.merged || !whiteout)) {
    Status s = sys::StatAtIfExists(host, name, &e.lower, &e.in_lower, kNoName);
    if (!s) return Named(s.error(), layers_.lower, path_);
    if (e.in_lower) e.lower_dir = host;
  }
  if (!whiteout && !f.merged && host >= 0) f.shown.insert(name);
  auto below = visit_(e);
  if (!below) return below.error();
  if (*below != Below::kEnter) return Ok();
  const bool lower_is_dir = e.in_lower && S_ISDIR(e.lower.st_mode);
  if (is_dir) {
    ACQFS_TRY(Chain(name, layer, *entry, d));
    d->into = true;
    d->lower = lower_is_dir;
    // Below a directory opaque to the host every own directory hides the
    // host's one.
    d->merged = d->merged && f.merged && lower_is_dir;
    d->in_git = e.in_git;
  } else if (lower_is_dir) {
    *d = Descent{true, 0, 0, true, false, e.in_git};
  }
  return Ok();
}

// The chain of the own directory `name` of the current frame, whose topmost
// directory is `top`, in `layer`: it and the own directories of that name in
// the frame's layers below it, down to the first opaque one; a whiteout or a
// non-directory stops it (fs/layer_chain.h; an entry gone meanwhile is
// absent). Sets d->own, d->xw and d->merged (false when the chain is opaque
// to the host or was stopped).
Status Walker::Chain(const std::string& name, unsigned layer,
                     const LayerEntry& top, Descent* d) {
  const Frame& f = frames_.back();
  NameChain chain;
  bool more = chain.Add(layer, top, 0);
  for (LayerSet below = f.own & (Bit(layer) - 1); below && more;) {
    const unsigned i = TopOf(below);
    below &= ~Bit(i);
    const EntryRead how{.xattr_whiteouts = (f.xw & Bit(i)) != 0};
    auto e = ReadLayerEntry(layers_.format, OwnFd(i), name, how, kNoName);
    if (!e) return Named(e.error(), layers_.At(i), path_);
    more = chain.Add(i, *e, 0);
  }
  d->own = chain.dirs();
  d->xw = chain.xattr_whiteouts();
  d->merged = !chain.stopped();
  return Ok();
}

// An entry of a host listing: a name an opaque own directory lacks, or an
// object below a host directory the own layers removed (path_ is its path).
Status Walker::LowerStep(const std::string& name, Descent* d) {
  if (!Wanted()) return Ok();
  UpperEntry e(UpperEntry::kLowerOnly, path_, name);
  Status s =
      sys::StatAtIfExists(stack_.lower(), name, &e.lower, &e.in_lower, kNoName);
  if (!s) return Named(s.error(), layers_.lower, path_);
  if (!e.in_lower) return Ok();  // gone since the listing
  e.in_git = frames_.back().in_git || name == ".git";
  e.lower_dir = stack_.lower();
  auto below = visit_(e);
  if (!below) return below.error();
  if (*below == Below::kEnter && S_ISDIR(e.lower.st_mode))
    *d = Descent{true, 0, 0, true, false, e.in_git};
  return Ok();
}

// Enters `name` of the current directory as `d` says. A directory gone
// meanwhile (ENOENT) is not entered; when only its host half is gone, the
// own half still is.
Status Walker::Descend(const std::string& name, const Descent& d) {
  const bool upper = (d.own & Bit(up_)) != 0;
  // The frozen layers' bits are their LowerMask bits; the host's is bit 0.
  const LowerMask frozen =
      static_cast<LowerMask>(d.own & (Bit(up_) - 1) & ~LayerSet{1});
  Status s = stack_.Push(name, upper, frozen | (d.lower ? LowerBit(0) : 0));
  bool lower = d.lower;
  if (!s && s.err() == ENOENT && d.own && d.lower) {
    lower = false;
    s = stack_.Push(name, upper, frozen);
  }
  if (!s) {
    if (s.err() == ENOENT) {
      path_.resize(frames_.back().path_len);
      return Ok();
    }
    const unsigned top = d.own ? TopOf(d.own) : 0;
    return Named(s.error(), layers_.At(top), path_);
  }
  Descent pushed = d;
  pushed.merged = d.merged && lower;
  s = PushFrame(pushed);
  if (!s && s.err() == ENOENT) {
    // Removed between its open and its listing: getdents64 of a directory
    // that is gone fails with ENOENT (the kernel's IS_DEADDIR). Gone since
    // the listing, as an entry that vanished before its stat.
    ACQFS_TRY(stack_.Pop());
    path_.resize(frames_.back().path_len);
    return Ok();
  }
  return s;
}

}  // namespace

Result<uint64_t> WalkUpper(const Layers& layers,
                           const UpperWalkOptions& options,
                           const UpperVisitor& visit) {
  Walker walker(layers, options, visit);
  return walker.Run();
}

}  // namespace acqfs
