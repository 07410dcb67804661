#include "gitbridge/export.h"

#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "common/git_ptr.h"
#include "fs/layer.h"
#include "gitbridge/bridge_repo.h"
#include "gitbridge/git_names.h"
#include "gitbridge/host_repo.h"
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
};

Result<std::unique_ptr<Session>> OpenSession(const ExportConfig& c) {
  auto s = std::make_unique<Session>();
  s->progress = c.progress;
  auto host = HostRepo::Open(c.lower);
  if (!host) {
    if (host.err() == ENOENT)
      return Error::Of(ENOENT, "no git repository to export to", c.lower);
    return host.error();
  }
  s->host.emplace(std::move(*host));
  auto layers =
      Layers::OpenForReading(c.lower, c.upper, c.xattr_namespace, c.frozen);
  if (!layers) return layers.error();
  layers->policy = c.policy;
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

bool Reserved(const std::string& branch) {
  std::string r = kWorktreeBranchName;
  return branch == r || branch.rfind(r + "/", 0) == 0;
}

struct Plan {
  std::map<std::string, git_oid> publish;  // branch -> tip
  std::vector<std::string> refused;
  std::vector<SkippedExport> skipped;
  std::map<std::string, git_oid> bridge_heads;  // before this export
  std::optional<git_oid> host_dirty;
  std::optional<git_oid> base;       // the snapshot's 1st parent
  git_oid tree{};                    // the working tree
  std::optional<git_oid> base_tree;  // the host's working state's tree
  std::optional<git_oid> prev;       // previous snapshot
  bool worktree_changed = false;
  uint64_t changes = 0;
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
                    const std::map<std::string, git_oid>& host_branches,
                    Plan* plan) {
  if (!s.sandbox) {
    plan->refused.push_back("branches: " + s.sandbox_refused);
    return Ok();
  }
  auto branches = s.sandbox->Branches();
  if (!branches) return branches.error();
  for (const auto& [name, tip] : *branches) {
    auto h = host_branches.find(name);
    if (h != host_branches.end() && git_oid_equal(&h->second, &tip)) continue;
    if (Reserved(name)) {
      plan->refused.push_back(name +
                              ": the name is reserved for the working "
                              "tree commit");
      continue;
    }
    if (std::string why = BadBranchName(name); !why.empty()) {
      plan->refused.push_back(PrintableName(name) + ": " + why +
                              " (git check-ref-format --branch refuses it)");
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

// Chooses the snapshot's base and builds its tree.
Status PlanWorktree(Session& s, const std::vector<git_oid>& hide,
                    const std::optional<git_oid>& host_head, Plan* plan) {
  git_repository* bridge = s.bridge->repo();
  Result<std::optional<git_oid>> head = std::optional<git_oid>();
  if (s.sandbox) head = s.sandbox->Head();
  if (!head) return head.error();
  Report(s.progress, "reading the host's working tree");
  std::vector<SkippedPath> host_skipped;
  auto dirty = s.host->DirtyCommit(bridge, &host_skipped);
  if (!dirty) {
    // The snapshot sits on the host's working state, so what stops reading
    // it stops the working tree alone, as below: libgit2 1.5's status
    // gives up on a host checkout holding directories nested more than 100
    // deep ("directory nesting too deep (100)", FILESYSTEM_MAX_DEPTH of its
    // working-directory iterator). The branches still go out.
    plan->refused.push_back("working tree: the host's working state: " +
                            dirty.error().Message());
    return Ok();
  }
  for (SkippedPath& k : host_skipped)
    plan->skipped.push_back({std::move(k.path), std::move(k.reason), true});
  plan->host_dirty = *dirty;
  bool head_moved =
      *head && (!host_head || !git_oid_equal(&**head, &*host_head));
  if (head_moved) {
    Status c = s.bridge->CopyReachable(s.sandbox->repo(), {**head}, hide);
    if (!c) {
      plan->refused.push_back("HEAD: " + c.error().Message());
      head_moved = false;
    }
  }
  if (head_moved)
    plan->base = **head;
  else if (*dirty)
    plan->base = **dirty;
  else
    plan->base = host_head;

  std::optional<git_oid> base_tree;
  std::optional<git_oid> tree_source = *dirty ? *dirty : host_head;
  if (tree_source) {
    auto t = TreeOf(bridge, *tree_source);
    if (!t) return t.error();
    base_tree = *t;
  }
  plan->base_tree = base_tree;
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
    tree = BuildWorktreeTree(bridge, base_tree ? &*base_tree : nullptr,
                             *s.layers, &stats, s.progress);
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
  for (SkippedPath& k : stats.skipped)
    plan->skipped.push_back({std::move(k.path), std::move(k.reason), false});

  auto refs = s.bridge->Refs("refs/acqfs/");
  if (!refs) return refs.error();
  auto prev = refs->find("worktree");
  if (prev == refs->end()) {
    // Nothing to publish while the tree is just the base's.
    std::optional<git_oid> base_of_base;
    if (plan->base) {
      auto t = TreeOf(bridge, *plan->base);
      if (!t) return t.error();
      base_of_base = *t;
    }
    plan->worktree_changed =
        !base_of_base || !git_oid_equal(&*base_of_base, &plan->tree);
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

Result<Plan> MakePlan(Session& s) {
  Plan plan;
  auto host_branches = s.host->Branches();
  if (!host_branches) return host_branches.error();
  auto host_head = s.host->Head();
  if (!host_head) return host_head.error();
  std::vector<git_oid> hide = HostTips(*host_branches, *host_head);
  auto bridge_heads = s.bridge->Refs("refs/heads/");
  if (!bridge_heads) return bridge_heads.error();
  plan.bridge_heads = *bridge_heads;
  ACQFS_TRY(PlanBranches(s, hide, *host_branches, &plan));
  ACQFS_TRY(PlanWorktree(s, hide, *host_head, &plan));
  return plan;
}

// A commit in the bridge of `tree` on `parents`, by acqfs at `when`.
Result<git_oid> MakeCommit(git_repository* repo, const git_oid& tree_id,
                           const std::vector<git_oid>& parents, int64_t when,
                           const std::string& msg, const std::string& shown) {
  std::vector<GitCommit> owned;
  std::vector<const git_commit*> ptrs;
  for (const auto& p : parents) {
    git_commit* raw = nullptr;
    int rc = git_commit_lookup(&raw, repo, &p);
    if (rc < 0) return GitError(rc, "read parent " + OidHex(p), shown);
    owned.emplace_back(raw);
    ptrs.push_back(raw);
  }
  git_tree* traw = nullptr;
  int rc = git_tree_lookup(&traw, repo, &tree_id);
  GitTree tree(traw);
  if (rc < 0) return GitError(rc, "read tree " + OidHex(tree_id), shown);
  git_signature* sraw = nullptr;
  rc = git_signature_new(&sraw, "acqfs", "acqfs@localhost", when, 0);
  GitSignature sig(sraw);
  if (rc < 0) return GitError(rc, "make signature", shown);
  git_oid id;
  rc = git_commit_create(&id, repo, nullptr, sig.get(), sig.get(), nullptr,
                         msg.c_str(), tree.get(), ptrs.size(), ptrs.data());
  if (rc < 0) return GitError(rc, "commit", shown);
  return id;
}

// Not under refs/acqfs/: the host fetches the commits through the working
// tree's, not a ref each.
constexpr char kCheckpointRefs[] = "refs/acqfs-checkpoints/";

// The checkpoints' commits, oldest first: each the tree of the host's
// working state under that checkpoint's layers, on the one before (the
// first on `first_parent`), with the checkpoint's message and time, so the
// same checkpoint gives the same commit in every bridge (a fork's shares
// its parent's). One already exported (refs/acqfs/checkpoints/<id> on the
// same parent) is not built again.
Result<std::vector<std::pair<uint32_t, git_oid>>> CommitCheckpoints(
    Session& s, const ExportConfig& c, const Plan& plan,
    const std::optional<git_oid>& first_parent) {
  std::vector<std::pair<uint32_t, git_oid>> out;
  if (c.checkpoints.empty()) return out;
  git_repository* bridge = s.bridge->repo();
  auto known = s.bridge->Refs(kCheckpointRefs);
  if (!known) return known.error();
  std::optional<git_oid> prev = first_parent;
  for (const auto& cp : c.checkpoints) {
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
                                         c.xattr_namespace, below);
    if (!layers) return layers.error();
    layers->policy = c.policy;
    SnapshotStats stats;
    auto tree =
        BuildWorktreeTree(bridge, plan.base_tree ? &*plan.base_tree : nullptr,
                          *layers, &stats, s.progress);
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
                         c.bridge);
    if (!id) return id.error();
    out.emplace_back(cp.number, *id);
    prev = *id;
  }
  return out;
}

Result<git_oid> CommitSnapshot(Session& s, const ExportConfig& c,
                               const Plan& plan,
                               const std::optional<git_oid>& checkpoint) {
  git_repository* bridge = s.bridge->repo();
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
  add(plan.host_dirty);
  std::vector<GitCommit> owned;
  std::vector<const git_commit*> ptrs;
  for (const auto& p : parents) {
    git_commit* raw = nullptr;
    int rc = git_commit_lookup(&raw, bridge, &p);
    if (rc < 0) return GitError(rc, "read parent " + OidHex(p), c.bridge);
    owned.emplace_back(raw);
    ptrs.push_back(raw);
  }
  git_tree* traw = nullptr;
  int rc = git_tree_lookup(&traw, bridge, &plan.tree);
  GitTree tree(traw);
  if (rc < 0) return GitError(rc, "read snapshot tree", c.bridge);
  git_signature* sraw = nullptr;
  rc = git_signature_new(&sraw, "acqfs", "acqfs@localhost", std::time(nullptr),
                         0);
  GitSignature sig(sraw);
  if (rc < 0) return GitError(rc, "make signature", c.bridge);
  std::string msg = "acqfs: working tree of sandbox " + c.sandbox + "\n";
  git_oid id;
  rc = git_commit_create(&id, bridge, nullptr, sig.get(), sig.get(), nullptr,
                         msg.c_str(), tree.get(), ptrs.size(), ptrs.data());
  if (rc < 0) return GitError(rc, "commit working tree", c.bridge);
  return id;
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
  auto plan = MakePlan(s);
  if (!plan) return plan.error();
  ExportResult r;
  r.refused = plan->refused;
  r.skipped = plan->skipped;
  r.changed_paths = plan->changes;
  r.host_dirty_commit = Hex(plan->host_dirty);
  r.fetch_command = "git -C " + c.lower + " fetch " + RemoteName(c.sandbox);
  // The checkpoints, oldest first, on the host's HEAD (which moves less
  // than its working state, so that forks and later exports share them).
  std::optional<git_oid> last_checkpoint;
  std::vector<std::pair<uint32_t, git_oid>> checkpoints;
  if (!plan->base_tree) {
    if (!c.checkpoints.empty())
      r.refused.push_back("checkpoints: the host's working state is unknown");
  } else {
    auto host_head = s.host->Head();
    if (!host_head) return host_head.error();
    auto made = CommitCheckpoints(s, c, *plan, *host_head);
    if (!made) {
      r.refused.push_back("checkpoints: " + made.error().Message());
    } else {
      checkpoints = std::move(*made);
      if (!checkpoints.empty()) last_checkpoint = checkpoints.back().second;
    }
  }
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
  ACQFS_TRY(s.bridge->VerifyPublished(PublishedTips(*plan, snapshot)));
  ACQFS_TRY(PublishBranches(s, *plan, &r));
  for (const auto& [number, id] : checkpoints) {
    r.checkpoint_commits.emplace_back(number, OidHex(id));
  }
  for (size_t i = 0; i < checkpoints.size(); ++i)
    ACQFS_TRY(s.bridge->SetRef(kCheckpointRefs + c.checkpoints[i].id,
                               checkpoints[i].second, "acqfs export"));
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

Result<PendingWork> Pending(const ExportConfig& c) {
  auto session = OpenSession(c);
  if (!session) return session.error();
  Session& s = **session;
  auto plan = MakePlan(s);
  if (!plan) return plan.error();
  PendingWork w;
  for (const auto& [name, tip] : plan->publish) {
    auto old = plan->bridge_heads.find(name);
    if (old == plan->bridge_heads.end() || !git_oid_equal(&old->second, &tip))
      w.unexported.push_back("branch " + name + " at " + OidHex(tip));
  }
  if (plan->worktree_changed)
    w.unexported.push_back("working tree changes (" +
                           std::to_string(plan->changes) + " paths)");
  for (const std::string& why : plan->refused)
    w.unexportable.push_back("refused " + why);
  for (const SkippedExport& k : plan->skipped)
    if (!k.host)
      w.unexportable.push_back("path " + PrintableName(k.path) + ": " +
                               k.reason);
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
