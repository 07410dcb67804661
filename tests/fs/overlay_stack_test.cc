// Overlay::Freeze, Restack and ReplaceFrozen (fs/overlay.h,
// fs/overlay_stack.cc; docs/stack.md) on the engine, without FUSE: a checkpoint
// freezes the upper and leaves the merged view as it was, the frozen layer
// never changes after, and the next write copies up into the new upper; a
// rewind serves an earlier stack and takes every name away (a node open across
// it is gone, ESTALE); a squash serves a merged layer in place of frozen
// layers 1..n with the view, the numbers and the nodes unchanged; a commit that
// fails leaves the stack as it was; and a data write in flight (WriteData,
// HoldOffFreeze) holds a checkpoint off until its last byte.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "fs/layer.h"
#include "fs/layer_squash.h"
#include "fs/overlay.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs::test::DescribeTree;
using acqfs::test::Exists;
using acqfs::test::ListDir;
using acqfs::test::Lstat;
using acqfs::test::MakeDir;
using acqfs::test::MakeFile;
using acqfs::test::ReadFile;

using View = std::map<std::string, std::string>;
using NameSet = std::set<std::pair<Node*, std::string>>;

// Two views equal, else each path they differ on.
::testing::AssertionResult SameView(const View& got, const View& want) {
  std::string diff;
  for (const auto& [path, d] : want) {
    auto it = got.find(path);
    if (it == got.end())
      diff += "\n  " + path + ": missing, was " + d;
    else if (it->second != d)
      diff += "\n  " + path + ": " + it->second + "\n  " +
              std::string(path.size(), ' ') + "  was " + d;
  }
  for (const auto& [path, d] : got)
    if (!want.count(path)) diff += "\n  " + path + ": new, " + d;
  if (diff.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the views differ:" << diff;
}

class OverlayStack : public acqfs::test::OverlayTest {
 protected:
  // A new empty directory beside lower/, upper/ and work/, for a layer.
  std::string NewLayerDir(const std::string& name) {
    const std::string p = t_.root() + "/" + name;
    MakeDir(p);
    return p;
  }

  // A commit that counts its calls and returns `result`.
  static std::function<Status()> Commit(int* calls, Status result = Ok()) {
    return [calls, result] {
      ++*calls;
      return result;
    };
  }
  static Status Failing() {
    return Error::Of(EIO, "write stack.json (test)", "stack.json");
  }

  // The lookups the tests made, by node, for ForgetAll.
  Node* Counted(Result<Node*> r, const std::string& what) {
    if (!r.ok()) {
      ADD_FAILURE() << what << ": " << r.error().Message();
      return nullptr;
    }
    ++lookups_[*r];
    return *r;
  }
  Node* Look(Node* parent, const std::string& name) {
    return Counted(ov_->Lookup(parent, name), "lookup " + name);
  }
  // Looks up a relative path component by component (counted).
  Node* At(const std::string& rel) {
    Node* n = root();
    size_t pos = 0;
    while (n) {
      const size_t slash = rel.find('/', pos);
      n = Look(n, rel.substr(pos, slash == std::string::npos ? std::string::npos
                                                             : slash - pos));
      if (slash == std::string::npos) break;
      pos = slash + 1;
    }
    return n;
  }
  // Gives every counted lookup back (as the kernel's FORGETs would), so
  // that the next lookups make new nodes, numbered from the layers.
  void ForgetAll() {
    for (const auto& [n, c] : lookups_) ov_->Forget(n, c);
    lookups_.clear();
  }

  // Creates the regular file `name` in `parent` holding `data` (written
  // through WriteData), its handle released.
  Node* NewFile(Node* parent, const std::string& name,
                const std::string& data) {
    auto made = ov_->Create(parent, name, 0644, O_WRONLY, Me());
    if (!made.ok()) {
      ADD_FAILURE() << "create " << name << ": " << made.error().Message();
      return nullptr;
    }
    Node* n = made->first;
    ++lookups_[n];
    made->second = nullptr;
    ov_->ReleaseOpen(n);
    EXPECT_TRUE(Rewrite(n, data)) << name;
    return n;
  }
  Node* NewDir(Node* parent, const std::string& name) {
    return Counted(ov_->Mkdir(parent, name, 0755, Me()), "mkdir " + name);
  }

  // Replaces the data of `node` by `data`, as a truncate and a write would:
  // through WriteData, the one way a file's data is written.
  ::testing::AssertionResult Rewrite(Node* node, const std::string& data) {
    auto r =
        ov_->WriteData(node, Overlay::DataOp::kWrite,
                       Quota::Charge::Span(0, static_cast<off_t>(data.size())),
                       [&](int fd) -> int64_t {
                         if (::ftruncate(fd, 0) != 0) return -errno;
                         ssize_t w = ::pwrite(fd, data.data(), data.size(), 0);
                         return w < 0 ? -errno : w;
                       });
    if (!r.ok())
      return ::testing::AssertionFailure()
             << "WriteData of " << ov_->PathOf(node) << ": "
             << r.error().Message();
    if (*r != static_cast<int64_t>(data.size()))
      return ::testing::AssertionFailure() << "WriteData returned " << *r;
    return ::testing::AssertionSuccess();
  }
  // The node's data as a READ finds it now (the file cache emptied first,
  // so that the data is reached afresh from the node).
  std::string ReadNow(Node* node) {
    ov_->ShrinkFiles(0);
    auto f = ov_->FileFor(node, false);
    if (!f.ok()) {
      ADD_FAILURE() << "FileFor " << ov_->PathOf(node) << ": "
                    << f.error().Message();
      return "";
    }
    return ReadAll(f->get());
  }

  // The merged view through the engine: every name of every listing,
  // looked up (counted), with its type, mode, owner, size, link count
  // (unless with_nlink_ is false), mtime, the number its lookup reports
  // (st_ino) and its listing's (d_ino), and its data or target. The root's own
  // attributes are those of the upper's root, which a checkpoint replaces: only
  // its number. Fills nodes_ (path -> node).
  View ViewNow() {
    View out;
    nodes_.clear();
    auto st = ov_->GetAttr(root());
    EXPECT_TRUE(st.ok()) << st.error().Message();
    if (st.ok()) out["."] = "ino=" + std::to_string(st->st_ino);
    Describe(root(), "", &out);
    return out;
  }
  void Describe(Node* dir, const std::string& prefix, View* out) {
    auto ents = ov_->ReadDir(dir);
    if (!ents.ok()) {
      ADD_FAILURE() << "ReadDir /" << prefix << ": " << ents.error().Message();
      return;
    }
    for (const ListedEntry& e : *ents) {
      if (e.name == "." || e.name == "..") continue;
      const std::string rel = prefix.empty() ? e.name : prefix + "/" + e.name;
      struct stat st {};
      auto n = ov_->Lookup(dir, e.name, &st);
      if (!n.ok()) {
        (*out)[rel] = "lookup: " + n.error().Message();
        continue;
      }
      ++lookups_[*n];
      nodes_[rel] = *n;
      auto attr = ov_->GetAttr(*n);
      if (!attr.ok()) {
        (*out)[rel] = "getattr: " + attr.error().Message();
        continue;
      }
      st = *attr;
      std::string d =
          std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + ":" +
          std::to_string(st.st_gid) + " size=" + std::to_string(st.st_size) +
          (with_nlink_ ? " nlink=" + std::to_string(st.st_nlink)
                       : std::string()) +
          " mtime=" + std::to_string(st.st_mtim.tv_sec) + "." +
          std::to_string(st.st_mtim.tv_nsec) +
          " ino=" + std::to_string(st.st_ino) +
          " dino=" + std::to_string(e.ino);
      if (S_ISREG(st.st_mode)) d += " data=" + ReadVia(*n);
      if (S_ISLNK(st.st_mode)) {
        auto t = ov_->ReadLink(*n);
        d += " target=" + (t.ok() ? *t : t.error().Message());
      }
      (*out)[rel] = d;
      if (S_ISDIR(st.st_mode)) Describe(*n, rel, out);
    }
  }

  std::vector<std::string> FrozenPaths() {
    std::vector<std::string> out;
    for (const Layer& l : ov_->layers().frozen) out.push_back(l.root_path());
    return out;
  }

  // Squashes frozen layers 1..count of the engine's stack into a new
  // directory `name` (as the daemon's squash builds it before
  // ReplaceFrozen).
  std::string Squashed(const std::string& name, unsigned count) {
    const std::string out = NewLayerDir(name);
    auto layers = Layers::OpenForReading(t_.lower(), ov_->UpperRootPath(),
                                         XattrNamespace::kUser, FrozenPaths());
    if (!layers.ok()) {
      ADD_FAILURE() << "open the stack: " << layers.error().Message();
      return out;
    }
    auto stats = SquashLayers(*layers, 1, count, out);
    EXPECT_TRUE(stats.ok()) << stats.error().Message();
    return out;
  }

  std::map<Node*, uint64_t> lookups_;
  std::map<std::string, Node*> nodes_;
  // Whether ViewNow describes link counts (a squash's hard links raise
  // them for as long as the squashed layers exist).
  bool with_nlink_ = true;
};

// ---- Freeze ----------------------------------------------------------------

TEST_F(OverlayStack, FreezeCommitsOnceAndTheNextWriteCopiesUpIntoTheNewUpper) {
  MakeFile(t_.L("f"), "hello world");
  ASSERT_NO_FATAL_FAILURE(Start());
  Node* f = At("f");
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(Rewrite(f, "first"));
  ASSERT_EQ(ReadFile(t_.U("f")), "first");
  const ino_t old_copy = Lstat(t_.U("f")).st_ino;

  const std::string next = NewLayerDir("u1");
  int commits = 0;
  ASSERT_OK_AND_ASSIGN(auto stale, ov_->Freeze(next, Commit(&commits)));
  EXPECT_EQ(commits, 1);
  EXPECT_TRUE(stale.empty());
  EXPECT_EQ(ov_->UpperRootPath(), next);
  EXPECT_EQ(FrozenPaths(), std::vector<std::string>{t_.upper()});
  EXPECT_EQ(ov_->cached_files(), 0u) << "descriptors into the old upper";

  // Read through the node: the frozen copy, not the host's.
  EXPECT_EQ(ReadNow(f), "first");
  EXPECT_FALSE(Exists(next + "/f")) << "a read copies nothing up";
  ASSERT_TRUE(Rewrite(f, "second"));
  EXPECT_EQ(ReadFile(next + "/f"), "second");
  EXPECT_NE(Lstat(next + "/f").st_ino, old_copy);
  EXPECT_EQ(ReadFile(t_.U("f")), "first") << "the frozen layer was written";
  EXPECT_EQ(ReadFile(t_.L("f")), "hello world");
  EXPECT_EQ(ReadNow(f), "second");
  EXPECT_EQ(commits, 1);
}

TEST_F(OverlayStack, AFrozenUpperNeverChangesWhateverIsWrittenAfter) {
  MakeFile(t_.L("f"), "host f");
  MakeFile(t_.L("d/x"), "host x");
  MakeFile(t_.L("gone"), "host gone");
  ASSERT_NO_FATAL_FAILURE(Start());
  Node* f = At("f");
  Node* x = At("d/x");
  ASSERT_TRUE(f && x);
  ASSERT_TRUE(Rewrite(f, "f1"));
  ASSERT_TRUE(Rewrite(x, "x1"));
  Node* n = NewFile(root(), "n", "n1");
  Node* m = NewDir(root(), "m");
  ASSERT_TRUE(n && m);
  Node* mf = NewFile(m, "mf", "mf1");
  ASSERT_NE(mf, nullptr);
  ASSERT_OK(ov_->SetXattr(n, "user.note", "one", 0));
  ASSERT_OK(ov_->Unlink(root(), "gone"));
  const auto frozen = DescribeTree(t_.upper());
  ASSERT_FALSE(frozen.empty());

  int commits = 0;
  const std::string next = NewLayerDir("u1");
  ASSERT_OK(ov_->Freeze(next, Commit(&commits)));
  ASSERT_EQ(commits, 1);

  // Every kind of change, to everything the frozen layer holds.
  ASSERT_TRUE(Rewrite(f, "f2 longer"));
  ASSERT_TRUE(Rewrite(x, "x2"));
  ASSERT_TRUE(Rewrite(n, "n2"));
  ASSERT_TRUE(Rewrite(mf, "mf2"));
  ASSERT_OK(ov_->SetXattr(n, "user.note", "two", 0));
  SetAttrRequest chmod;
  chmod.set_mode = true;
  chmod.mode = 0600;
  ASSERT_OK(ov_->SetAttr(mf, chmod, -1));
  SetAttrRequest touch;
  touch.set_mtime = true;
  touch.mtime = {12345, 0};
  ASSERT_OK(ov_->SetAttr(m, touch, -1));
  ASSERT_OK(ov_->Rename(root(), "n", m, "n-moved", 0));
  ASSERT_OK(ov_->Unlink(root(), "f"));
  ASSERT_OK(ov_->Unlink(m, "mf"));
  ASSERT_OK(ov_->Unlink(Look(root(), "d"), "x"));
  ASSERT_OK(ov_->Rmdir(root(), "d"));
  ASSERT_NE(NewFile(root(), "gone", "back"), nullptr);
  ASSERT_NE(NewFile(m, "new", "new"), nullptr);

  EXPECT_EQ(DescribeTree(t_.upper()), frozen);
  EXPECT_EQ(ReadFile(t_.U("f")), "f1");
  EXPECT_EQ(ReadFile(t_.U("m/mf")), "mf1");
  EXPECT_EQ(ReadFile(t_.L("d/x")), "host x");
}

TEST_F(OverlayStack, FreezeLeavesTheMergedViewAsItWas) {
  MakeFile(t_.L("f"), "host f");
  MakeFile(t_.L("keep"), "host keep");
  MakeFile(t_.L("d/x"), "host x");
  MakeFile(t_.L("d/y"), "host y");
  MakeFile(t_.L("gone"), "host gone");
  MakeDir(t_.L("e"));
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(Rewrite(At("f"), "f1"));
  ASSERT_TRUE(Rewrite(At("d/x"), "x1"));
  ASSERT_OK(ov_->Unlink(At("d"), "y"));
  ASSERT_OK(ov_->Unlink(root(), "gone"));
  Node* m = NewDir(root(), "m");
  ASSERT_NE(m, nullptr);
  ASSERT_NE(NewFile(m, "mf", "mf1"), nullptr);
  ASSERT_NE(NewFile(root(), "n", "n1"), nullptr);
  ASSERT_NE(Counted(ov_->Symlink(root(), "s", "n", Me()), "symlink"), nullptr);
  // An opaque directory: the host's e replaced by a new one.
  ASSERT_OK(ov_->Rmdir(root(), "e"));
  Node* e = NewDir(root(), "e");
  ASSERT_NE(e, nullptr);
  ASSERT_NE(NewFile(e, "ee", "ee"), nullptr);
  const View before = ViewNow();
  ASSERT_EQ(before.count("gone"), 0u);
  ASSERT_EQ(before.count("d/y"), 0u);
  ASSERT_EQ(before.at("f").find("data=f1") != std::string::npos, true);
  const auto nodes_before = nodes_;

  int commits = 0;
  ASSERT_OK(ov_->Freeze(NewLayerDir("u1"), Commit(&commits)));
  ASSERT_EQ(commits, 1);
  // Through the nodes the engine holds: the same view, the same nodes.
  EXPECT_TRUE(SameView(ViewNow(), before));
  EXPECT_EQ(nodes_, nodes_before);
  // And through new nodes, numbered from the layers afresh.
  ForgetAll();
  EXPECT_TRUE(SameView(ViewNow(), before));
}

TEST_F(OverlayStack, AFailedCommitLeavesTheStackAsItWas) {
  MakeFile(t_.L("f"), "host f");
  ASSERT_NO_FATAL_FAILURE(Start());
  Node* f = At("f");
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(Rewrite(f, "f1"));
  const View before = ViewNow();
  const std::string next = NewLayerDir("u1");

  int commits = 0;
  auto r = ov_->Freeze(next, Commit(&commits, Failing()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err(), EIO);
  EXPECT_EQ(r.error().op, "write stack.json (test)");
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(ov_->UpperRootPath(), t_.upper());
  EXPECT_TRUE(FrozenPaths().empty());
  EXPECT_TRUE(SameView(ViewNow(), before));
  // Writes still go to the old upper, in place.
  const ino_t copy = Lstat(t_.U("f")).st_ino;
  ASSERT_TRUE(Rewrite(f, "f2"));
  EXPECT_EQ(ReadFile(t_.U("f")), "f2");
  EXPECT_EQ(Lstat(t_.U("f")).st_ino, copy);
  ASSERT_NE(NewFile(root(), "n", "n"), nullptr);
  EXPECT_TRUE(Exists(t_.U("n")));
  EXPECT_TRUE(ListDir(next).empty());

  // A new upper that cannot be opened: refused before the commit runs.
  auto missing = ov_->Freeze(t_.root() + "/nowhere", Commit(&commits));
  EXPECT_EQ(missing.err(), ENOENT);
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(ov_->UpperRootPath(), t_.upper());

  // And the stack still freezes afterwards.
  ASSERT_OK(ov_->Freeze(next, Commit(&commits)));
  EXPECT_EQ(commits, 2);
  EXPECT_EQ(ov_->UpperRootPath(), next);
}

TEST_F(OverlayStack, HardLinksOfTheOldUpperAreReturnedAsStaleNames) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Node* d = NewDir(root(), "d");
  Node* h = NewFile(root(), "h", "linked");
  ASSERT_TRUE(d && h);
  ASSERT_EQ(Counted(ov_->Link(h, root(), "h2"), "link h2"), h);
  ASSERT_EQ(Counted(ov_->Link(h, d, "h3"), "link h3"), h);
  Node* lone = NewFile(root(), "lone", "lone");
  ASSERT_NE(lone, nullptr);
  ASSERT_EQ(Lstat(t_.U("h")).st_nlink, 3u);
  const std::string primary = ov_->PathOf(h);

  int commits = 0;
  ASSERT_OK_AND_ASSIGN(auto stale,
                       ov_->Freeze(NewLayerDir("u1"), Commit(&commits)));
  ASSERT_EQ(commits, 1);
  // The other names of the file: all but the one it keeps.
  NameSet got;
  for (const auto& s : stale) got.insert({s.parent, s.name});
  EXPECT_EQ(got.size(), stale.size()) << "a name returned twice";
  NameSet all = {{root(), "h"}, {root(), "h2"}, {d, "h3"}};
  NameSet others;
  for (const auto& p : all) {
    const std::string rel =
        (p.first == root() ? "" : ov_->PathOf(p.first) + "/") + p.second;
    if (rel != primary) others.insert(p);
  }
  ASSERT_EQ(others.size(), 2u) << primary;
  EXPECT_EQ(got, others);
  EXPECT_EQ(ov_->PathOf(h), primary);

  // Each name is looked up afresh, and is a file of its own from now on: a
  // write through one copies that name up alone.
  Node* h2 = Look(root(), "h2");
  Node* h3 = Look(d, "h3");
  Node* h1 = Look(root(), "h");
  ASSERT_TRUE(h1 && h2 && h3);
  EXPECT_EQ(ReadNow(h2), "linked");
  EXPECT_EQ(ReadNow(h3), "linked");
  ASSERT_TRUE(Rewrite(h2, "changed"));
  EXPECT_EQ(ReadNow(h2), "changed");
  EXPECT_EQ(ReadNow(h1), "linked");
  EXPECT_EQ(ReadNow(h3), "linked");
  EXPECT_EQ(ReadFile(ov_->UpperRootPath() + "/h2"), "changed");
  EXPECT_FALSE(Exists(ov_->UpperRootPath() + "/h"));
  EXPECT_EQ(ReadFile(t_.U("h")), "linked");
  EXPECT_EQ(Lstat(t_.U("h")).st_nlink, 3u) << "the frozen links changed";
}

TEST_F(OverlayStack, FreezeRefusesAThirtySecondFrozenLayer) {
  ASSERT_NO_FATAL_FAILURE(Start());
  int commits = 0;
  for (unsigned i = 1; i < kMaxLowerLayers; ++i) {
    SCOPED_TRACE(i);
    ASSERT_OK(
        ov_->Freeze(NewLayerDir("u" + std::to_string(i)), Commit(&commits)));
  }
  ASSERT_EQ(ov_->layers().frozen.size(), kMaxLowerLayers - 1);
  const std::string upper = ov_->UpperRootPath();
  auto r = ov_->Freeze(NewLayerDir("one-too-many"), Commit(&commits));
  EXPECT_EQ(r.err(), EMLINK);
  EXPECT_EQ(commits, static_cast<int>(kMaxLowerLayers - 1));
  EXPECT_EQ(ov_->UpperRootPath(), upper);
}

// ---- Restack ---------------------------------------------------------------

class OverlayRestack : public OverlayStack {
 protected:
  // The checkpoint: the host's a and d/x changed, b made; frozen as
  // t_.upper() under u1. Then more: a, d/x changed again, b removed, c and
  // e/y made, in u1.
  void Build() {
    MakeFile(t_.L("a"), "host a");
    MakeFile(t_.L("d/x"), "host x");
    ASSERT_NO_FATAL_FAILURE(Start());
    ASSERT_TRUE(Rewrite(At("a"), "a1"));
    ASSERT_TRUE(Rewrite(At("d/x"), "x1"));
    ASSERT_NE(NewFile(root(), "b", "b1"), nullptr);
    u1_ = NewLayerDir("u1");
    int commits = 0;
    ASSERT_OK(ov_->Freeze(u1_, Commit(&commits)));
    checkpoint_ = ViewNow();
    ASSERT_EQ(checkpoint_.count("b"), 1u);

    a_ = At("a");
    x_ = At("d/x");
    ASSERT_TRUE(a_ && x_);
    ASSERT_TRUE(Rewrite(a_, "a2"));
    ASSERT_TRUE(Rewrite(x_, "x2"));
    ASSERT_OK(ov_->Unlink(root(), "b"));
    c_ = NewFile(root(), "c", "c2");
    e_ = NewDir(root(), "e");
    ASSERT_TRUE(c_ && e_);
    y_ = NewFile(e_, "y", "y2");
    ASSERT_NE(y_, nullptr);
    later_ = ViewNow();
    ASSERT_NE(later_, checkpoint_);
  }

  std::string u1_;
  View checkpoint_, later_;
  Node *a_ = nullptr, *x_ = nullptr, *c_ = nullptr, *e_ = nullptr,
       *y_ = nullptr;
};

TEST_F(OverlayRestack, ServesTheStackGivenAndForgetsEveryName) {
  ASSERT_NO_FATAL_FAILURE(Build());
  Node* d = At("d");
  ASSERT_NE(d, nullptr);
  // A file open across the rewind (a counted open, its descriptor cached).
  ASSERT_OK_AND_ASSIGN(FileLease held, ov_->Open(a_, O_RDWR));
  held = nullptr;
  const auto u1_tree = DescribeTree(u1_);
  const auto checkpoint_tree = DescribeTree(t_.upper());

  const std::string u2 = NewLayerDir("u2");
  int commits = 0;
  ASSERT_OK_AND_ASSIGN(Overlay::Restacked r,
                       ov_->Restack({t_.upper()}, u2, Commit(&commits)));
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(FrozenPaths(), std::vector<std::string>{t_.upper()});
  EXPECT_EQ(ov_->UpperRootPath(), u2);

  // The names: every one the engine knew, and every name of the new
  // stack's root (b: the kernel may hold it as missing).
  NameSet names;
  for (const auto& s : r.names) names.insert({s.parent, s.name});
  for (const auto& want : NameSet{{root(), "a"},
                                  {root(), "b"},
                                  {root(), "c"},
                                  {root(), "d"},
                                  {root(), "e"},
                                  {d, "x"},
                                  {e_, "y"}})
    EXPECT_EQ(names.count(want), 1u) << want.second;
  for (const auto& [parent, name] : names)
    EXPECT_TRUE(parent == root() || parent == d || parent == e_)
        << "a name in an unknown directory: " << name;
  // The nodes the kernel holds, to drop their caches.
  std::set<Node*> nodes(r.nodes.begin(), r.nodes.end());
  EXPECT_EQ(nodes.count(root()), 0u);
  for (Node* n : {a_, c_, d, e_, x_, y_})
    EXPECT_EQ(nodes.count(n), 1u) << ov_->PathOf(n);

  // The view is the checkpoint's, through new nodes.
  EXPECT_TRUE(SameView(ViewNow(), checkpoint_));
  EXPECT_NE(nodes_.at("a"), a_);
  EXPECT_NE(nodes_.at("d"), d);
  EXPECT_EQ(nodes_.count("c") + nodes_.count("e"), 0u);

  // The node open across it reads and writes nothing any more.
  ov_->ShrinkFiles(0);
  EXPECT_ERRNO(ESTALE, ov_->FileFor(a_, false));
  EXPECT_ERRNO(ESTALE, ov_->FileFor(a_, true));
  auto w = ov_->WriteData(a_, Overlay::DataOp::kWrite,
                          Quota::Charge::Span(0, 1), [](int fd) -> int64_t {
                            return ::pwrite(fd, "z", 1, 0) == 1 ? 1 : -errno;
                          });
  EXPECT_ERRNO(ESTALE, w);
  EXPECT_ERRNO(ESTALE, ov_->FileFor(y_, false));
  ov_->ReleaseOpen(a_);

  // Nothing of the layers was written by the rewind; a write now goes to
  // the new upper.
  EXPECT_EQ(DescribeTree(u1_), u1_tree);
  EXPECT_EQ(DescribeTree(t_.upper()), checkpoint_tree);
  EXPECT_TRUE(ListDir(u2).empty());
  Node* a = nodes_.at("a");
  ASSERT_TRUE(Rewrite(a, "a3"));
  EXPECT_EQ(ReadFile(u2 + "/a"), "a3");
  EXPECT_EQ(ReadFile(t_.U("a")), "a1");
  EXPECT_EQ(ReadFile(u1_ + "/a"), "a2");
  EXPECT_EQ(ReadNow(a), "a3");
}

TEST_F(OverlayRestack, AfterAnUndoPointIsFrozenLikeTheDaemonsRewind) {
  // The daemon freezes the upper first (the auto-rewind checkpoint), then
  // restacks: the undo point can be restacked back to.
  ASSERT_NO_FATAL_FAILURE(Build());
  int commits = 0;
  const std::string u2 = NewLayerDir("u2");
  ASSERT_OK(ov_->Freeze(u2, Commit(&commits)));
  const std::vector<std::string> undo = FrozenPaths();
  ASSERT_EQ(undo, (std::vector<std::string>{t_.upper(), u1_}));
  ASSERT_OK(ov_->Restack({t_.upper()}, NewLayerDir("u3"), Commit(&commits)));
  EXPECT_TRUE(SameView(ViewNow(), checkpoint_));
  ASSERT_OK(ov_->Restack(undo, NewLayerDir("u4"), Commit(&commits)));
  EXPECT_EQ(commits, 3);
  ForgetAll();
  EXPECT_TRUE(SameView(ViewNow(), later_));
  // And back to the host alone.
  ASSERT_OK(ov_->Restack({}, NewLayerDir("u5"), Commit(&commits)));
  View host = ViewNow();
  EXPECT_EQ(host.count("b") + host.count("c") + host.count("e"), 0u);
  ASSERT_EQ(host.count("a"), 1u);
  EXPECT_NE(host.at("a").find("data=host a"), std::string::npos) << host["a"];
  EXPECT_NE(host.at("d/x").find("data=host x"), std::string::npos);
}

TEST_F(OverlayRestack, AFailedCommitLeavesEverythingAsItWas) {
  ASSERT_NO_FATAL_FAILURE(Build());
  ASSERT_OK_AND_ASSIGN(FileLease held, ov_->Open(a_, O_RDWR));
  held = nullptr;
  const std::string u2 = NewLayerDir("u2");
  int commits = 0;
  auto r = ov_->Restack({t_.upper()}, u2, Commit(&commits, Failing()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err(), EIO);
  EXPECT_EQ(r.error().op, "write stack.json (test)");
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(FrozenPaths(), std::vector<std::string>{t_.upper()});
  EXPECT_EQ(ov_->UpperRootPath(), u1_);
  // The same nodes, names and data.
  EXPECT_TRUE(SameView(ViewNow(), later_));
  EXPECT_EQ(nodes_.at("a"), a_);
  EXPECT_EQ(nodes_.at("e/y"), y_);
  EXPECT_EQ(ov_->PathOf(x_), "d/x");
  EXPECT_EQ(ReadNow(a_), "a2");
  ASSERT_TRUE(Rewrite(a_, "a3"));
  ov_->ReleaseOpen(a_);
  EXPECT_EQ(ReadFile(u1_ + "/a"), "a3");
  EXPECT_TRUE(ListDir(u2).empty());

  // A frozen layer that cannot be opened: refused before the commit.
  auto missing = ov_->Restack({t_.root() + "/nowhere"}, u2, Commit(&commits));
  EXPECT_EQ(missing.err(), ENOENT);
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(ov_->UpperRootPath(), u1_);
}

// ---- ReplaceFrozen ---------------------------------------------------------

class OverlayReplaceFrozen : public OverlayStack {
 protected:
  // Three frozen layers over the host, and changes in the live upper:
  //   layer 1: a changed, n1 made, m/ and m/f made, gone removed;
  //   layer 2: d/x and m/f changed, m/g made, n1 renamed to m/n1 (a
  //            whiteout over a frozen file), a hard link m/f2 of m/f, the
  //            host's directory o/ replaced by a new (opaque) one;
  //   layer 3: m/g removed, m/sub/z made, k made;
  //   upper:   a changed again, k removed while open (its data kept by its
  //            path in layer 3).
  void Build() {
    MakeFile(t_.L("a"), "host a");
    MakeFile(t_.L("d/x"), "host x");
    MakeFile(t_.L("gone"), "host gone");
    MakeFile(t_.L("keep"), "host keep");
    MakeFile(t_.L("o/old"), "host old");
    ASSERT_NO_FATAL_FAILURE(Start());
    int commits = 0;
    // Layer 1.
    ASSERT_TRUE(Rewrite(At("a"), "a1"));
    ASSERT_NE(NewFile(root(), "n1", "n1"), nullptr);
    Node* m = NewDir(root(), "m");
    ASSERT_NE(m, nullptr);
    ASSERT_NE(NewFile(m, "f", "f1"), nullptr);
    ASSERT_OK(ov_->Unlink(root(), "gone"));
    ASSERT_OK(ov_->Freeze(NewLayerDir("f2"), Commit(&commits)));
    // Layer 2.
    ASSERT_TRUE(Rewrite(At("d/x"), "x2"));
    Node* f = At("m/f");
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(Rewrite(f, "f2"));
    ASSERT_NE(NewFile(m, "g", "g2"), nullptr);
    ASSERT_OK(ov_->Rename(root(), "n1", m, "n1", 0));
    ASSERT_EQ(Counted(ov_->Link(f, m, "f2"), "link"), f);
    ASSERT_OK(ov_->Unlink(At("o"), "old"));
    ASSERT_OK(ov_->Rmdir(root(), "o"));
    Node* o = NewDir(root(), "o");
    ASSERT_NE(o, nullptr);
    ASSERT_NE(NewFile(o, "new", "o2"), nullptr);
    ASSERT_OK(ov_->Freeze(NewLayerDir("f3"), Commit(&commits)));
    // Layer 3.
    ASSERT_OK(ov_->Unlink(m, "g"));
    Node* sub = NewDir(m, "sub");
    ASSERT_NE(sub, nullptr);
    ASSERT_NE(NewFile(sub, "z", "z3"), nullptr);
    ASSERT_NE(NewFile(root(), "k", "kept data"), nullptr);
    ASSERT_OK(ov_->Freeze(NewLayerDir("u"), Commit(&commits)));
    ASSERT_EQ(FrozenPaths().size(), 3u);
    // The live upper.
    ASSERT_TRUE(Rewrite(At("a"), "a4"));
    k_ = At("k");
    ASSERT_NE(k_, nullptr);
    ASSERT_OK_AND_ASSIGN(FileLease held, ov_->Open(k_, O_RDONLY));
    held = nullptr;
    ASSERT_OK(ov_->Unlink(root(), "k"));
    ASSERT_EQ(ReadNow(k_), "kept data");
    with_nlink_ = false;
    before_ = ViewNow();
    ASSERT_EQ(before_.count("k"), 0u);
    ASSERT_EQ(before_.count("m/n1"), 1u);
    ASSERT_EQ(before_.count("m/sub/z"), 1u);
    nodes_before_ = nodes_;
  }
  // Every node looked up before is the one looked up now, with the same
  // number.
  void ExpectTheSameNodes() {
    for (const auto& [rel, n] : nodes_before_) {
      auto it = nodes_.find(rel);
      ASSERT_NE(it, nodes_.end()) << rel;
      EXPECT_EQ(it->second, n) << rel << ": a name was forgotten";
    }
  }

  Node* k_ = nullptr;
  View before_;
  std::map<std::string, Node*> nodes_before_;
};

TEST_F(OverlayReplaceFrozen, AllFrozenLayersSquashedLeaveTheViewAndTheNodes) {
  ASSERT_NO_FATAL_FAILURE(Build());
  const std::vector<std::string> old = FrozenPaths();
  const std::string merged = Squashed("merged", 3);
  int commits = 0;
  ASSERT_OK(ov_->ReplaceFrozen(3, merged, Commit(&commits)));
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(FrozenPaths(), std::vector<std::string>{merged});

  EXPECT_TRUE(SameView(ViewNow(), before_));
  ExpectTheSameNodes();
  // The file kept by its path in layer 3 reads from the merged layer now.
  EXPECT_EQ(ReadNow(k_), "kept data");
  // New nodes get the same numbers from the merged layer.
  ForgetAll();
  EXPECT_TRUE(SameView(ViewNow(), before_));
  EXPECT_EQ(ReadNow(k_), "kept data");

  // The merged layer is served: the old layers can go.
  const std::string grave = NewLayerDir("grave");
  for (size_t i = 0; i < old.size(); ++i)
    ASSERT_EQ(
        ::rename(old[i].c_str(), (grave + "/" + std::to_string(i)).c_str()), 0);
  ForgetAll();
  EXPECT_TRUE(SameView(ViewNow(), before_));
  // A write copies a merged layer's file up, with its number.
  Node* f = nodes_.at("m/f");
  ASSERT_TRUE(Rewrite(f, "f4"));
  EXPECT_EQ(ReadFile(ov_->UpperRootPath() + "/m/f"), "f4");
  EXPECT_EQ(ReadFile(merged + "/m/f"), "f2");
  auto st = ov_->GetAttr(f);
  ASSERT_OK(st);
  EXPECT_NE(before_.at("m/f").find(" ino=" + std::to_string(st->st_ino) + " "),
            std::string::npos)
      << before_.at("m/f");
}

TEST_F(OverlayReplaceFrozen, TheBottomTwoSquashedMoveTheThirdDown) {
  ASSERT_NO_FATAL_FAILURE(Build());
  const std::vector<std::string> old = FrozenPaths();
  const std::string merged = Squashed("merged", 2);
  int commits = 0;
  ASSERT_OK(ov_->ReplaceFrozen(2, merged, Commit(&commits)));
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(FrozenPaths(), (std::vector<std::string>{merged, old[2]}));
  EXPECT_TRUE(SameView(ViewNow(), before_));
  ExpectTheSameNodes();
  EXPECT_EQ(ReadNow(k_), "kept data");
  ForgetAll();
  EXPECT_TRUE(SameView(ViewNow(), before_));
  // And a checkpoint on top of it still keeps the view.
  ASSERT_OK(ov_->Freeze(NewLayerDir("u-next"), Commit(&commits)));
  EXPECT_TRUE(SameView(ViewNow(), before_));
  EXPECT_EQ(ReadNow(k_), "kept data");
}

TEST_F(OverlayReplaceFrozen, AFailedCommitLeavesTheStack) {
  ASSERT_NO_FATAL_FAILURE(Build());
  const std::vector<std::string> old = FrozenPaths();
  const std::string merged = Squashed("merged", 3);
  int commits = 0;
  Status r = ov_->ReplaceFrozen(3, merged, Commit(&commits, Failing()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err(), EIO);
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(FrozenPaths(), old);
  EXPECT_TRUE(SameView(ViewNow(), before_));
  ExpectTheSameNodes();
  EXPECT_EQ(ReadNow(k_), "kept data");
  // The merged layer is not read: removing its files changes nothing.
  ASSERT_EQ(::unlink((merged + "/m/f").c_str()), 0);
  ForgetAll();
  EXPECT_TRUE(SameView(ViewNow(), before_));

  // No such layers: refused before the commit.
  EXPECT_ERRNO(EINVAL, ov_->ReplaceFrozen(0, merged, Commit(&commits)));
  EXPECT_ERRNO(EINVAL, ov_->ReplaceFrozen(4, merged, Commit(&commits)));
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(FrozenPaths(), old);
}

// A directory the sandbox made (no host directory under it, so no origin
// marker), frozen in one of the squashed layers and not copied up since:
// its number is its own st_ino in that layer, which the squash's new
// directory must keep, for a lookup after the kernel forgot it.
TEST_F(OverlayStack, ADirectoryTheSandboxMadeKeepsItsNumberAcrossASquash) {
  MakeFile(t_.L("host"), "host");
  ASSERT_NO_FATAL_FAILURE(Start());
  Node* made = NewDir(root(), "made");
  ASSERT_NE(made, nullptr);
  ASSERT_NE(NewFile(made, "f", "f"), nullptr);
  ASSERT_OK_AND_ASSIGN(struct stat st, ov_->GetAttr(made));
  const ino_t reported = st.st_ino;
  int commits = 0;
  ASSERT_OK(ov_->Freeze(NewLayerDir("u1"), Commit(&commits)));
  ASSERT_NE(NewFile(root(), "other", "other"), nullptr);
  ASSERT_OK(ov_->Freeze(NewLayerDir("u2"), Commit(&commits)));
  ForgetAll();
  Node* held = At("made");  // looked up afresh from the frozen layer
  ASSERT_NE(held, nullptr);
  ASSERT_OK_AND_ASSIGN(st, ov_->GetAttr(held));
  ASSERT_EQ(st.st_ino, reported) << "the number changed across a freeze";

  const std::string merged = Squashed("merged", 2);
  ASSERT_OK(ov_->ReplaceFrozen(2, merged, Commit(&commits)));
  ASSERT_OK_AND_ASSIGN(st, ov_->GetAttr(held));
  EXPECT_EQ(st.st_ino, reported) << "the node the kernel holds";
  ForgetAll();
  ASSERT_OK_AND_ASSIGN(auto listed, ov_->ReadDir(root()));
  for (const ListedEntry& e : listed) {
    if (e.name == "made") {
      EXPECT_EQ(e.ino, reported) << "listing";
    }
  }
  Node* again = At("made");
  ASSERT_NE(again, nullptr);
  ASSERT_OK_AND_ASSIGN(st, ov_->GetAttr(again));
  EXPECT_EQ(st.st_ino, reported)
      << "a lookup after the squash reports another number for " << merged
      << "/made";
}

// ---- The freeze gate -------------------------------------------------------

// How long a Freeze that must wait is watched not to end, and how long one
// that may go is given to end.
constexpr auto kHeld = std::chrono::milliseconds(200);
constexpr auto kGenerous = std::chrono::seconds(30);

TEST_F(OverlayStack, HoldOffFreezeHoldsACheckpointOffUntilReleased) {
  MakeFile(t_.L("f"), "host f");
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string next = NewLayerDir("u1");
  std::atomic<int> commits{0};
  auto gate = ov_->HoldOffFreeze();
  auto frozen = std::async(std::launch::async, [&] {
    return ov_->Freeze(next, [&] {
      ++commits;
      return Ok();
    });
  });
  EXPECT_EQ(frozen.wait_for(kHeld), std::future_status::timeout)
      << "Freeze ended while a write held the gate";
  EXPECT_EQ(commits.load(), 0);
  EXPECT_EQ(ov_->UpperRootPath(), t_.upper());
  gate.unlock();
  ASSERT_EQ(frozen.wait_for(kGenerous), std::future_status::ready);
  auto r = frozen.get();
  ASSERT_OK(r);
  EXPECT_EQ(commits.load(), 1);
  EXPECT_EQ(ov_->UpperRootPath(), next);
}

// The gate (Overlay::CloseGate), as the daemon uses it for the base's
// .git/index: the gated directory's own lookup waits too (the root's
// READDIRPLUS looks it up the same way), so nothing sees its attributes
// from before the install, which changes its ctime. Before, its lookup was
// answered at once, and a `tar` of the mount started at once said ".git:
// file changed as we read it".
TEST_F(OverlayStack, TheGatedDirectoryIsLookedUpOnlyOnceItsFileIsInstalled) {
  MakeDir(t_.L(".git"));
  MakeFile(t_.L(".git/HEAD"), "ref: refs/heads/main\n");
  MakeDir(t_.U(".git"));  // as the mount prepares it
  MakeFile(t_.root() + "/index.src", "the base's index");
  ASSERT_NO_FATAL_FAILURE(Start());
  ov_->CloseGate(".git");
  auto looked = std::async(std::launch::async, [&] {
    struct stat st {};
    auto n = ov_->Lookup(root(), ".git", &st, nullptr);
    return std::make_pair(n.ok(), st);
  });
  EXPECT_EQ(looked.wait_for(kHeld), std::future_status::timeout)
      << ".git was looked up while its index was still to be installed";
  UniqueFd src(::open((t_.root() + "/index.src").c_str(), O_RDONLY));
  ASSERT_TRUE(src);
  ASSERT_OK(ov_->InstallUpperFile(".git/index", src.get()));
  ov_->OpenGate();
  ASSERT_EQ(looked.wait_for(kGenerous), std::future_status::ready);
  auto [found, st] = looked.get();
  ASSERT_TRUE(found);
  const struct stat now = Lstat(t_.U(".git"));
  EXPECT_EQ(st.st_ctim.tv_sec, now.st_ctim.tv_sec);
  EXPECT_EQ(st.st_ctim.tv_nsec, now.st_ctim.tv_nsec)
      << "the lookup reported .git's attributes from before the install";
  ASSERT_OK_AND_ASSIGN(Node * index, Walk(".git/index"));
  ASSERT_OK_AND_ASSIGN(struct stat ist, ov_->GetAttr(index));
  EXPECT_EQ(ist.st_size, 16);
}

TEST_F(OverlayStack, AWriteInFlightEndsInTheLayerItStartedIn) {
  MakeFile(t_.L("f"), "host f");
  ASSERT_NO_FATAL_FAILURE(Start());
  Node* f = At("f");
  ASSERT_NE(f, nullptr);
  const std::string next = NewLayerDir("u1");

  // The write takes its descriptor (copying f up), then waits to be let go
  // before its bytes.
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, go = false;
  auto write = std::async(std::launch::async, [&] {
    return ov_->WriteData(f, Overlay::DataOp::kWrite, Quota::Charge::Span(0, 4),
                          [&](int fd) -> int64_t {
                            {
                              std::unique_lock<std::mutex> l(mu);
                              entered = true;
                              cv.notify_all();
                              cv.wait(l, [&] { return go; });
                            }
                            return ::pwrite(fd, "LATE", 4, 0) == 4 ? 4 : -errno;
                          });
  });
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, kGenerous, [&] { return entered; }));
  }
  std::atomic<int> commits{0};
  auto frozen = std::async(std::launch::async, [&] {
    return ov_->Freeze(next, [&] {
      ++commits;
      return Ok();
    });
  });
  const bool waited = frozen.wait_for(kHeld) == std::future_status::timeout;
  const int commits_meanwhile = commits.load();
  {
    std::lock_guard<std::mutex> l(mu);
    go = true;
    cv.notify_all();
  }
  ASSERT_EQ(write.wait_for(kGenerous), std::future_status::ready);
  ASSERT_EQ(frozen.wait_for(kGenerous), std::future_status::ready);
  EXPECT_TRUE(waited) << "Freeze ended while a write was in flight";
  EXPECT_EQ(commits_meanwhile, 0);
  auto w = write.get();
  ASSERT_OK(w);
  EXPECT_EQ(*w, 4);
  ASSERT_OK(frozen.get());
  EXPECT_EQ(commits.load(), 1);
  // Its bytes are in the layer now frozen, whole, and the next write goes
  // to the new one.
  EXPECT_EQ(ReadFile(t_.U("f")), "LATE f");
  EXPECT_FALSE(Exists(next + "/f"));
  EXPECT_EQ(ReadNow(f), "LATE f");
  ASSERT_TRUE(Rewrite(f, "after"));
  EXPECT_EQ(ReadFile(next + "/f"), "after");
  EXPECT_EQ(ReadFile(t_.U("f")), "LATE f");
}

}  // namespace
}  // namespace acqfs
