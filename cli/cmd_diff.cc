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
//   @@ hunks from libgit2, with its "\ No newline at end of file" markers
//      (the blocks are rendered by gitbridge/patch.h)
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
// Paths the sandbox's policy hides or makes read-only are left out, as
// export leaves them out (gitbridge/publish_rule.h).
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
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/sandbox.h"
#include "common/sys.h"
#include "fs/change_scan.h"
#include "fs/layer.h"
#include "gitbridge/patch.h"
#include "gitbridge/publish_rule.h"
#include "state/state.h"

namespace acqfs::cli {

namespace {

using gitbridge::PatchPath;
using gitbridge::PatchSide;

bool Representable(mode_t mode) { return S_ISREG(mode) || S_ISLNK(mode); }

// Reads the object at `rel` in `layer` (st_mode `mode`) into a PatchSide.
Result<PatchSide> ReadSide(const Layer& layer, const std::string& rel,
                           mode_t mode) {
  PatchSide s;
  s.exists = true;
  s.mode = mode;
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
    auto data =
        sys::ReadAll(fd->get(), gitbridge::kPatchMaxTextSize, layer.Shown(rel));
    if (!data && data.err() != EFBIG) return data.error();
    s.too_big = !data;
    if (data) s.data = std::move(*data);
  }
  return s;
}

// The names a block prints for `path`: "a/P" and "b/P", quoted as `acqfs
// status` quotes paths.
PatchPath NamesOf(const std::string& path) {
  return {path, QuotePath("a/" + path), QuotePath("b/" + path)};
}

// Bytes of patch written so far (a rescan must not repeat any).
size_t written = 0;

void Write(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  written += text.size();
}

// One "diff --git" block from `old_side` to `new_side` (either may be
// missing, not both), written to stdout.
Status EmitBlock(const gitbridge::PatchRenderer& renderer,
                 const std::string& path, const PatchSide& old_side,
                 const PatchSide& new_side) {
  auto block = renderer.Block(NamesOf(path), old_side, new_side);
  if (!block) return block.error();
  Write(*block);
  return Ok();
}

class DiffWriter {
 public:
  explicit DiffWriter(const Layers& layers) : layers_(layers) {}
  // Writes the blocks of changes[i] (and, for a directory that became a
  // file, of the deletions below it first); returns the next index.
  Result<size_t> Emit(const std::vector<PathChange>& changes, size_t i);
  // Scans `path` and what is below it afresh (with `options`' settings) and
  // writes their blocks: for a path that changed while it was read. Tries
  // kAttempts times while that keeps happening before anything is written.
  static constexpr int kAttempts = 3;
  Status EmitAgain(const std::string& path, const ChangeScanOptions& options);

 private:
  Status EmitOld(const PathChange& c);   // the lower object goes
  Status EmitNew(const PathChange& c);   // the merged object arrives
  Status EmitBoth(const PathChange& c);  // same type: an edit
  // The own layer holding the merged object of `c` (a frozen layer or the
  // upper: where the scan found it).
  const Layer& NewLayer(const PathChange& c) const {
    return c.layer == 0 ? layers_.upper : layers_.At(c.layer);
  }
  const Layers& layers_;
  gitbridge::PatchRenderer renderer_;
};

Status DiffWriter::EmitOld(const PathChange& c) {
  if (!Representable(c.old_mode)) return Ok();
  auto old_side = ReadSide(layers_.lower, c.path, c.old_mode);
  if (!old_side) return old_side.error();
  return EmitBlock(renderer_, c.path, *old_side, PatchSide{});
}

Status DiffWriter::EmitNew(const PathChange& c) {
  if (!Representable(c.new_mode)) return Ok();
  auto new_side = ReadSide(NewLayer(c), c.path, c.new_mode);
  if (!new_side) return new_side.error();
  return EmitBlock(renderer_, c.path, PatchSide{}, *new_side);
}

Status DiffWriter::EmitBoth(const PathChange& c) {
  if (!Representable(c.new_mode)) return Ok();  // devices: not in a patch
  if (c.kind == PathChange::kMetadata) {
    // The same content: the exec bit is all a patch can say.
    Write(renderer_.ModeBlock(NamesOf(c.path), c.old_mode, c.new_mode));
    return Ok();
  }
  auto old_side = ReadSide(layers_.lower, c.path, c.old_mode);
  if (!old_side) return old_side.error();
  auto new_side = ReadSide(NewLayer(c), c.path, c.new_mode);
  if (!new_side) return new_side.error();
  return EmitBlock(renderer_, c.path, *old_side, *new_side);
}

Status DiffWriter::EmitAgain(const std::string& path,
                             const ChangeScanOptions& options) {
  ChangeScanOptions one;
  one.paths = {path};
  one.include_git_dir = options.include_git_dir;
  Status last = Ok();
  for (int attempt = 0; attempt < kAttempts; attempt++) {
    auto changes = ScanChanges(layers_, one);
    if (!changes) return changes.error();
    gitbridge::DropPolicyRefused(layers_.policy.get(), &*changes);
    const size_t before = written;
    last = Ok();
    for (size_t i = 0; i < changes->size() && last;) {
      auto next = Emit(*changes, i);
      if (next)
        i = *next;
      else
        last = next.error();
    }
    if (last || !ChangedUnderfoot(last.err()) || written != before) return last;
  }
  return last;
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
  if (Status st = found->StackOk(); !st)
    return Fail(kExitBadInput, "diff", st.error());
  auto layers = found->OpenLayers();
  if (!layers) return Fail(kExitFailed, "diff", layers.error());
  Progress progress("diff " + paths.name);
  options.progress = [&](uint64_t n) { progress.Update("scanning", n); };
  auto changes = ScanChanges(*layers, options);
  progress.Finish();
  if (!changes) return Fail(kExitFailed, "diff", changes.error());
  // What the policy keeps out of an export is not diffed either.
  gitbridge::DropPolicyRefused(layers->policy.get(), &*changes);
  DiffWriter writer(*layers);
  size_t left_out = 0;
  for (size_t i = 0; i < changes->size();) {
    const size_t before = written;
    auto next = writer.Emit(*changes, i);
    if (next) {
      i = *next;
      continue;
    }
    if (!ChangedUnderfoot(next.err()) || written != before)
      return Fail(kExitFailed, "diff", next.error());
    // The sandbox changed the path while diff read it (a mounted sandbox at
    // work): diff what is there now, as git diff reads each file when it
    // comes to it. The changes at and below the path are scanned afresh.
    const std::string path = (*changes)[i].path;
    i++;
    while (i < changes->size() && (*changes)[i].path.size() > path.size() &&
           (*changes)[i].path.starts_with(path + "/"))
      i++;
    if (Status s = writer.EmitAgain(path, options); !s) {
      if (!ChangedUnderfoot(s.err()))
        return Fail(kExitFailed, "diff", s.error());
      std::fprintf(stderr,
                   "acqfs: diff: %s: changed while diff read it, %d times; "
                   "left out (%s)\n",
                   QuotePath(path).c_str(), DiffWriter::kAttempts,
                   s.error().Message().c_str());
      left_out++;
    }
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return Fail(kExitFailed, "diff", Error::Errno("write", "stdout"));
  // Exit 1, as docs/cli.md says: the sandbox was at work, nothing failed.
  if (left_out > 0)
    return Fail(kExitBadInput, "diff", std::to_string(left_out) + " paths",
                "left out: they changed while diff read them; run diff "
                "again once the sandbox is quiet");
  return 0;
}

}  // namespace acqfs::cli
