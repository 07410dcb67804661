#include "daemon/serve_control.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include "common/sys.h"
#include "daemon/control.h"
#include "stack/stack_ops.h"
#include "stack/store.h"
#include "stack/transform.h"

namespace acqfs::cli {

namespace {

Result<nlohmann::json> ServeCheckpoint(const std::string& state,
                                       const std::string& name,
                                       MountControl* mc,
                                       const nlohmann::json& req) {
  // Every field is checked for its type: `"kind": 7` was taken for a plain
  // checkpoint.
  if (req.contains("message") && !req["message"].is_string())
    return Error::Of(EINVAL, "checkpoint (the message is not a string)",
                     "message");
  if (req.contains("kind") && !req["kind"].is_string())
    return Error::Of(EINVAL, "checkpoint (the kind is not a string)", "kind");
  const std::string message =
      req.contains("message") ? req["message"].get<std::string>() : "";
  CheckpointKind kind = CheckpointKind::kCheckpoint;
  if (req.contains("kind")) {
    auto k = KindFromName(req["kind"].get<std::string>());
    if (!k) return Error::Of(EINVAL, "checkpoint (unknown kind)", "kind");
    kind = *k;
  }
  const auto start = std::chrono::steady_clock::now();
  auto lock = StoreLock::Take(state);
  if (!lock) return lock.error();
  const std::string path = StackPath(state, name);
  auto m = ReadStack(path);
  if (!m) return m.error();
  auto plan = PlanCheckpoint(state, *m, mc->UpperPath(), message, kind);
  if (!plan) return plan.error();
  Status s = mc->Checkpoint(plan->new_upper,
                            [&] { return WriteStack(path, plan->next); });
  if (!s) {
    (void)LayerStore(state).Remove(
        StoreRef(plan->new_upper.substr(plan->new_upper.rfind('/') + 1)));
    return s.error();
  }
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  return nlohmann::json{{"number", plan->number},
                        {"time_ns", plan->time_ns},
                        {"layer", plan->next.frozen.back()},
                        {"ms", ms}};
}

Result<nlohmann::json> ServeRewind(const std::string& state,
                                   const std::string& name, MountControl* mc,
                                   const nlohmann::json& req) {
  // In range before it is narrowed: 4294967297 was checkpoint 1.
  if (!req.contains("number") || !req["number"].is_number_unsigned() ||
      req["number"].get<uint64_t>() == 0 ||
      req["number"].get<uint64_t>() > UINT32_MAX)
    return Error::Of(
        EINVAL, "rewind (no checkpoint number from 1 to 4294967295)", "number");
  const uint32_t number = static_cast<uint32_t>(req["number"].get<uint64_t>());
  auto lock = StoreLock::Take(state);
  if (!lock) return lock.error();
  const std::string path = StackPath(state, name);
  auto m = ReadStack(path);
  if (!m) return m.error();
  const Checkpoint* c = m->Find(number);
  if (!c)
    return Error::Of(ENOENT, "rewind (no such checkpoint)",
                     "checkpoint " + std::to_string(number));
  LayerStore store(state);
  const std::string top = store.Path(c->layers.back());
  struct stat like;
  if (::stat(top.c_str(), &like) != 0) return Error::Errno("stat", top);
  auto ref = store.Create(&like);
  if (!ref) return ref.error();
  // Mounted, the upper is frozen as the undo point whatever it holds: a
  // write may land in it until the daemon's quiescent point.
  uint32_t undo = 0;
  auto next =
      RewindWithUndo(*m, number, /*upper_nonempty=*/true, *ref, NowNs(), &undo);
  if (!next) {
    (void)store.Remove(*ref);
    return next.error();
  }
  std::vector<std::string> frozen;
  for (const auto& f : next->frozen) frozen.push_back(store.Path(f));
  Status s = mc->Rewind(frozen, store.Path(*ref),
                        [&] { return WriteStack(path, *next); });
  if (!s) {
    (void)store.Remove(*ref);
    return s.error();
  }
  return nlohmann::json{{"number", number}, {"undo", undo}};
}

Result<nlohmann::json> ServeSquash(const std::string& state,
                                   const std::string& name, MountControl* mc,
                                   const nlohmann::json& req) {
  if (!req.contains("merge") || !req["merge"].is_array() ||
      !req.contains("id") || !req["id"].is_string() ||
      !req.contains("building") || !req["building"].is_string())
    return Error::Of(EINVAL, "squash (malformed request)", "merge");
  std::vector<std::string> merge;
  for (const auto& r : req["merge"]) {
    if (!r.is_string())
      return Error::Of(EINVAL, "squash (malformed request)", "merge");
    merge.push_back(r.get<std::string>());
  }
  const std::string id = req["id"].get<std::string>();
  const std::string asked = req["building"].get<std::string>();
  // The client's path for the merged layer may be spelled otherwise than
  // the daemon's (a relative state directory, one reached through a
  // symlink): it must name this sandbox's folder by identity, and the
  // daemon's own path is used from here on.
  const std::string building = LayerStore::BuildPath(state + "/" + name, id);
  struct stat mine, theirs;
  if (!ValidLayerId(id) || sys::Basename(asked) != sys::Basename(building) ||
      ::stat((state + "/" + name).c_str(), &mine) != 0 ||
      ::stat(sys::Dirname(asked).c_str(), &theirs) != 0 ||
      mine.st_dev != theirs.st_dev || mine.st_ino != theirs.st_ino)
    return Error::Of(EINVAL, "squash (not this sandbox's merged layer)", asked);
  auto lock = StoreLock::Take(state);
  if (!lock) return lock.error();
  const std::string path = StackPath(state, name);
  auto m = ReadStack(path);
  if (!m) return m.error();
  if (merge.empty() || merge.size() > m->frozen.size() ||
      !std::equal(merge.begin(), merge.end(), m->frozen.begin()))
    return Error::Of(ESTALE,
                     "squash (the stack changed while the merged layer was "
                     "built; squash again)",
                     path);
  SquashPlan plan;
  plan.keep = m->frozen.size() - merge.size();
  plan.merge = merge;
  const unsigned merged = static_cast<unsigned>(merge.size());
  auto next =
      CommitSquash(LayerStore(state), *m, plan, building, id,
                   [&](const StackManifest& next, const std::string& layer) {
                     return mc->Squash(merged, layer,
                                       [&] { return WriteStack(path, next); });
                   });
  if (!next) return next.error();
  const std::string ref = StoreRef(id);
  return nlohmann::json{{"layer", ref}, {"frozen", next->frozen.size()}};
}

}  // namespace

nlohmann::json ServeControl(const std::string& state, const std::string& name,
                            MountControl* mc, const nlohmann::json& request) {
  const std::string op = request.contains("op") && request["op"].is_string()
                             ? request["op"].get<std::string>()
                             : "";
  if (op == "ping") return nlohmann::json{{"ok", true}};
  if (op == "info") {
    const int64_t passed = mc->PassedThrough();
    const MountControl::AuditState audit = mc->Audit();
    return nlohmann::json{
        {"transport", mc->Transport()},
        {"passthrough_opens",
         passed < 0 ? nlohmann::json() : nlohmann::json(passed)},
        {"audit", audit.on ? nlohmann::json{{"written", audit.written},
                                            {"lost", audit.lost},
                                            {"incomplete", audit.incomplete}}
                           : nlohmann::json()}};
  }
  if (op == "audit_flush") {
    if (Status s = mc->FlushAudit(); !s) return ErrorReply(s.error());
    return nlohmann::json{{"ok", true}};
  }
  if (op == "checkpoint") {
    auto r = ServeCheckpoint(state, name, mc, request);
    if (!r) return ErrorReply(r.error());
    return *r;
  }
  if (op == "squash") {
    auto r = ServeSquash(state, name, mc, request);
    if (!r) return ErrorReply(r.error());
    return *r;
  }
  if (op == "rewind") {
    auto r = ServeRewind(state, name, mc, request);
    if (!r) return ErrorReply(r.error());
    return *r;
  }
  return ErrorReply(Error::Of(EINVAL, "control request (unknown op)", op));
}

}  // namespace acqfs::cli
