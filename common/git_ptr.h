// Owners for libgit2 objects and the one way to turn a libgit2 failure into
// an Error. Only gitbridge/ and this header include <git2.h>.
// Thread-safety: libgit2 objects stay on the thread that made them; the last
// error is per thread, so GitError() must be called right after the failing
// call, on the same thread (include/git2/errors.h).
#ifndef ACQFS_COMMON_GIT_PTR_H_
#define ACQFS_COMMON_GIT_PTR_H_

#include <git2.h>

#include <memory>
#include <string>

#include "common/error.h"

namespace acqfs {

template <class T, void (*F)(T*)>
struct GitFree {
  void operator()(T* p) const { F(p); }
};
template <class T, void (*F)(T*)>
using GitPtr = std::unique_ptr<T, GitFree<T, F>>;

using GitRepository = GitPtr<git_repository, git_repository_free>;
using GitOdb = GitPtr<git_odb, git_odb_free>;
using GitOdbObject = GitPtr<git_odb_object, git_odb_object_free>;
using GitObject = GitPtr<git_object, git_object_free>;
using GitCommit = GitPtr<git_commit, git_commit_free>;
using GitTree = GitPtr<git_tree, git_tree_free>;
using GitTreeBuilder = GitPtr<git_treebuilder, git_treebuilder_free>;
using GitBlob = GitPtr<git_blob, git_blob_free>;
using GitReference = GitPtr<git_reference, git_reference_free>;
using GitRevwalk = GitPtr<git_revwalk, git_revwalk_free>;
using GitConfig = GitPtr<git_config, git_config_free>;
using GitRemote = GitPtr<git_remote, git_remote_free>;
using GitIndex = GitPtr<git_index, git_index_free>;
using GitStatusList = GitPtr<git_status_list, git_status_list_free>;
using GitSignature = GitPtr<git_signature, git_signature_free>;
using GitReferenceIterator =
    GitPtr<git_reference_iterator, git_reference_iterator_free>;
using GitConfigIterator = GitPtr<git_config_iterator, git_config_iterator_free>;
using GitTransaction = GitPtr<git_transaction, git_transaction_free>;
using GitTreeEntry = GitPtr<git_tree_entry, git_tree_entry_free>;

// An Error for a failed libgit2 call: `op` and `path` as for Error, the
// library's own message appended to op, errno EIO (ENOENT for GIT_ENOTFOUND).
Error GitError(int rc, const std::string& op, const std::string& path);

// git_repository_open_ext, tried again (up to 50 times, a millisecond
// apart and more) while it fails on a file replaced under it: libgit2 1.5
// stats a file (the config) by its path, opens it by its path, and then
// insists on reading the size the stat said, so a writer renaming a new
// config into place between the two (git, or another sandbox registering
// its remote) fails the open with "could not read (expected N bytes, read
// M)". Returns libgit2's code; the last error is that of the last try.
int GitOpenRepository(git_repository** out, const std::string& path,
                      unsigned flags);

// What a failed GitOpenRepository of the checkout `path` means, taken right
// after it (the last error is per thread):
// - kNoRepository: `path` holds no repository (libgit2's "could not find
//   repository"); for acqfs, a lower that is not a git checkout;
// - kRefused: a repository is there and libgit2 will not open it, e.g. one
//   another user owns ("dubious ownership", which libgit2 1.5.1 reports as a
//   missing safe.directory), a damaged config or HEAD.
enum class GitOpenFailure { kNoRepository, kRefused };
GitOpenFailure ClassifyGitOpenFailure(int rc);

// The Error for a failed GitOpenRepository of the checkout `path`, taken
// right after it: GitError(rc, op, path), except for a checkout or git
// directory whose owner is neither this process's effective uid nor, as
// root, the SUDO_UID that git and libgit2 also trust. That one is EPERM and
// says whom it belongs to and the ways out: run as that user (or through
// sudo from it), or add the checkout to safe.directory, as git requires.
Error GitOpenError(int rc, const std::string& op, const std::string& path);

// Holds libgit2 initialised for its lifetime (git_libgit2_init/shutdown are
// reference counted, so nesting is fine). The first one in a process also
// keeps libgit2 initialised until the process ends: Debian's libgit2 1.5
// (built with mbedTLS) parses the whole CA bundle,
// /etc/ssl/certs/ca-certificates.crt, at every first init, about 9 ms here,
// which a command that opens repositories one after another (acqfs mount
// did four times) would otherwise pay each time (docs/benchmarks.md, W1).
class GitLibrary {
 public:
  GitLibrary() {
    KeepForProcess();
    git_libgit2_init();
  }
  ~GitLibrary() { git_libgit2_shutdown(); }
  GitLibrary(const GitLibrary&) = delete;
  GitLibrary& operator=(const GitLibrary&) = delete;

 private:
  // One git_libgit2_init, once per process, never shut down.
  static void KeepForProcess();
};

// Hex form of an object id.
std::string OidHex(const git_oid& id);

}  // namespace acqfs

#endif  // ACQFS_COMMON_GIT_PTR_H_
