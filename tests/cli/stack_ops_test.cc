// Tests of ServeControl's checks (cli/stack_ops.h): every field of a
// request the daemon's control socket receives is checked for its type and
// range before anything is done (issue 32: a rewind number of 2^32 + 1 was
// checkpoint 1, and "kind": 7 a plain checkpoint), and a squash's merged
// layer is recognised by the folder it is in, however the client spelled
// its path (a relative state directory, one reached through a symlink).
#include "daemon/serve_control.h"
#include "stack/stack_ops.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness/temp_dir.h"

namespace acqfs::cli {
namespace {

using ::acqfs::test::TempDir;

// Records what the daemon would have been asked to do.
class FakeControl : public MountControl {
 public:
  Status Checkpoint(const std::string&,
                    const std::function<Status()>&) override {
    calls.push_back("checkpoint");
    return Ok();
  }
  Status Rewind(const std::vector<std::string>&, const std::string&,
                const std::function<Status()>&) override {
    calls.push_back("rewind");
    return Ok();
  }
  Status Squash(unsigned, const std::string&,
                const std::function<Status()>&) override {
    calls.push_back("squash");
    return Ok();
  }
  std::string UpperPath() override { return ""; }
  std::vector<std::string> calls;
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

}  // namespace
}  // namespace acqfs::cli
