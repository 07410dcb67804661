#include "cli/stack.h"

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

using nlohmann::json;

constexpr char kStatsSuffix[] = ".stats";
constexpr char kLockName[] = "lock";
constexpr size_t kIdLen = 16;
constexpr size_t kMaxManifestBytes = 16 << 20;
constexpr size_t kMaxStatsBytes = 4096;

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

bool IsPrefix(const std::vector<std::string>& p,
              const std::vector<std::string>& of) {
  return p.size() <= of.size() && std::equal(p.begin(), p.end(), of.begin());
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

Status SyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Error::Errno("open directory", dir);
  if (::fsync(fd.get()) != 0) return Error::Errno("fsync", dir);
  return Ok();
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

// ---- stats

json StatsToJson(const LayerStats& s) {
  return json{{"version", 1}, {"paths", s.paths}, {"bytes", s.bytes}};
}

std::optional<LayerStats> ParseStats(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("version") ||
      j["version"] != 1 || !j.contains("paths") || !j.contains("bytes") ||
      !j["paths"].is_number_unsigned() || !j["bytes"].is_number_unsigned())
    return std::nullopt;
  return LayerStats{j["paths"].get<uint64_t>(), j["bytes"].get<uint64_t>()};
}

// The sidecar's stats when it exists and parses.
std::optional<LayerStats> ReadCachedStats(const std::string& sidecar) {
  UniqueFd fd(::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return std::nullopt;
  auto text = sys::ReadAll(fd.get(), kMaxStatsBytes, sidecar);
  if (!text) return std::nullopt;
  return ParseStats(*text);
}

// ".<id>.stats.<16 hex>": the temporary file of WriteFileAtomically for a
// sidecar.
bool IsStatsTemp(const std::string& n) {
  const size_t suf = std::string_view(kStatsSuffix).size();
  return n.size() == 1 + kIdLen + suf + 1 + 16 && n[0] == '.' &&
         ValidLayerId(std::string_view(n).substr(1, kIdLen)) &&
         n.compare(1 + kIdLen, suf, kStatsSuffix) == 0 &&
         n[1 + kIdLen + suf] == '.' &&
         ValidLayerId(std::string_view(n).substr(2 + kIdLen + suf));
}

// Is `e` (in `dirfd`) a directory with an overlay opaque xattr?
Result<bool> IsOpaque(int dirfd, const std::string& name,
                      const std::string& shown) {
  const std::string xpath = sys::XattrPath(dirfd, name);
  for (const char* key : {"trusted.overlay.opaque", "user.overlay.opaque"}) {
    auto v = sys::GetXattr(xpath, key, shown);
    if (v) return true;
    if (v.err() != ENODATA && v.err() != ENOTSUP && v.err() != EOPNOTSUPP)
      return v.error();
  }
  return false;
}

// Measures the tree below the directory `name` in `dirfd`.
Result<LayerStats> Measure(int dirfd, const std::string& name,
                           const std::string& shown) {
  LayerStats s;
  TreeVisitor visit;
  visit.entry = [&](int dir, const sys::DirEntry& e,
                    const std::string& dir_shown) -> Result<bool> {
    struct stat st;
    if (::fstatat(dir, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return Error::Errno("stat", dir_shown + "/" + e.name);
    s.bytes += static_cast<uint64_t>(st.st_blocks) * 512;
    if (!S_ISDIR(st.st_mode)) {
      ++s.paths;
      return false;
    }
    auto opaque = IsOpaque(dir, e.name, dir_shown + "/" + e.name);
    if (!opaque) return opaque.error();
    if (*opaque) ++s.paths;
    return true;
  };
  ACQFS_TRY(WalkTree(dirfd, name, shown, visit));
  return s;
}

}  // namespace

// ---------------------------------------------------------------- refs

bool ValidLayerId(std::string_view id) {
  if (id.size() != kIdLen) return false;
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
  char buf[kIdLen + 1];
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
    ACQFS_TRY(SyncDir(sys::Dirname(upper)));
    ACQFS_TRY(SyncDir(sys::Dirname(from)));
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

// ---------------------------------------------------------------- store

Result<StoreLock> StoreLock::Take(const std::string& state,
                                  std::chrono::milliseconds timeout) {
  LayerStore store(state);
  ACQFS_TRY(store.Ensure());
  const std::string path = store.Dir() + "/" + kLockName;
  UniqueFd fd(
      ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return Error::Errno("open layer store lock", path);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0)
      return StoreLock(std::move(fd));
    if (errno != EWOULDBLOCK && errno != EINTR)
      return Error::Errno("lock layer store", path);
    if (std::chrono::steady_clock::now() >= deadline)
      return Error::Of(ETIMEDOUT,
                       "lock layer store (held by another acqfs for " +
                           std::to_string(timeout.count()) + " ms)",
                       path);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string LayerStore::Dir() const { return state_ + "/" + kLayerStoreDir; }

std::string LayerStore::Path(std::string_view ref) const {
  return state_ + "/" + std::string(ref);
}

Status LayerStore::Ensure() const {
  const std::string dir = Dir();
  if (::mkdir(dir.c_str(), 0700) == 0) return SyncDir(state_);
  if (errno != EEXIST) return Error::Errno("mkdir", dir);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Error::Errno("stat", dir);
  if (!S_ISDIR(st.st_mode)) return Error::Of(ENOTDIR, "layer store", dir);
  return Ok();
}

namespace {

// Gives the new, empty directory `name` in `parent` (shown as `path`) the
// shape of a layer root: `like`'s permission bits, times and (as root)
// owner, or 0755 without `like`; then makes it durable. Opened with no
// symlink followed.
Status ShapeLayerRoot(int parent, const std::string& name,
                      const std::string& path, const struct stat* like) {
  UniqueFd fd(::openat(parent, name.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Error::Errno("open", path);
  mode_t mode = 0755;
  if (like != nullptr) {
    mode = like->st_mode & 07777;
    if (::geteuid() == 0 && ::fchown(fd.get(), like->st_uid, like->st_gid) != 0)
      return Error::Errno("chown", path);
  }
  if (::fchmod(fd.get(), mode) != 0) return Error::Errno("chmod", path);
  if (like != nullptr) {
    const struct timespec times[2] = {like->st_atim, like->st_mtim};
    if (::futimens(fd.get(), times) != 0) return Error::Errno("utimens", path);
  }
  if (::fsync(fd.get()) != 0) return Error::Errno("fsync", path);
  if (::fsync(parent) != 0) return Error::Errno("fsync", sys::Dirname(path));
  return Ok();
}

// Makes "<prefix><new id>" in `parent` (shown as `dir`), 0700, and returns
// the id.
Result<std::string> MakeFreshDir(int parent, const std::string& dir,
                                 const std::string& prefix) {
  for (;;) {
    auto id = NewLayerId();
    if (!id) return id.error();
    if (::mkdirat(parent, (prefix + *id).c_str(), 0700) == 0) return *id;
    if (errno != EEXIST) return Error::Errno("mkdir", dir + "/" + prefix + *id);
  }
}

}  // namespace

Result<std::string> LayerStore::Create(const struct stat* like) const {
  ACQFS_TRY(Ensure());
  const std::string dir = Dir();
  auto store = sys::OpenDirPath(dir, O_RDONLY);
  if (!store) return store.error();
  auto id = MakeFreshDir(store->get(), dir, "");
  if (!id) return id.error();
  ACQFS_TRY(ShapeLayerRoot(store->get(), *id, dir + "/" + *id, like));
  return StoreRef(*id);
}

std::string LayerStore::BuildPath(const std::string& folder,
                                  std::string_view id) {
  return folder + "/" + std::string(kBuildPrefix) + std::string(id);
}

Result<std::string> LayerStore::StartBuild(const std::string& folder,
                                           const struct stat& like,
                                           bool sweep) const {
  auto dir = sys::OpenDirPath(folder, O_RDONLY);
  if (!dir) return dir.error();
  if (sweep) {
    auto entries = sys::ReadDir(dir->get(), folder);
    if (!entries) return entries.error();
    for (const auto& e : *entries)
      if (e.name.rfind(kBuildPrefix, 0) == 0)
        ACQFS_TRY(sys::RemoveTree(dir->get(), e.name, folder + "/" + e.name));
  }
  auto id = MakeFreshDir(dir->get(), folder, kBuildPrefix);
  if (!id) return id.error();
  const std::string name = std::string(kBuildPrefix) + *id;
  if (Status s = ShapeLayerRoot(dir->get(), name, folder + "/" + name, &like);
      !s) {
    (void)sys::RemoveTree(dir->get(), name, folder + "/" + name);
    return s.error();
  }
  return *id;
}

Result<std::string> LayerStore::Adopt(const std::string& built,
                                      std::string_view id) const {
  if (!ValidLayerId(id) ||
      sys::Basename(built) != std::string(kBuildPrefix) + std::string(id))
    return Error::Of(EINVAL, "adopt layer (not a layer built for the store)",
                     built);
  ACQFS_TRY(Ensure());
  const std::string dir = Dir();
  auto store = sys::OpenDirPath(dir, O_RDONLY);
  if (!store) return store.error();
  auto from = sys::OpenDirPath(sys::Dirname(built), O_RDONLY);
  if (!from) return from.error();
  // RENAME_NOREPLACE: an id is never reused, and a layer already in the
  // store under it is never replaced.
  ACQFS_TRY(sys::Renameat2(from->get(), sys::Basename(built), store->get(),
                           std::string(id), RENAME_NOREPLACE, built));
  // The rename durable before any manifest names the layer.
  if (::fsync(store->get()) != 0) return Error::Errno("fsync", dir);
  return StoreRef(id);
}

Status LayerStore::Remove(std::string_view ref) const {
  constexpr std::string_view kStore = ".layers/";
  if (ref.substr(0, kStore.size()) != kStore ||
      !ValidLayerId(ref.substr(kStore.size())))
    return Error::Of(EINVAL, "remove layer (not a store layer)",
                     std::string(ref));
  const std::string id(ref.substr(kStore.size()));
  const std::string dir = Dir();
  auto store = sys::OpenDirPath(dir, O_RDONLY);
  if (!store) {
    if (store.err() == ENOENT) return Ok();
    return store.error();
  }
  ACQFS_TRY(sys::RemoveTree(store->get(), id, dir));
  // The sidecar after the layer: a crash between leaves a sidecar without a
  // layer, which the next collection removes.
  const std::string sidecar = id + kStatsSuffix;
  if (::unlinkat(store->get(), sidecar.c_str(), 0) != 0 && errno != ENOENT)
    return Error::Errno("unlink", dir + "/" + sidecar);
  return Ok();
}

Result<LayerStats> LayerStore::StatsOf(std::string_view ref) const {
  if (!ValidLayerRef(ref))
    return Error::Of(EINVAL, "layer stats (malformed ref)", std::string(ref));
  const std::string path = Path(ref);
  if (IsLegacyRef(ref)) return Measure(AT_FDCWD, path, path);
  const std::string id(ref.substr(std::string_view(".layers/").size()));
  const std::string sidecar = Dir() + "/" + id + kStatsSuffix;
  UniqueFd cached(::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (cached) {
    auto text = sys::ReadAll(cached.get(), kMaxStatsBytes, sidecar);
    if (text) {
      if (auto s = ParseStats(*text)) return *s;
    }
    // An unreadable or malformed cache is measured again and replaced.
  } else if (errno != ENOENT) {
    return Error::Errno("open", sidecar);
  }
  auto s = Measure(AT_FDCWD, path, path);
  if (!s) return s.error();
  // Best effort: a cache that cannot be written (a read-only state dir, a
  // collection removing the temporary file) costs only a later re-measure.
  (void)WriteFileAtomically(sidecar, StatsToJson(*s).dump() + "\n", 0600);
  return s;
}

namespace {

// A fork's or an rm's folder (ForkFolderName, a trash folder) in the state
// directory `state_fd`: removed when no command holds its flock (true);
// false when its command is still at work, or the name is gone or no
// directory.
Result<bool> RemoveIfAbandoned(int state_fd, const std::string& name,
                               const std::string& state) {
  const std::string shown = state + "/" + name;
  UniqueFd fd(::openat(state_fd, name.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return false;
    return Error::Errno("open", shown);
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return false;
    return Error::Errno("lock", shown);
  }
  ACQFS_TRY(sys::RemoveTree(state_fd, name, state));
  return true;
}

}  // namespace

Result<GcReport> LayerStore::CollectGarbage(
    std::chrono::milliseconds lock_timeout) const {
  GcReport report;
  // The trash an rm that died left (its flock free), removed before the
  // store lock is taken: a sandbox's folder may be large, and a trash
  // folder is never anything's but the rm's that made it.
  if (auto fd = sys::OpenDirPath(state_, O_RDONLY)) {
    if (auto names = sys::ReadDir(fd->get(), state_)) {
      for (const sys::DirEntry& e : *names) {
        if (!IsTrashFolderName(e.name)) continue;
        auto removed = RemoveIfAbandoned(fd->get(), e.name, state_);
        if (!removed) return removed.error();
        if (*removed) ++report.folders_removed;
      }
    }
  }
  auto lock = StoreLock::Take(state_, lock_timeout);
  if (!lock) return lock.error();

  // Everything any manifest references; refuse on any unreadable one.
  std::set<std::string> live;
  auto state_fd = sys::OpenDirPath(state_, O_RDONLY);
  if (!state_fd) return state_fd.error();
  auto sandboxes = sys::ReadDir(state_fd->get(), state_);
  if (!sandboxes) return sandboxes.error();
  for (const sys::DirEntry& e : *sandboxes) {
    if (e.name == kLayerStoreDir) continue;
    // A fork or an rm that died left its folder: removed first, so that the
    // layers only it names go in this pass. One whose command is still at
    // work is left alone, a fork's manifest read (its new upper is named
    // nowhere else yet).
    if (IsForkFolderName(e.name) || IsTrashFolderName(e.name)) {
      auto removed = RemoveIfAbandoned(state_fd->get(), e.name, state_);
      if (!removed) return removed.error();
      if (*removed) {
        ++report.folders_removed;
        continue;
      }
      if (IsTrashFolderName(e.name)) continue;
    }
    struct stat st;
    if (::fstatat(state_fd->get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) !=
        0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      return Error::Errno("stat", state_ + "/" + e.name);
    }
    if (!S_ISDIR(st.st_mode)) continue;
    const std::string path = StackPath(state_, e.name);
    auto m = ReadStack(path);
    if (!m) {
      if (m.err() == ENOENT && m.error().path == path) continue;  // legacy
      return m.error();
    }
    ++report.manifests;
    for (std::string& r : m->Referenced()) live.insert(std::move(r));
  }

  const std::string dir = Dir();
  auto store = sys::OpenDirPath(dir, O_RDONLY);
  if (!store) return store.error();
  auto entries = sys::ReadDir(store->get(), dir);
  if (!entries) return entries.error();
  std::vector<std::string> doomed_layers, doomed_files;
  std::set<std::string> present;
  for (const sys::DirEntry& e : *entries) {
    if (ValidLayerId(e.name)) {
      present.insert(e.name);
      if (live.count(StoreRef(e.name)))
        ++report.layers_kept;
      else
        doomed_layers.push_back(e.name);
    }
  }
  for (const sys::DirEntry& e : *entries) {
    const std::string& n = e.name;
    const size_t suf = std::string_view(kStatsSuffix).size();
    if (n.size() == kIdLen + suf && n.substr(kIdLen) == kStatsSuffix &&
        ValidLayerId(n.substr(0, kIdLen))) {
      if (!present.count(n.substr(0, kIdLen))) doomed_files.push_back(n);
    } else if (IsStatsTemp(n)) {
      // ".<id>.stats.<random>": WriteFileAtomically's temporary file that a
      // crash left behind (we hold the lock, but a StatsOf may run without
      // it; it then only fails to cache).
      doomed_files.push_back(n);
      ++report.temps_removed;
    }
  }
  std::sort(doomed_layers.begin(), doomed_layers.end());
  for (const std::string& id : doomed_layers) {
    // Its size: the sidecar's when there is one, else measured (not
    // cached: it is about to go). A layer that cannot be measured (a dir it
    // may not read) is removed all the same: RemoveTree makes it enterable.
    uint64_t bytes = 0;
    if (auto cached = ReadCachedStats(dir + "/" + id + kStatsSuffix)) {
      bytes = cached->bytes;
    } else if (auto s = Measure(store->get(), id, dir)) {
      bytes = s->bytes;
    }
    ACQFS_TRY(Remove(StoreRef(id)));
    report.bytes_freed += bytes;
    ++report.layers_removed;
    report.removed.push_back(StoreRef(id));
  }
  for (const std::string& n : doomed_files) {
    struct stat st;
    if (::fstatat(store->get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      report.bytes_freed += static_cast<uint64_t>(st.st_blocks) * 512;
    if (::unlinkat(store->get(), n.c_str(), 0) != 0 && errno != ENOENT)
      return Error::Errno("unlink", dir + "/" + n);
    if (n[0] != '.') ++report.sidecars_removed;
  }
  return report;
}

Result<GcReport> CollectGarbage(const std::string& state) {
  return LayerStore(state).CollectGarbage();
}

// ---------------------------------------------------------------- folders

std::string ForkFolderName(std::string_view sandbox) {
  return std::string(kForkFolderPrefix) + std::string(sandbox);
}

bool IsForkFolderName(std::string_view name) {
  constexpr std::string_view p = kForkFolderPrefix;
  return name.size() > p.size() && name.substr(0, p.size()) == p;
}

bool IsTrashFolderName(std::string_view name) {
  constexpr std::string_view p = kTrashFolderPrefix;
  return name.size() > p.size() && name.substr(0, p.size()) == p;
}

namespace {

// Opens the directory `name` of `state_fd` and takes its flock without
// waiting: EBUSY naming it when another open file holds it.
Result<UniqueFd> LockFolder(int state_fd, const std::string& name,
                            const std::string& shown) {
  UniqueFd fd(::openat(state_fd, name.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Error::Errno("open", shown);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Error::Of(EBUSY, "in use by another acqfs command", shown);
    return Error::Errno("lock", shown);
  }
  return fd;
}

Status SyncFd(int fd, const std::string& shown) {
  if (::fsync(fd) != 0) return Error::Errno("fsync", shown);
  return Ok();
}

}  // namespace

Result<HeldFolder> ReserveForkFolder(const std::string& state,
                                     const std::string& sandbox) {
  auto state_fd = sys::OpenDirPath(state, O_RDONLY);
  if (!state_fd) return state_fd.error();
  const std::string name = ForkFolderName(sandbox);
  const std::string shown = state + "/" + name;
  // Under the store lock, which every collection holds: it never finds the
  // folder made and not yet locked.
  auto lock = StoreLock::Take(state);
  if (!lock) return lock.error();
  if (::mkdirat(state_fd->get(), name.c_str(), 0700) != 0) {
    if (errno != EEXIST) return Error::Errno("mkdir", shown);
    // A fork to the same name is at work, or one died and left it.
    auto old = LockFolder(state_fd->get(), name, shown);
    if (!old) {
      if (old.err() == EBUSY)
        return Error::Of(EBUSY, "another acqfs fork is making it", shown);
      return old.error();
    }
    ACQFS_TRY(sys::RemoveTree(state_fd->get(), name, state));
    if (::mkdirat(state_fd->get(), name.c_str(), 0700) != 0)
      return Error::Errno("mkdir", shown);
  }
  auto fd = LockFolder(state_fd->get(), name, shown);
  if (!fd) return fd.error();
  return HeldFolder{std::move(*fd), name};
}

Status CommitForkFolder(const std::string& state, HeldFolder* folder,
                        const std::string& sandbox) {
  auto state_fd = sys::OpenDirPath(state, O_RDONLY);
  if (!state_fd) return state_fd.error();
  {
    auto lock = StoreLock::Take(state);
    if (!lock) return lock.error();
    ACQFS_TRY(sys::Renameat2(state_fd->get(), folder->name, state_fd->get(),
                             sandbox, RENAME_NOREPLACE,
                             state + "/" + folder->name));
  }
  folder->name = sandbox;
  return SyncFd(state_fd->get(), state);
}

Result<HeldFolder> MoveToTrash(const std::string& state,
                               const std::string& name) {
  auto state_fd = sys::OpenDirPath(state, O_RDONLY);
  if (!state_fd) return state_fd.error();
  auto fd = LockFolder(state_fd->get(), name, state + "/" + name);
  if (!fd) return fd.error();
  std::string trash;
  for (;;) {
    auto id = NewLayerId();
    if (!id) return id.error();
    trash = std::string(kTrashFolderPrefix) + *id;
    Status moved = sys::Renameat2(state_fd->get(), name, state_fd->get(), trash,
                                  RENAME_NOREPLACE, state + "/" + name);
    if (moved) break;
    if (moved.err() != EEXIST) return moved.error();
  }
  ACQFS_TRY(SyncFd(state_fd->get(), state));
  return HeldFolder{std::move(*fd), trash};
}

Status RemoveHeldFolder(const std::string& state, const HeldFolder& folder) {
  auto state_fd = sys::OpenDirPath(state, O_RDONLY);
  if (!state_fd) return state_fd.error();
  return sys::RemoveTree(state_fd->get(), folder.name, state);
}

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
