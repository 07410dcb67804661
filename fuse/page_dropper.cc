#include "fuse/page_dropper.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "common/handle.h"
#include "fuse/kernel_notify.h"

namespace acqfs {

constexpr size_t kMaxWaiting = 4096;

struct PageDropper::State {
  std::shared_ptr<const KernelNotify> notify;  // immutable after Start
  std::mutex mu;
  std::condition_variable cv;
  std::set<uint64_t> waiting;  // guarded by mu
  uint64_t overflowed = 0;     // guarded by mu
  bool stop = false;           // guarded by mu
  bool done = false;           // guarded by mu: the thread has returned
};

namespace {

void Run(const std::shared_ptr<PageDropper::State>& s) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [&] { return s->stop || !s->waiting.empty(); });
    if (s->stop) break;
    uint64_t ino = *s->waiting.begin();
    s->waiting.erase(s->waiting.begin());
    uint64_t overflowed = s->overflowed;
    s->overflowed = 0;
    lock.unlock();
    if (overflowed)
      spdlog::warn("page dropper: {} refused writes not dropped (queue full)",
                   overflowed);
    int e = s->notify->InvalInode(ino, 0, 0);  // every page
    // ENOENT: the kernel has forgotten the inode, and its pages with it.
    if (e != 0 && e != ENOENT)
      spdlog::warn("notify_inval_inode: node {:#x}: {}", ino, std::strerror(e));
    lock.lock();
  }
  s->done = true;
  s->cv.notify_all();
}

}  // namespace

Result<std::unique_ptr<PageDropper>> PageDropper::Start(
    std::shared_ptr<const KernelNotify> notify) {
  auto s = std::make_shared<State>();
  s->notify = std::move(notify);
  std::thread([s] { Run(s); }).detach();
  return std::unique_ptr<PageDropper>(new PageDropper(std::move(s)));
}

PageDropper::~PageDropper() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
  if (!state_->cv.wait_for(lock, std::chrono::seconds(1),
                           [&] { return state_->done; }))
    spdlog::warn("page dropper: a notification still in flight at unmount");
}

void PageDropper::Drop(uint64_t ino) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->waiting.size() >= kMaxWaiting && !state_->waiting.count(ino)) {
    ++state_->overflowed;
    return;
  }
  state_->waiting.insert(ino);
  state_->cv.notify_one();
}

}  // namespace acqfs
