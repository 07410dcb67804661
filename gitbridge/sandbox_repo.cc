#include "gitbridge/sandbox_repo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string_view>
#include <vector>

#include "common/sys.h"
#include "gitbridge/layer_odb.h"
#include "gitbridge/merged_tree.h"

namespace acqfs::gitbridge {
namespace {

constexpr int kMaxSymrefDepth = 5;    // as git's SYMREF_MAXDEPTH
constexpr int kMaxRefDirDepth = 64;   // nesting below refs/heads
constexpr size_t kMaxRefFile = 4096;  // HEAD and loose refs
constexpr size_t kMaxPackedRefs = size_t{1} << 30;
constexpr size_t kMaxReflog = size_t{1} << 30;
// Backend priorities: every lower backend (git's own priorities are 1 and 2)
// is asked before the upper ones, so an upper whiteout of a lower loose
// object (left by a `git gc` in the sandbox) is never read as an object.
constexpr int kUpperPackedPriority = 0;
constexpr int kUpperLoosePriority = -1;

// The content of the regular file at `rel` in the merged view; nullopt when
// it is missing or not a regular file (a symlink is never followed).
Result<std::optional<std::string>> ReadMergedFile(const Layers& layers,
                                                  const std::string& rel,
                                                  size_t limit) {
  MergedTree tree(layers);
  auto node = tree.Resolve(rel);  // EINVAL for a malformed path
  if (!node) return node.error();
  if (!node->exists || !S_ISREG(node->st.st_mode))
    return std::optional<std::string>();
  auto text = tree.ReadFile(rel, limit);
  if (text) return std::optional<std::string>(std::move(*text));
  // Gone or swapped for something else since it was resolved.
  int e = text.err();
  if (e == ENOENT || e == ENOTDIR || e == EISDIR || e == ELOOP || e == EINVAL)
    return std::optional<std::string>();
  return text.error();
}

// What a loose ref file (or HEAD) says.
struct RefValue {
  enum Kind { kInvalid, kDirect, kSymbolic } kind = kInvalid;
  git_oid id{};
  std::string target;  // kSymbolic
};

RefValue ParseRefFile(std::string text) {
  RefValue v;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' ||
                           text.back() == ' ' || text.back() == '\t'))
    text.pop_back();
  if (text.rfind("ref:", 0) == 0) {
    size_t i = 4;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    v.kind = RefValue::kSymbolic;
    v.target = text.substr(i);
    return v;
  }
  if (text.size() == GIT_OID_HEXSZ &&
      git_oid_fromstrn(&v.id, text.data(), text.size()) == 0)
    v.kind = RefValue::kDirect;
  return v;
}

bool ValidRefName(const std::string& name) {
  int valid = 0;
  if (name.rfind("refs/", 0) != 0) return false;
  return git_reference_name_is_valid(&valid, name.c_str()) == 0 && valid;
}

// packed-refs: "<hex> <refname>" lines; '#' (header) and '^' (peeled tag)
// lines are skipped, as is anything malformed.
std::map<std::string, git_oid> ParsePackedRefs(const std::string& text) {
  std::map<std::string, git_oid> refs;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() < GIT_OID_HEXSZ + 2 || line[GIT_OID_HEXSZ] != ' ') continue;
    git_oid id;
    if (git_oid_fromstrn(&id, line.data(), GIT_OID_HEXSZ) != 0) continue;
    std::string name = line.substr(GIT_OID_HEXSZ + 1);
    if (ValidRefName(name)) refs[name] = id;
  }
  return refs;
}

Result<std::map<std::string, git_oid>> ReadPackedRefs(
    const Layers& layers, const std::string& gitdir) {
  auto text = ReadMergedFile(layers, gitdir + "/packed-refs", kMaxPackedRefs);
  if (!text) return text.error();
  if (!*text) return std::map<std::string, git_oid>();
  return ParsePackedRefs(**text);
}

// Adds the loose refs below the merged directory `dir` (`rel` from the layer
// roots, `prefix` the ref name so far) to `refs`; a symbolic or unreadable
// ref removes the name instead (the loose file wins over packed-refs).
Status CollectLooseRefs(const Layers& layers, const DirView& dir,
                        const std::string& prefix, int depth,
                        std::map<std::string, git_oid>* refs) {
  if (depth > kMaxRefDirDepth)
    return Error::Of(ELOOP, "refs nested too deeply", dir.path);
  auto entries = ListMerged(layers, dir);
  if (!entries) return entries.error();
  for (const MergedEntry& e : *entries) {
    auto c = ResolveChild(layers, dir, e.name);
    if (!c) return c.error();
    if (!c->exists) continue;
    std::string rel = sys::Join(dir.path, e.name);
    std::string name = prefix + e.name;
    if (c->is_dir()) {
      ACQFS_TRY(
          CollectLooseRefs(layers, c->AsDir(rel), name + "/", depth + 1, refs));
      continue;
    }
    if (!ValidRefName(name)) continue;  // e.g. "x.lock"
    auto text = ReadMergedFile(layers, rel, kMaxRefFile);
    RefValue v;
    if (text && *text) v = ParseRefFile(std::move(**text));
    if (v.kind == RefValue::kDirect) {
      (*refs)[name] = v.id;
    } else {
      refs->erase(name);
    }
  }
  return Ok();
}

// An object database over the objects directory of the merged view: the
// host's (with its alternates: the host is trusted) when it shows through,
// the upper's and the frozen layers' when present.
Result<GitOdb> OpenObjects(const Layers& layers, const std::string& gitdir) {
  git_odb* raw = nullptr;
  int rc = git_odb_new(&raw);
  GitOdb odb(raw);
  if (rc < 0) return GitError(rc, "new object database", gitdir);
  std::string rel = gitdir + "/objects";
  auto node = MergedTree(layers).Resolve(rel);
  if (!node) return node.error();
  if (!node->exists || !S_ISDIR(node->st.st_mode)) return odb;
  if (node->dir.lower & LowerBit(0)) {
    std::string path = layers.lower.Shown(rel);
    rc = git_odb_add_disk_alternate(odb.get(), path.c_str());
    if (rc < 0) return GitError(rc, "add object store", path);
  }
  // A frozen layer was the sandbox's upper once: read as the upper is.
  for (unsigned i = 1; i < layers.lower_layers(); ++i)
    if (node->dir.lower & LowerBit(i))
      ACQFS_TRY(AddLayerObjects(odb.get(), layers.LowerLayer(i), rel,
                                kUpperPackedPriority, kUpperLoosePriority));
  // The upper's loose objects and packs, read only through the layer
  // (never by a path the sandbox could redirect); its info/alternates is
  // never read.
  if (node->dir.upper)
    ACQFS_TRY(AddLayerObjects(odb.get(), layers.upper, rel,
                              kUpperPackedPriority, kUpperLoosePriority));
  return odb;
}

}  // namespace

Result<SandboxRepo> SandboxRepo::Open(const Layers& layers,
                                      const std::string& gitdir) {
  if (gitdir.empty() || gitdir.front() == '/' || gitdir.back() == '/')
    return Error::Of(EINVAL, "invalid git directory", gitdir);
  auto odb = OpenObjects(layers, gitdir);
  if (!odb) return odb.error();
  git_repository* raw = nullptr;
  int rc = git_repository_wrap_odb(&raw, odb->get());
  GitRepository repo(raw);
  if (rc < 0)
    return GitError(rc, "wrap object database", layers.upper.Shown(gitdir));
  SandboxRepo s(layers, gitdir);
  s.repo_ = std::move(repo);
  return s;
}

Result<SandboxRepo> SandboxRepo::OpenRefsOnly(const Layers& layers,
                                              const std::string& gitdir) {
  if (gitdir.empty() || gitdir.front() == '/' || gitdir.back() == '/')
    return Error::Of(EINVAL, "invalid git directory", gitdir);
  return SandboxRepo(layers, gitdir);
}

Result<std::map<std::string, git_oid>> SandboxRepo::Branches() const {
  auto packed = ReadPackedRefs(*layers_, gitdir_);
  if (!packed) return packed.error();
  std::map<std::string, git_oid> refs;
  for (const auto& [name, id] : *packed)
    if (name.rfind("refs/heads/", 0) == 0) refs[name] = id;
  std::string rel = gitdir_ + "/refs/heads";
  auto node = MergedTree(*layers_).Resolve(rel);
  if (!node) return node.error();
  if (node->exists && S_ISDIR(node->st.st_mode))
    ACQFS_TRY(CollectLooseRefs(*layers_, node->dir, "refs/heads/", 0, &refs));
  std::map<std::string, git_oid> out;
  for (const auto& [name, id] : refs) out[name.substr(11)] = id;
  return out;
}

Result<std::map<std::string, git_oid>> SandboxRepo::AllRefs() const {
  auto refs = ReadPackedRefs(*layers_, gitdir_);
  if (!refs) return refs.error();
  std::string rel = gitdir_ + "/refs";
  auto node = MergedTree(*layers_).Resolve(rel);
  if (!node) return node.error();
  if (node->exists && S_ISDIR(node->st.st_mode))
    ACQFS_TRY(CollectLooseRefs(*layers_, node->dir, "refs/", 0, &*refs));
  return refs;
}

Result<std::vector<git_oid>> SandboxRepo::ReflogIds(
    const std::string& ref) const {
  if (!ValidRefName(ref))
    return Error::Of(EINVAL, "invalid ref name '" + ref + "'",
                     layers_->upper.Shown(gitdir_));
  std::vector<git_oid> ids;
  auto text = ReadMergedFile(*layers_, gitdir_ + "/logs/" + ref, kMaxReflog);
  if (!text) return text.error();
  if (!*text) return ids;
  // "<old> <new> <name> <email> <time> <tz>\t<message>" a line.
  const std::string& t = **text;
  size_t pos = 0;
  while (pos < t.size()) {
    size_t eol = t.find('\n', pos);
    if (eol == std::string::npos) eol = t.size();
    git_oid id;
    if (eol - pos > 2 * GIT_OID_HEXSZ + 1 && t[pos + GIT_OID_HEXSZ] == ' ' &&
        git_oid_fromstrn(&id, t.data() + pos + GIT_OID_HEXSZ + 1,
                         GIT_OID_HEXSZ) == 0 &&
        !git_oid_is_zero(&id))
      ids.push_back(id);
    pos = eol + 1;
  }
  return ids;
}

Result<std::optional<git_oid>> SandboxRepo::ResolveRef(const std::string& name,
                                                       int depth) const {
  std::string shown = layers_->upper.Shown(gitdir_ + "/" + name);
  if (depth > kMaxSymrefDepth)
    return Error::Of(ELOOP, "symbolic ref chain too long", shown);
  if (!ValidRefName(name))
    return Error::Of(EINVAL, "invalid ref name '" + name + "'", shown);
  auto text = ReadMergedFile(*layers_, gitdir_ + "/" + name, kMaxRefFile);
  if (!text) return text.error();
  if (*text) {
    RefValue v = ParseRefFile(std::move(**text));
    if (v.kind == RefValue::kDirect) return std::optional<git_oid>(v.id);
    if (v.kind == RefValue::kSymbolic) return ResolveRef(v.target, depth + 1);
    return Error::Of(EIO, "unreadable ref", shown);
  }
  auto packed = ReadPackedRefs(*layers_, gitdir_);
  if (!packed) return packed.error();
  auto it = packed->find(name);
  if (it == packed->end()) return std::optional<git_oid>();
  return std::optional<git_oid>(it->second);
}

Result<std::optional<git_oid>> SandboxRepo::Head() const {
  auto text = ReadMergedFile(*layers_, gitdir_ + "/HEAD", kMaxRefFile);
  if (!text) return text.error();
  if (!*text) return std::optional<git_oid>();
  RefValue v = ParseRefFile(std::move(**text));
  if (v.kind == RefValue::kDirect) return std::optional<git_oid>(v.id);
  if (v.kind == RefValue::kSymbolic) return ResolveRef(v.target, 1);
  return Error::Of(EIO, "unreadable HEAD",
                   layers_->upper.Shown(gitdir_ + "/HEAD"));
}

Result<std::string> SandboxRepo::HeadBranch() const {
  auto text = ReadMergedFile(*layers_, gitdir_ + "/HEAD", kMaxRefFile);
  if (!text) return text.error();
  if (!*text) return std::string();
  RefValue v = ParseRefFile(std::move(**text));
  if (v.kind != RefValue::kSymbolic || v.target.rfind("refs/heads/", 0) != 0)
    return std::string();
  auto id = ResolveRef(v.target, 1);
  if (!id) return id.error();
  if (!*id) return std::string();  // unborn
  return v.target.substr(11);
}

}  // namespace acqfs::gitbridge
