// Progress: one self-rewriting status line on stderr for operations that
// can take longer than a second (an export of a large change, the removal
// of a big upper layer).
//
// It prints nothing unless stderr is a terminal, and nothing during the
// first second, so quick runs and scripts (output piped or redirected) stay
// quiet. A ticker thread redraws the line five times a second as
//   "acqfs: <what>: <phase>: <count> (<seconds>s)" and an erase-to-end-of-line,
// so a long step that reports nothing still shows time passing; the line is
// erased when the Progress ends. The environment can override the choice:
// ACQFS_PROGRESS=never turns it off, ACQFS_PROGRESS=always draws even when
// stderr is not a terminal, and ACQFS_PROGRESS_DELAY_MS sets the delay
// before the first draw (default 1000).
// Thread-safety: Update may be called from any thread; it locks.
#ifndef ACQFS_CLI_PROGRESS_H_
#define ACQFS_CLI_PROGRESS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace acqfs::cli {

class Progress {
 public:
  explicit Progress(std::string what);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // The current phase and how many of its items are done (0: not counted).
  void Update(const std::string& phase, uint64_t done = 0);
  // Erases the line (if drawn); later updates draw nothing.
  void Finish();

  bool enabled() const { return enabled_; }

 private:
  using Clock = std::chrono::steady_clock;
  void Tick();
  void DrawLocked();

  const std::string what_;
  bool enabled_ = false;
  bool drawn_ = false;
  bool finished_ = false;
  Clock::time_point start_;
  Clock::duration delay_;
  std::string phase_;
  uint64_t done_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread ticker_;
};

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_PROGRESS_H_
