#include "audit/log_file.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <optional>
#include <utility>

#include "common/sys.h"

namespace acqfs::audit {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// How long the writer lets a batch gather (the most a kill -9 can take of
// records already queued, with what it was writing).
constexpr std::chrono::milliseconds kBatchDelay{50};
// The most bytes the writer thread encodes before it writes them.
constexpr size_t kMaxChunk = 1024 * 1024;
constexpr size_t kNoReadLimit = std::numeric_limits<size_t>::max();

int64_t NowNs() {
  struct timespec ts;
  // CLOCK_REALTIME always exists: clock_gettime cannot fail here.
  (void)::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// How the files of a state directory `shown` are named in errors.
std::string DirShown(const std::string& shown) {
  return shown + "/" + kAuditDirName;
}
std::string FileShown(const std::string& shown, const char* name) {
  return DirShown(shown) + "/" + name;
}

// Opens audit/ beneath `state_fd` (O_PATH), first making it (0700) when
// `create`. A symlink there is refused (ELOOP).
Result<UniqueFd> OpenAuditDir(int state_fd, const std::string& shown,
                              bool create) {
  const std::string dir_shown = DirShown(shown);
  if (create && ::mkdirat(state_fd, kAuditDirName, 0700) != 0 &&
      errno != EEXIST)
    return Error::Errno("mkdir", dir_shown);
  return sys::OpenBeneath(state_fd, kAuditDirName, O_PATH | O_DIRECTORY, 0,
                          dir_shown);
}

// Opens `rel` beneath `dir_fd` with no symlink followed, and checks that it
// is a regular file (O_NONBLOCK: a planted fifo does not hang the open).
Result<UniqueFd> OpenLogFile(int dir_fd, const std::string& rel, int flags,
                             const std::string& shown) {
  auto fd =
      sys::OpenBeneath(dir_fd, rel, flags | O_NONBLOCK | O_NOCTTY, 0600, shown);
  if (!fd) return fd;
  auto st = sys::Fstat(fd->get(), shown);
  if (!st) return st.error();
  if (!S_ISREG(st->st_mode))
    return Error::Of(EINVAL, "open audit log (not a regular file)", shown);
  return fd;
}

// OpenLogFile for reading; a missing file (or audit/) gives an invalid fd.
Result<UniqueFd> OpenIfExists(int dir_fd, const std::string& rel,
                              const std::string& shown) {
  auto fd = OpenLogFile(dir_fd, rel, O_RDONLY, shown);
  if (!fd && fd.err() == ENOENT) return UniqueFd();
  return fd;
}

// Reads up to `n` bytes at `off`, fewer only at the end of the file.
Result<size_t> PreadFull(int fd, char* buf, size_t n, uint64_t off,
                         const std::string& shown) {
  size_t done = 0;
  while (done < n) {
    ssize_t r =
        ::pread(fd, buf + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("read", shown);
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

// The offset just past the last '\n' among the first `size` bytes of `fd`
// (0 when there is none).
Result<uint64_t> EndOfLastLine(int fd, uint64_t size,
                               const std::string& shown) {
  std::string buf(kReadChunk, '\0');
  uint64_t end = size;
  while (end > 0) {
    const uint64_t start = end > kReadChunk ? end - kReadChunk : 0;
    auto n = PreadFull(fd, buf.data(), end - start, start, shown);
    if (!n) return n.error();
    for (size_t i = *n; i > 0; --i)
      if (buf[i - 1] == '\n') return start + i;
    end = start;
  }
  return 0;
}

// The seq of the last line that decodes among the first `size` bytes of
// `fd` (0 when none does).
Result<uint64_t> LastSeq(int fd, uint64_t size, const std::string& shown) {
  auto end = EndOfLastLine(fd, size, shown);
  if (!end) return end.error();
  uint64_t line_end = *end;
  while (line_end > 0) {
    auto start = EndOfLastLine(fd, line_end - 1, shown);
    if (!start) return start.error();
    std::string line(line_end - *start, '\0');
    auto n = PreadFull(fd, line.data(), line.size(), *start, shown);
    if (!n) return n.error();
    line.resize(*n);
    if (auto r = DecodeRecord(line)) return r->seq;
    line_end = *start;
  }
  return 0;
}

// Calls `line` with each whole line of `text` (without its '\n'); returns
// the bytes of a last line that has no '\n'.
template <class F>
std::string_view ForEachLine(std::string_view text, const F& line) {
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string_view::npos;
       pos = nl + 1)
    line(text.substr(pos, nl - pos));
  return text.substr(pos);
}

// How many records a generation of the log holds, and the times of the
// first and last.
struct Generation {
  bool known = true;  // false: count it from the file when needed
  uint64_t count = 0;
  int64_t from_ns = 0;
  int64_t to_ns = 0;
  void Add(int64_t t) {
    if (count++ == 0) from_ns = t;
    to_ns = t;
  }
};

Result<Generation> CountFile(int dir_fd, const char* name,
                             const std::string& shown) {
  Generation g;
  auto fd = OpenIfExists(dir_fd, name, shown);
  if (!fd) return fd.error();
  if (!fd->is_valid()) return g;
  auto text = sys::ReadAll(fd->get(), kNoReadLimit, shown);
  if (!text) return text.error();
  ForEachLine(*text, [&](std::string_view line) {
    if (auto r = DecodeRecord(line)) g.Add(r->time_ns);
  });
  return g;
}

// Records lost and not yet reported by a kDropped record.
struct Loss {
  uint64_t count = 0;
  int64_t from_ns = 0;
  int64_t to_ns = 0;
  void Add(uint64_t n, int64_t from, int64_t to) {
    if (n == 0) return;
    from_ns = count == 0 ? from : std::min(from_ns, from);
    to_ns = count == 0 ? to : std::max(to_ns, to);
    count += n;
  }
};

// A record waiting for the disk; `meta` for a kDropped record the writer
// made itself (not one given to Append: it is not counted in WriterStats).
struct Queued {
  Record r;
  bool meta = false;
};

// What the writer thread did with one batch.
struct BatchOutcome {
  uint64_t written = 0;  // appended records now on disk
  uint64_t dropped = 0;  // appended records lost
  Loss lost;             // every loss to report in a kDropped record
  std::optional<Error> error;
};

// One line of a chunk about to be written: where it ends in the buffer and
// what it was.
struct Line {
  size_t end = 0;
  enum Kind { kFiller, kAppended, kDropped, kRotated } kind = kFiller;
  uint64_t seq = 0;
  int64_t time_ns = 0;
  Loss loss;  // kDropped: what it reports
};

// Both generations opened for reading (either may be invalid: missing).
struct Generations {
  UniqueFd old;  // audit/log.1
  UniqueFd cur;  // audit/log
};

// Opens audit/log, then audit/log.1; when the log rotated between the two
// opens (both name the same file), tries again, so that the two belong
// together.
Result<Generations> OpenGenerations(int state_fd, const std::string& shown) {
  auto dir = OpenAuditDir(state_fd, shown, /*create=*/false);
  if (!dir) {
    if (dir.err() == ENOENT) return Generations();
    return dir.error();
  }
  for (int attempt = 0;; ++attempt) {
    Generations g;
    auto cur = OpenIfExists(dir->get(), kAuditLogName,
                            FileShown(shown, kAuditLogName));
    if (!cur) return cur.error();
    auto old = OpenIfExists(dir->get(), kAuditOldLogName,
                            FileShown(shown, kAuditOldLogName));
    if (!old) return old.error();
    g.cur = std::move(*cur);
    g.old = std::move(*old);
    if (attempt < 8 && g.cur && g.old) {
      auto a = sys::Fstat(g.cur.get(), FileShown(shown, kAuditLogName));
      if (!a) return a.error();
      auto b = sys::Fstat(g.old.get(), FileShown(shown, kAuditOldLogName));
      if (!b) return b.error();
      if (a->st_ino == b->st_ino && a->st_dev == b->st_dev) continue;
    }
    return g;
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Writer

struct Writer::Impl {
  // Set by Open, then read-only.
  WriterOptions options;
  std::string shown_log;  // "<shown>/audit/log"
  std::string shown_old;  // "<shown>/audit/log.1"
  UniqueFd dir;           // audit/ (O_PATH)

  // The writer thread's alone once it runs (Open sets them before).
  UniqueFd log;           // audit/log (O_APPEND); invalid after a failed open
  uint64_t log_size = 0;  // its bytes
  uint64_t next_seq = 1;
  Generation cur;                 // what audit/log holds
  Generation old;                 // what audit/log.1 holds
  std::optional<Record> rotated;  // a kRotated record not yet written
  uint64_t rotate_floor = 0;      // bytes of audit/log a rotation would keep
  bool torn = false;  // audit/log may end in a fragment (a cut that failed)

  mutable std::mutex mu;            // a leaf lock
  std::condition_variable work_cv;  // (mu) queue not empty, or stop
  std::condition_variable done_cv;  // (mu) `processed` grew
  std::deque<Queued> queue;         // GUARDED_BY(mu), <= limit()
  uint64_t queued_total = 0;        // GUARDED_BY(mu): ever put in `queue`
  uint64_t processed = 0;           // GUARDED_BY(mu): of them written or lost
  Loss pending_loss;                // GUARDED_BY(mu): not yet queued
  WriterStats stats;                // GUARDED_BY(mu)
  bool incomplete = false;          // GUARDED_BY(mu)
  bool warned_write = false;        // GUARDED_BY(mu)
  bool warned_queue = false;        // GUARDED_BY(mu)
  std::optional<Error> last_error;  // GUARDED_BY(mu)
  bool stop = false;                // GUARDED_BY(mu)
  bool flush_wanted = false;        // GUARDED_BY(mu): Flush is waiting

  std::thread thread;  // runs Run(); joined by ~Writer

  size_t limit() const { return std::max<size_t>(options.queue_limit, 1); }
  void QueueLossLocked();
  void Run();
  bool AccountLocked(const BatchOutcome& out, size_t items);
  BatchOutcome WriteBatch(std::deque<Queued>& batch);
  Status WriteChunk(std::string& buf, std::vector<Line>& lines,
                    BatchOutcome* out);
  Status Rotate();
  Status OpenLog();
};

void Writer::Impl::QueueLossLocked() {
  Queued q;
  q.meta = true;
  q.r.op = Op::kDropped;
  q.r.time_ns = NowNs();
  q.r.count = pending_loss.count;
  q.r.from_ns = pending_loss.from_ns;
  q.r.to_ns = pending_loss.to_ns;
  pending_loss = Loss();
  queue.push_back(std::move(q));
  ++queued_total;
}

Result<std::unique_ptr<Writer>> Writer::Open(int state_fd,
                                             const std::string& shown,
                                             const WriterOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->shown_log = FileShown(shown, kAuditLogName);
  impl->shown_old = FileShown(shown, kAuditOldLogName);
  auto dir = OpenAuditDir(state_fd, shown, /*create=*/true);
  if (!dir) return dir.error();
  impl->dir = std::move(*dir);
  const int d = impl->dir.get();
  auto log = OpenLogFile(d, kAuditLogName, O_WRONLY | O_APPEND | O_CREAT,
                         impl->shown_log);
  if (!log) return log.error();
  impl->log = std::move(*log);

  // Read through a second descriptor of the same file: cut a torn last
  // line, then find the last record's seq.
  auto rd = OpenLogFile(d, kAuditLogName, O_RDONLY, impl->shown_log);
  if (!rd) return rd.error();
  auto wst = sys::Fstat(impl->log.get(), impl->shown_log);
  if (!wst) return wst.error();
  auto rst = sys::Fstat(rd->get(), impl->shown_log);
  if (!rst) return rst.error();
  if (wst->st_ino != rst->st_ino || wst->st_dev != rst->st_dev)
    return Error::Of(EAGAIN, "open audit log (replaced while opened)",
                     impl->shown_log);
  auto end = EndOfLastLine(rd->get(), rst->st_size, impl->shown_log);
  if (!end) return end.error();
  if (*end < static_cast<uint64_t>(rst->st_size) &&
      ::ftruncate(impl->log.get(), static_cast<off_t>(*end)) != 0)
    return Error::Errno("truncate a torn last line", impl->shown_log);
  impl->log_size = *end;
  auto seq = LastSeq(rd->get(), *end, impl->shown_log);
  if (!seq) return seq.error();
  if (*end == 0) {
    auto old = OpenIfExists(d, kAuditOldLogName, impl->shown_old);
    if (!old) return old.error();
    if (old->is_valid()) {
      auto ost = sys::Fstat(old->get(), impl->shown_old);
      if (!ost) return ost.error();
      seq = LastSeq(old->get(), ost->st_size, impl->shown_old);
      if (!seq) return seq.error();
    }
  }
  impl->next_seq = *seq + 1;
  // A log there before is counted when it is about to be replaced.
  impl->cur.known = impl->log_size == 0;
  impl->old.known = false;

  Impl* p = impl.get();
  try {
    impl->thread = std::thread([p] { p->Run(); });
  } catch (const std::exception& e) {
    return Error::Of(EAGAIN, std::string("start the audit writer: ") + e.what(),
                     impl->shown_log);
  }
  return std::unique_ptr<Writer>(new Writer(std::move(impl)));
}

Writer::Writer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Writer::~Writer() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stop = true;
  }
  impl_->work_cv.notify_all();
  impl_->thread.join();
}

void Writer::Append(Record r) {
  Impl& m = *impl_;
  bool warn = false;
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(m.mu);
    if (r.time_ns == 0) r.time_ns = NowNs();
    ++m.stats.appended;
    if (m.pending_loss.count > 0 && m.queue.size() < m.limit())
      m.QueueLossLocked();
    if (m.queue.size() < m.limit()) {
      m.queue.push_back(Queued{std::move(r), false});
      ++m.queued_total;
      // The writer is woken by the first record of a batch and when a
      // quarter of the queue is full, not by each record: a wake-up per
      // record cost a context switch per request on two CPUs (W5's tar x
      // 37% slower).
      wake = m.queue.size() == 1 || m.queue.size() == m.limit() / 4;
    } else {
      ++m.stats.dropped;
      m.pending_loss.Add(1, r.time_ns, r.time_ns);
      m.incomplete = true;
      warn = !m.warned_queue;
      m.warned_queue = true;
    }
  }
  if (wake) m.work_cv.notify_one();
  if (warn)
    spdlog::warn("audit log: {}: the queue is full ({} records); records lost",
                 m.shown_log, m.limit());
}

Status Writer::Flush() {
  std::unique_lock<std::mutex> l(impl_->mu);
  const uint64_t target = impl_->queued_total;
  if (impl_->processed < target) {
    impl_->flush_wanted = true;
    impl_->work_cv.notify_one();
  }
  impl_->done_cv.wait(l, [&] { return impl_->processed >= target; });
  if (impl_->last_error) return *impl_->last_error;
  return Ok();
}

bool Writer::Incomplete() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->incomplete;
}

WriterStats Writer::GetStats() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->stats;
}

void Writer::Impl::Run() {
  std::unique_lock<std::mutex> l(mu);
  for (;;) {
    work_cv.wait(l, [&] { return stop || !queue.empty(); });
    // A batch gathers for up to kBatchDelay, unless the queue fills to a
    // quarter, a Flush waits or the writer stops.
    work_cv.wait_for(l, kBatchDelay, [&] {
      return stop || flush_wanted || queue.size() >= limit() / 4;
    });
    flush_wanted = false;
    if (queue.empty()) break;  // stopping, and everything written
    std::deque<Queued> batch;
    batch.swap(queue);
    l.unlock();
    BatchOutcome out = WriteBatch(batch);
    l.lock();
    const bool warn = AccountLocked(out, batch.size());
    if (warn) {
      l.unlock();
      spdlog::warn("audit log: {} records lost: {}", out.lost.count,
                   out.error->Message());
      l.lock();
    }
  }
  // Stopping: a loss not yet on record gets one last try.
  if (pending_loss.count == 0) return;
  QueueLossLocked();
  std::deque<Queued> batch;
  batch.swap(queue);
  l.unlock();
  BatchOutcome out = WriteBatch(batch);
  l.lock();
  AccountLocked(out, batch.size());
}

// Takes the outcome of a batch of `items` into the counts; true when the
// failure it reports is the first to be logged.
bool Writer::Impl::AccountLocked(const BatchOutcome& out, size_t items) {
  stats.written += out.written;
  stats.dropped += out.dropped;
  pending_loss.Add(out.lost.count, out.lost.from_ns, out.lost.to_ns);
  processed += items;
  bool warn = false;
  if (out.error) {
    last_error = out.error;
    incomplete = true;
    warn = !warned_write;
    warned_write = true;
  }
  done_cv.notify_all();
  return warn;
}

BatchOutcome Writer::Impl::WriteBatch(std::deque<Queued>& batch) {
  BatchOutcome out;
  const uint64_t half = options.max_bytes / 2;
  std::string buf;
  std::vector<Line> lines;
  // Adds `r` to the chunk: `text`, its line, encoded with seq next_seq.
  auto add_encoded = [&](const Record& r, const std::string& text, Line line) {
    line.seq = next_seq++;
    line.time_ns = r.time_ns;
    buf += text;
    line.end = buf.size();
    lines.push_back(line);
  };
  auto add = [&](Record& r, Line line) {
    r.seq = next_seq;
    add_encoded(r, EncodeRecord(r), line);
  };
  auto start_chunk = [&] {
    if (!lines.empty()) return;
    if (torn) {  // end the fragment: it becomes a line of its own
      buf = "\n";
      Line filler;
      filler.end = 1;
      lines.push_back(filler);
    }
    if (rotated) {
      Line line;
      line.kind = Line::kRotated;
      add(*rotated, line);
    }
  };
  size_t i = 0;
  auto lose_rest = [&](const Error& e) {
    for (; i < batch.size(); ++i) {
      const Record& r = batch[i].r;
      if (batch[i].meta) {
        out.lost.Add(r.count, r.from_ns, r.to_ns);
      } else {
        ++out.dropped;
        out.lost.Add(1, r.time_ns, r.time_ns);
      }
    }
    out.error = e;
  };
  for (; i < batch.size(); ++i) {
    start_chunk();
    Record& r = batch[i].r;
    r.seq = next_seq;
    std::string text = EncodeRecord(r);
    const uint64_t held = log_size + buf.size();
    if (held > rotate_floor && held + text.size() > half) {
      Status s = WriteChunk(buf, lines, &out);
      if (s) s = Rotate();
      if (!s) {
        lose_rest(s.error());
        return out;
      }
      start_chunk();
      r.seq = next_seq;  // after the kRotated record
      text = EncodeRecord(r);
    }
    Line line;
    line.kind = batch[i].meta ? Line::kDropped : Line::kAppended;
    if (batch[i].meta) line.loss.Add(r.count, r.from_ns, r.to_ns);
    add_encoded(r, text, line);
    if (buf.size() >= kMaxChunk) {  // a bounded buffer for a long queue
      if (Status s = WriteChunk(buf, lines, &out); !s) {
        ++i;  // record i was in the chunk, and counted
        lose_rest(s.error());
        return out;
      }
    }
  }
  if (Status s = WriteChunk(buf, lines, &out); !s) out.error = s.error();
  return out;
}

// Writes the chunk with one write(2) (more only after a short one) and
// empties it. On failure the lines not wholly written are cut off again
// and counted as lost, and their seqs are given again.
Status Writer::Impl::WriteChunk(std::string& buf, std::vector<Line>& lines,
                                BatchOutcome* out) {
  if (lines.empty()) return Ok();
  size_t done = 0;
  std::optional<Error> error;
  if (!log) {  // a rotation could not open it: try again
    if (Status s = OpenLog(); !s) error = s.error();
  }
  while (!error && done < buf.size()) {
    ssize_t n = ::write(log.get(), buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      error = Error::Errno("write", shown_log);
      break;
    }
    done += static_cast<size_t>(n);
  }
  // The lines wholly written.
  size_t whole = 0, kept = 0;
  while (whole < lines.size() && lines[whole].end <= done)
    kept = lines[whole++].end;
  if (done > kept) {
    if (::ftruncate(log.get(), static_cast<off_t>(log_size + kept)) == 0) {
      done = kept;
    } else {
      torn = true;  // the next chunk ends the fragment first
    }
  }
  if (whole > 0 && kept == done) torn = false;
  log_size += done;
  bool seq_reset = false;
  for (size_t k = 0; k < lines.size(); ++k) {
    const Line& line = lines[k];
    if (line.kind == Line::kFiller) continue;
    if (k < whole) {
      cur.Add(line.time_ns);
      if (line.kind == Line::kAppended) ++out->written;
      if (line.kind == Line::kRotated) rotated.reset();
      continue;
    }
    if (!seq_reset) {  // the first lost record's seq is given again
      next_seq = line.seq;
      seq_reset = true;
    }
    if (line.kind == Line::kAppended) {
      ++out->dropped;
      out->lost.Add(1, line.time_ns, line.time_ns);
    } else if (line.kind == Line::kDropped) {
      out->lost.Add(line.loss.count, line.loss.from_ns, line.loss.to_ns);
    }  // a kRotated record stays in `rotated`, first in the next chunk
  }
  buf.clear();
  lines.clear();
  if (error) return *error;
  return Ok();
}

// audit/log becomes audit/log.1 (replacing it) and a new audit/log is
// started, its first record (written with the next chunk) a kRotated
// record about the generation replaced.
Status Writer::Impl::Rotate() {
  Generation replaced = old;
  if (!replaced.known) {
    auto g = CountFile(dir.get(), kAuditOldLogName, shown_old);
    if (!g) return g.error();
    replaced = *g;
  }
  if (::renameat(dir.get(), kAuditLogName, dir.get(), kAuditOldLogName) != 0)
    return Error::Errno("rename to " + std::string(kAuditOldLogName),
                        shown_log);
  log.reset();
  old = cur;
  cur = Generation();
  Record r;
  r.op = Op::kRotated;
  r.time_ns = NowNs();
  r.count = replaced.count;
  r.from_ns = replaced.from_ns;
  r.to_ns = replaced.to_ns;
  r.seq = next_seq;
  rotated = r;
  rotate_floor = EncodeRecord(r).size();
  torn = false;
  return OpenLog();
}

Status Writer::Impl::OpenLog() {
  auto fd = OpenLogFile(dir.get(), kAuditLogName, O_WRONLY | O_APPEND | O_CREAT,
                        shown_log);
  if (!fd) return fd.error();
  auto st = sys::Fstat(fd->get(), shown_log);
  if (!st) return st.error();
  log = std::move(*fd);
  log_size = static_cast<uint64_t>(st->st_size);
  return Ok();
}

// ---------------------------------------------------------------------------
// Reading

namespace {

// Decodes the lines of `text` into `out`, counting those that do not
// decode (a last line without its '\n' included).
void DecodeLines(std::string_view text, ReadResult* out) {
  std::string_view rest = ForEachLine(text, [&](std::string_view line) {
    auto r = DecodeRecord(line);
    if (r)
      out->records.push_back(std::move(*r));
    else
      ++out->damaged_lines;
  });
  if (!rest.empty()) ++out->damaged_lines;
}

}  // namespace

Result<ReadResult> ReadLog(int state_fd, const std::string& shown) {
  ReadResult out;
  auto g = OpenGenerations(state_fd, shown);
  if (!g) return g.error();
  const std::pair<const UniqueFd*, const char*> files[] = {
      {&g->old, kAuditOldLogName}, {&g->cur, kAuditLogName}};
  for (const auto& [fd, name] : files) {
    if (!fd->is_valid()) continue;
    auto text = sys::ReadAll(fd->get(), kNoReadLimit, FileShown(shown, name));
    if (!text) return text.error();
    DecodeLines(*text, &out);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Follower

namespace {

std::string LogRel() {
  return std::string(kAuditDirName) + "/" + kAuditLogName;
}

}  // namespace

Result<Follower> Follower::Open(int state_fd, const std::string& shown) {
  Follower f;
  f.state_fd_ = state_fd;
  f.shown_ = shown;
  const std::string log_shown = FileShown(shown, kAuditLogName);
  auto fd = OpenIfExists(state_fd, LogRel(), log_shown);
  if (!fd) return fd.error();
  if (fd->is_valid()) {
    auto st = sys::Fstat(fd->get(), log_shown);
    if (!st) return st.error();
    // Start after the last whole line: a line still being written is
    // returned once it ends.
    auto end = EndOfLastLine(fd->get(), st->st_size, log_shown);
    if (!end) return end.error();
    f.fd_ = std::move(*fd);
    f.ino_ = st->st_ino;
    f.offset_ = *end;
  }
  return f;
}

namespace {

// Reads `fd` from *offset to its end, decoding each line that ends into
// `out`; keeps the start of a line not yet ended in *partial.
Status ReadNewLines(int fd, uint64_t* offset, std::string* partial,
                    const std::string& shown, std::vector<Record>* out) {
  auto st = sys::Fstat(fd, shown);
  if (!st) return st.error();
  const uint64_t size = static_cast<uint64_t>(st->st_size);
  if (size < *offset) {  // cut (a torn line removed): follow from there
    *offset = std::min(size, *offset - std::min(*offset, partial->size()));
    partial->clear();
  }
  std::string buf(kReadChunk, '\0');
  for (;;) {
    auto n = PreadFull(fd, buf.data(), buf.size(), *offset, shown);
    if (!n) return n.error();
    if (*n == 0) return Ok();
    *offset += *n;
    partial->append(buf.data(), *n);
    std::string_view rest = ForEachLine(*partial, [&](std::string_view line) {
      if (auto r = DecodeRecord(line)) out->push_back(std::move(*r));
    });
    partial->erase(0, partial->size() - rest.size());
  }
}

}  // namespace

Result<std::vector<Record>> Follower::Poll() {
  std::vector<Record> out;
  const std::string log_shown = FileShown(shown_, kAuditLogName);
  if (fd_)
    ACQFS_TRY(ReadNewLines(fd_.get(), &offset_, &partial_, log_shown, &out));
  auto now = OpenIfExists(state_fd_, LogRel(), log_shown);
  if (!now) return now.error();
  if (!now->is_valid()) return out;  // between a rename and the new file
  auto st = sys::Fstat(now->get(), log_shown);
  if (!st) return st.error();
  if (fd_ && st->st_ino == ino_) return out;
  // A new audit/log: the one read so far became audit/log.1. Its end
  // first (written before the rename), then the new one from its start.
  if (fd_)
    ACQFS_TRY(ReadNewLines(fd_.get(), &offset_, &partial_, log_shown, &out));
  partial_.clear();  // a fragment there will never end
  fd_ = std::move(*now);
  ino_ = st->st_ino;
  offset_ = 0;
  ACQFS_TRY(ReadNewLines(fd_.get(), &offset_, &partial_, log_shown, &out));
  return out;
}

// ---------------------------------------------------------------------------
// CopyLog

namespace {

// Writes the whole lines of `src` (or, when it is invalid, removes `name`)
// as `name` in the directory `to_dir`: a temporary file renamed into place.
Status CopyGeneration(const UniqueFd& src, const std::string& src_shown,
                      int to_dir, const char* name,
                      const std::string& to_shown) {
  const std::string dst_shown = FileShown(to_shown, name);
  if (!src) {
    if (::unlinkat(to_dir, name, 0) != 0 && errno != ENOENT)
      return Error::Errno("unlink", dst_shown);
    return Ok();
  }
  auto text = sys::ReadAll(src.get(), kNoReadLimit, src_shown);
  if (!text) return text.error();
  const size_t nl = text->rfind('\n');
  text->resize(nl == std::string::npos ? 0 : nl + 1);
  const std::string tmp = sys::TempName(std::string(".") + name + ".copy-");
  const std::string tmp_shown = FileShown(to_shown, tmp.c_str());
  auto out = sys::OpenBeneath(to_dir, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600,
                              tmp_shown);
  if (!out) return out.error();
  Status s =
      sys::PwriteAll(out->get(), text->data(), text->size(), 0, tmp_shown);
  if (s) s = sys::Fsync(out->get(), tmp_shown);
  if (s) s = sys::Renameat2(to_dir, tmp, to_dir, name, 0, dst_shown);
  if (!s) (void)::unlinkat(to_dir, tmp.c_str(), 0);
  return s;
}

}  // namespace

Status CopyLog(int from_state_fd, const std::string& from_shown,
               int to_state_fd, const std::string& to_shown) {
  auto g = OpenGenerations(from_state_fd, from_shown);
  if (!g) return g.error();
  if (!g->old && !g->cur) return Ok();
  auto dir = OpenAuditDir(to_state_fd, to_shown, /*create=*/true);
  if (!dir) return dir.error();
  ACQFS_TRY(CopyGeneration(g->old, FileShown(from_shown, kAuditOldLogName),
                           dir->get(), kAuditOldLogName, to_shown));
  ACQFS_TRY(CopyGeneration(g->cur, FileShown(from_shown, kAuditLogName),
                           dir->get(), kAuditLogName, to_shown));
  return Ok();
}

}  // namespace acqfs::audit
