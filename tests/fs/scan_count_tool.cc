// acqfs_scan_count_tool LOWER UPPER [FROZEN...]: runs ScanChanges once over
// the layers (frozen bottom first, user.overlay.* format) and prints the
// number of changes. For counting the scan's system calls (strace -c), not
// a test.
#include <cstdio>
#include <string>
#include <vector>

#include "fs/change_scan.h"
#include "fs/layer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LOWER UPPER [FROZEN...]\n", argv[0]);
    return 2;
  }
  std::vector<std::string> frozen(argv + 3, argv + argc);
  auto layers = acqfs::Layers::OpenForReading(
      argv[1], argv[2], acqfs::XattrNamespace::kUser, frozen);
  if (!layers) {
    std::fprintf(stderr, "%s\n", layers.error().Message().c_str());
    return 1;
  }
  auto changes = acqfs::ScanChanges(*layers);
  if (!changes) {
    std::fprintf(stderr, "%s\n", changes.error().Message().c_str());
    return 1;
  }
  std::printf("%zu\n", changes->size());
  return 0;
}
