#include "gitbridge/patch.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "common/git_ptr.h"

namespace acqfs::gitbridge {
namespace {

using GitPatch = GitPtr<git_patch, git_patch_free>;

constexpr size_t kBinaryProbe = 8000;  // git's buffer_is_binary window
constexpr char kNoBlob[] = "0000000";

std::string Octal(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%06o", mode);
  return buf;
}

Result<std::string> BlobId(const std::string& data, const std::string& path) {
  git_oid oid;
  int rc = git_odb_hash(&oid, data.data(), data.size(), GIT_OBJECT_BLOB);
  if (rc < 0) return GitError(rc, "hash blob", path);
  char hex[8];
  git_oid_tostr(hex, sizeof hex, &oid);
  return std::string(hex);
}

bool LooksBinary(const PatchSide& s) {
  if (s.too_big) return true;
  std::string_view head(s.data.data(), std::min(s.data.size(), kBinaryProbe));
  return head.find('\0') != std::string_view::npos;
}

// A block's text, line by line.
class Text {
 public:
  void Line(const std::string& s) { text_ += s + "\n"; }
  std::string& text() { return text_; }

 private:
  std::string text_;
};

// The ---/+++ name, with git's tab after a name holding a space.
std::string FileLineName(const PatchPath& p, const std::string& name) {
  return name + (p.path.find(' ') != std::string::npos ? "\t" : "");
}

// Appends the ---/+++ lines and libgit2's hunks of old -> new (nothing when
// there are no hunks, as for an empty new file).
Status AppendHunks(const PatchPath& p, const PatchSide& old_side,
                   const PatchSide& new_side, Text* block) {
  git_diff_options opts;
  git_diff_options_init(&opts, GIT_DIFF_OPTIONS_VERSION);
  opts.flags |= GIT_DIFF_FORCE_TEXT;  // binary is decided above
  git_patch* raw = nullptr;
  int rc = git_patch_from_buffers(
      &raw, old_side.exists ? old_side.data.data() : nullptr,
      old_side.data.size(), p.path.c_str(),
      new_side.exists ? new_side.data.data() : nullptr, new_side.data.size(),
      p.path.c_str(), &opts);
  GitPatch patch(raw);
  if (rc < 0) return GitError(rc, "diff", p.path);
  size_t hunks = git_patch_num_hunks(patch.get());
  if (hunks == 0) return Ok();
  block->Line(old_side.exists ? "--- " + FileLineName(p, p.a_name)
                              : "--- /dev/null");
  block->Line(new_side.exists ? "+++ " + FileLineName(p, p.b_name)
                              : "+++ /dev/null");
  std::string& out = block->text();
  for (size_t h = 0; h < hunks; ++h) {
    const git_diff_hunk* hunk = nullptr;
    size_t lines = 0;
    rc = git_patch_get_hunk(&hunk, &lines, patch.get(), h);
    if (rc < 0) return GitError(rc, "diff hunk", p.path);
    out.append(hunk->header, hunk->header_len);
    for (size_t i = 0; i < lines; ++i) {
      const git_diff_line* line = nullptr;
      rc = git_patch_get_line_in_hunk(&line, patch.get(), h, i);
      if (rc < 0) return GitError(rc, "diff line", p.path);
      // ' ', '+', '-' lead their line; the end-of-file markers carry their
      // own "\n\ No newline at end of file\n".
      if (line->origin == GIT_DIFF_LINE_CONTEXT ||
          line->origin == GIT_DIFF_LINE_ADDITION ||
          line->origin == GIT_DIFF_LINE_DELETION)
        out.push_back(line->origin);
      out.append(line->content, line->content_len);
    }
  }
  return Ok();
}

}  // namespace

PatchRenderer::PatchRenderer() : git_(std::make_unique<GitLibrary>()) {}
PatchRenderer::~PatchRenderer() = default;

unsigned GitFileMode(mode_t mode) {
  if (S_ISLNK(mode)) return 0120000;
  return (mode & S_IXUSR) ? 0100755 : 0100644;
}

Result<std::string> PatchRenderer::Block(const PatchPath& p,
                                         const PatchSide& old_side,
                                         const PatchSide& new_side) const {
  const unsigned old_mode = GitFileMode(old_side.mode);
  const unsigned new_mode = GitFileMode(new_side.mode);
  bool same_data = old_side.exists && new_side.exists && !old_side.too_big &&
                   !new_side.too_big && old_side.data == new_side.data;
  bool mode_change = old_side.exists && new_side.exists && old_mode != new_mode;
  if (same_data && !mode_change) return std::string();
  Text b;
  b.Line("diff --git " + p.a_name + " " + p.b_name);
  if (!old_side.exists) b.Line("new file mode " + Octal(new_mode));
  if (!new_side.exists) b.Line("deleted file mode " + Octal(old_mode));
  if (mode_change) {
    b.Line("old mode " + Octal(old_mode));
    b.Line("new mode " + Octal(new_mode));
  }
  if (!same_data) {
    if (!old_side.too_big && !new_side.too_big) {
      std::string old_blob = kNoBlob, new_blob = kNoBlob;
      if (old_side.exists) {
        auto id = BlobId(old_side.data, p.path);
        if (!id) return id.error();
        old_blob = *id;
      }
      if (new_side.exists) {
        auto id = BlobId(new_side.data, p.path);
        if (!id) return id.error();
        new_blob = *id;
      }
      std::string index = "index " + old_blob + ".." + new_blob;
      if (old_side.exists && new_side.exists && !mode_change)
        index += " " + Octal(new_mode);
      b.Line(index);
    }
    if (LooksBinary(old_side) || LooksBinary(new_side)) {
      b.Line("Binary files " +
             (old_side.exists ? p.a_name : std::string("/dev/null")) + " and " +
             (new_side.exists ? p.b_name : std::string("/dev/null")) +
             " differ");
    } else {
      ACQFS_TRY(AppendHunks(p, old_side, new_side, &b));
    }
  }
  return std::move(b.text());
}

std::string PatchRenderer::ModeBlock(const PatchPath& p, mode_t old_mode,
                                     mode_t new_mode) const {
  const unsigned o = GitFileMode(old_mode), n = GitFileMode(new_mode);
  if (o == n) return "";
  Text b;
  b.Line("diff --git " + p.a_name + " " + p.b_name);
  b.Line("old mode " + Octal(o));
  b.Line("new mode " + Octal(n));
  return std::move(b.text());
}

}  // namespace acqfs::gitbridge
