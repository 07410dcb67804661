// HostWatch: the host's changes to its checkout, as they happen (inotify),
// so that the daemon can drop what the kernel caches of them at once
// instead of after the attribute timeout (docs/architecture.md, "Host
// edits while mounted").
//
// The kernel caches a host file's name, attributes and pages for the
// mount's timeout (60 s by default). A host that rewrote files in that
// window (a `git checkout`, a `sed -i`, an editor) left the sandbox
// acting on sizes and listings that were no longer true: `git status` in
// the sandbox read a shorter file than the size it had been told ("short
// read while indexing"), or mapped it and died of SIGBUS. With the watch,
// each change is reported as it lands, and the daemon invalidates the
// name, the listing and the file's cached attributes and pages, which
// leaves the same races a native disk has.
//
// What it watches: every directory of the host tree (one inotify watch
// each), but the top-level names in `skip` (`.git`: the sandbox's git is
// its own, and the shared object store is never cached). The watches are
// added by the watch's own thread a tenth of a second after Start (at nice
// 19, so it leaves the mount's first requests and the CPUs to the
// sandbox's first commands), walking the tree
// breadth first with at most one directory open; changes made before a
// directory's watch is in place are seen after the timeout, as before.
// New directories (made or moved in) are walked and watched as their
// events come; a directory moved away or deleted loses its watches.
// When the kernel refuses a watch (the user's inotify limit,
// fs.inotify.max_user_watches) or its queue overflows, the sink hears it
// once (kLost, for the daemon's log) and the rest of the tree keeps the
// timeout's behaviour.
// Descriptors: its copy of the root, the inotify instance, a stop pipe
// (two) and one directory while walking.
// Stopping: the destructor tells the thread to stop and waits for it at
// most a second (a sink may wait in the kernel, see fuse/kernel_notify.h);
// a thread still busy then is left to end alone, and calls no sink again.
// Thread-safety: Start and the destructor from one thread; the sink runs
// on the watch's thread.
#ifndef ACQFS_FS_HOST_WATCH_H_
#define ACQFS_FS_HOST_WATCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace acqfs {

struct HostChange {
  enum Kind {
    kEntry,    // `name` in `dir` was made, removed, or renamed from or to
    kContent,  // the file `dir`/`name` was written in place
    kAttrs,    // its attributes changed (mode, owner, times, links)
    kLost,     // changes go unseen from now on (`why`): the queue
               // overflowed, or the kernel refused a watch of `dir`
  };
  Kind kind = kEntry;
  std::string dir;   // relative to the root, "" for the root
  std::string name;  // an entry of `dir`
  bool is_dir = false;
  std::string why;  // kLost only
};

class HostWatch {
 public:
  using Sink = std::function<void(const HostChange&)>;
  // Hears, on the watch's thread, that the first walk has ended: the
  // directories watched and the seconds it took.
  using Walked = std::function<void(size_t, double)>;
  // Watches the tree below `root` (a directory; the watch keeps its own
  // descriptor of it), skipping the top-level names in `skip`. The sink
  // hears every change once the walk reached its directory.
  static Result<std::unique_ptr<HostWatch>> Start(
      int root, std::string shown, Sink sink,
      std::vector<std::string> skip = {}, Walked walked = {});
  ~HostWatch();  // stops and joins the thread
  HostWatch(const HostWatch&) = delete;
  HostWatch& operator=(const HostWatch&) = delete;

  // Directories watched now, and whether the first walk has ended (tests).
  size_t watched() const;
  bool walked() const;

  struct State;  // shared with the thread

 private:
  explicit HostWatch(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

}  // namespace acqfs

#endif  // ACQFS_FS_HOST_WATCH_H_
