// UpperWalk (see upper_walk.h). One frame per directory on the current path,
// each holding that directory's listing and how far the walk got in it. An
// upper frame lists the upper directory; when it is opaque (or below an
// opaque one) and the lower has a directory at its path, the frame then
// turns into a lower frame listing the lower names the upper did not show.
// A lower-only frame (below a lower directory the upper removed) lists the
// lower alone. All of them sit on one LayerStack, so entering and leaving a
// directory is O(1) system calls and the descriptors stay bounded.
// The sys and format helpers are called with an empty `shown`; failures get
// the absolute path of the entry (Named), built only then.
#include "fs/upper_walk.h"

#include <cerrno>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/sys.h"
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

class Walker {
 public:
  Walker(const Layers& layers, const UpperWalkOptions& options,
         const UpperVisitor& visit)
      : layers_(layers), options_(options), visit_(visit), stack_(layers) {}
  Walker(const Walker&) = delete;
  Walker& operator=(const Walker&) = delete;

  Result<uint64_t> Run();

 private:
  struct Frame {
    std::vector<sys::DirEntry> entries;
    size_t next = 0;
    size_t path_len = 0;      // path_'s length in this directory
    bool upper = true;        // entries are the upper's (else the lower's)
    bool merged = false;      // upper frames: the lower directory shows
    bool xwhiteouts = false;  // upper frames: opaque mark "x"
    bool in_git = false;      // the directory is a .git or below one
    bool lower_listed = false;
    // Upper frames that will list their lower: the names the upper shows.
    std::unordered_set<std::string> shown;
  };
  // Where the entry just visited asks the walk to go.
  struct Descent {
    bool into = false;
    bool upper = false;  // enter the upper directory of the name
    bool lower = false;  // enter the lower directory of the name
    // The new upper frame's view.
    bool merged = false;
    bool xwhiteouts = false;
    bool in_git = false;
  };

  Status PushFrame(bool upper, bool merged, bool xwhiteouts, bool in_git);
  Status NextPhaseOrPop();
  Status UpperStep(const std::string& name, Descent* d);
  Status LowerStep(const std::string& name, Descent* d);
  Status Descend(const std::string& name, const Descent& d);
  bool Wanted() const { return !options_.wanted || options_.wanted(path_); }

  const Layers& layers_;
  const UpperWalkOptions& options_;
  const UpperVisitor& visit_;
  LayerStack stack_;
  std::vector<Frame> frames_;  // root first
  std::string path_;           // the current entry's (or directory's) path
  uint64_t visited_ = 0;
};

Result<uint64_t> Walker::Run() {
  auto root = RootView(layers_);
  if (!root) return root.error();
  ACQFS_TRY(PushFrame(true, root->merged(), root->xwhiteouts, false));
  while (!frames_.empty()) {
    Frame& f = frames_.back();
    if (f.next == f.entries.size()) {
      ACQFS_TRY(NextPhaseOrPop());
      continue;
    }
    const std::string name = std::move(f.entries[f.next++].name);
    if (name == ".git" && options_.git_dirs == GitDirs::kSkip) continue;
    const size_t len = f.path_len;
    AppendName(&path_, name);
    Descent d;
    ACQFS_TRY(f.upper ? UpperStep(name, &d) : LowerStep(name, &d));
    if (d.into) {
      ACQFS_TRY(Descend(name, d));  // `f` may be stale from here
      continue;
    }
    path_.resize(len);
  }
  return visited_;
}

// Lists the stack's current directory (path_) into a new frame: the upper
// directory for an upper frame, the lower one for a lower-only frame.
Status Walker::PushFrame(bool upper, bool merged, bool xwhiteouts,
                         bool in_git) {
  Frame f;
  f.upper = upper;
  f.merged = merged;
  f.xwhiteouts = xwhiteouts;
  f.in_git = in_git;
  f.path_len = path_.size();
  f.lower_listed = !upper;
  const int dir = upper ? stack_.upper() : stack_.lower();
  auto ents = sys::ReadDir(dir, kNoName);
  if (!ents)
    return Named(ents.error(), upper ? layers_.upper : layers_.lower, path_);
  f.entries = std::move(*ents);
  frames_.push_back(std::move(f));
  if (options_.listed) options_.listed(path_);
  return Ok();
}

// The current frame's entries are all visited: an upper frame that hides
// its lower directory goes on with the lower names it did not show; any
// other frame is done, and the walk is back in the parent.
Status Walker::NextPhaseOrPop() {
  Frame& f = frames_.back();
  if (!f.lower_listed && !f.merged && stack_.lower() >= 0) {
    f.lower_listed = true;
    auto ents = sys::ReadDir(stack_.lower(), kNoName);
    if (!ents) return Named(ents.error(), layers_.lower, path_);
    f.entries.clear();
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

// An entry of an upper listing (path_ is its path).
Status Walker::UpperStep(const std::string& name, Descent* d) {
  if (!Wanted()) return Ok();
  Frame& f = frames_.back();
  UpperEntry e(UpperEntry::kUpper, path_, name);
  bool found = false;
  Status s =
      sys::StatAtIfExists(stack_.upper(), name, &e.upper, &found, kNoName);
  if (!s) return Named(s.error(), layers_.upper, path_);
  if (!found) return Ok();  // gone since the listing
  if (++visited_ % kProgressEvery == 0 && options_.progress)
    options_.progress(visited_);
  auto whiteout = layers_.format.IsWhiteoutEntry(stack_.upper(), name, e.upper,
                                                 f.xwhiteouts, kNoName);
  if (!whiteout) {
    if (whiteout.err() == ENOENT) return Ok();
    return Named(whiteout.error(), layers_.upper, path_);
  }
  if (*whiteout) e.kind = UpperEntry::kWhiteout;
  e.in_git = f.in_git || name == ".git";
  e.upper_dir = stack_.upper();
  const bool is_dir = !*whiteout && S_ISDIR(e.upper.st_mode);
  if (is_dir) {
    auto mark = layers_.format.ReadOpaque(stack_.upper(), name, kNoName);
    if (!mark) {
      if (mark.err() == ENOENT) return Ok();
      return Named(mark.error(), layers_.upper, path_);
    }
    e.opaque = *mark;
  }
  // In an opaque directory a whiteout hides nothing of its own: the lower
  // names the directory lacks are listed after its upper entries.
  if (stack_.lower() >= 0 && (f.merged || !*whiteout)) {
    s = sys::StatAtIfExists(stack_.lower(), name, &e.lower, &e.in_lower,
                            kNoName);
    if (!s) return Named(s.error(), layers_.lower, path_);
    if (e.in_lower) e.lower_dir = stack_.lower();
  }
  if (!*whiteout && !f.merged && stack_.lower() >= 0) f.shown.insert(name);
  auto below = visit_(e);
  if (!below) return below.error();
  if (*below != Below::kEnter) return Ok();
  const bool lower_is_dir = e.in_lower && S_ISDIR(e.lower.st_mode);
  if (is_dir) {
    // Below an opaque directory every upper directory hides its lower one.
    *d = Descent{true,
                 true,
                 lower_is_dir,
                 f.merged && lower_is_dir && e.opaque != OpaqueMark::kOpaque,
                 e.opaque == OpaqueMark::kMayHoldXattrWhiteouts,
                 e.in_git};
  } else if (lower_is_dir) {
    *d = Descent{true, false, true, false, false, e.in_git};
  }
  return Ok();
}

// An entry of a lower listing: a name an opaque directory lacks, or an
// object below a lower directory the upper removed (path_ is its path).
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
    *d = Descent{true, false, true, false, false, e.in_git};
  return Ok();
}

// Enters `name` of the current directory as `d` says. A directory gone
// meanwhile (ENOENT) is not entered; when only its lower half is gone, the
// upper half still is.
Status Walker::Descend(const std::string& name, const Descent& d) {
  Status s = stack_.Push(name, d.upper, d.lower);
  bool lower = d.lower;
  if (!s && s.err() == ENOENT && d.upper && d.lower) {
    lower = false;
    s = stack_.Push(name, true, false);
  }
  if (!s) {
    if (s.err() == ENOENT) {
      path_.resize(frames_.back().path_len);
      return Ok();
    }
    return Named(s.error(), d.upper ? layers_.upper : layers_.lower, path_);
  }
  return PushFrame(d.upper, d.merged && lower, d.xwhiteouts, d.in_git);
}

}  // namespace

Result<uint64_t> WalkUpper(const Layers& layers,
                           const UpperWalkOptions& options,
                           const UpperVisitor& visit) {
  Walker walker(layers, options, visit);
  return walker.Run();
}

}  // namespace acqfs
