// DeepContent: a blob of a git tree read one tree at a time, for the tests
// of trees nested deeper than libgit2's recursive lookups go (issue 13).
// Header-only (needs libgit2, e.g. through acqfs_gitbridge); the git-bridge
// tests include it.
// Thread-safety: plain functions.
#ifndef ACQFS_TESTS_HARNESS_DEEP_GIT_H_
#define ACQFS_TESTS_HARNESS_DEEP_GIT_H_

#include <git2.h>

#include <string>

#include "common/git_ptr.h"

namespace acqfs::test {

// The blob content at `path` of `tree`, looked up one tree at a time (a
// path 100,000 directories deep: git_tree_entry_bypath recurses in
// libgit2), or "<missing>".
inline std::string DeepContent(git_repository* repo, const git_oid& tree,
                               const std::string& path) {
  git_oid id = tree;
  size_t start = 0;
  for (;;) {
    git_tree* raw = nullptr;
    if (git_tree_lookup(&raw, repo, &id) != 0) return "<not a tree>";
    acqfs::GitTree t(raw);
    size_t slash = path.find('/', start);
    std::string name = path.substr(
        start, slash == std::string::npos ? std::string::npos : slash - start);
    const git_tree_entry* e = git_tree_entry_byname(t.get(), name.c_str());
    if (!e) return "<missing>";
    id = *git_tree_entry_id(e);
    if (slash == std::string::npos) break;
    if (git_tree_entry_type(e) != GIT_OBJECT_TREE) return "<missing>";
    start = slash + 1;
  }
  git_blob* braw = nullptr;
  if (git_blob_lookup(&braw, repo, &id) != 0) return "<not a blob>";
  acqfs::GitBlob b(braw);
  return std::string(static_cast<const char*>(git_blob_rawcontent(braw)),
                     git_blob_rawsize(braw));
}

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_DEEP_GIT_H_
