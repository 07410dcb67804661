#include "gitbridge/line_merge.h"

#include <git2.h>

#include <cstring>

#include "common/git_ptr.h"

namespace acqfs::gitbridge {

Result<std::optional<std::string>> MergeFileLines(std::string_view ancestor,
                                                  std::string_view ours,
                                                  std::string_view theirs,
                                                  const std::string& path) {
  git_merge_file_input in[3];
  const std::string_view sides[3] = {ancestor, ours, theirs};
  for (int i = 0; i < 3; ++i) {
    git_merge_file_input_init(&in[i], GIT_MERGE_FILE_INPUT_VERSION);
    in[i].ptr = sides[i].data();
    in[i].size = sides[i].size();
    in[i].path = path.c_str();
  }
  git_merge_file_result out;
  std::memset(&out, 0, sizeof out);
  int rc = git_merge_file(&out, &in[0], &in[1], &in[2], nullptr);
  if (rc < 0) return GitError(rc, "merge the lines of", path);
  std::optional<std::string> merged;
  if (out.automergeable) merged = std::string(out.ptr, out.len);
  git_merge_file_result_free(&out);
  return merged;
}

}  // namespace acqfs::gitbridge
