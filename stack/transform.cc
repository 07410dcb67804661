#include "stack/transform.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "common/atomic_file.h"
#include "common/dir_walk.h"
#include "common/sys.h"

namespace acqfs::cli {
namespace {

bool IsPrefix(const std::vector<std::string>& p,
              const std::vector<std::string>& of) {
  return p.size() <= of.size() && std::equal(p.begin(), p.end(), of.begin());
}

// ---- transformation helpers

Status CheckTransformable(const StackManifest& m, const std::string& op) {
  if (m.moved_from)
    return Error::Of(EINVAL, op + ": the sandbox's migration is unfinished",
                     "");
  return Ok();
}

Status CheckNewRef(const StackManifest& m, const std::string& ref,
                   const std::string& op) {
  if (!ValidLayerRef(ref))
    return Error::Of(EINVAL, op + ": malformed new layer ref \"" + ref + "\"",
                     "");
  auto refs = m.Referenced();
  if (std::binary_search(refs.begin(), refs.end(), ref))
    return Error::Of(
        EINVAL, op + ": new layer " + ref + " is in the stack already", "");
  return Ok();
}

Error NoCheckpoint(const std::string& op, uint32_t number) {
  return Error::Of(
      ENOENT, op + ": there is no checkpoint " + std::to_string(number), "");
}

}  // namespace

// ---------------------------------------------------------------- transforms

Result<CheckpointResult> TakeCheckpoint(const StackManifest& m,
                                        const std::string& new_upper,
                                        const std::string& message,
                                        int64_t time_ns, CheckpointKind kind) {
  const std::string op = "checkpoint " + std::to_string(m.next_number);
  ACQFS_TRY(CheckTransformable(m, op));
  ACQFS_TRY(CheckNewRef(m, new_upper, op));
  if (m.frozen.size() >= kMaxFrozen)
    return Error::Of(EMLINK,
                     op + ": the stack holds " + std::to_string(kMaxFrozen) +
                         " frozen layers, the most it may; squash first",
                     "");
  if (m.next_number == std::numeric_limits<uint32_t>::max())
    return Error::Of(EOVERFLOW, op + ": checkpoint numbers exhausted", "");
  CheckpointResult r;
  r.manifest = m;
  StackManifest& n = r.manifest;
  n.frozen.push_back(m.upper);
  r.number = n.next_number++;
  n.checkpoints.push_back(
      Checkpoint{r.number, message, time_ns, n.frozen, kind});
  n.base = r.number;
  n.upper = new_upper;
  return r;
}

Result<StackManifest> Rewind(const StackManifest& m, uint32_t number,
                             const std::string& new_upper) {
  const std::string op = "rewind to checkpoint " + std::to_string(number);
  ACQFS_TRY(CheckTransformable(m, op));
  const Checkpoint* c = m.Find(number);
  if (c == nullptr) return NoCheckpoint("rewind", number);
  ACQFS_TRY(CheckNewRef(m, new_upper, op));
  StackManifest n = m;
  n.frozen = c->layers;
  n.base = number;
  n.upper = new_upper;
  return n;
}

Result<StackManifest> RewindWithUndo(const StackManifest& m, uint32_t number,
                                     bool upper_nonempty,
                                     const std::string& new_upper,
                                     int64_t time_ns, uint32_t* undo_number) {
  if (undo_number != nullptr) *undo_number = 0;
  if (m.Find(number) == nullptr) return NoCheckpoint("rewind", number);
  if (!upper_nonempty) return Rewind(m, number, new_upper);
  // The checkpoint's upper is never used (the rewind replaces it at once):
  // freeze with `new_upper` and rewind to it.
  auto cp =
      TakeCheckpoint(m, new_upper, "before rewind to " + std::to_string(number),
                     time_ns, CheckpointKind::kAutoRewind);
  if (!cp) return cp.error();
  StackManifest n = std::move(cp->manifest);
  const Checkpoint* c = n.Find(number);
  n.frozen = c->layers;
  n.base = number;
  if (undo_number != nullptr) *undo_number = cp->number;
  return n;
}

Result<StackManifest> Fork(const StackManifest& m, uint32_t at,
                           const std::string& new_upper) {
  const uint32_t point = at == 0 ? m.base : at;
  const std::string op = "fork at checkpoint " + std::to_string(point);
  ACQFS_TRY(CheckTransformable(m, op));
  std::vector<std::string> layers;
  if (point != 0) {
    const Checkpoint* c = m.Find(point);
    if (c == nullptr) return NoCheckpoint("fork", point);
    layers = c->layers;
  }
  ACQFS_TRY(CheckNewRef(m, new_upper, op));
  StackManifest n;
  n.upper = new_upper;
  n.frozen = layers;
  n.base = point;
  n.next_number = m.next_number;
  for (const Checkpoint& c : m.checkpoints)
    if (IsPrefix(c.layers, layers)) n.checkpoints.push_back(c);
  return n;
}

Result<ForkResult> ForkCurrent(const StackManifest& m,
                               const std::string& parent_new_upper,
                               const std::string& child_new_upper,
                               const std::string& message, int64_t time_ns) {
  if (parent_new_upper == child_new_upper)
    return Error::Of(EINVAL, "fork: the two new uppers are the same layer", "");
  auto cp = TakeCheckpoint(m, parent_new_upper, message, time_ns,
                           CheckpointKind::kFork);
  if (!cp) return cp.error();
  auto child = Fork(cp->manifest, cp->number, child_new_upper);
  if (!child) return child.error();
  return ForkResult{std::move(cp->manifest), std::move(*child), cp->number};
}

SquashPlan PlanSquash(const StackManifest& m, size_t keep) {
  SquashPlan p;
  p.keep = keep;
  const size_t n = m.frozen.size();
  if (n <= keep + 1) {
    p.nothing_to_do = "nothing to squash: the stack has " + std::to_string(n) +
                      " frozen layer" + (n == 1 ? "" : "s") + ", keeping " +
                      std::to_string(keep) + " leaves at most one to merge";
    return p;
  }
  p.merge.assign(m.frozen.begin(), m.frozen.begin() + (n - keep));
  return p;
}

Result<StackManifest> ApplySquash(const StackManifest& m,
                                  const SquashPlan& plan,
                                  const std::string& merged) {
  const std::string op = "squash";
  ACQFS_TRY(CheckTransformable(m, op));
  const size_t n = m.frozen.size();
  const size_t k = plan.merge.size();
  if (k < 2 || k + plan.keep != n || !IsPrefix(plan.merge, m.frozen))
    return Error::Of(EINVAL, "squash: the plan is not this stack's", "");
  ACQFS_TRY(CheckNewRef(m, merged, op));
  StackManifest out = m;
  out.frozen.assign(1, merged);
  out.frozen.insert(out.frozen.end(), m.frozen.begin() + k, m.frozen.end());
  out.checkpoints.clear();
  for (const Checkpoint& c : m.checkpoints) {
    const bool on_range = IsPrefix(c.layers, plan.merge);  // F[0..j], j < k
    if (on_range && c.layers.size() < k) continue;         // merged away
    Checkpoint nc = c;
    if (IsPrefix(plan.merge, c.layers)) {
      nc.layers.assign(1, merged);
      nc.layers.insert(nc.layers.end(), c.layers.begin() + k, c.layers.end());
    }
    out.checkpoints.push_back(std::move(nc));
  }
  return out;
}

Result<StackManifest> CommitSquash(
    const LayerStore& store, const StackManifest& m, const SquashPlan& plan,
    const std::string& built, std::string_view id,
    const std::function<Status(const StackManifest&, const std::string&)>&
        install) {
  // The manifest first (it checks the plan against m, and writes nothing),
  // then the layer into the store, then the switch: a failure at any step
  // leaves the stack as it was (an adopted layer no manifest names is
  // removed here, or by the next garbage collection after a crash).
  auto next = ApplySquash(m, plan, StoreRef(id));
  if (!next) return next.error();
  auto ref = store.Adopt(built, id);
  if (!ref) return ref.error();
  if (Status s = install(*next, store.Path(*ref)); !s) {
    (void)store.Remove(*ref);
    return s.error();
  }
  return next;
}

}  // namespace acqfs::cli
