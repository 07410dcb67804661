// acqfs diff: a sandbox's changes as one patch in git's extended unified
// format, read from its layers alone (mounted or not). `patch -p1` (GNU
// patch 2.7) or `git apply` run in a copy of the lower reproduces the
// sandbox's regular files, symlinks and executable bits.
//
// Each regular file or symlink that ChangeScan reports (fs/change_scan.h)
// gets a block like git's:
//   diff --git a/P b/P
//   new file mode 100644 | deleted file mode 100755 | old mode/new mode
//   index <old>..<new>[ <mode>]    (abbreviated blob ids, 0000000 for none)
//   --- a/P | --- /dev/null
//   +++ b/P | +++ /dev/null
//   @@ hunks from libgit2 (git_patch_from_buffers), with its
//      "\ No newline at end of file" markers
// Modes are git's: 100644, 100755 (owner exec bit set) or 120000. A symlink
// is a file whose content is its target, without a newline. A file with a
// NUL byte in its first 8000 bytes on either side, or larger than 512 MiB
// (git's core.bigFileThreshold), is binary: "Binary files a/P and b/P
// differ" (/dev/null for a missing side) and no hunks. Paths are quoted as
// `acqfs status` quotes them; like git, a "---"/"+++" name holding a space
// ends with a tab.
// A change of file type is a deletion followed by a creation of the same
// path, as in git; the deletions below a directory that became a file come
// before that file. A new symlink target is an edit of the one-line file;
// GNU patch applies it to the link because the index line says 120000.
// Left out, as git leaves them out: directories themselves, fifos, sockets
// and devices, and changes of owner, xattrs or of mode bits other than the
// executable bit. GNU patch 2.7 cannot apply a change between a file and a
// directory in one run, not even git's own diff of it (it removes files
// only at the end); `git apply` can.
//
// PATH arguments restrict the diff to those paths and what lies below them;
// they are relative to the sandbox root ("./" allowed); absolute paths and
// ".." are refused (exit 1).
// Exit status: 0 whether or not there are differences (unlike diff(1)), 1
// for bad input (unknown sandbox, bad PATH), 2 when reading fails.
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/sandbox.h"
#include "cli/state.h"
#include "common/git_ptr.h"
#include "common/sys.h"
#include "fs/change_scan.h"
#include "fs/layer.h"

namespace acqfs::cli {

namespace {

using GitPatch = GitPtr<git_patch, git_patch_free>;

constexpr size_t kBinaryProbe = 8000;        // git's buffer_is_binary window
constexpr size_t kMaxTextSize = 512u << 20;  // git's core.bigFileThreshold
constexpr char kNoBlob[] = "0000000";

// One side of a block: what a/P or b/P holds.
struct Side {
  bool exists = false;
  unsigned mode = 0;  // git's: 0100644, 0100755, 0120000
  std::string data;   // content or link target ("" when too big)
  bool too_big = false;
  std::string blob;  // abbreviated blob id, "" when too big
};

unsigned GitMode(mode_t mode) {
  if (S_ISLNK(mode)) return 0120000;
  return (mode & S_IXUSR) ? 0100755 : 0100644;
}

bool Representable(mode_t mode) { return S_ISREG(mode) || S_ISLNK(mode); }

std::string Octal(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%06o", mode);
  return buf;
}

Result<std::string> BlobId(const std::string& data, const std::string& shown) {
  git_oid oid;
  int rc = git_odb_hash(&oid, data.data(), data.size(), GIT_OBJECT_BLOB);
  if (rc < 0) return GitError(rc, "hash blob", shown);
  char hex[8];
  git_oid_tostr(hex, sizeof hex, &oid);
  return std::string(hex);
}

// Reads the object at `rel` in `layer` (st_mode `mode`) into a Side.
Result<Side> ReadSide(const Layer& layer, const std::string& rel, mode_t mode) {
  Side s;
  s.exists = true;
  s.mode = GitMode(mode);
  if (S_ISLNK(mode)) {
    auto dir = layer.OpenDir(sys::Dirname(rel));
    if (!dir) return dir.error();
    auto target =
        sys::ReadLinkAt(dir->get(), sys::Basename(rel), layer.Shown(rel));
    if (!target) return target.error();
    s.data = std::move(*target);
  } else {
    auto fd = layer.OpenForReading(rel);
    if (!fd) return fd.error();
    auto data = sys::ReadAll(fd->get(), kMaxTextSize, layer.Shown(rel));
    if (!data && data.err() != EFBIG) return data.error();
    s.too_big = !data;
    if (data) s.data = std::move(*data);
  }
  if (s.too_big) return s;
  auto blob = BlobId(s.data, layer.Shown(rel));
  if (!blob) return blob.error();
  s.blob = std::move(*blob);
  return s;
}

bool LooksBinary(const Side& s) {
  if (s.too_big) return true;
  std::string_view head(s.data.data(), std::min(s.data.size(), kBinaryProbe));
  return head.find('\0') != std::string_view::npos;
}

// Writes a block's text to stdout, building it first.
class Block {
 public:
  explicit Block(const std::string& path) : path_(path) {}
  void Line(const std::string& s) { text_ += s + "\n"; }
  std::string& text() { return text_; }
  // "a/P" or "b/P", quoted when needed.
  std::string Name(char side) const {
    return QuotePath(std::string(1, side) + "/" + path_);
  }
  // The ---/+++ name, with git's tab after a name holding a space.
  std::string FileLineName(char side) const {
    return Name(side) + (path_.find(' ') != std::string::npos ? "\t" : "");
  }
  void Flush() { std::fwrite(text_.data(), 1, text_.size(), stdout); }

 private:
  const std::string& path_;
  std::string text_;
};

// Appends the ---/+++ lines and libgit2's hunks of old -> new (nothing when
// there are no hunks, as for an empty new file).
Status AppendHunks(const std::string& path, const Side& old_side,
                   const Side& new_side, Block* block) {
  git_diff_options opts;
  git_diff_options_init(&opts, GIT_DIFF_OPTIONS_VERSION);
  opts.flags |= GIT_DIFF_FORCE_TEXT;  // binary is decided above
  git_patch* raw = nullptr;
  int rc = git_patch_from_buffers(
      &raw, old_side.exists ? old_side.data.data() : nullptr,
      old_side.data.size(), path.c_str(),
      new_side.exists ? new_side.data.data() : nullptr, new_side.data.size(),
      path.c_str(), &opts);
  GitPatch patch(raw);
  if (rc < 0) return GitError(rc, "diff", path);
  size_t hunks = git_patch_num_hunks(patch.get());
  if (hunks == 0) return Ok();
  block->Line(old_side.exists ? "--- " + block->FileLineName('a')
                              : "--- /dev/null");
  block->Line(new_side.exists ? "+++ " + block->FileLineName('b')
                              : "+++ /dev/null");
  std::string& out = block->text();
  for (size_t h = 0; h < hunks; ++h) {
    const git_diff_hunk* hunk = nullptr;
    size_t lines = 0;
    rc = git_patch_get_hunk(&hunk, &lines, patch.get(), h);
    if (rc < 0) return GitError(rc, "diff hunk", path);
    out.append(hunk->header, hunk->header_len);
    for (size_t i = 0; i < lines; ++i) {
      const git_diff_line* line = nullptr;
      rc = git_patch_get_line_in_hunk(&line, patch.get(), h, i);
      if (rc < 0) return GitError(rc, "diff line", path);
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

// One "diff --git" block from `old_side` to `new_side` (either may be
// missing, not both).
Status EmitBlock(const std::string& path, const Side& old_side,
                 const Side& new_side) {
  bool same_data = old_side.exists && new_side.exists && !old_side.too_big &&
                   !new_side.too_big && old_side.data == new_side.data;
  bool mode_change =
      old_side.exists && new_side.exists && old_side.mode != new_side.mode;
  if (same_data && !mode_change) return Ok();
  Block b(path);
  b.Line("diff --git " + b.Name('a') + " " + b.Name('b'));
  if (!old_side.exists) b.Line("new file mode " + Octal(new_side.mode));
  if (!new_side.exists) b.Line("deleted file mode " + Octal(old_side.mode));
  if (mode_change) {
    b.Line("old mode " + Octal(old_side.mode));
    b.Line("new mode " + Octal(new_side.mode));
  }
  if (!same_data) {
    if (!old_side.too_big && !new_side.too_big) {
      std::string index = "index " +
                          (old_side.exists ? old_side.blob : kNoBlob) + ".." +
                          (new_side.exists ? new_side.blob : kNoBlob);
      if (old_side.exists && new_side.exists && !mode_change)
        index += " " + Octal(new_side.mode);
      b.Line(index);
    }
    if (LooksBinary(old_side) || LooksBinary(new_side)) {
      b.Line("Binary files " +
             (old_side.exists ? b.Name('a') : std::string("/dev/null")) +
             " and " +
             (new_side.exists ? b.Name('b') : std::string("/dev/null")) +
             " differ");
    } else {
      ACQFS_TRY(AppendHunks(path, old_side, new_side, &b));
    }
  }
  b.Flush();
  return Ok();
}

class DiffWriter {
 public:
  explicit DiffWriter(const Layers& layers) : layers_(layers) {}
  // Writes the blocks of changes[i] (and, for a directory that became a
  // file, of the deletions below it first); returns the next index.
  Result<size_t> Emit(const std::vector<PathChange>& changes, size_t i);

 private:
  Status EmitOld(const PathChange& c);   // the lower object goes
  Status EmitNew(const PathChange& c);   // the merged object arrives
  Status EmitBoth(const PathChange& c);  // same type: an edit
  const Layers& layers_;
};

Status DiffWriter::EmitOld(const PathChange& c) {
  if (!Representable(c.old_mode)) return Ok();
  auto old_side = ReadSide(layers_.lower, c.path, c.old_mode);
  if (!old_side) return old_side.error();
  return EmitBlock(c.path, *old_side, Side{});
}

Status DiffWriter::EmitNew(const PathChange& c) {
  if (!Representable(c.new_mode)) return Ok();
  auto new_side = ReadSide(layers_.upper, c.path, c.new_mode);
  if (!new_side) return new_side.error();
  return EmitBlock(c.path, Side{}, *new_side);
}

Status DiffWriter::EmitBoth(const PathChange& c) {
  if (!Representable(c.new_mode)) return Ok();  // devices: not in a patch
  if (c.kind == PathChange::kMetadata) {
    // The same content: the exec bit is all a patch can say.
    unsigned old_mode = GitMode(c.old_mode), new_mode = GitMode(c.new_mode);
    if (old_mode == new_mode) return Ok();
    Block b(c.path);
    b.Line("diff --git " + b.Name('a') + " " + b.Name('b'));
    b.Line("old mode " + Octal(old_mode));
    b.Line("new mode " + Octal(new_mode));
    b.Flush();
    return Ok();
  }
  auto old_side = ReadSide(layers_.lower, c.path, c.old_mode);
  if (!old_side) return old_side.error();
  auto new_side = ReadSide(layers_.upper, c.path, c.new_mode);
  if (!new_side) return new_side.error();
  return EmitBlock(c.path, *old_side, *new_side);
}

Result<size_t> DiffWriter::Emit(const std::vector<PathChange>& changes,
                                size_t i) {
  const PathChange& c = changes[i];
  switch (c.kind) {
    case PathChange::kAdded:
      ACQFS_TRY(EmitNew(c));
      return i + 1;
    case PathChange::kDeleted:
      ACQFS_TRY(EmitOld(c));
      return i + 1;
    case PathChange::kModified:
    case PathChange::kMetadata:
      ACQFS_TRY(EmitBoth(c));
      return i + 1;
    case PathChange::kTypeChanged:
      break;
  }
  ACQFS_TRY(EmitOld(c));
  size_t next = i + 1;
  // Below a directory that became a file there are only deletions; they go
  // before the file that takes its place.
  std::string below = c.path + "/";
  while (S_ISDIR(c.old_mode) && next < changes.size() &&
         changes[next].path.starts_with(below))
    ACQFS_TRY(EmitOld(changes[next++]));
  ACQFS_TRY(EmitNew(c));
  return next;
}

// `arg` as a path relative to the sandbox root: "./" and "." components and
// repeated or trailing slashes dropped; false for an absolute path or "..".
bool NormalizePath(const std::string& arg, std::string* out) {
  if (arg.starts_with("/")) return false;
  out->clear();
  size_t i = 0;
  while (i <= arg.size()) {
    size_t j = arg.find('/', i);
    if (j == std::string::npos) j = arg.size();
    std::string part = arg.substr(i, j - i);
    if (part == "..") return false;
    if (!part.empty() && part != ".") *out = sys::Join(*out, part);
    i = j + 1;
  }
  return true;
}

}  // namespace

int RunDiff(const DiffArgs& a) {
  ChangeScanOptions options;
  options.include_git_dir = a.include_git_dir;
  for (const std::string& p : a.paths) {
    std::string rel;
    if (!NormalizePath(p, &rel))
      return Fail(kExitBadInput, "diff", p,
                  "not a path inside the sandbox (give it relative to the "
                  "sandbox root, without ..)");
    options.paths.push_back(rel.empty() ? "." : rel);
  }
  std::string state = Absolute(ResolveStateDir(a.state_dir));
  auto found = Sandbox::Find(state, a.name);
  if (!found) return FailFind("diff", a.name, found.error());
  const SandboxPaths& paths = found->paths();
  auto layers = found->OpenLayers();
  if (!layers) return Fail(kExitFailed, "diff", layers.error());
  Progress progress("diff " + paths.name);
  options.progress = [&](uint64_t n) { progress.Update("scanning", n); };
  auto changes = ScanChanges(*layers, options);
  progress.Finish();
  if (!changes) return Fail(kExitFailed, "diff", changes.error());
  GitLibrary git;
  DiffWriter writer(*layers);
  for (size_t i = 0; i < changes->size();) {
    auto next = writer.Emit(*changes, i);
    if (!next) return Fail(kExitFailed, "diff", next.error());
    i = *next;
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return Fail(kExitFailed, "diff", Error::Errno("write", "stdout"));
  return 0;
}

}  // namespace acqfs::cli
