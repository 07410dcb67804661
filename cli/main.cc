// The `acqfs` command line: parses into the argument structs of commands.h
// and calls the subcommand. Exit codes and the error format are in
// cli_util.h and docs/cli.md.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/commands.h"

namespace acqfs::cli {
namespace {

void AddMount(CLI::App& app, MountArgs& m) {
  auto* c = app.add_subcommand(
      "mount",
      "Mount LOWER read-only under a writable upper layer at MOUNTPOINT");
  c->add_option("lower", m.lower, "The directory shown read-only below")
      ->required();
  c->add_option("mountpoint", m.mountpoint, "Where the merged view appears")
      ->required();
  c->add_option("--name", m.name,
                "Sandbox name (default: the mountpoint's basename)");
  c->add_option("--state-dir", m.state_dir,
                "State directory (default: $ACQFS_STATE_DIR, "
                "$XDG_STATE_HOME/acqfs or ~/.local/state/acqfs)");
  c->add_flag("--foreground", m.foreground,
              "Serve in this process until unmounted");
  c->add_flag("--allow-other", m.allow_other,
              "Let other users (e.g. a container's) use the mount");
  c->add_option("-o", m.options,
                "Options: userxattr, timeout=SECONDS, threads=N, writeback, "
                "debug");
  c->add_option("--log-level", m.log_level,
                "trace, debug, info, warn or error (default info)");
  c->add_flag_callback(
      "-v,--verbose", [&m] { m.log_level = "debug"; },
      "Log every failed request");
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

void AddRm(CLI::App& app, RmArgs& r) {
  auto* c = app.add_subcommand(
      "rm",
      "Remove a sandbox and its remote (refuses while work would be lost)");
  c->add_option("name", r.name, "The sandbox")->required();
  c->add_option("--state-dir", r.state_dir, "State directory");
  c->add_flag("--force", r.force, "Remove even if work would be lost");
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
  ExportArgs e;
  RmArgs r;
  AddMount(app, m);
  AddUmount(app, u);
  AddExport(app, e);
  AddRm(app, r);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return app.exit(err) == 0 ? 0 : 1;
  }
  if (app.got_subcommand("mount")) return RunMount(m);
  if (app.got_subcommand("umount")) return RunUmount(u);
  if (app.got_subcommand("export")) return RunExport(e);
  if (app.got_subcommand("rm")) return RunRm(r);
  return 1;
}
