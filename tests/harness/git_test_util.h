// Helpers the git bridge's tests share: object ids from hex, the lines of a
// command's output, blobs and tree entries read back from a repository,
// a repository's loose objects, and the overlay entries (whiteouts, opaque
// directories, symlinks, each with its parent directories made) that tests
// lay down in hand-built layers. They fail the current test (ADD_FAILURE,
// naming the id, path or call) rather than return errors.
// Header-only (inline), like git_env.h: the including program links libgit2
// (e.g. acqfs_gitbridge), which the harness library does not.
// Thread-safety: stateless functions; a repository is used by one thread.
#ifndef ACQFS_TESTS_HARNESS_GIT_TEST_UTIL_H_
#define ACQFS_TESTS_HARNESS_GIT_TEST_UTIL_H_

#include <git2.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/git_ptr.h"

namespace acqfs::test {

// The id of 40 hex digits `hex` (a failure, and the zero id, when it is
// not one).
inline git_oid Oid(const std::string& hex) {
  git_oid id{};
  EXPECT_EQ(git_oid_fromstr(&id, hex.c_str()), 0) << hex;
  return id;
}

// The non-empty lines of `text`, in order.
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

// Writes `data` into `repo` as a blob; returns its id.
inline git_oid MakeBlob(git_repository* repo, const std::string& data) {
  git_oid id{};
  EXPECT_EQ(git_blob_create_from_buffer(&id, repo, data.data(), data.size()), 0)
      << "git_blob_create_from_buffer";
  return id;
}

// One entry of a tree, as read back.
struct TreeEntryAt {
  git_filemode_t mode;
  git_oid id;
};

// The entry at `path` (slash-separated) of tree `tree`, or nullopt.
inline std::optional<TreeEntryAt> EntryAt(git_repository* repo,
                                          const git_oid& tree,
                                          const std::string& path) {
  git_tree* raw = nullptr;
  EXPECT_EQ(git_tree_lookup(&raw, repo, &tree), 0) << "git_tree_lookup";
  GitTree t(raw);
  if (!t) return std::nullopt;
  git_tree_entry* e = nullptr;
  if (git_tree_entry_bypath(&e, t.get(), path.c_str()) != 0)
    return std::nullopt;
  GitTreeEntry owned(e);
  return TreeEntryAt{git_tree_entry_filemode(e), *git_tree_entry_id(e)};
}

// The content of the blob at `path` of tree `tree`: "<missing>" when there
// is no entry, "<not a blob>" when it is not one. `*mode`, when given, gets
// the entry's mode.
inline std::string BlobAt(git_repository* repo, const git_oid& tree,
                          const std::string& path,
                          git_filemode_t* mode = nullptr) {
  auto e = EntryAt(repo, tree, path);
  if (!e) return "<missing>";
  if (mode) *mode = e->mode;
  git_blob* raw = nullptr;
  if (git_blob_lookup(&raw, repo, &e->id) != 0) return "<not a blob>";
  GitBlob b(raw);
  return std::string(static_cast<const char*>(git_blob_rawcontent(raw)),
                     static_cast<size_t>(git_blob_rawsize(raw)));
}

// The loose objects (40-digit hex ids) under an objects directory.
inline std::set<std::string> LooseObjects(const std::string& objects) {
  namespace fs = std::filesystem;
  std::set<std::string> out;
  for (const auto& d : fs::directory_iterator(objects)) {
    std::string dn = d.path().filename().string();
    if (dn.size() != 2 || !d.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(d.path()))
      out.insert(dn + f.path().filename().string());
  }
  return out;
}

// ---- Layers built by hand (the user.* xattr namespace) --------------------

// A 0/0 character device (an overlayfs whiteout) at `path`, its parent
// directories made first.
inline void MakeWhiteoutAt(const std::string& path) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  EXPECT_EQ(::mknod(path.c_str(), S_IFCHR | 0, makedev(0, 0)), 0)
      << "mknod " << path << ": " << std::strerror(errno);
}

// The directory `dir` (made with its parents when missing) marked opaque
// with `value` ("y": opaque; "x": may hold xattr whiteouts).
inline void MakeOpaqueDir(const std::string& dir, const char* value = "y") {
  std::filesystem::create_directories(dir);
  EXPECT_EQ(::setxattr(dir.c_str(), "user.overlay.opaque", value,
                       std::strlen(value), 0),
            0)
      << "setxattr user.overlay.opaque " << dir << ": " << std::strerror(errno);
}

// A symlink at `path` to `target`, its parent directories made first.
inline void MakeSymlinkAt(const std::string& target, const std::string& path) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  EXPECT_EQ(::symlink(target.c_str(), path.c_str()), 0)
      << "symlink " << path << ": " << std::strerror(errno);
}

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_HARNESS_GIT_TEST_UTIL_H_
