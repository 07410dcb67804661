#include "fs/layer_chain.h"

#include <cerrno>

#include "common/sys.h"

namespace acqfs {

Result<LayerEntry> ReadLayerEntry(const LayerFormat& format, int dirfd,
                                  const std::string& name, const EntryRead& how,
                                  const std::string& shown) {
  LayerEntry e;
  bool found = false;
  Status s = sys::StatAtIfExists(dirfd, name, &e.st, &found, shown);
  if (!s) return s.error();
  if (!found) return LayerEntry{};
  if (how.plain) {
    e.kind = S_ISDIR(e.st.st_mode) ? LayerEntry::kDir : LayerEntry::kNonDir;
    return e;
  }
  // Each read below fails with ENOENT when the entry went since its stat:
  // it is absent then, as if it had never been listed.
  auto whiteout =
      format.IsWhiteoutEntry(dirfd, name, e.st, how.xattr_whiteouts, shown);
  if (!whiteout) {
    if (whiteout.err() == ENOENT) return LayerEntry{};
    return whiteout.error();
  }
  if (*whiteout) {
    e.kind = LayerEntry::kWhiteout;
    return e;
  }
  e.kind = S_ISDIR(e.st.st_mode) ? LayerEntry::kDir : LayerEntry::kNonDir;
  if (how.origin) {
    auto origin = format.ReadOrigin(dirfd, name, shown);
    if (!origin) {
      if (origin.err() == ENOENT) return LayerEntry{};
      return origin.error();
    }
    e.origin = *origin;
  }
  if (e.kind == LayerEntry::kDir) {
    auto mark = format.ReadOpaque(dirfd, name, shown);
    if (!mark) {
      if (mark.err() == ENOENT) return LayerEntry{};
      return mark.error();
    }
    e.opaque = *mark;
  }
  return e;
}

bool NameChain::Add(unsigned layer, const LayerEntry& e, uint64_t own_number,
                    bool plain) {
  if (done_) return false;
  switch (e.kind) {
    case LayerEntry::kAbsent:
      return true;
    case LayerEntry::kWhiteout:
      // Hides the name below; under a directory it ends its chain.
      if (found_) {
        stopped_ = true;
      } else {
        whited_out_ = true;
        top_ = e;
        top_layer_ = layer;
      }
      done_ = true;
      return false;
    case LayerEntry::kNonDir:
      if (found_) {
        // Under the topmost directory: hidden by it, and it ends the chain.
        stopped_ = true;
      } else {
        found_ = true;
        top_ = e;
        top_layer_ = layer;
        number_ = !plain && e.origin ? e.origin : own_number;
        pending_ = false;
      }
      done_ = true;
      return false;
    case LayerEntry::kDir:
      break;
  }
  if (!found_) {
    found_ = true;
    top_ = e;
    top_layer_ = layer;
    pending_ = true;
  }
  dirs_ |= Bit(layer);
  if (pending_) {
    // Its own number until a directory below gives one.
    number_ = !plain && e.origin ? e.origin : own_number;
    pending_ = !plain && !e.origin;
  }
  if (plain) {  // the host: the bottom layer, whose objects are plain
    done_ = true;
    return false;
  }
  if (e.opaque == OpaqueMark::kMayHoldXattrWhiteouts) xw_ |= Bit(layer);
  if (e.opaque == OpaqueMark::kOpaque) {
    stopped_ = true;
    done_ = true;
    return false;
  }
  return true;
}

}  // namespace acqfs
