// TempTree: a private temporary directory holding lower/, upper/ and work/
// for the fs engine's tests (and anything else that opens acqfs layers
// without a mount), with OpenLayers and Names to drive acqfs_layer on it.
// Includes the building helpers (harness/fs_util.h) and the Result
// assertions (harness/result_assert.h) such tests use with it.
// Thread-safety: single-threaded test code.
#ifndef ACQFS_TESTS_HARNESS_LAYER_TREE_H_
#define ACQFS_TESTS_HARNESS_LAYER_TREE_H_

#include <string>
#include <vector>

#include "fs/layer.h"
#include "fs/layer_format.h"
#include "harness/fs_util.h"
#include "harness/result_assert.h"

namespace acqfs::test {

// A directory made with mkdtemp under /tmp, holding lower/, upper/ and work/,
// removed with everything below it on destruction.
class TempTree {
 public:
  TempTree();
  ~TempTree();
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const std::string& root() const { return root_; }
  std::string lower() const { return root_ + "/lower"; }
  std::string upper() const { return root_ + "/upper"; }
  std::string work() const { return root_ + "/work"; }
  std::string tmp() const { return work() + "/acqfs-tmp"; }
  std::string L(const std::string& rel) const { return lower() + "/" + rel; }
  std::string U(const std::string& rel) const { return upper() + "/" + rel; }

 private:
  std::string root_;
};

// Opens the layers of `tree` (Layers::Open on lower, upper and work).
acqfs::Result<acqfs::Layers> OpenLayers(
    const TempTree& tree,
    acqfs::XattrNamespace ns = acqfs::XattrNamespace::kUser);

// Sorted names of a merged listing.
std::vector<std::string> Names(const std::vector<acqfs::MergedEntry>& v);

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_LAYER_TREE_H_
