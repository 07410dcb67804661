#include "stack/manifest.h"

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
#include "stack/store.h"

namespace acqfs::cli {
namespace {

using nlohmann::json;

constexpr size_t kMaxManifestBytes = 16 << 20;

}  // namespace

bool ValidSandboxNameRule(std::string_view name) {
  if (name.empty() || name.size() > 64 || name == "." || name == ".." ||
      name == kLayerStoreDir)
    return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

namespace {

Error Invalid(const std::string& field, const std::string& shown) {
  return Error::Of(EINVAL, "parse sandbox stack (" + field + ")", shown);
}

bool ContainsRef(const std::vector<std::string>& v, const std::string& r) {
  return std::find(v.begin(), v.end(), r) != v.end();
}

bool HasDuplicates(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return std::adjacent_find(v.begin(), v.end()) != v.end();
}

Result<uint32_t> GetU32(const json& j, const std::string& field,
                        const std::string& shown) {
  if (!j.is_number_unsigned() ||
      j.get<uint64_t>() > std::numeric_limits<uint32_t>::max())
    return Invalid(field, shown);
  return static_cast<uint32_t>(j.get<uint64_t>());
}

Result<std::vector<std::string>> GetRefs(const json& j,
                                         const std::string& field,
                                         const std::string& shown) {
  if (!j.is_array() || j.size() > kMaxFrozen) return Invalid(field, shown);
  std::vector<std::string> out;
  for (const json& e : j) {
    if (!e.is_string() || !ValidLayerRef(e.get<std::string>()))
      return Invalid(field, shown);
    out.push_back(e.get<std::string>());
  }
  if (HasDuplicates(out)) return Invalid(field, shown);
  return out;
}

Result<Checkpoint> ParseCheckpoint(const json& j, const std::string& field,
                                   const std::string& shown) {
  if (!j.is_object()) return Invalid(field, shown);
  static const std::set<std::string> kKeys = {"number", "message", "time_ns",
                                              "layers", "kind"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!kKeys.count(it.key())) return Invalid(field + "." + it.key(), shown);
  for (const auto& k : kKeys)
    if (!j.contains(k)) return Invalid(field + "." + k, shown);
  Checkpoint c;
  auto n = GetU32(j["number"], field + ".number", shown);
  if (!n) return n.error();
  if (*n == 0) return Invalid(field + ".number", shown);
  c.number = *n;
  if (!j["message"].is_string()) return Invalid(field + ".message", shown);
  c.message = j["message"].get<std::string>();
  const json& t = j["time_ns"];
  if (!t.is_number_integer() ||
      (t.is_number_unsigned() &&
       t.get<uint64_t>() >
           static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
    return Invalid(field + ".time_ns", shown);
  c.time_ns = t.get<int64_t>();
  auto layers = GetRefs(j["layers"], field + ".layers", shown);
  if (!layers) return layers.error();
  if (layers->empty()) return Invalid(field + ".layers", shown);
  c.layers = std::move(*layers);
  if (!j["kind"].is_string()) return Invalid(field + ".kind", shown);
  auto kind = KindFromName(j["kind"].get<std::string>());
  if (!kind) return Invalid(field + ".kind", shown);
  c.kind = *kind;
  return c;
}

json CheckpointToJson(const Checkpoint& c) {
  return json{{"number", c.number},
              {"message", c.message},
              {"time_ns", c.time_ns},
              {"layers", c.layers},
              {"kind", std::string(KindName(c.kind))}};
}

bool Exists(const std::string& path, bool* found, Status* err) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    *found = true;
    return true;
  }
  if (errno == ENOENT) {
    *found = false;
    return true;
  }
  *err = Error::Errno("stat", path);
  return false;
}

// Is there something at `path`? (lstat; ENOENT is "no".)
Result<bool> PathExists(const std::string& path) {
  bool found = false;
  Status err = Ok();
  if (!Exists(path, &found, &err)) return err.error();
  return found;
}

}  // namespace

// ---------------------------------------------------------------- refs

bool ValidLayerId(std::string_view id) {
  if (id.size() != kLayerIdLen) return false;
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool IsLegacyRef(std::string_view ref) {
  constexpr std::string_view kUpper = "/upper";
  return ref.size() > kUpper.size() &&
         ref.substr(ref.size() - kUpper.size()) == kUpper &&
         ValidSandboxNameRule(ref.substr(0, ref.size() - kUpper.size()));
}

bool ValidLayerRef(std::string_view ref) {
  constexpr std::string_view kStore = ".layers/";
  if (ref.substr(0, kStore.size()) == kStore)
    return ValidLayerId(ref.substr(kStore.size()));
  return IsLegacyRef(ref);
}

Result<std::string> NewLayerId() {
  uint64_t v = 0;
  ssize_t n;
  do {
    n = ::getrandom(&v, sizeof v, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Error::Errno("getrandom", "");
  if (n != static_cast<ssize_t>(sizeof v))
    return Error::Of(EIO, "getrandom (short read)", "");
  char buf[kLayerIdLen + 1];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return std::string(buf);
}

std::string StoreRef(std::string_view id) {
  return std::string(kLayerStoreDir) + "/" + std::string(id);
}

// ---------------------------------------------------------------- manifest

std::string_view KindName(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::kCheckpoint:
      return "checkpoint";
    case CheckpointKind::kAutoRewind:
      return "auto-rewind";
    case CheckpointKind::kFork:
      return "fork";
  }
  return "checkpoint";
}

std::optional<CheckpointKind> KindFromName(std::string_view name) {
  if (name == "checkpoint") return CheckpointKind::kCheckpoint;
  if (name == "auto-rewind") return CheckpointKind::kAutoRewind;
  if (name == "fork") return CheckpointKind::kFork;
  return std::nullopt;
}

const Checkpoint* StackManifest::Find(uint32_t number) const {
  for (const Checkpoint& c : checkpoints)
    if (c.number == number) return &c;
  return nullptr;
}

std::vector<std::string> StackManifest::Referenced() const {
  std::vector<std::string> out;
  if (!upper.empty()) out.push_back(upper);
  out.insert(out.end(), frozen.begin(), frozen.end());
  for (const Checkpoint& c : checkpoints)
    out.insert(out.end(), c.layers.begin(), c.layers.end());
  if (moved_from) out.push_back(*moved_from);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string StackToJson(const StackManifest& m) {
  json cps = json::array();
  for (const Checkpoint& c : m.checkpoints) cps.push_back(CheckpointToJson(c));
  json j{{"version", kStackVersion},     {"upper", m.upper},
         {"frozen", m.frozen},           {"base", m.base},
         {"next_number", m.next_number}, {"checkpoints", cps}};
  if (m.moved_from) j["moved_from"] = *m.moved_from;
  return j.dump(2) + "\n";
}

Result<StackManifest> ParseStack(std::string_view text,
                                 const std::string& shown) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Invalid("json", shown);
  static const std::set<std::string> kKeys = {
      "version",     "upper",       "frozen",    "base",
      "next_number", "checkpoints", "moved_from"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!kKeys.count(it.key())) return Invalid(it.key(), shown);
  for (const auto& k : kKeys)
    if (k != "moved_from" && !j.contains(k)) return Invalid(k, shown);

  if (!j["version"].is_number_integer() || j["version"] != kStackVersion)
    return Invalid("version", shown);
  StackManifest m;
  if (!j["upper"].is_string() || !ValidLayerRef(j["upper"].get<std::string>()))
    return Invalid("upper", shown);
  m.upper = j["upper"].get<std::string>();
  auto frozen = GetRefs(j["frozen"], "frozen", shown);
  if (!frozen) return frozen.error();
  m.frozen = std::move(*frozen);
  if (ContainsRef(m.frozen, m.upper)) return Invalid("upper", shown);
  auto next = GetU32(j["next_number"], "next_number", shown);
  if (!next) return next.error();
  if (*next == 0) return Invalid("next_number", shown);
  m.next_number = *next;
  auto base = GetU32(j["base"], "base", shown);
  if (!base) return base.error();
  m.base = *base;

  if (!j["checkpoints"].is_array()) return Invalid("checkpoints", shown);
  std::set<uint32_t> numbers;
  for (size_t i = 0; i < j["checkpoints"].size(); ++i) {
    const std::string field = "checkpoints[" + std::to_string(i) + "]";
    auto c = ParseCheckpoint(j["checkpoints"][i], field, shown);
    if (!c) return c.error();
    if (c->number >= m.next_number || !numbers.insert(c->number).second)
      return Invalid(field + ".number", shown);
    if (ContainsRef(c->layers, m.upper))
      return Invalid(field + ".layers", shown);
    m.checkpoints.push_back(std::move(*c));
  }

  if (m.base >= m.next_number) return Invalid("base", shown);
  if (m.base == 0) {
    if (!m.frozen.empty()) return Invalid("base", shown);
  } else {
    const Checkpoint* b = m.Find(m.base);
    if (b == nullptr || b->layers != m.frozen) return Invalid("base", shown);
  }

  if (j.contains("moved_from")) {
    const json& mf = j["moved_from"];
    if (!mf.is_string() || !IsLegacyRef(mf.get<std::string>()))
      return Invalid("moved_from", shown);
    m.moved_from = mf.get<std::string>();
    if (*m.moved_from == m.upper || ContainsRef(m.frozen, *m.moved_from))
      return Invalid("moved_from", shown);
    for (const Checkpoint& c : m.checkpoints)
      if (ContainsRef(c.layers, *m.moved_from))
        return Invalid("moved_from", shown);
  }
  return m;
}

Result<StackManifest> ReadStack(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return Error::Errno("open sandbox stack", path);
  auto text = sys::ReadAll(fd.get(), kMaxManifestBytes, path);
  if (!text) return text.error();
  return ParseStack(*text, path);
}

Status WriteStack(const std::string& path, const StackManifest& m) {
  return WriteFileAtomically(path, StackToJson(m), 0600, Durability::kDurable,
                             FileOwner::kDirectory);
}

std::string StackPath(const std::string& state, const std::string& name) {
  return state + "/" + name + "/" + kStackFile;
}

Result<LoadedStack> LoadStack(const std::string& state, const std::string& name,
                              bool may_repair) {
  const std::string path = StackPath(state, name);
  LoadedStack out;
  auto m = ReadStack(path);
  if (!m) {
    if (m.err() != ENOENT || m.error().path != path) return m.error();
    const std::string legacy = state + "/" + name + "/upper";
    struct stat st;
    if (::lstat(legacy.c_str(), &st) != 0) {
      if (errno == ENOENT) return Error::Of(ENOENT, "open sandbox stack", path);
      return Error::Errno("stat", legacy);
    }
    if (!S_ISDIR(st.st_mode))
      return Error::Of(ENOTDIR, "legacy sandbox upper", legacy);
    out.legacy = true;
    out.manifest.upper = name + "/upper";
    return out;
  }
  out.manifest = std::move(*m);
  if (!out.manifest.moved_from) return out;
  if (may_repair) {
    ACQFS_TRY(FinishMigration(state, name, &out.manifest));
    return out;
  }
  LayerStore store(state);
  auto upper = PathExists(store.Path(out.manifest.upper));
  if (!upper) return upper.error();
  if (!*upper) {
    auto from = PathExists(store.Path(*out.manifest.moved_from));
    if (!from) return from.error();
    if (*from) out.upper_at_moved_from = true;
  }
  return out;
}

Status CheckLayerOwners(const std::string& state, const std::string& name,
                        const StackManifest& m) {
  const std::string path = StackPath(state, name);
  auto refuse = [&](const std::string& why) {
    return Error::Of(EBUSY,
                     "sandbox " + name + "'s stack: " + why +
                         " (a live upper belongs to one sandbox; repair the "
                         "manifest, or remove the sandbox with rm --force)",
                     path);
  };
  auto foreign_legacy = [&](const std::string& ref) {
    return IsLegacyRef(ref) && ref != name + "/upper";
  };
  if (foreign_legacy(m.upper))
    return refuse("its upper " + m.upper + " is another sandbox's folder");
  const std::vector<std::string> mine = m.Referenced();
  for (const std::string& ref : mine)
    if (foreign_legacy(ref))
      return refuse("it names " + ref + ", another sandbox's folder");
  auto names = [&](const std::vector<std::string>& refs,
                   const std::string& ref) {
    return std::binary_search(refs.begin(), refs.end(), ref);
  };
  auto dir = sys::OpenDirPath(state, O_RDONLY);
  if (!dir) return dir.error();
  auto entries = sys::ReadDir(dir->get(), state);
  if (!entries) return entries.error();
  for (const auto& e : *entries) {
    const std::string& other = e.name;
    if (other == name || !ValidSandboxNameRule(other)) continue;
    auto theirs = LoadStack(state, other, /*may_repair=*/false);
    if (!theirs) continue;
    // Its live upper: where the manifest puts it, and where a migration
    // under way still has it (a legacy sandbox's manifest is implicit,
    // upper "<other>/upper").
    const StackManifest& t = theirs->manifest;
    std::vector<std::string> live = {t.upper};
    if (t.moved_from) live.push_back(*t.moved_from);
    for (const std::string& ref : live)
      if (names(mine, ref))
        return refuse("it names " + ref + ", the live upper of sandbox " +
                      other);
    if (names(t.Referenced(), m.upper))
      return refuse("its upper " + m.upper + " is a layer of sandbox " + other);
  }
  return Ok();
}

Status FinishMigration(const std::string& state, const std::string& name,
                       StackManifest* m) {
  if (!m->moved_from) return Ok();
  LayerStore store(state);
  const std::string upper = store.Path(m->upper);
  const std::string from = store.Path(*m->moved_from);
  auto have_upper = PathExists(upper);
  if (!have_upper) return have_upper.error();
  auto have_from = PathExists(from);
  if (!have_from) return have_from.error();
  if (*have_upper && *have_from)
    return Error::Of(
        EEXIST,
        "finish sandbox migration (the upper is also still at " + from + ")",
        upper);
  if (!*have_upper) {
    if (!*have_from)
      return Error::Of(
          ENOENT,
          "finish sandbox migration (the upper is not at " + from + " either)",
          upper);
    ACQFS_TRY(store.Ensure());
    ACQFS_TRY(sys::Renameat2(AT_FDCWD, from, AT_FDCWD, upper, RENAME_NOREPLACE,
                             upper));
    // The move must be durable before the manifest stops naming moved_from.
    ACQFS_TRY(sys::SyncDirPath(sys::Dirname(upper)));
    ACQFS_TRY(sys::SyncDirPath(sys::Dirname(from)));
  }
  StackManifest done = *m;
  done.moved_from.reset();
  ACQFS_TRY(WriteStack(StackPath(state, name), done));
  *m = std::move(done);
  return Ok();
}

Status MigrateLegacy(const std::string& state, const std::string& name,
                     StackManifest* m) {
  if (!ValidSandboxNameRule(name))
    return Error::Of(EINVAL, "migrate sandbox (bad name)", name);
  const std::string path = StackPath(state, name);
  auto have_stack = PathExists(path);
  if (!have_stack) return have_stack.error();
  if (*have_stack) return Error::Of(EEXIST, "migrate sandbox", path);
  const std::string legacy_ref = name + "/upper";
  LayerStore store(state);
  struct stat st;
  if (::lstat(store.Path(legacy_ref).c_str(), &st) != 0)
    return Error::Errno("stat", store.Path(legacy_ref));
  if (!S_ISDIR(st.st_mode))
    return Error::Of(ENOTDIR, "migrate sandbox", store.Path(legacy_ref));
  ACQFS_TRY(store.Ensure());
  std::string ref;
  for (;;) {
    auto id = NewLayerId();
    if (!id) return id.error();
    ref = StoreRef(*id);
    auto taken = PathExists(store.Path(ref));
    if (!taken) return taken.error();
    if (!*taken) break;
  }
  StackManifest next;
  next.upper = ref;
  next.moved_from = legacy_ref;
  // Commit point 1: from here the manifest names where the upper goes.
  ACQFS_TRY(WriteStack(path, next));
  // Commit point 2 (rename) and 3 (the manifest without moved_from).
  ACQFS_TRY(FinishMigration(state, name, &next));
  *m = std::move(next);
  return Ok();
}

}  // namespace acqfs::cli
