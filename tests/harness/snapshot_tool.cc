// acqfs_snapshot_tool: prints TreeSnapshot::Serialize() of a tree, so that a
// snapshot can be taken in another process (as another user, inside a user
// namespace) and compared by a test.
//
// Usage: acqfs_snapshot_tool [--merged-view|--everything] [--no-owner]
//                            [--skip=REL]... ROOT
// Presets come first: they reset the other options.
// Exit status 0 with the snapshot on stdout (read errors are part of it), 2 on
// a usage error.
#include <cstdio>
#include <iostream>
#include <string>

#include "harness/snapshot.h"

namespace {

int Usage() {
  std::cerr << "usage: acqfs_snapshot_tool [--merged-view|--everything] "
               "[--no-owner] [--skip=REL]... ROOT\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  acqfs::test::SnapshotOptions options;
  std::string root;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--merged-view") {
      options = acqfs::test::SnapshotOptions::MergedView();
    } else if (arg == "--everything") {
      options = acqfs::test::SnapshotOptions::Everything();
    } else if (arg == "--no-owner") {
      options.owner = false;
    } else if (arg.rfind("--skip=", 0) == 0) {
      options.skip.push_back(arg.substr(7));
    } else if (arg.rfind("--", 0) == 0 || !root.empty()) {
      return Usage();
    } else {
      root = arg;
    }
  }
  if (root.empty()) return Usage();
  std::cout << acqfs::test::Snapshot(root, options).Serialize();
  return std::cout.good() ? 0 : 1;
}
