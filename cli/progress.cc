#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace acqfs::cli {

Progress::Progress(std::string what)
    : what_(std::move(what)),
      start_(Clock::now()),
      delay_(std::chrono::seconds(1)) {
  const char* env = std::getenv("ACQFS_PROGRESS");
  std::string mode = env ? env : "";
  if (mode == "never")
    enabled_ = false;
  else if (mode == "always")
    enabled_ = true;
  else
    enabled_ = ::isatty(STDERR_FILENO) == 1;
  if (const char* ms = std::getenv("ACQFS_PROGRESS_DELAY_MS"); ms && *ms) {
    char* end = nullptr;
    long v = std::strtol(ms, &end, 10);
    if (*end == '\0' && v >= 0) delay_ = std::chrono::milliseconds(v);
  }
  if (enabled_) ticker_ = std::thread([this] { Tick(); });
}

Progress::~Progress() { Finish(); }

void Progress::Update(const std::string& phase, uint64_t done) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  bool new_phase = phase != phase_;
  phase_ = phase;
  done_ = done;
  // A new step is shown at once (once the delay has passed).
  if (new_phase && !finished_ && Clock::now() - start_ >= delay_) DrawLocked();
}

void Progress::Tick() {
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, delay_, [this] { return finished_; })) return;
  for (;;) {
    DrawLocked();
    if (cv_.wait_for(lock, std::chrono::milliseconds(200),
                     [this] { return finished_; }))
      return;
  }
}

void Progress::DrawLocked() {
  if (phase_.empty()) return;
  auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start_)
          .count();
  std::string line = "\racqfs: " + what_ + ": " + phase_;
  if (done_ > 0) line += ": " + std::to_string(done_);
  line += " (" + std::to_string(secs) + "s)\x1b[K";
  // A failed write to the terminal only loses the progress line.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  drawn_ = true;
}

void Progress::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (drawn_) {
      static const char kErase[] = "\r\x1b[K";
      (void)!::write(STDERR_FILENO, kErase, sizeof kErase - 1);
    }
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace acqfs::cli
