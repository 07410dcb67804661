#include "gitbridge/export.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "common/git_ptr.h"
#include "common/sys.h"
#include "fs/copy_up_source.h"
#include "fs/layer.h"
#include "gitbridge/bridge_repo.h"
#include "gitbridge/git_names.h"
#include "gitbridge/host_repo.h"
#include "gitbridge/publish_rule.h"
#include "gitbridge/remote.h"
#include "gitbridge/sandbox_repo.h"
#include "gitbridge/worktree_snapshot.h"

namespace acqfs::gitbridge {
namespace {

// Everything an export reads, opened once. Members are destroyed in reverse
// order, so the repositories go before the library.
struct Session {
  GitLibrary lib;
  std::unique_ptr<Layers> layers;
  std::optional<HostRepo> host;
  std::optional<BridgeRepo> bridge;
  // The sandbox's own repository; when it cannot be opened (e.g. too many
  // packs), why: its branches are refused and the working tree still goes.
  std::optional<SandboxRepo> sandbox;
  std::string sandbox_refused;
  ProgressFn progress;
  // The base's instant, after which a host edit of a file the sandbox
  // wrote is left out of the snapshot (worktree_snapshot.h); 0: none.
  int64_t host_changed_since_ns = 0;
};

// The sandbox's copy-up sources (fs/copy_up_source.h), for the snapshot to
// leave out host edits the sandbox wrote over. None kept yet: none needed.
Status OpenSources(const ExportConfig& c, Layers* layers) {
  if (c.sources.empty()) return Ok();
  auto src = CopyUpSources::Open(c.sources, 0, /*create=*/false);
  if (!src) return src.err() == ENOENT ? Ok() : Status(src.error());
  layers->sources = *src;
  return Ok();
}

Result<std::unique_ptr<Session>> OpenSession(const ExportConfig& c) {
  auto s = std::make_unique<Session>();
  s->progress = c.progress;
  if (c.base.recorded() && c.base.own_git)
    s->host_changed_since_ns = c.base.time_ns;
  auto host = HostRepo::Open(c.lower);
  if (!host) {
    if (host.err() == ENOENT)
      return Error::Of(ENOENT, "no git repository to export to", c.lower);
    return host.error();
  }
  s->host.emplace(std::move(*host));
  auto layers = Layers::OpenForReading(c.lower, c.upper, c.xattr_namespace,
                                       c.frozen, c.anchor);
  if (!layers) return layers.error();
  layers->policy = c.policy;
  ACQFS_TRY(OpenSources(c, &*layers));
  s->layers = std::make_unique<Layers>(std::move(*layers));
  auto bridge = BridgeRepo::OpenOrCreate(c.bridge, s->host->objects_dir());
  if (!bridge) return bridge.error();
  s->bridge.emplace(std::move(*bridge));
  auto sandbox = SandboxRepo::Open(*s->layers);
  if (sandbox)
    s->sandbox.emplace(std::move(*sandbox));
  else
    s->sandbox_refused = sandbox.error().Message();
  return s;
}

struct Plan {
  std::map<std::string, git_oid> publish;  // branch -> tip
  std::vector<std::string> refused;
  std::vector<SkippedExport> skipped;
  std::map<std::string, git_oid> bridge_heads;  // before this export
  std::optional<git_oid> base_commit;           // the base's HEAD
  std::optional<git_oid> base;                  // the snapshot's 1st parent
  git_oid tree{};                               // the working tree
  std::optional<git_oid> base_tree;             // the base commit's tree
  std::optional<git_oid> prev;                  // previous snapshot
  bool worktree_changed = false;
  uint64_t changes = 0;
  std::vector<std::string> paths;  // the working tree's changed paths
  uint64_t host_edits_separated = 0;
  std::vector<HostEditKept> host_edits_kept;
};

std::vector<git_oid> HostTips(const std::map<std::string, git_oid>& branches,
                              const std::optional<git_oid>& head) {
  std::vector<git_oid> hide;
  for (const auto& [name, id] : branches) hide.push_back(id);
  if (head) hide.push_back(*head);
  return hide;
}

// Decides which sandbox branches to publish, copying their objects in.
Status PlanBranches(Session& s, const std::vector<git_oid>& hide,
                    const std::map<std::string, git_oid>& base_branches,
                    Plan* plan) {
  if (!s.sandbox) {
    plan->refused.push_back("branches: " + s.sandbox_refused);
    return Ok();
  }
  auto branches = s.sandbox->Branches();
  if (!branches) return branches.error();
  for (const auto& [name, tip] : *branches) {
    auto h = base_branches.find(name);
    if (h != base_branches.end() && git_oid_equal(&h->second, &tip)) continue;
    if (std::string why = RefusedBranch(name); !why.empty()) {
      plan->refused.push_back(PrintableName(name) + ": " + why);
      continue;
    }
    Report(s.progress, "copying the objects of branch " + name);
    // Whatever stops the copy (an unsafe tree, a missing or corrupt object
    // in the sandbox) stops this branch only.
    Status c = s.bridge->CopyReachable(s.sandbox->repo(), {tip}, hide);
    if (!c) {
      plan->refused.push_back(name + ": " + c.error().Message());
      continue;
    }
    plan->publish[name] = tip;
  }
  return Ok();
}

Result<git_oid> TreeOf(git_repository* repo, const git_oid& commit) {
  git_commit* raw = nullptr;
  int rc = git_commit_lookup(&raw, repo, &commit);
  GitCommit c(raw);
  if (rc < 0) return GitError(rc, "read commit " + OidHex(commit), "");
  return *git_commit_tree_id(c.get());
}

// Chooses the snapshot's first parent, the sandbox's own HEAD (else the
// base commit), and builds its tree: that commit's tree with the
// sandbox's changes laid over it (the host's working tree, which the
// sandbox sees live, never enters it; docs/git-bridge.md, "The commit
// structure").
Status PlanWorktree(Session& s, const std::vector<git_oid>& hide, Plan* plan) {
  git_repository* bridge = s.bridge->repo();
  Result<std::optional<git_oid>> head = std::optional<git_oid>();
  if (s.sandbox) head = s.sandbox->Head();
  if (!head) return head.error();
  bool own_head = *head && (!plan->base_commit ||
                            !git_oid_equal(&**head, &*plan->base_commit));
  if (own_head) {
    Status c = s.bridge->CopyReachable(s.sandbox->repo(), {**head}, hide);
    if (!c) {
      plan->refused.push_back("HEAD: " + c.error().Message());
      own_head = false;
    }
  }
  plan->base = own_head ? *head : plan->base_commit;

  if (plan->base_commit) {
    auto t = TreeOf(bridge, *plan->base_commit);
    if (!t) {
      // The base's commit is gone from the host (pruned after its branch
      // went): what stops reading it stops the working tree alone.
      plan->refused.push_back("working tree: the base commit: " +
                              t.error().Message());
      return Ok();
    }
    plan->base_tree = *t;
  }
  // A path the sandbox never wrote is as its HEAD has it: what the host
  // changed in its own files (uncommitted at the mount, or since) shows
  // in the sandbox, but it is not the agent's work.
  std::optional<git_oid> base_tree = plan->base_tree;
  if (plan->base && (!plan->base_commit ||
                     !git_oid_equal(&*plan->base, &*plan->base_commit))) {
    auto t = TreeOf(bridge, *plan->base);
    if (!t) return t.error();
    base_tree = *t;
  }
  // A mounted sandbox at work may change a path between the scan and the
  // read of it (ChangedUnderfoot): the snapshot is then taken again, up to
  // kAttempts times, rather than refused at the first such path. (Even a
  // reading that succeeds records each path as it was when read, not one
  // instant: docs/changes.md.)
  constexpr int kAttempts = 3;
  SnapshotStats stats;
  Result<git_oid> tree = git_oid{};
  for (int attempt = 1;; attempt++) {
    stats = SnapshotStats{};
    tree =
        BuildWorktreeTree(bridge, base_tree ? &*base_tree : nullptr, *s.layers,
                          &stats, s.progress, s.host_changed_since_ns);
    if (tree || !ChangedUnderfoot(tree.err()) || attempt == kAttempts) break;
  }
  if (!tree) {
    // Whatever stops the working tree (a directory or file that cannot be
    // read) stops it alone: it is refused and named, the previous snapshot
    // stays, the branches still go out.
    std::string why = "working tree: " + tree.error().Message();
    if (ChangedUnderfoot(tree.err()))
      why += " (the sandbox changed it while export read it, " +
             std::to_string(kAttempts) +
             " times; export again once the sandbox is quiet)";
    plan->refused.push_back(why);
    plan->worktree_changed = false;
    return Ok();
  }
  plan->tree = *tree;
  plan->changes = stats.changes;
  plan->paths = std::move(stats.paths);
  for (SkippedPath& k : stats.skipped)
    plan->skipped.push_back({std::move(k.path), std::move(k.reason), false});
  plan->host_edits_separated = stats.host_edits_separated;
  plan->host_edits_kept = std::move(stats.host_edits_kept);

  auto refs = s.bridge->Refs("refs/acqfs/");
  if (!refs) return refs.error();
  auto prev = refs->find("worktree");
  if (prev == refs->end()) {
    // Published even when it holds nothing uncommitted, so that the
    // documented `git merge sandbox-<name>/acqfs-worktree` always works;
    // there is nothing to publish only in an empty repository with an
    // empty working tree.
    git_oid empty;
    plan->worktree_changed =
        plan->base ||
        (git_oid_fromstr(&empty, "4b825dc642cb6eb9a060e54bf8d69288fbee4904") ==
             0 &&
         !git_oid_equal(&empty, &plan->tree));
    return Ok();
  }
  plan->prev = prev->second;
  git_commit* raw = nullptr;
  int rc = git_commit_lookup(&raw, bridge, &prev->second);
  GitCommit pc(raw);
  if (rc < 0) return GitError(rc, "read previous snapshot", s.bridge->path());
  bool same_tree = git_oid_equal(git_commit_tree_id(pc.get()), &plan->tree);
  bool same_base =
      plan->base && git_commit_parentcount(pc.get()) > 0 &&
      git_oid_equal(git_commit_parent_id(pc.get(), 0), &*plan->base);
  plan->worktree_changed = !(same_tree && same_base);
  return Ok();
}

// The base's branches and HEAD (or the host's now, for a sandbox without
// a recorded base).
Status BaseRefs(const Session& s, const ExportConfig& c,
                std::map<std::string, git_oid>* branches,
                std::optional<git_oid>* head) {
  if (!c.base.recorded()) {
    auto host_branches = s.host->Branches();
    if (!host_branches) return host_branches.error();
    auto host_head = s.host->Head();
    if (!host_head) return host_head.error();
    *branches = std::move(*host_branches);
    *head = *host_head;
    return Ok();
  }
  auto parse = [&](const std::string& hex) -> Result<git_oid> {
    git_oid id;
    if (git_oid_fromstrn(&id, hex.data(), hex.size()) != 0 ||
        hex.size() != GIT_OID_HEXSZ)
      return Error::Of(EINVAL, "bad commit id '" + hex + "' in the base",
                       c.sandbox);
    return id;
  };
  for (const auto& [name, hex] : c.base.branches) {
    auto id = parse(hex);
    if (!id) return id.error();
    (*branches)[name] = *id;
  }
  if (!c.base.head.empty()) {
    auto id = parse(c.base.head);
    if (!id) return id.error();
    *head = *id;
  }
  return Ok();
}

Result<Plan> MakePlan(Session& s, const ExportConfig& c) {
  Plan plan;
  std::map<std::string, git_oid> base_branches;
  ACQFS_TRY(BaseRefs(s, c, &base_branches, &plan.base_commit));
  // Objects the host has need no copy: its tips now, and the base's.
  auto host_branches = s.host->Branches();
  if (!host_branches) return host_branches.error();
  auto host_head = s.host->Head();
  if (!host_head) return host_head.error();
  std::vector<git_oid> hide = HostTips(*host_branches, *host_head);
  for (const auto& [name, id] : base_branches)
    if (s.host->HasObject(id)) hide.push_back(id);
  if (plan.base_commit && s.host->HasObject(*plan.base_commit))
    hide.push_back(*plan.base_commit);
  auto bridge_heads = s.bridge->Refs("refs/heads/");
  if (!bridge_heads) return bridge_heads.error();
  plan.bridge_heads = *bridge_heads;
  ACQFS_TRY(PlanBranches(s, hide, base_branches, &plan));
  ACQFS_TRY(PlanWorktree(s, hide, &plan));
  return plan;
}

// The one commit builder of an export (the checkpoints' commits and the
// working tree's): a commit in `repo` of `tree_id` on `parents` (in order),
// by acqfs at `when` (seconds since the epoch, UTC). Errors name the
// operation, `what` is committed ("working tree", "checkpoint 3") and
// `shown` (the bridge's path).
Result<git_oid> MakeCommit(git_repository* repo, const git_oid& tree_id,
                           const std::vector<git_oid>& parents, int64_t when,
                           const std::string& msg, const std::string& what,
                           const std::string& shown) {
  std::vector<GitCommit> owned;
  std::vector<const git_commit*> ptrs;
  for (const auto& p : parents) {
    git_commit* raw = nullptr;
    int rc = git_commit_lookup(&raw, repo, &p);
    GitCommit parent(raw);
    if (rc < 0)
      return GitError(rc, "read parent " + OidHex(p) + " of the " + what,
                      shown);
    ptrs.push_back(parent.get());
    owned.push_back(std::move(parent));
  }
  git_tree* traw = nullptr;
  int rc = git_tree_lookup(&traw, repo, &tree_id);
  GitTree tree(traw);
  if (rc < 0)
    return GitError(rc, "read tree " + OidHex(tree_id) + " of the " + what,
                    shown);
  git_signature* sraw = nullptr;
  rc = git_signature_new(&sraw, "acqfs", "acqfs@localhost", when, 0);
  GitSignature sig(sraw);
  if (rc < 0) return GitError(rc, "make signature", shown);
  git_oid id;
  rc = git_commit_create(&id, repo, nullptr, sig.get(), sig.get(), nullptr,
                         msg.c_str(), tree.get(), ptrs.size(), ptrs.data());
  if (rc < 0) return GitError(rc, "commit " + what, shown);
  return id;
}

// Not under refs/acqfs/: the host fetches the commits through the working
// tree's, not a ref each.
constexpr char kCheckpointRefs[] = "refs/acqfs-checkpoints/";

// The checkpoints' commits of `chain`, oldest first: each the tree of the
// host's working state under that checkpoint's layers, on the one before
// (the first on `first_parent`), with the checkpoint's message and time, so
// the same checkpoint gives the same commit in every bridge (a fork's
// shares its parent's). One already exported (`*known`: the commits of
// refs/acqfs-checkpoints/<id>, and those made by this export) on the same
// parent is not built again; each one built is added to `*known` and to
// `*built` (its top layer's id and its commit), for the cache's refs.
Result<std::vector<std::pair<uint32_t, git_oid>>> CommitCheckpoints(
    Session& s, const ExportConfig& c,
    const std::vector<ExportConfig::CheckpointRef>& chain, const Plan& plan,
    const std::optional<git_oid>& first_parent,
    std::map<std::string, git_oid>* known,
    std::vector<std::pair<std::string, git_oid>>* built) {
  std::vector<std::pair<uint32_t, git_oid>> out;
  git_repository* bridge = s.bridge->repo();
  std::optional<git_oid> prev = first_parent;
  for (const auto& cp : chain) {
    auto k = known->find(cp.id);
    if (k != known->end()) {
      git_commit* raw = nullptr;
      int rc = git_commit_lookup(&raw, bridge, &k->second);
      GitCommit kc(raw);
      bool same_parent =
          rc == 0 &&
          (prev ? git_commit_parentcount(kc.get()) == 1 &&
                      git_oid_equal(git_commit_parent_id(kc.get(), 0), &*prev)
                : git_commit_parentcount(kc.get()) == 0);
      if (same_parent) {
        out.emplace_back(cp.number, k->second);
        prev = k->second;
        continue;
      }
    }
    Report(s.progress,
           "building the tree of checkpoint " + std::to_string(cp.number));
    std::vector<std::string> below(cp.layers.begin(), cp.layers.end() - 1);
    auto layers = Layers::OpenForReading(c.lower, cp.layers.back(),
                                         c.xattr_namespace, below, c.anchor);
    if (!layers) return layers.error();
    layers->policy = c.policy;
    ACQFS_TRY(OpenSources(c, &*layers));
    SnapshotStats stats;
    auto tree =
        BuildWorktreeTree(bridge, plan.base_tree ? &*plan.base_tree : nullptr,
                          *layers, &stats, s.progress, s.host_changed_since_ns);
    if (!tree) return tree.error();
    std::string msg = cp.message.empty()
                          ? "checkpoint " + std::to_string(cp.number)
                          : cp.message;
    // Nothing of the sandbox's own (its name): a fork's bridge makes the
    // same commit.
    msg += "\n\nAcqfs-Checkpoint: " + std::to_string(cp.number) + "\n";
    std::vector<git_oid> parents;
    if (prev) parents.push_back(*prev);
    auto id = MakeCommit(bridge, *tree, parents, cp.time_ns / 1000000000, msg,
                         "checkpoint " + std::to_string(cp.number), c.bridge);
    if (!id) return id.error();
    out.emplace_back(cp.number, *id);
    (*known)[cp.id] = *id;
    built->emplace_back(cp.id, *id);
    prev = *id;
  }
  return out;
}

// refs/acqfs/checkpoints/<number>: every checkpoint's commit, on the
// current stack or off it, which the host fetches as
// refs/sandboxes/<name>/checkpoints/<number>.
constexpr char kNumberedCheckpointRefs[] = "refs/acqfs/checkpoints/";

// Has checkpoint `cp` (its top layer) anything of its own? A checkpoint
// taken with nothing changed since the one below it holds that one's tree.
bool HoldsWork(const ExportConfig& c, const ExportConfig::CheckpointRef& cp) {
  auto layer = Layer::OpenUnder(c.anchor, cp.layers.back());
  if (!layer) return true;  // unreadable: say so rather than lose it
  auto entries = sys::ReadDir(layer->root(), cp.layers.back());
  return !entries || !entries->empty();
}

// The working tree's commit: its parents (docs/git-bridge.md, "The commit
// structure") are the sandbox's HEAD, the newest checkpoint's commit and the
// previous working-tree commit, each once.
Result<git_oid> CommitSnapshot(Session& s, const ExportConfig& c,
                               const Plan& plan,
                               const std::optional<git_oid>& checkpoint) {
  std::vector<git_oid> parents;
  auto add = [&](const std::optional<git_oid>& id) {
    if (!id) return;
    for (const auto& p : parents)
      if (git_oid_equal(&p, &*id)) return;
    parents.push_back(*id);
  };
  add(plan.base);
  add(checkpoint);
  add(plan.prev);
  std::string msg = "acqfs: working tree of sandbox " + c.sandbox + "\n";
  return MakeCommit(s.bridge->repo(), plan.tree, parents, std::time(nullptr),
                    msg, "working tree", c.bridge);
}

std::string Hex(const std::optional<git_oid>& id) {
  return id ? OidHex(*id) : std::string();
}

Status PublishBranches(Session& s, const Plan& plan, ExportResult* r) {
  for (const auto& [name, tip] : plan.publish) {
    auto old = plan.bridge_heads.find(name);
    if (old != plan.bridge_heads.end() && git_oid_equal(&old->second, &tip))
      continue;
    std::string ref = "refs/heads/" + name;
    ACQFS_TRY(s.bridge->SetRef(ref, tip, "acqfs export"));
    r->updates.push_back(RefUpdate{
        ref, old == plan.bridge_heads.end() ? "" : OidHex(old->second),
        OidHex(tip)});
  }
  for (const auto& [name, id] : plan.bridge_heads) {
    if (plan.publish.count(name)) continue;
    std::string ref = "refs/heads/" + name;
    ACQFS_TRY(s.bridge->DeleteRef(ref));
    r->updates.push_back(RefUpdate{ref, OidHex(id), ""});
  }
  return Ok();
}

// The commits the bridge's refs will name once this export is published.
std::vector<git_oid> PublishedTips(const Plan& plan,
                                   const std::optional<git_oid>& snapshot) {
  std::vector<git_oid> tips;
  for (const auto& [name, tip] : plan.publish) tips.push_back(tip);
  if (snapshot)
    tips.push_back(*snapshot);
  else if (plan.prev)
    tips.push_back(*plan.prev);
  return tips;
}

// The bridge's published refs (its branches and refs/acqfs/*) whose commits
// the host does not have, as "<name> at <id>".
Result<std::vector<std::string>> UnfetchedRefs(const HostRepo& host,
                                               const BridgeRepo& bridge) {
  auto heads = bridge.Refs("refs/heads/");
  if (!heads) return heads.error();
  std::map<std::string, git_oid> published = std::move(*heads);
  auto refs = bridge.Refs("refs/acqfs/");
  if (!refs) return refs.error();
  for (const auto& [name, id] : *refs) published["acqfs/" + name] = id;
  std::vector<std::string> out;
  for (const auto& [name, id] : published)
    if (!host.HasObject(id)) out.push_back(name + " at " + OidHex(id));
  return out;
}

}  // namespace

bool IsGitCheckout(const std::string& dir) {
  GitLibrary lib;
  auto host = HostRepo::Open(dir);
  return host.ok() || host.err() != ENOENT;
}

Status PrepareBridge(const ExportConfig& c) {
  GitLibrary lib;
  {
    auto host = HostRepo::Open(c.lower);
    if (!host) return host.error();
    auto bridge = BridgeRepo::OpenOrCreate(c.bridge, host->objects_dir());
    if (!bridge) return bridge.error();
  }
  return RegisterRemote(c.lower, c.sandbox, c.bridge);
}

Result<ExportResult> Export(const ExportConfig& c) {
  auto session = OpenSession(c);
  if (!session) return session.error();
  Session& s = **session;
  auto plan = MakePlan(s, c);
  if (!plan) return plan.error();
  ExportResult r;
  r.refused = plan->refused;
  r.skipped = plan->skipped;
  r.changed_paths = plan->changes;
  r.host_edits_separated = plan->host_edits_separated;
  r.host_edits_kept = plan->host_edits_kept;
  r.base_commit = Hex(plan->base_commit);
  if (c.base.recorded()) {
    auto moved = HostChangesSince(c.lower, c.base, plan->paths);
    if (moved)
      r.host_changed = std::move(*moved);
    else
      r.host_changed_error = moved.error().Message();
  }
  r.fetch_command = "git -C " + c.lower + " fetch " + RemoteName(c.sandbox);
  // The checkpoints, oldest first, on the base commit (which a fork
  // shares, so that its exports and its parent's share them).
  std::optional<git_oid> last_checkpoint;
  std::vector<std::pair<uint32_t, git_oid>> checkpoints;
  // Every checkpoint's commit by number; the commits this export built,
  // by their top layer's id (for the cache, refs/acqfs-checkpoints/).
  std::vector<std::pair<uint32_t, git_oid>> numbered;
  std::vector<std::pair<std::string, git_oid>> built;
  auto known = s.bridge->Refs(kCheckpointRefs);
  if (!known) return known.error();
  auto numbered_before = s.bridge->Refs(kNumberedCheckpointRefs);
  if (!numbered_before) return numbered_before.error();
  if (!plan->base_tree) {
    if (!c.checkpoints.empty())
      r.refused.push_back("checkpoints: the base commit is unknown");
  } else {
    auto made = CommitCheckpoints(s, c, c.checkpoints, *plan, plan->base_commit,
                                  &*known, &built);
    if (!made) {
      r.refused.push_back("checkpoints: " + made.error().Message());
    } else {
      checkpoints = std::move(*made);
      if (!checkpoints.empty()) last_checkpoint = checkpoints.back().second;
    }
    // Those off the current stack, each through its own chain.
    for (const auto& chain : c.off_stack) {
      if (chain.empty()) continue;
      auto off = CommitCheckpoints(s, c, chain, *plan, plan->base_commit,
                                   &*known, &built);
      if (!off) {
        r.refused.push_back("checkpoint " +
                            std::to_string(chain.back().number) + ": " +
                            off.error().Message());
        continue;
      }
      numbered.push_back(off->back());
    }
  }
  for (const auto& cp : checkpoints) numbered.push_back(cp);
  std::sort(numbered.begin(), numbered.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (last_checkpoint && plan->prev && !plan->worktree_changed) {
    // A checkpoint since the last snapshot: a new one on top of it.
    git_commit* raw = nullptr;
    int rc = git_commit_lookup(&raw, s.bridge->repo(), &*plan->prev);
    GitCommit pc(raw);
    bool has = false;
    for (unsigned i = 0; rc == 0 && i < git_commit_parentcount(pc.get()); ++i)
      has = has ||
            git_oid_equal(git_commit_parent_id(pc.get(), i), &*last_checkpoint);
    if (!has) plan->worktree_changed = true;
  } else if (last_checkpoint && !plan->prev) {
    plan->worktree_changed = true;
  }
  std::optional<git_oid> snapshot;
  if (plan->worktree_changed) {
    Report(s.progress, "writing the snapshot commit");
    auto id = CommitSnapshot(s, c, *plan, last_checkpoint);
    if (!id) return id.error();
    snapshot = *id;
  }
  // What `git fetch` will read must be readable: checked before any ref
  // moves, so a damaged bridge fails the export and keeps its refs.
  Report(s.progress, "verifying the bridge's objects");
  std::vector<git_oid> tips = PublishedTips(*plan, snapshot);
  for (const auto& [number, id] : numbered) tips.push_back(id);
  ACQFS_TRY(s.bridge->VerifyPublished(tips));
  ACQFS_TRY(PublishBranches(s, *plan, &r));
  for (const auto& [number, id] : checkpoints) {
    r.checkpoint_commits.emplace_back(number, OidHex(id));
  }
  for (const auto& [id, commit] : built)
    ACQFS_TRY(s.bridge->SetRef(kCheckpointRefs + id, commit, "acqfs export"));
  for (const auto& [number, commit] : numbered) {
    const std::string name = std::to_string(number);
    auto k = numbered_before->find(name);
    if (k != numbered_before->end() && git_oid_equal(&k->second, &commit))
      continue;
    const std::string ref = kNumberedCheckpointRefs + name;
    ACQFS_TRY(s.bridge->SetRef(ref, commit, "acqfs export"));
    r.updates.push_back(RefUpdate{
        ref, k == numbered_before->end() ? std::string() : OidHex(k->second),
        OidHex(commit)});
  }
  r.worktree_commit = Hex(plan->prev);
  if (snapshot) {
    ACQFS_TRY(s.bridge->SetRef(kWorktreeRef, *snapshot, "acqfs export"));
    r.updates.push_back(
        RefUpdate{kWorktreeRef, Hex(plan->prev), OidHex(*snapshot)});
    r.worktree_commit = OidHex(*snapshot);
  }
  r.worktree_parent = r.worktree_commit.empty() ? "" : Hex(plan->base);
  return r;
}

Result<PlannedWorktree> PlanWorktreeOnly(const ExportConfig& c) {
  auto session = OpenSession(c);
  if (!session) return session.error();
  Session& s = **session;
  auto plan = MakePlan(s, c);
  if (!plan) return plan.error();
  PlannedWorktree w;
  w.base_commit = Hex(plan->base_commit);
  w.refused = plan->refused;
  bool tree_refused = false;
  for (const auto& why : plan->refused)
    tree_refused = tree_refused || why.rfind("working tree", 0) == 0;
  if (!tree_refused) w.tree = OidHex(plan->tree);
  return w;
}

Result<PendingWork> Pending(const ExportConfig& c) {
  auto session = OpenSession(c);
  if (!session) return session.error();
  Session& s = **session;
  auto plan = MakePlan(s, c);
  if (!plan) return plan.error();
  PendingWork w;
  for (const auto& [name, tip] : plan->publish) {
    auto old = plan->bridge_heads.find(name);
    if (old == plan->bridge_heads.end() || !git_oid_equal(&old->second, &tip))
      w.unexported.push_back("branch " + name + " at " + OidHex(tip));
  }
  // A snapshot would be published, but it may hold nothing to lose: no
  // uncommitted change on a HEAD the host has (the snapshot is published
  // even then, so that the documented merge always works).
  bool holds_work = plan->worktree_changed;
  if (holds_work && plan->base && s.host->HasObject(*plan->base)) {
    auto parent_tree = TreeOf(s.bridge->repo(), *plan->base);
    if (!parent_tree) return parent_tree.error();
    holds_work = !git_oid_equal(&*parent_tree, &plan->tree);
  }
  if (holds_work)
    w.unexported.push_back("working tree changes (" +
                           std::to_string(plan->changes) + " paths)");
  for (const std::string& why : plan->refused)
    w.unexportable.push_back("refused " + why);
  for (const SkippedExport& k : plan->skipped)
    if (!k.host)
      w.unexportable.push_back("path " + PrintableName(k.path) + ": " +
                               k.reason);
  // A checkpoint is work of its own: an undo point a rewind left holds
  // what the agent wrote before it, and nothing else does.
  auto exported = s.bridge->Refs(kNumberedCheckpointRefs);
  if (!exported) return exported.error();
  auto check = [&](const ExportConfig::CheckpointRef& cp) {
    if (!exported->count(std::to_string(cp.number)) && HoldsWork(c, cp))
      w.unexported.push_back(
          "checkpoint " + std::to_string(cp.number) +
          (cp.message.empty() ? "" : " (" + cp.message + ")"));
  };
  for (const auto& cp : c.checkpoints) check(cp);
  for (const auto& chain : c.off_stack)
    if (!chain.empty()) check(chain.back());
  auto unfetched = UnfetchedRefs(*s.host, *s.bridge);
  if (!unfetched) return unfetched.error();
  w.unfetched = std::move(*unfetched);
  return w;
}

Result<std::vector<std::string>> Unfetched(const ExportConfig& c) {
  GitLibrary lib;
  auto host = HostRepo::Open(c.lower);
  if (!host) return host.error();
  auto bridge = BridgeRepo::OpenOrCreate(c.bridge, host->objects_dir());
  if (!bridge) return bridge.error();
  return UnfetchedRefs(*host, *bridge);
}

}  // namespace acqfs::gitbridge
