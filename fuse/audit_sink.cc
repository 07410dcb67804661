#include "fuse/audit_sink.h"

#include <time.h>
#include <unistd.h>

#include <utility>

#include "common/sys.h"
#include "fs/boundary_note.h"
#include "fs/overlay.h"

namespace acqfs {
namespace {

// How old a handle-less file's first pending write may get before its
// record is written (no RELEASE will come).
constexpr int64_t kHandleLessWriteAge = 2'000'000'000;

int64_t NowNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

uint64_t KeyOf(const Node* node) { return reinterpret_cast<uintptr_t>(node); }

}  // namespace

AuditSink::AuditSink(std::unique_ptr<audit::Writer> writer, Overlay* overlay,
                     Options options)
    : writer_(std::move(writer)),
      overlay_(overlay),
      options_(std::move(options)) {}

AuditSink::~AuditSink() { (void)Flush(); }

std::string AuditSink::LayerId() {
  return sys::Basename(overlay_->UpperRootPath());
}

void AuditSink::Mounted() {
  audit::Record r;
  r.op = audit::Op::kMount;
  r.time_ns = NowNs();
  r.pid = r.tid = static_cast<int32_t>(::getpid());
  r.uid = ::getuid();
  r.gid = ::getgid();
  r.comm = "acqfs";
  r.layer = LayerId();
  writer_->Append(std::move(r));
}

audit::Record AuditSink::Make(fuse_req_t req, audit::Op op) {
  audit::Record r;
  r.op = op;
  r.time_ns = NowNs();
  const fuse_ctx* c = fuse_req_ctx(req);
  callers_.Fill(&r, static_cast<int32_t>(c->pid), c->uid, c->gid);
  r.layer = LayerId();
  return r;
}

void AuditSink::Changed(audit::Record r, int err) {
  r.result = err;
  if (err != 0) {
    BoundaryNote note = TakeBoundaryNote();
    if (note.boundary != nullptr) r.boundary = note.boundary;
  }
  TakeOldWrites(r.time_ns);
  writer_->Append(std::move(r));
}

void AuditSink::LookedUp(fuse_req_t req, const std::string& rel, int err) {
  if (err == 0) return;
  BoundaryNote note = TakeBoundaryNote();
  if (note.boundary == nullptr) return;
  audit::Record r = Make(req, audit::Op::kLookup);
  r.path = rel;
  r.result = err;
  r.boundary = note.boundary;
  writer_->Append(std::move(r));
}

void AuditSink::OpenedForReading(fuse_req_t req, const std::string& rel,
                                 int err) {
  bool match = false;
  for (const auto& g : options_.read_globs)
    if (g.Matches(rel, false)) {
      match = true;
      break;
    }
  if (!match) return;
  audit::Record r = Make(req, audit::Op::kOpenRead);
  r.path = rel;
  Changed(std::move(r), err);
}

void AuditSink::Wrote(fuse_req_t req, const Node* node,
                      const std::function<std::string()>& rel, uint64_t off,
                      uint64_t size, int err) {
  if (err != 0) {
    audit::Record r = Make(req, audit::Op::kWrite);
    r.path = rel();
    r.size = size;
    if (size > 0) r.ranges.emplace_back(off, off + size);
    return Changed(std::move(r), err);
  }
  // The first write of a run makes the record (the caller, the path, the
  // layer); the others only add their range.
  std::vector<audit::Record> out;
  if (!writes_.AddIfPending(KeyOf(node), off, size, &out)) {
    audit::Record first = Make(req, audit::Op::kWrite);
    first.path = rel();
    out = writes_.Add(KeyOf(node), off, size, first);
  }
  for (auto& r : out) writer_->Append(std::move(r));
  TakeOldWrites(NowNs());
}

void AuditSink::OpenedForWritingUnseen(fuse_req_t req, const Node* node,
                                       const std::string& rel) {
  audit::Record first = Make(req, audit::Op::kWrite);
  first.path = rel;
  for (auto& r : writes_.AddUnseen(KeyOf(node), first))
    writer_->Append(std::move(r));
}

void AuditSink::EndOfWrites(const Node* node) {
  if (auto r = writes_.Take(KeyOf(node))) writer_->Append(std::move(*r));
}

void AuditSink::TakeOldWrites(int64_t now_ns) {
  if (!handle_less_.load(std::memory_order_relaxed)) return;
  int64_t due = next_sweep_ns_.load(std::memory_order_relaxed);
  if (now_ns < due) return;
  if (!next_sweep_ns_.compare_exchange_strong(due, now_ns + 1'000'000'000))
    return;
  for (auto& r : writes_.TakeOlderThan(now_ns - kHandleLessWriteAge))
    writer_->Append(std::move(r));
}

Status AuditSink::Flush() {
  for (auto& r : writes_.TakeAll()) writer_->Append(std::move(r));
  return writer_->Flush();
}

}  // namespace acqfs
