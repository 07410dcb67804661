#include "fuse/passthrough.h"

#include <linux/fuse.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "fuse/fuse_uapi.h"

namespace acqfs {

OpenAnswer DecideOpen(uint32_t cached, uint32_t passed) {
  if (passed > 0) return OpenAnswer::kReuse;
  if (cached > 0) return OpenAnswer::kCached;
  return OpenAnswer::kCreate;
}

// The ids left (files still open at a lazy unmount) go with the
// connection.
BackingTable::~BackingTable() = default;

std::string BackingTable::off_reason() const {
  std::lock_guard<std::mutex> l(mu_);
  return off_reason_;
}

bool BackingTable::AnswerFromCounts(Entry* e, uint32_t* id) {
  switch (DecideOpen(e->cached, e->passed)) {
    case OpenAnswer::kCached:
      ++e->cached;
      *id = 0;
      return true;
    case OpenAnswer::kReuse:
      ++e->passed;
      passed_through_.fetch_add(1, std::memory_order_relaxed);
      *id = e->id;
      return true;
    case OpenAnswer::kCreate:
      break;
  }
  if (enabled()) return false;
  ++e->cached;
  *id = 0;
  return true;
}

uint32_t BackingTable::Open(const void* node,
                            const std::function<Result<int>()>& backing_fd) {
  uint32_t id = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (AnswerFromCounts(&nodes_[node], &id)) return id;
  }
  // Outside the lock: finding the node's file takes the Overlay's locks.
  Result<int> fd = backing_fd();
  std::lock_guard<std::mutex> l(mu_);
  Entry& e = nodes_[node];
  // Another open of the node may have been answered meanwhile.
  if (AnswerFromCounts(&e, &id)) return id;
  if (!fd || record_ == nullptr) {
    ++e.cached;
    return 0;
  }
  // Recorded first: a daemon that dies from here on leaves the file to be
  // fenced by the next claim of the layers.
  struct stat st;
  if (::fstat(*fd, &st) != 0) {
    ++e.cached;
    return 0;
  }
  auto slot = record_->Add(static_cast<uint64_t>(st.st_ino));
  if (!slot) {
    spdlog::warn("passthrough: {} (this open is cached)",
                 slot.error().Message());
    ++e.cached;
    return 0;
  }
  fuse_uapi::BackingMap map;
  std::memset(&map, 0, sizeof map);
  map.fd = *fd;
  const int made = ::ioctl(dev_fd_, fuse_uapi::kDevIocBackingOpen, &map);
  if (made <= 0) {
    const int err = errno;
    // Refused for every file alike: the daemon lacks CAP_SYS_ADMIN in the
    // initial user namespace, the kernel did not take FUSE_PASSTHROUGH, or
    // the upper is itself on a stacked file system too deep.
    if (err == EPERM || err == EOPNOTSUPP || err == ELOOP || err == EINVAL) {
      if (enabled_.exchange(false)) {
        off_reason_ =
            std::string("FUSE_DEV_IOC_BACKING_OPEN: ") + std::strerror(err);
        spdlog::warn("passthrough: off from now on ({})", off_reason_);
      }
    } else {
      spdlog::warn(
          "passthrough: FUSE_DEV_IOC_BACKING_OPEN: {} (this open "
          "is cached)",
          std::strerror(err));
    }
    record_->Remove(*slot);
    ++e.cached;
    return 0;
  }
  e.id = static_cast<uint32_t>(made);
  e.slot = *slot;
  ++e.passed;
  passed_through_.fetch_add(1, std::memory_order_relaxed);
  return e.id;
}

void BackingTable::Release(const void* node, bool passed) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  Entry& e = it->second;
  if (passed && e.passed > 0) {
    if (--e.passed == 0) {
      CloseId(e.id);
      // The kernel has let go of the backing file (it RELEASEs an open
      // after it is done with it).
      record_->Remove(e.slot);
      e.id = 0;
    }
  } else if (!passed && e.cached > 0) {
    --e.cached;
  }
  if (e.cached == 0 && e.passed == 0) nodes_.erase(it);
}

std::vector<const void*> BackingTable::Live() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<const void*> out;
  for (const auto& [node, e] : nodes_)
    if (e.passed > 0) out.push_back(node);
  return out;
}

void BackingTable::CloseId(uint32_t id) {
  // The kernel keeps the backing file for the opens that use it; the id
  // only goes from its table.
  if (::ioctl(dev_fd_, fuse_uapi::kDevIocBackingClose, &id) != 0)
    spdlog::warn("passthrough: FUSE_DEV_IOC_BACKING_CLOSE {}: {}", id,
                 std::strerror(errno));
}

namespace {
thread_local uint32_t reply_backing = 0;
}  // namespace

ReplyBacking::ReplyBacking(uint32_t id) { reply_backing = id; }
ReplyBacking::~ReplyBacking() { reply_backing = 0; }
uint32_t ReplyBacking::Current() { return reply_backing; }

bool PassthroughReply(const struct iovec* iov, int count, uint32_t id,
                      std::vector<struct iovec>* out, std::vector<char>* body) {
  if (count != 2 || iov[0].iov_len != sizeof(fuse_out_header) ||
      iov[1].iov_len < sizeof(fuse_open_out))
    return false;
  fuse_out_header h;
  std::memcpy(&h, iov[0].iov_base, sizeof h);
  if (h.error != 0) return false;
  const char* b = static_cast<const char*>(iov[1].iov_base);
  body->assign(b, b + iov[1].iov_len);
  fuse_open_out o;
  char* tail = body->data() + body->size() - sizeof o;
  std::memcpy(&o, tail, sizeof o);
  // The kernel refuses any other flag beside FOPEN_PASSTHROUGH but
  // FOPEN_DIRECT_IO, FOPEN_PARALLEL_DIRECT_WRITES and FOPEN_NOFLUSH (the
  // caller's open fails with EIO): a passed-through file has no page cache
  // of its own to keep.
  o.open_flags &=
      FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES | FOPEN_NOFLUSH;
  o.open_flags |= fuse_uapi::kFopenPassthrough;
  o.padding = id;  // backing_id in the kernel's 7.40+ header
  std::memcpy(tail, &o, sizeof o);
  out->assign(iov, iov + count);
  (*out)[1].iov_base = body->data();
  return true;
}

}  // namespace acqfs
