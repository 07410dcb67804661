// Tests of ServeControl (daemon/serve_control.h), the daemon's answers on
// its control socket, against a fake filesystem (MountControl) and a real
// state directory: every field of a request is checked for its type and
// range before anything is done (issue 32: a rewind number of 2^32 + 1 was
// checkpoint 1, and "kind": 7 a plain checkpoint); a squash's merged layer
// is recognised by the folder it is in, however the client spelled its path
// (a relative state directory, one reached through a symlink); and each
// served request leaves the manifest, the store and the filesystem agreeing,
// whether the filesystem's switch succeeds or fails.
#include "stack/stack_ops.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/sys.h"
#include "daemon/serve_control.h"
#include "harness/temp_dir.h"
#include "stack/manifest.h"
#include "stack/store.h"

namespace acqfs::cli {
namespace {

using ::acqfs::test::TempDir;

// Records what the daemon would have been asked to do. Each switch runs
// its `commit` (the manifest written) as the real filesystem does, unless
// `fail` says the switch fails first.
class FakeControl : public MountControl {
 public:
  Status Checkpoint(const std::string& new_upper,
                    const std::function<Status()>& commit) override {
    calls.push_back("checkpoint");
    args = {new_upper};
    return Switch(commit, [&] { upper = new_upper; });
  }
  Status Rewind(const std::vector<std::string>& frozen,
                const std::string& new_upper,
                const std::function<Status()>& commit) override {
    calls.push_back("rewind");
    args = frozen;
    args.push_back(new_upper);
    return Switch(commit, [&] { upper = new_upper; });
  }
  Status Squash(unsigned count, const std::string& merged,
                const std::function<Status()>& commit) override {
    calls.push_back("squash");
    args = {std::to_string(count), merged};
    return Switch(commit, [] {});
  }
  std::string UpperPath() override { return upper; }

  std::vector<std::string> calls;
  std::vector<std::string> args;  // of the last call
  std::string upper;
  bool fail = false;

 private:
  Status Switch(const std::function<Status()>& commit,
                const std::function<void()>& done) {
    if (fail) return Error::Of(EIO, "switch the layers", "fake");
    ACQFS_TRY(commit());
    done();
    return Ok();
  }
};

int ErrnoOf(const nlohmann::json& reply) {
  if (!reply.contains("ok") || reply["ok"].get<bool>()) return 0;
  return reply.value("errno", 0);
}

TEST(ServeControl, FieldsOfTheWrongTypeOrRangeAreRefused) {
  TempDir t;
  const std::string state = t.MakeDir("state");
  t.MakeDir("state/box");
  FakeControl mc;
  for (const char* bad :
       {R"({"op":"rewind","number":4294967297})",
        R"({"op":"rewind","number":0})", R"({"op":"rewind","number":-1})",
        R"({"op":"rewind","number":"1"})", R"({"op":"rewind","number":1.5})",
        R"({"op":"rewind"})", R"({"op":"checkpoint","kind":7})",
        R"({"op":"checkpoint","kind":"nonsense"})",
        R"({"op":"checkpoint","message":["x"]})"}) {
    nlohmann::json reply =
        ServeControl(state, "box", &mc, nlohmann::json::parse(bad));
    EXPECT_EQ(ErrnoOf(reply), EINVAL) << bad << " -> " << reply.dump();
  }
  EXPECT_TRUE(mc.calls.empty());
}

TEST(ServeControl, ASquashLayerIsKnownByItsFolderNotItsSpelling) {
  TempDir t;
  const std::string state = t.MakeDir("state");
  t.MakeDir("state/box");
  t.MakeDir("other");
  const std::string id = "0123456789abcdef";
  ASSERT_EQ(::symlink(state.c_str(), (t.path() + "/link").c_str()), 0);
  FakeControl mc;
  auto squash = [&](const std::string& building) {
    return ServeControl(state, "box", &mc,
                        {{"op", "squash"},
                         {"merge", {".layers/aaaaaaaaaaaaaaaa"}},
                         {"id", id},
                         {"building", building}});
  };
  // Through a symlink to the same folder: accepted as this sandbox's (it
  // then fails only for want of a stack here).
  nlohmann::json r = squash(t.path() + "/link/box/squash." + id);
  EXPECT_NE(ErrnoOf(r), 0) << r.dump();
  EXPECT_NE(ErrnoOf(r), EINVAL) << r.dump();
  // Another folder, another name, another id: refused.
  for (const std::string& bad :
       {t.path() + "/other/squash." + id, state + "/box/squash.x" + id,
        state + "/box/squash.ffffffffffffffff", std::string("squash.") + id})
    EXPECT_EQ(ErrnoOf(squash(bad)), EINVAL) << bad;
  EXPECT_TRUE(mc.calls.empty());
}

// A sandbox "box" with a stack of two frozen layers (a.txt in the first,
// b.txt in the second) under an empty upper, and its manifest.
struct Served {
  TempDir t;
  std::string state;
  StackManifest m;
  FakeControl mc;

  Served() {
    state = t.MakeDir("state");
    t.MakeDir("state/box", 0700);
    LayerStore store(state);
    auto a = store.Create();
    auto b = store.Create();
    auto u = store.Create();
    EXPECT_TRUE(a && b && u);
    std::ofstream(store.Path(*a) + "/a.txt") << "a";
    std::ofstream(store.Path(*b) + "/b.txt") << "b";
    m.upper = *u;
    m.frozen = {*a, *b};
    m.checkpoints = {{1, "one", 1, {*a}, CheckpointKind::kCheckpoint},
                     {2, "two", 2, {*a, *b}, CheckpointKind::kCheckpoint}};
    m.base = 2;
    m.next_number = 3;
    EXPECT_TRUE(WriteStack(StackPath(state, "box"), m).ok());
    mc.upper = store.Path(*u);
  }
  StackManifest Now() {
    auto r = ReadStack(StackPath(state, "box"));
    EXPECT_TRUE(r.ok());
    return r ? *r : StackManifest{};
  }
  nlohmann::json Ask(const nlohmann::json& req) {
    return ServeControl(state, "box", &mc, req);
  }
  bool InStore(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
  }
};

TEST(ServeControl, ACheckpointFreezesTheUpperOnceTheManifestSaysSo) {
  Served s;
  const std::string old_upper = s.mc.upper;
  nlohmann::json r =
      s.Ask({{"op", "checkpoint"}, {"message", "three"}, {"kind", "fork"}});
  ASSERT_EQ(ErrnoOf(r), 0) << r.dump();
  EXPECT_EQ(r["number"], 3);
  StackManifest now = s.Now();
  ASSERT_EQ(now.frozen.size(), 3u);
  EXPECT_EQ(LayerStore(s.state).Path(now.frozen.back()), old_upper);
  EXPECT_EQ(LayerStore(s.state).Path(now.upper), s.mc.upper);
  EXPECT_NE(s.mc.upper, old_upper);
  ASSERT_NE(now.Find(3), nullptr);
  EXPECT_EQ(now.Find(3)->message, "three");
  EXPECT_EQ(now.Find(3)->kind, CheckpointKind::kFork);
  EXPECT_EQ(r["layer"], now.frozen.back());

  // The filesystem cannot switch: the manifest is as it was, and the new
  // upper made for it is gone from the store.
  s.mc.fail = true;
  const std::string upper = s.mc.upper;
  r = s.Ask({{"op", "checkpoint"}});
  EXPECT_EQ(ErrnoOf(r), EIO) << r.dump();
  ASSERT_EQ(s.mc.args.size(), 1u);
  EXPECT_FALSE(s.InStore(s.mc.args[0]));
  EXPECT_EQ(s.Now().frozen, now.frozen);
  EXPECT_EQ(s.Now().next_number, now.next_number);
  EXPECT_EQ(s.mc.upper, upper);
}

TEST(ServeControl, ARewindServesTheCheckpointsStackAndKeepsAnUndoPoint) {
  Served s;
  nlohmann::json r = s.Ask({{"op", "rewind"}, {"number", 9u}});
  EXPECT_EQ(ErrnoOf(r), ENOENT) << r.dump();
  EXPECT_TRUE(s.mc.calls.empty());

  const std::string old_upper = s.m.upper;
  r = s.Ask({{"op", "rewind"}, {"number", 1u}});
  ASSERT_EQ(ErrnoOf(r), 0) << r.dump();
  EXPECT_EQ(r["number"], 1);
  const uint32_t undo = r["undo"].get<uint32_t>();
  StackManifest now = s.Now();
  LayerStore store(s.state);
  EXPECT_EQ(now.frozen, std::vector<std::string>({s.m.frozen[0]}));
  EXPECT_EQ(now.base, 1u);
  // The filesystem was handed the same stack, bottom first, and the new
  // upper.
  ASSERT_EQ(s.mc.args.size(), 2u);
  EXPECT_EQ(s.mc.args[0], store.Path(s.m.frozen[0]));
  EXPECT_EQ(s.mc.args[1], store.Path(now.upper));
  // What the stack held is an undo point: the old upper frozen on top of
  // checkpoint 2's layers.
  ASSERT_NE(now.Find(undo), nullptr);
  EXPECT_EQ(now.Find(undo)->kind, CheckpointKind::kAutoRewind);
  EXPECT_EQ(
      now.Find(undo)->layers,
      std::vector<std::string>({s.m.frozen[0], s.m.frozen[1], old_upper}));

  s.mc.fail = true;
  r = s.Ask({{"op", "rewind"}, {"number", 2u}});
  EXPECT_EQ(ErrnoOf(r), EIO) << r.dump();
  EXPECT_FALSE(s.InStore(s.mc.args.back()));
  EXPECT_EQ(s.Now().base, 1u);
  EXPECT_EQ(s.Now().frozen, now.frozen);
}

TEST(ServeControl, ASquashAdoptsTheBuiltLayerOrLeavesTheStackAsItWas) {
  Served s;
  LayerStore store(s.state);
  struct stat like;
  ASSERT_EQ(::stat(store.Path(s.m.frozen[1]).c_str(), &like), 0);
  const std::string folder = s.state + "/box";
  auto squash = [&](const std::string& id) {
    return s.Ask({{"op", "squash"},
                  {"merge", s.m.frozen},
                  {"id", id},
                  {"building", LayerStore::BuildPath(folder, id)}});
  };
  // The switch fails: the built layer adopted for it goes, the stack stays.
  auto id = store.StartBuild(folder, like, /*sweep=*/false);
  ASSERT_TRUE(id.ok());
  std::ofstream(LayerStore::BuildPath(folder, *id) + "/merged.txt") << "m";
  s.mc.fail = true;
  nlohmann::json r = squash(*id);
  EXPECT_EQ(ErrnoOf(r), EIO) << r.dump();
  EXPECT_FALSE(s.InStore(store.Path(StoreRef(*id))));
  EXPECT_EQ(s.Now().frozen, s.m.frozen);

  // Served: the two frozen layers are one, the checkpoint that named them
  // both names the merged layer.
  s.mc.fail = false;
  id = store.StartBuild(folder, like, /*sweep=*/true);
  ASSERT_TRUE(id.ok());
  std::ofstream(LayerStore::BuildPath(folder, *id) + "/merged.txt") << "m";
  r = squash(*id);
  ASSERT_EQ(ErrnoOf(r), 0) << r.dump();
  EXPECT_EQ(r["layer"], StoreRef(*id));
  EXPECT_EQ(r["frozen"], 1);
  ASSERT_EQ(s.mc.args.size(), 2u);
  EXPECT_EQ(s.mc.args[0], "2");
  EXPECT_EQ(s.mc.args[1], store.Path(StoreRef(*id)));
  StackManifest now = s.Now();
  EXPECT_EQ(now.frozen, std::vector<std::string>({StoreRef(*id)}));
  ASSERT_NE(now.Find(2), nullptr);
  EXPECT_EQ(now.Find(2)->layers, std::vector<std::string>({StoreRef(*id)}));
  EXPECT_TRUE(s.InStore(store.Path(StoreRef(*id)) + "/merged.txt"));
  EXPECT_FALSE(s.InStore(LayerStore::BuildPath(folder, *id)));

  // The stack changed since the client planned: ESTALE, nothing moved.
  auto late = store.StartBuild(folder, like, /*sweep=*/false);
  ASSERT_TRUE(late.ok());
  r = squash(*late);
  EXPECT_EQ(ErrnoOf(r), ESTALE) << r.dump();
  EXPECT_TRUE(s.InStore(LayerStore::BuildPath(folder, *late)));
  EXPECT_EQ(s.Now().frozen, now.frozen);
}

TEST(ServeControl, PingAndUnknownRequests) {
  Served s;
  EXPECT_EQ(s.Ask({{"op", "ping"}})["ok"], true);
  for (const char* bad :
       {R"({"op":"status"})", R"({"op":7})", R"({})", R"({"op":"Checkpoint"})"})
    EXPECT_EQ(ErrnoOf(s.Ask(nlohmann::json::parse(bad))), EINVAL) << bad;
  EXPECT_TRUE(s.mc.calls.empty());
}

}  // namespace
}  // namespace acqfs::cli
