#include "harness/layer_tree.h"

#include <ftw.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace acqfs::test {
namespace {

int RemoveOne(const char* path, const struct stat*, int, struct FTW*) {
  if (::remove(path) != 0)
    ADD_FAILURE() << "remove " << path << ": " << std::strerror(errno);
  return 0;
}

}  // namespace

TempTree::TempTree() {
  char tmpl[] = "/tmp/acqfs-unit-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << tmpl << ": " << std::strerror(errno);
    return;
  }
  root_ = tmpl;
  MakeDir(lower());
  MakeDir(upper());
  MakeDir(work());
}

TempTree::~TempTree() {
  if (root_.empty()) return;
  ::nftw(root_.c_str(), RemoveOne, 32, FTW_DEPTH | FTW_PHYS);
}

acqfs::Result<acqfs::Layers> OpenLayers(const TempTree& tree,
                                        acqfs::XattrNamespace ns) {
  return acqfs::Layers::Open(tree.lower(), tree.upper(), tree.work(), ns);
}

std::vector<std::string> Names(const std::vector<acqfs::MergedEntry>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace acqfs::test
