#include "cli/stack_ops.h"

#include <sys/stat.h>

#include <chrono>

#include "cli/control.h"

namespace acqfs::cli {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<CheckpointPlan> PlanCheckpoint(const std::string& state,
                                      const StackManifest& m,
                                      const std::string& upper_root,
                                      const std::string& message,
                                      CheckpointKind kind) {
  struct stat like;
  if (::stat(upper_root.c_str(), &like) != 0)
    return Error::Errno("stat (the upper layer)", upper_root);
  LayerStore store(state);
  auto ref = store.Create(&like);
  if (!ref) return ref.error();
  CheckpointPlan p;
  p.time_ns = NowNs();
  auto next = TakeCheckpoint(m, *ref, message, p.time_ns, kind);
  if (!next) {
    (void)store.Remove(*ref);
    return next.error();
  }
  p.next = std::move(next->manifest);
  p.number = next->number;
  p.new_upper = store.Path(*ref);
  return p;
}

namespace {

Result<nlohmann::json> ServeCheckpoint(const std::string& state,
                                       const std::string& name,
                                       MountControl* mc,
                                       const nlohmann::json& req) {
  const std::string message =
      req.contains("message") && req["message"].is_string()
          ? req["message"].get<std::string>()
          : "";
  CheckpointKind kind = CheckpointKind::kCheckpoint;
  if (req.contains("kind") && req["kind"].is_string()) {
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
  if (!req.contains("number") || !req["number"].is_number_unsigned())
    return Error::Of(EINVAL, "rewind (no checkpoint number)", "number");
  const uint32_t number = req["number"].get<uint32_t>();
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

}  // namespace

nlohmann::json ServeControl(const std::string& state, const std::string& name,
                            MountControl* mc, const nlohmann::json& request) {
  const std::string op = request.contains("op") && request["op"].is_string()
                             ? request["op"].get<std::string>()
                             : "";
  if (op == "ping") return nlohmann::json{{"ok", true}};
  if (op == "checkpoint") {
    auto r = ServeCheckpoint(state, name, mc, request);
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
