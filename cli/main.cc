// The `acqfs` command line: parses into the argument structs of commands.h
// and calls the subcommand. Exit codes and the error format are in
// cli_util.h and docs/cli.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "fuse/mount.h"
#include "state/as_owner.h"
#include "state/state.h"

namespace acqfs::cli {
namespace {

// --hide, --hide-secrets, --read-only, --quota, --policy (mount and run).
void AddPolicyOptions(CLI::App* c, PolicyArgs& p) {
  c->add_option("--hide", p.hide,
                "Hide lower paths matching GLOB (gitignore-style; repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  c->add_flag("--hide-secrets", p.hide_secrets,
              "Hide the usual secret files (.env, *.pem, .ssh/, ...; see "
              "docs/sandboxes.md)");
  c->add_option("--read-only", p.read_only,
                "Paths matching GLOB can be read but not changed (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  c->add_option("--quota", p.quota,
                "Cap the upper layer at SIZE (e.g. 500M, 2G)");
  c->add_option("--audit-reads", p.audit_reads,
                "Record in the audit log each open for reading of a path "
                "matching GLOB (repeatable; see docs/audit.md)")
      ->take_all()
      ->allow_extra_args(false);
  c->add_option("--audit-max", p.audit_max,
                "Bound the audit log at SIZE (default 64M; it rotates)");
  c->add_option("--policy", p.policy_file,
                "Read hide/read_only/quota/hide_secrets/audit_reads/"
                "audit_max from a JSON file");
}

void AddMount(CLI::App& app, MountArgs& m) {
  auto* c = app.add_subcommand(
      "mount",
      "Mount LOWER read-only under a writable upper layer at MOUNTPOINT");
  c->add_option("lower", m.lower, "The directory shown read-only below")
      ->required();
  c->add_option("mountpoint", m.mountpoint, "Where the merged view appears")
      ->required();
  c->add_option("--name", m.name,
                "Sandbox name (default: the mountpoint's basename)")
      ->each([&m](const std::string&) { m.name_given = true; });
  c->add_option("--state-dir", m.state_dir,
                "State directory (default: $ACQFS_STATE_DIR, "
                "$XDG_STATE_HOME/acqfs or ~/.local/state/acqfs)");
  c->add_flag("--foreground", m.foreground,
              "Serve in this process until unmounted");
  c->add_flag("--allow-other", m.allow_other,
              "Let other users (e.g. a container's) use the mount, with "
              "the usual permission checks (the default as root; an "
              "ordinary user needs user_allow_other in /etc/fuse.conf)");
  c->add_flag("--no-allow-other", m.no_allow_other,
              "Only the user who mounts may use the mount (the default "
              "for an ordinary user)");
  c->add_flag("--ignore-podman-namespace", m.ignore_podman_namespace,
              "Mount even though a rootless Podman namespace of yours, made "
              "before this mount, would not see it (no container will use "
              "the mount)");
  c->add_option("-o", m.options, MountOptionsHelp());
  c->add_option("--log-level", m.log_level,
                "trace, debug, info, warn or error (default info)");
  c->add_flag_callback(
      "-v,--verbose", [&m] { m.log_level = "debug"; },
      "Log every failed request");
  AddPolicyOptions(c, m.policy);
}

void AddRemount(CLI::App& app, RemountArgs& r) {
  auto* c = app.add_subcommand(
      "remount",
      "Change a running mount's flags (ro, rw, noexec, ...), as mount -o "
      "remount does (root only)");
  c->add_option("mountpoint", r.mountpoint, "The sandbox's mountpoint")
      ->required();
  c->add_option("-o", r.options,
                "ro, rw, exec, noexec, nodiratime, dev, suid, nodev, nosuid")
      ->required();
}

void AddUmount(CLI::App& app, UmountArgs& u) {
  auto* c = app.add_subcommand(
      "umount", "Unmount a sandbox, then export it to its bridge repository");
  c->add_option("target", u.target, "A sandbox name or its mountpoint")
      ->required();
  c->add_option("--state-dir", u.state_dir, "State directory");
  c->add_flag("--no-export", u.no_export, "Do not export after unmounting");
  c->add_flag("--json", u.json, "Print the export's result as JSON");
}

void AddExport(CLI::App& app, ExportArgs& e) {
  auto* c = app.add_subcommand(
      "export",
      "Publish a sandbox's branches and working tree for `git fetch "
      "sandbox-NAME`");
  c->add_option("name", e.name, "The sandbox")->required();
  c->add_option("--state-dir", e.state_dir, "State directory");
  c->add_flag("--json", e.json, "Print the result as JSON");
}

void AddApply(CLI::App& app, ApplyArgs& a) {
  auto* c = app.add_subcommand(
      "apply",
      "Bring a sandbox's work into the host's working tree as uncommitted "
      "edits (a 3-way merge per file; all or nothing)");
  c->add_option("name", a.name, "The sandbox")->required();
  c->add_option("paths", a.paths,
                "Only these paths (relative to the checkout's top)");
  c->add_option("--state-dir", a.state_dir, "State directory");
  c->add_flag("--check", a.check, "Say what would conflict and change nothing");
  c->add_flag("--json", a.json, "Print the result as JSON");
}

void AddRm(CLI::App& app, RmArgs& r) {
  auto* c = app.add_subcommand(
      "rm",
      "Remove a sandbox and its remote (refuses while work would be lost)");
  c->add_option("name", r.name, "The sandbox")->required();
  c->add_option("--state-dir", r.state_dir, "State directory");
  c->add_flag("--force", r.force, "Remove even if work would be lost");
}

void AddLs(CLI::App& app, LsArgs& l) {
  auto* c = app.add_subcommand(
      "ls", "List sandboxes: lower, mountpoint, state, disk use, changes");
  c->add_option("--state-dir", l.state_dir, "State directory");
  c->add_flag("--json", l.json, "Print a JSON array");
}

void AddStatus(CLI::App& app, StatusArgs& s) {
  auto* c = app.add_subcommand(
      "status",
      "What a sandbox changed relative to its lower, one path a line");
  c->add_option("name", s.name, "The sandbox (name or mountpoint)")->required();
  c->add_option("--state-dir", s.state_dir, "State directory");
  c->add_flag("--json", s.json, "Print a JSON object");
  c->add_flag("-z", s.null_terminated,
              "End entries with NUL and print paths unquoted");
  c->add_flag("--git-dir", s.include_git_dir,
              "Also report changes inside .git directories (at any depth)");
}

void AddDiff(CLI::App& app, DiffArgs& d) {
  auto* c = app.add_subcommand(
      "diff", "Unified diff of a sandbox's changes against its lower");
  c->add_option("name", d.name, "The sandbox (name or mountpoint)")->required();
  c->add_option("paths", d.paths,
                "Only these paths (relative to the sandbox root)");
  c->add_option("--state-dir", d.state_dir, "State directory");
  c->add_flag("--git-dir", d.include_git_dir,
              "Also diff changes inside .git directories (at any depth)");
}

void AddLog(CLI::App& app, LogArgs& lg) {
  auto* c = app.add_subcommand(
      "log", "Show a sandbox's audit log: what was changed, refused, by whom");
  c->add_option("name", lg.name, "The sandbox (name or mountpoint)")
      ->required();
  c->add_option("--state-dir", lg.state_dir, "State directory");
  c->add_option("--since", lg.since,
                "Only what came after this checkpoint (a number)")
      ->check(CLI::PositiveNumber);
  c->add_option("--until", lg.until,
                "Only what came up to this checkpoint (a number)")
      ->check(CLI::PositiveNumber);
  c->add_option("--path", lg.paths,
                "Only records of paths matching GLOB (gitignore-style; "
                "repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  c->add_option("--op", lg.ops,
                "Only these operations (create, write, rename, ...; "
                "repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  c->add_option("--pid", lg.pids, "Only what this process did (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  c->add_flag("--refused", lg.refused, "Only what failed or was refused");
  c->add_flag("--json", lg.json, "One JSON object per record");
  c->add_flag("--follow,-f", lg.follow,
              "Keep printing records as they are written");
  c->add_flag("--summary", lg.summary,
              "Counts by operation and by process, per checkpoint");
}

void AddStack(CLI::App& app, CheckpointArgs& cp, CheckpointsArgs& cps,
              RewindArgs& rw, ForkArgs& fk, SquashArgs& sq, GcArgs& gc) {
  auto* c = app.add_subcommand(
      "checkpoint",
      "Freeze a sandbox's state as its next checkpoint (mounted or not)");
  c->add_option("name", cp.name, "The sandbox (name or mountpoint)")
      ->required();
  c->add_option("-m,--message", cp.message, "What the checkpoint is");
  c->add_option("--state-dir", cp.state_dir, "State directory");
  c->add_flag("--json", cp.json, "Print the result as JSON");
  c = app.add_subcommand("checkpoints", "List a sandbox's checkpoints");
  c->add_option("name", cps.name, "The sandbox (name or mountpoint)")
      ->required();
  c->add_option("--state-dir", cps.state_dir, "State directory");
  c->add_flag("--json", cps.json, "Print a JSON object");
  c = app.add_subcommand(
      "rewind", "Make a sandbox's tree what it was at a checkpoint (undoable)");
  c->add_option("name", rw.name, "The sandbox (name or mountpoint)")
      ->required();
  c->add_option("checkpoint", rw.checkpoint, "The checkpoint's number")
      ->required()
      ->check(CLI::PositiveNumber);
  c->add_option("--state-dir", rw.state_dir, "State directory");
  c = app.add_subcommand(
      "fork", "Make a new sandbox sharing a sandbox's checkpoints (O(1))");
  c->add_option("name", fk.name, "The sandbox (name or mountpoint)")
      ->required();
  c->add_option("new", fk.new_name, "The new sandbox's name")->required();
  c->add_option("mountpoint", fk.mountpoint, "Mount the new sandbox there");
  c->add_option("--at", fk.at, "Fork at this checkpoint (default: now)")
      ->check(CLI::PositiveNumber);
  c->add_option("--state-dir", fk.state_dir, "State directory");
  c = app.add_subcommand("squash",
                         "Merge a sandbox's oldest frozen layers into one");
  c->add_option("name", sq.name, "The sandbox (name or mountpoint)")
      ->required();
  c->add_option("--keep", sq.keep,
                "Leave the newest N frozen layers as they are (default 4)");
  c->add_option("--state-dir", sq.state_dir, "State directory");
  c = app.add_subcommand("gc",
                         "Remove the layers no sandbox's stack uses any more");
  c->add_option("--state-dir", gc.state_dir, "State directory");
}

void AddBench(CLI::App& app, BenchArgs& b) {
  auto* c = app.add_subcommand(
      "bench",
      "Time COMMAND in fresh acqfs sandboxes and in fresh git clones of a "
      "checkout");
  c->add_option("--repo", b.repo,
                "The git checkout (default: the current directory's; its top "
                "level is used)");
  c->add_option("--runs", b.runs, "Runs in each kind of workspace (default 3)")
      ->check(CLI::Range(1, 1000));
  c->add_option("--state-dir", b.state_dir,
                "State directory for the temporary sandboxes (default: a "
                "temporary one)");
  c->add_flag("--json", b.json, "Print the results as JSON");
  c->add_option("command", b.command,
                "After --: the command and its arguments, run without a shell "
                "(use sh -c '...' for shell syntax)")
      ->required();
  c->footer(
      "Example: acqfs bench --runs 5 -- sh -c 'make -j2'\n"
      "Runs alternate (sandbox, clone, ...); only COMMAND is timed. Every "
      "sandbox, clone and remote it makes is removed, also on Ctrl-C.");
}

void AddRun(CLI::App& app, RunArgs& r) {
  auto* c = app.add_subcommand(
      "run",
      "Run COMMAND in bubblewrap with a sandbox's mount as /workspace, then "
      "export the sandbox");
  auto* name = c->add_option("name", r.name,
                             "The sandbox (created when it does not exist)")
                   ->required();
  // NAME must come before `--`: CLI11 would otherwise take the command's
  // first word for it (`acqfs run -- make test` would run `test` in a
  // sandbox "make"). A positional that fails its check goes to the next
  // positional, the command; the answer given while parsing is kept, as the
  // check runs again once parsing is over.
  auto after_mark = std::make_shared<std::optional<bool>>();
  name->check(CLI::Validator(
      [c, after_mark](std::string&) -> std::string {
        if (!after_mark->has_value()) {
          std::vector<std::string> seen = c->remaining();
          *after_mark = std::find(seen.begin(), seen.end(), "--") != seen.end();
        }
        return **after_mark ? "NAME must come before --" : "";
      },
      "", "name before --"));
  c->validate_positionals();
  c->add_option("--repo", r.repo,
                "The directory a new sandbox shows (default: the current "
                "directory's git checkout; its top level is used)");
  c->add_option("--state-dir", r.state_dir, "State directory");
  c->add_option("--mountpoint", r.mountpoint,
                "Where to mount the sandbox when run mounts it (default: "
                "${XDG_RUNTIME_DIR:-/tmp}/acqfs-UID/NAME)");
  c->add_option("--network", r.network,
                "none (default: only a loopback interface) or host");
  c->add_flag("--no-export", r.no_export,
              "Do not export the sandbox when the command ends");
  c->add_option("-o", r.options, "Mount options when run mounts the sandbox");
  c->add_flag("--allow-other", r.allow_other,
              "When run mounts: let other users use the mount (the default "
              "as root)");
  c->add_flag("--no-allow-other", r.no_allow_other,
              "When run mounts: only the user who mounts may use the mount "
              "(the default for an ordinary user)");
  AddPolicyOptions(c, r.policy);
  c->add_option("command", r.command,
                "After --: the command and its arguments, run without a shell "
                "(use sh -c '...' for shell syntax)");
  c->footer(
      "Example: acqfs run fix-1 -- sh -c 'make && make test'\n"
      "The command sees the sandbox at /workspace (its working directory), "
      "/usr and /etc read-only, a private /tmp, and no network unless "
      "--network=host. Exit status: the command's (128+N after signal N).");
}

// CLI11's parse errors in acqfs's own error format.
int UsageError(const CLI::App& app, const CLI::ParseError& err) {
  std::string where = "acqfs";
  for (const CLI::App* sub : app.get_subcommands())
    where += " " + sub->get_name();
  std::fprintf(stderr, "acqfs: usage: %s: %s (see `%s --help`)\n",
               where.c_str(), err.what(), where.c_str());
  return 1;
}

}  // namespace
}  // namespace acqfs::cli

int main(int argc, char** argv) {
  using namespace acqfs::cli;
  CLI::App app{"acqfs: a copy-on-write workspace over a git checkout"};
  app.set_version_flag("--version", std::string("acqfs ") + ACQFS_VERSION);
  app.require_subcommand(1);
  MountArgs m;
  UmountArgs u;
  RemountArgs rmt;
  ExportArgs e;
  RmArgs r;
  ApplyArgs ap;
  LsArgs l;
  StatusArgs s;
  DiffArgs d;
  BenchArgs b;
  RunArgs run;
  CheckpointArgs cp;
  CheckpointsArgs cps;
  RewindArgs rw;
  ForkArgs fk;
  SquashArgs sq;
  GcArgs gc;
  LogArgs lg;
  AddMount(app, m);
  AddLog(app, lg);
  AddStack(app, cp, cps, rw, fk, sq, gc);
  AddUmount(app, u);
  AddRemount(app, rmt);
  AddExport(app, e);
  AddRm(app, r);
  AddApply(app, ap);
  AddLs(app, l);
  AddStatus(app, s);
  AddDiff(app, d);
  AddBench(app, b);
  AddRun(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& err) {
    return app.exit(err);
  } catch (const CLI::CallForAllHelp& err) {
    return app.exit(err);
  } catch (const CLI::CallForVersion& err) {
    return app.exit(err);
  } catch (const CLI::ParseError& err) {
    return UsageError(app, err);
  }
  // Root on a state directory another user owns acts there as that user
  // (state/as_owner.h): the commands that read and change a sandbox's stack,
  // layers and bridge. (mount, umount, rm and run keep root's ids: they
  // mount, unmount and read other processes; each acts as the owner for
  // its own steps in the folder: the bridge.)
  auto as_owner = [](const std::string& state_dir) {
    return AsOwner::Of(Absolute(ResolveStateDir(state_dir)));
  };
  std::optional<acqfs::Result<AsOwner>> owner;
  if (app.got_subcommand("export")) owner = as_owner(e.state_dir);
  if (app.got_subcommand("status")) owner = as_owner(s.state_dir);
  if (app.got_subcommand("diff")) owner = as_owner(d.state_dir);
  if (app.got_subcommand("checkpoint")) owner = as_owner(cp.state_dir);
  if (app.got_subcommand("checkpoints")) owner = as_owner(cps.state_dir);
  if (app.got_subcommand("rewind")) owner = as_owner(rw.state_dir);
  if (app.got_subcommand("fork")) owner = as_owner(fk.state_dir);
  if (app.got_subcommand("squash")) owner = as_owner(sq.state_dir);
  if (app.got_subcommand("gc")) owner = as_owner(gc.state_dir);
  if (app.got_subcommand("ls")) owner = as_owner(l.state_dir);
  if (owner && !*owner)
    return Fail(kExitFailed, app.get_subcommands().front()->get_name(),
                owner->error());
  if (app.got_subcommand("mount")) return RunMount(m);
  if (app.got_subcommand("umount")) return RunUmount(u);
  if (app.got_subcommand("remount")) return RunRemount(rmt);
  if (app.got_subcommand("export")) return RunExport(e);
  if (app.got_subcommand("rm")) return RunRm(r);
  if (app.got_subcommand("apply")) return RunApply(ap);
  if (app.got_subcommand("ls")) return RunLs(l);
  if (app.got_subcommand("status")) return RunStatus(s);
  if (app.got_subcommand("diff")) return RunDiff(d);
  if (app.got_subcommand("bench")) return RunBench(b);
  if (app.got_subcommand("run")) return RunRun(run);
  if (app.got_subcommand("checkpoint")) return RunCheckpoint(cp);
  if (app.got_subcommand("checkpoints")) return RunCheckpoints(cps);
  if (app.got_subcommand("rewind")) return RunRewind(rw);
  if (app.got_subcommand("fork")) return RunFork(fk);
  if (app.got_subcommand("squash")) return RunSquash(sq);
  if (app.got_subcommand("gc")) return RunGc(gc);
  if (app.got_subcommand("log")) return RunLog(lg);
  return 1;
}
