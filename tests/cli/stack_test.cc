// The layer stack's on-disk unit (stack/: manifest, store, transform),
// the manifest's JSON and its validation, the pure transformations
// (checkpoint, rewind, fork, squash and which checkpoints they keep), the
// layer store (create, remove, stats and their cache), the store lock,
// garbage collection and the legacy migration with a crash at each step.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/sys.h"
#include "stack/manifest.h"
#include "stack/store.h"
#include "stack/transform.h"

namespace acqfs::cli {
namespace {

using nlohmann::json;

const std::string kA = ".layers/00000000000000aa";
const std::string kB = ".layers/00000000000000bb";
const std::string kC = ".layers/00000000000000cc";
const std::string kD = ".layers/00000000000000dd";
const std::string kE = ".layers/00000000000000ee";
const std::string kU = ".layers/0000000000000f01";
const std::string kU2 = ".layers/0000000000000f02";
const std::string kU3 = ".layers/0000000000000f03";
const std::string kM = ".layers/0000000000000abc";

#define ASSERT_OK(expr)                                            \
  do {                                                             \
    const auto& r_ = (expr);                                       \
    ASSERT_TRUE(r_.ok()) << #expr << ": " << r_.error().Message(); \
  } while (0)

void MakeDir(const std::string& p, mode_t mode = 0755) {
  ASSERT_EQ(::mkdir(p.c_str(), mode), 0) << p << ": " << strerror(errno);
  ASSERT_EQ(::chmod(p.c_str(), mode), 0) << p;
}

void WriteText(const std::string& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(f.good()) << p;
  f << text;
}

std::string ReadText(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

// Blocks a file of `size` bytes occupies (what the stats count).
uint64_t BytesOf(const std::string& p) {
  struct stat st;
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

class StackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/acqfs-stack-XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    root_ = templ;
    state_ = root_ + "/state";
    MakeDir(state_, 0700);
  }
  void TearDown() override {
    Status s = sys::RemoveTree(AT_FDCWD, root_, root_);
    EXPECT_TRUE(s.ok()) << s.error().Message();
  }
  // A legacy sandbox folder: meta.json and an upper with a file.
  void MakeLegacy(const std::string& name) {
    MakeDir(state_ + "/" + name, 0700);
    WriteText(state_ + "/" + name + "/meta.json", "{}");
    MakeDir(state_ + "/" + name + "/upper");
    MakeDir(state_ + "/" + name + "/upper/src");
    WriteText(state_ + "/" + name + "/upper/src/data.txt", "precious");
  }
  void ExpectLegacyDataAt(const std::string& ref) {
    EXPECT_EQ(ReadText(state_ + "/" + ref + "/src/data.txt"), "precious")
        << ref;
  }

  std::string root_, state_;
};

// A manifest with history: 1 = [A], 2 = [A,B], 3 = [A,B,C] (base),
// 4 = [A,D] (another branch, an auto-rewind point).
StackManifest Sample() {
  StackManifest m;
  m.upper = kU;
  m.frozen = {kA, kB, kC};
  m.base = 3;
  m.next_number = 5;
  m.checkpoints = {
      {1, "one", 100, {kA}, CheckpointKind::kCheckpoint},
      {2, "", 200, {kA, kB}, CheckpointKind::kFork},
      {4, "before rewind to 3", 400, {kA, kD}, CheckpointKind::kAutoRewind},
      {3, "three \"quoted\"", 300, {kA, kB, kC}, CheckpointKind::kCheckpoint},
  };
  return m;
}

// ---------------------------------------------------------------- refs

TEST(StackRefs, Grammar) {
  EXPECT_TRUE(ValidLayerRef(".layers/0123456789abcdef"));
  EXPECT_TRUE(ValidLayerRef("my-box_1.x/upper"));
  EXPECT_FALSE(ValidLayerRef(".layers/0123456789ABCDEF"));   // uppercase
  EXPECT_FALSE(ValidLayerRef(".layers/0123456789abcde"));    // 15
  EXPECT_FALSE(ValidLayerRef(".layers/0123456789abcdef0"));  // 17
  EXPECT_FALSE(ValidLayerRef("/abs/upper"));
  EXPECT_FALSE(ValidLayerRef("../upper"));
  EXPECT_FALSE(ValidLayerRef("./upper"));
  EXPECT_FALSE(ValidLayerRef("a/../b/upper"));
  EXPECT_FALSE(ValidLayerRef(".layers/upper"));
  EXPECT_FALSE(ValidLayerRef("box/work"));
  EXPECT_FALSE(ValidLayerRef("box/upper/"));
  EXPECT_FALSE(ValidLayerRef(""));
  EXPECT_TRUE(IsLegacyRef("box/upper"));
  EXPECT_FALSE(IsLegacyRef(kA));
  auto id = NewLayerId();
  ASSERT_OK(id);
  EXPECT_TRUE(ValidLayerId(*id)) << *id;
  auto id2 = NewLayerId();
  ASSERT_OK(id2);
  EXPECT_NE(*id, *id2);
}

// ---------------------------------------------------------------- JSON

TEST_F(StackTest, JsonRoundTrip) {
  StackManifest m = Sample();
  m.checkpoints[0].time_ns = -5;
  m.checkpoints[1].time_ns = 1700000000123456789;
  auto back = ParseStack(StackToJson(m), "x");
  ASSERT_OK(back);
  EXPECT_EQ(*back, m);

  StackManifest mig;
  mig.upper = kU;
  mig.moved_from = "box/upper";
  auto back2 = ParseStack(StackToJson(mig), "x");
  ASSERT_OK(back2);
  EXPECT_EQ(*back2, mig);
  EXPECT_EQ(json::parse(StackToJson(mig))["version"], 1);

  const std::string path = state_ + "/stack.json";
  ASSERT_OK(WriteStack(path, m));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto read = ReadStack(path);
  ASSERT_OK(read);
  EXPECT_EQ(*read, m);
}

struct Malformed {
  const char* what;
  std::string field;  // expected in the op: "parse sandbox stack (FIELD)"
  std::function<void(json&)> mutate;
};

TEST_F(StackTest, MalformedManifestsNameTheField) {
  const json good = json::parse(StackToJson(Sample()));
  const std::vector<Malformed> cases = {
      {"not an object", "json", [](json& j) { j = json::array(); }},
      {"no version", "version", [](json& j) { j.erase("version"); }},
      {"version 2", "version", [](json& j) { j["version"] = 2; }},
      {"version string", "version", [](json& j) { j["version"] = "1"; }},
      {"unknown key", "colour", [](json& j) { j["colour"] = "red"; }},
      {"no upper", "upper", [](json& j) { j.erase("upper"); }},
      {"upper number", "upper", [](json& j) { j["upper"] = 7; }},
      {"upper absolute", "upper", [](json& j) { j["upper"] = "/etc/upper"; }},
      {"upper dotdot", "upper", [](json& j) { j["upper"] = "../x/upper"; }},
      {"upper bad id", "upper", [](json& j) { j["upper"] = ".layers/XYZ"; }},
      {"upper is frozen", "upper", [](json& j) { j["upper"] = kB; }},
      {"frozen not array", "frozen", [](json& j) { j["frozen"] = kA; }},
      {"frozen bad ref", "frozen",
       [](json& j) { j["frozen"][1] = ".layers/../../etc"; }},
      {"frozen duplicate", "frozen",
       [](json& j) {
         j["frozen"] = {kA, kA};
       }},
      {"frozen too deep", "frozen",
       [](json& j) {
         json f = json::array();
         for (int i = 0; i < static_cast<int>(kMaxFrozen) + 1; ++i) {
           char id[17];
           std::snprintf(id, sizeof id, "%016x", i + 1);
           f.push_back(std::string(".layers/") + id);
         }
         j["frozen"] = f;
       }},
      {"no base", "base", [](json& j) { j.erase("base"); }},
      {"base negative", "base", [](json& j) { j["base"] = -1; }},
      {"base float", "base", [](json& j) { j["base"] = 3.5; }},
      {"base not frozen", "base", [](json& j) { j["base"] = 2; }},
      {"base missing checkpoint", "base",
       [](json& j) {
         j["checkpoints"].erase(3);  // number 3
       }},
      {"base zero with frozen", "base", [](json& j) { j["base"] = 0; }},
      {"base >= next", "base", [](json& j) { j["base"] = 5; }},
      {"no next_number", "next_number",
       [](json& j) { j.erase("next_number"); }},
      {"next_number zero", "next_number",
       [](json& j) { j["next_number"] = 0; }},
      {"next_number huge", "next_number",
       [](json& j) { j["next_number"] = 5000000000ull; }},
      {"checkpoints object", "checkpoints",
       [](json& j) { j["checkpoints"] = json::object(); }},
      {"checkpoint not object", "checkpoints[1]",
       [](json& j) { j["checkpoints"][1] = 2; }},
      {"checkpoint no number", "checkpoints[0].number",
       [](json& j) { j["checkpoints"][0].erase("number"); }},
      {"checkpoint number zero", "checkpoints[0].number",
       [](json& j) { j["checkpoints"][0]["number"] = 0; }},
      {"checkpoint number duplicate", "checkpoints[1].number",
       [](json& j) { j["checkpoints"][1]["number"] = 1; }},
      {"checkpoint number >= next", "checkpoints[2].number",
       [](json& j) { j["checkpoints"][2]["number"] = 5; }},
      {"checkpoint message number", "checkpoints[0].message",
       [](json& j) { j["checkpoints"][0]["message"] = 1; }},
      {"checkpoint no time", "checkpoints[0].time_ns",
       [](json& j) { j["checkpoints"][0].erase("time_ns"); }},
      {"checkpoint time string", "checkpoints[0].time_ns",
       [](json& j) { j["checkpoints"][0]["time_ns"] = "now"; }},
      {"checkpoint time too big", "checkpoints[0].time_ns",
       [](json& j) {
         j["checkpoints"][0]["time_ns"] = 18000000000000000000ull;
       }},
      {"checkpoint layers empty", "checkpoints[0].layers",
       [](json& j) { j["checkpoints"][0]["layers"] = json::array(); }},
      {"checkpoint layers absolute", "checkpoints[0].layers",
       [](json& j) { j["checkpoints"][0]["layers"][0] = "/x/upper"; }},
      {"checkpoint layers has upper", "checkpoints[2].layers",
       [](json& j) { j["checkpoints"][2]["layers"][1] = kU; }},
      {"checkpoint bad kind", "checkpoints[0].kind",
       [](json& j) { j["checkpoints"][0]["kind"] = "snapshot"; }},
      {"checkpoint unknown key", "checkpoints[0].extra",
       [](json& j) { j["checkpoints"][0]["extra"] = true; }},
      {"moved_from store ref", "moved_from",
       [](json& j) { j["moved_from"] = kE; }},
      {"moved_from dotdot", "moved_from",
       [](json& j) { j["moved_from"] = "../upper"; }},
      {"moved_from number", "moved_from", [](json& j) { j["moved_from"] = 3; }},
  };
  for (const Malformed& c : cases) {
    json j = good;
    c.mutate(j);
    auto r = ParseStack(j.dump(), "/s/stack.json");
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.err(), EINVAL) << c.what;
    EXPECT_EQ(r.error().op, "parse sandbox stack (" + c.field + ")") << c.what;
    EXPECT_EQ(r.error().path, "/s/stack.json") << c.what;
  }
  for (const char* text : {"", "{", "{\"version\": 1,}", "null", "[1]"}) {
    auto r = ParseStack(text, "p");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().op, "parse sandbox stack (json)") << text;
  }
  // The unmutated one parses (the table tests what it says).
  ASSERT_OK(ParseStack(good.dump(), "p"));
  // From a file: the path is named.
  const std::string path = state_ + "/bad.json";
  WriteText(path, "{\"version\": 1}");
  auto r = ReadStack(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err(), EINVAL);
  EXPECT_EQ(r.error().path, path);
}

// ---------------------------------------------------------------- transforms

TEST(StackTransform, CheckpointFreezesTheUpper) {
  StackManifest m;
  m.upper = kA;
  auto r = TakeCheckpoint(m, kB, "first", 10, CheckpointKind::kCheckpoint);
  ASSERT_OK(r);
  EXPECT_EQ(r->number, 1u);
  EXPECT_EQ(r->manifest.upper, kB);
  EXPECT_EQ(r->manifest.frozen, std::vector<std::string>({kA}));
  EXPECT_EQ(r->manifest.base, 1u);
  EXPECT_EQ(r->manifest.next_number, 2u);
  ASSERT_EQ(r->manifest.checkpoints.size(), 1u);
  EXPECT_EQ(r->manifest.checkpoints[0],
            (Checkpoint{1, "first", 10, {kA}, CheckpointKind::kCheckpoint}));
  auto r2 = TakeCheckpoint(r->manifest, kC, "", 20, CheckpointKind::kFork);
  ASSERT_OK(r2);
  EXPECT_EQ(r2->number, 2u);
  EXPECT_EQ(r2->manifest.frozen, std::vector<std::string>({kA, kB}));
  EXPECT_EQ(r2->manifest.checkpoints[1].layers, r2->manifest.frozen);
  // Valid on disk too.
  ASSERT_OK(ParseStack(StackToJson(r2->manifest), "x"));

  // The new upper must be new.
  auto dup =
      TakeCheckpoint(r2->manifest, kA, "", 0, CheckpointKind::kCheckpoint);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.err(), EINVAL);
  auto bad = TakeCheckpoint(r2->manifest, "/tmp/x", "", 0,
                            CheckpointKind::kCheckpoint);
  EXPECT_EQ(bad.err(), EINVAL);
  // Not in the middle of a migration.
  StackManifest mig = m;
  mig.moved_from = "box/upper";
  EXPECT_EQ(TakeCheckpoint(mig, kB, "", 0, CheckpointKind::kCheckpoint).err(),
            EINVAL);
}

TEST(StackTransform, DepthLimit) {
  StackManifest m;
  m.upper = ".layers/1000000000000000";
  for (uint32_t i = 1; i <= kMaxFrozen; ++i) {
    char id[17];
    std::snprintf(id, sizeof id, "%016x", 0x20000 + i);
    auto r = TakeCheckpoint(m, std::string(".layers/") + id, "", i,
                            CheckpointKind::kCheckpoint);
    ASSERT_OK(r);
    m = r->manifest;
  }
  EXPECT_EQ(m.frozen.size(), kMaxFrozen);
  ASSERT_OK(ParseStack(StackToJson(m), "x"));
  auto r = TakeCheckpoint(m, kE, "", 0, CheckpointKind::kCheckpoint);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err(), EMLINK);
  EXPECT_NE(r.error().op.find("squash first"), std::string::npos)
      << r.error().op;
  auto f = ForkCurrent(m, kE, kD, "", 0);
  EXPECT_EQ(f.err(), EMLINK);
  // Forking at an existing checkpoint needs no new frozen layer.
  ASSERT_OK(Fork(m, 0, kE));
}

TEST(StackTransform, Rewind) {
  const StackManifest m = Sample();
  auto r = Rewind(m, 1, kE);
  ASSERT_OK(r);
  EXPECT_EQ(r->frozen, std::vector<std::string>({kA}));
  EXPECT_EQ(r->base, 1u);
  EXPECT_EQ(r->upper, kE);
  EXPECT_EQ(r->checkpoints, m.checkpoints);  // history untouched
  EXPECT_EQ(r->next_number, m.next_number);
  ASSERT_OK(ParseStack(StackToJson(*r), "x"));

  auto none = Rewind(m, 7, kE);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.err(), ENOENT);
  EXPECT_NE(none.error().op.find("7"), std::string::npos);
  EXPECT_EQ(Rewind(m, 0, kE).err(), ENOENT);
}

TEST(StackTransform, RewindWithUndo) {
  const StackManifest m = Sample();
  uint32_t undo = 99;
  auto r = RewindWithUndo(m, 2, /*upper_nonempty=*/true, kE, 500, &undo);
  ASSERT_OK(r);
  EXPECT_EQ(undo, 5u);
  EXPECT_EQ(r->frozen, std::vector<std::string>({kA, kB}));
  EXPECT_EQ(r->base, 2u);
  EXPECT_EQ(r->upper, kE);
  EXPECT_EQ(r->next_number, 6u);
  const Checkpoint* c = r->Find(5);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->kind, CheckpointKind::kAutoRewind);
  EXPECT_EQ(c->message, "before rewind to 2");
  EXPECT_EQ(c->time_ns, 500);
  EXPECT_EQ(c->layers, std::vector<std::string>({kA, kB, kC, kU}));
  ASSERT_OK(ParseStack(StackToJson(*r), "x"));
  // And the undo: rewinding to 5 gives the old tree back.
  auto back = Rewind(*r, 5, kM);
  ASSERT_OK(back);
  EXPECT_EQ(back->frozen, std::vector<std::string>({kA, kB, kC, kU}));

  // An empty upper is not kept.
  auto e = RewindWithUndo(m, 2, false, kE, 500, &undo);
  ASSERT_OK(e);
  EXPECT_EQ(undo, 0u);
  EXPECT_EQ(e->checkpoints, m.checkpoints);
  EXPECT_EQ(e->next_number, m.next_number);
  EXPECT_EQ(RewindWithUndo(m, 9, true, kE, 0).err(), ENOENT);
}

TEST(StackTransform, ForkSharesThePrefixHistory) {
  const StackManifest m = Sample();
  auto f = Fork(m, 2, kE);
  ASSERT_OK(f);
  EXPECT_EQ(f->upper, kE);
  EXPECT_EQ(f->frozen, std::vector<std::string>({kA, kB}));
  EXPECT_EQ(f->base, 2u);
  EXPECT_EQ(f->next_number, 5u);
  ASSERT_EQ(f->checkpoints.size(), 2u);  // 1 and 2; not 3 (later) or 4
  EXPECT_EQ(f->checkpoints[0], m.checkpoints[0]);
  EXPECT_EQ(f->checkpoints[1], m.checkpoints[1]);
  EXPECT_FALSE(f->moved_from);
  ASSERT_OK(ParseStack(StackToJson(*f), "x"));

  auto cur = Fork(m, 0, kE);  // at m.base == 3
  ASSERT_OK(cur);
  EXPECT_EQ(cur->base, 3u);
  EXPECT_EQ(cur->frozen, m.frozen);
  EXPECT_EQ(cur->checkpoints.size(), 3u);  // 1, 2, 3

  auto branch = Fork(m, 4, kE);
  ASSERT_OK(branch);
  ASSERT_EQ(branch->checkpoints.size(), 2u);  // 1 and 4
  EXPECT_EQ(branch->checkpoints[1].number, 4u);

  StackManifest host;
  host.upper = kU;
  auto h = Fork(host, 0, kE);
  ASSERT_OK(h);
  EXPECT_TRUE(h->frozen.empty());
  EXPECT_EQ(h->base, 0u);
  EXPECT_EQ(Fork(m, 8, kE).err(), ENOENT);
  EXPECT_EQ(Fork(m, 2, kU).err(), EINVAL);  // m's live upper
}

TEST(StackTransform, ForkCurrentCheckpointsTheParent) {
  const StackManifest m = Sample();
  auto f = ForkCurrent(m, kE, kM, "fork to other", 600);
  ASSERT_OK(f);
  EXPECT_EQ(f->number, 5u);
  EXPECT_EQ(f->parent.upper, kE);
  EXPECT_EQ(f->parent.frozen, std::vector<std::string>({kA, kB, kC, kU}));
  EXPECT_EQ(f->parent.Find(5)->kind, CheckpointKind::kFork);
  EXPECT_EQ(f->child.upper, kM);
  EXPECT_EQ(f->child.frozen, f->parent.frozen);
  EXPECT_EQ(f->child.base, 5u);
  EXPECT_EQ(f->child.next_number, 6u);
  EXPECT_EQ(f->child.checkpoints.size(), 4u);  // 1, 2, 3, 5
  EXPECT_EQ(f->child.Find(4), nullptr);
  EXPECT_EQ(ForkCurrent(m, kE, kE, "", 0).err(), EINVAL);
}

TEST(StackTransform, SquashNothingToDo) {
  StackManifest m = Sample();  // 3 frozen
  EXPECT_TRUE(PlanSquash(m, 2).merge.empty());
  EXPECT_FALSE(PlanSquash(m, 2).nothing_to_do.empty());
  EXPECT_TRUE(PlanSquash(m, 5).merge.empty());
  EXPECT_EQ(PlanSquash(m, 1).merge, std::vector<std::string>({kA, kB}));
  SquashPlan empty = PlanSquash(m, 2);
  EXPECT_EQ(ApplySquash(m, empty, kM).err(), EINVAL);
}

TEST(StackTransform, SquashKeepsBranchesAndRenumbersNothing) {
  // Frozen [A,B,C,D]; history 1=[A] 2=[A,B] 3=[A,B,C] 5=[A,B,C,D] (base),
  // 4=[A,E] (a branch: an undo point), 6=[A,B,E]? (would need E twice; use
  // a branch off 2 with its own layer U2).
  StackManifest m;
  m.upper = kU;
  m.frozen = {kA, kB, kC, kD};
  m.base = 5;
  m.next_number = 7;
  m.checkpoints = {{1, "1", 1, {kA}, CheckpointKind::kCheckpoint},
                   {2, "2", 2, {kA, kB}, CheckpointKind::kCheckpoint},
                   {3, "3", 3, {kA, kB, kC}, CheckpointKind::kCheckpoint},
                   {4, "4", 4, {kA, kE}, CheckpointKind::kAutoRewind},
                   {5, "5", 5, {kA, kB, kC, kD}, CheckpointKind::kCheckpoint},
                   {6, "6", 6, {kA, kB, kU2}, CheckpointKind::kAutoRewind}};
  ASSERT_OK(ParseStack(StackToJson(m), "x"));
  // keep 1: merge [A,B,C].
  SquashPlan p = PlanSquash(m, 1);
  ASSERT_EQ(p.merge, std::vector<std::string>({kA, kB, kC}));
  auto s = ApplySquash(m, p, kM);
  ASSERT_OK(s);
  EXPECT_EQ(s->frozen, std::vector<std::string>({kM, kD}));
  EXPECT_EQ(s->upper, kU);
  EXPECT_EQ(s->base, 5u);
  EXPECT_EQ(s->next_number, 7u);
  EXPECT_EQ(s->Find(1), nullptr);  // strict prefixes: merged away
  EXPECT_EQ(s->Find(2), nullptr);
  ASSERT_NE(s->Find(3), nullptr);  // exactly the range
  EXPECT_EQ(s->Find(3)->layers, std::vector<std::string>({kM}));
  EXPECT_EQ(s->Find(3)->message, "3");
  EXPECT_EQ(s->Find(5)->layers, std::vector<std::string>({kM, kD}));
  // Other branches untouched: their layers stay referenced.
  EXPECT_EQ(s->Find(4)->layers, std::vector<std::string>({kA, kE}));
  EXPECT_EQ(s->Find(6)->layers, std::vector<std::string>({kA, kB, kU2}));
  ASSERT_OK(ParseStack(StackToJson(*s), "x"));
  auto refs = s->Referenced();
  for (const auto& r : {kA, kB, kE, kU2, kM, kD, kU})
    EXPECT_TRUE(std::binary_search(refs.begin(), refs.end(), r)) << r;
  EXPECT_FALSE(std::binary_search(refs.begin(), refs.end(), kC));

  // keep 0: everything into one; the base gets [merged].
  auto all = ApplySquash(m, PlanSquash(m, 0), kM);
  ASSERT_OK(all);
  EXPECT_EQ(all->frozen, std::vector<std::string>({kM}));
  EXPECT_EQ(all->Find(5)->layers, std::vector<std::string>({kM}));
  EXPECT_EQ(all->Find(3), nullptr);
  ASSERT_OK(ParseStack(StackToJson(*all), "x"));

  // A plan that is not this stack's, or a merged ref in use.
  SquashPlan other = p;
  other.merge[1] = kE;
  EXPECT_EQ(ApplySquash(m, other, kM).err(), EINVAL);
  EXPECT_EQ(ApplySquash(m, p, kE).err(), EINVAL);
}

// ---------------------------------------------------------------- store

TEST_F(StackTest, CreateAndRemove) {
  LayerStore store(state_);
  auto ref = store.Create();
  ASSERT_OK(ref);
  EXPECT_TRUE(ValidLayerRef(*ref));
  EXPECT_EQ(ref->substr(0, 8), ".layers/");
  struct stat st;
  ASSERT_EQ(::stat(store.Path(*ref).c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat(store.Dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  // Like another upper's root.
  const std::string old = root_ + "/old";
  MakeDir(old, 0751);
  struct timespec times[2] = {{1000, 5}, {2000, 7}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old.c_str(), times, 0), 0);
  struct stat like;
  ASSERT_EQ(::stat(old.c_str(), &like), 0);
  auto ref2 = store.Create(&like);
  ASSERT_OK(ref2);
  EXPECT_NE(*ref, *ref2);
  ASSERT_EQ(::stat(store.Path(*ref2).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0751u);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 7);
  EXPECT_EQ(st.st_atim.tv_sec, 1000);

  // Remove copes with whiteouts, read-only dirs and a sidecar.
  const std::string p = store.Path(*ref);
  MakeDir(p + "/ro");
  WriteText(p + "/ro/f", "x");
  ASSERT_EQ(::mknod((p + "/ro/wh").c_str(), S_IFCHR | 0600, makedev(0, 0)), 0)
      << strerror(errno);
  ASSERT_EQ(::symlink("/etc/passwd", (p + "/ro/link").c_str()), 0);
  ASSERT_EQ(::chmod((p + "/ro").c_str(), 0555), 0);
  ASSERT_EQ(::chmod(p.c_str(), 0555), 0);
  ASSERT_OK(store.StatsOf(*ref));
  EXPECT_TRUE(Exists(p + ".stats"));
  ASSERT_OK(store.Remove(*ref));
  EXPECT_FALSE(Exists(p));
  EXPECT_FALSE(Exists(p + ".stats"));
  EXPECT_TRUE(Exists("/etc/passwd"));
  ASSERT_OK(store.Remove(*ref));  // gone already: no error
  EXPECT_TRUE(Exists(store.Path(*ref2)));
  EXPECT_EQ(store.Remove("box/upper").err(), EINVAL);
  EXPECT_EQ(store.Remove(".layers/../x").err(), EINVAL);
}

// The one commit of a squash (CommitSquash), which the command and the
// daemon both use: a layer built in the sandbox's folder is adopted into the
// store and named by the manifest, or, at any failure, the stack and the
// store are as they were.
TEST_F(StackTest, SquashBuildAdoptAndCommit) {
  LayerStore store(state_);
  const std::string folder = state_ + "/box";
  MakeDir(folder, 0700);
  const std::string like_dir = root_ + "/like";
  MakeDir(like_dir, 0751);
  struct stat like;
  ASSERT_EQ(::stat(like_dir.c_str(), &like), 0);
  // A leftover of an interrupted build is swept only when asked.
  MakeDir(folder + "/squash.00000000000000ff");
  auto kept = store.StartBuild(folder, like, /*sweep=*/false);
  ASSERT_OK(kept);
  EXPECT_TRUE(Exists(folder + "/squash.00000000000000ff"));
  auto id = store.StartBuild(folder, like, /*sweep=*/true);
  ASSERT_OK(id);
  EXPECT_FALSE(Exists(folder + "/squash.00000000000000ff"));
  EXPECT_FALSE(Exists(LayerStore::BuildPath(folder, *kept)));
  const std::string built = LayerStore::BuildPath(folder, *id);
  struct stat st;
  ASSERT_EQ(::stat(built.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0751u);
  WriteText(built + "/merged.txt", "merged");

  StackManifest m;
  m.upper = kU;
  m.frozen = {kA, kB, kC};
  m.next_number = 1;
  SquashPlan plan = PlanSquash(m, 1);
  ASSERT_EQ(plan.merge, std::vector<std::string>({kA, kB}));
  const std::string ref = StoreRef(*id);
  using Install =
      std::function<Status(const StackManifest&, const std::string&)>;

  // A plan that is not this stack's: nothing moves, nothing is installed.
  SquashPlan stale = plan;
  stale.merge[1] = kD;
  bool called = false;
  Install never = [&](const StackManifest&, const std::string&) -> Status {
    called = true;
    return Ok();
  };
  EXPECT_EQ(CommitSquash(store, m, stale, built, *id, never).err(), EINVAL);
  EXPECT_FALSE(called);
  EXPECT_TRUE(Exists(built + "/merged.txt"));
  EXPECT_FALSE(Exists(store.Path(ref)));
  // A built layer not named for the id is not adopted.
  EXPECT_EQ(store.Adopt(built, "0000000000000123").err(), EINVAL);
  EXPECT_EQ(store.Adopt(folder + "/merged", *id).err(), EINVAL);

  // The install fails (a daemon that could not swap its layers): the
  // adopted layer goes, and the manifest is untouched.
  Install refuse = [&](const StackManifest& next,
                       const std::string& layer) -> Status {
    EXPECT_EQ(layer, store.Path(ref));
    EXPECT_EQ(ReadText(layer + "/merged.txt"), "merged");
    EXPECT_EQ(next.frozen, std::vector<std::string>({ref, kC}));
    return Error::Of(EIO, "swap", layer);
  };
  EXPECT_EQ(CommitSquash(store, m, plan, built, *id, refuse).err(), EIO);
  EXPECT_FALSE(Exists(store.Path(ref)));
  EXPECT_FALSE(Exists(built));

  // A second build, committed.
  auto id2 = store.StartBuild(folder, like, /*sweep=*/true);
  ASSERT_OK(id2);
  const std::string built2 = LayerStore::BuildPath(folder, *id2);
  WriteText(built2 + "/merged.txt", "again");
  StackManifest written;
  Install save = [&](const StackManifest& next, const std::string&) -> Status {
    written = next;
    return Ok();
  };
  auto next = CommitSquash(store, m, plan, built2, *id2, save);
  ASSERT_OK(next);
  EXPECT_EQ(next->frozen, std::vector<std::string>({StoreRef(*id2), kC}));
  EXPECT_EQ(written.frozen, next->frozen);
  EXPECT_EQ(ReadText(store.Path(StoreRef(*id2)) + "/merged.txt"), "again");
  EXPECT_FALSE(Exists(built2));
  // Adopting under an id the store holds never replaces that layer.
  auto id3 = store.StartBuild(folder, like, /*sweep=*/false);
  ASSERT_OK(id3);
  const std::string clash = folder + "/squash." + *id2;
  ASSERT_EQ(
      ::rename(LayerStore::BuildPath(folder, *id3).c_str(), clash.c_str()), 0);
  EXPECT_EQ(store.Adopt(clash, *id2).err(), EEXIST);
  EXPECT_EQ(ReadText(store.Path(StoreRef(*id2)) + "/merged.txt"), "again");
}

TEST_F(StackTest, StoreLockExcludesAndTimesOut) {
  auto a = StoreLock::Take(state_);
  ASSERT_OK(a);
  auto t0 = std::chrono::steady_clock::now();
  auto b = StoreLock::Take(state_, std::chrono::milliseconds(150));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.err(), ETIMEDOUT);
  EXPECT_EQ(b.error().path, state_ + "/.layers/lock");
  EXPECT_GE(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(150));
  // Free again once its holder goes.
  { StoreLock moved = std::move(*a); }
  ASSERT_OK(StoreLock::Take(state_, std::chrono::milliseconds(0)));
}

TEST_F(StackTest, StatsCountsAndCaches) {
  LayerStore store(state_);
  auto ref = store.Create();
  ASSERT_OK(ref);
  const std::string p = store.Path(*ref);
  WriteText(p + "/a.txt", std::string(10000, 'a'));
  MakeDir(p + "/dir");
  WriteText(p + "/dir/b.txt", "b");
  ASSERT_EQ(::symlink("a.txt", (p + "/dir/link").c_str()), 0);
  ASSERT_EQ(::mknod((p + "/dir/gone").c_str(), S_IFCHR | 0600, makedev(0, 0)),
            0);
  MakeDir(p + "/opaque");
  ASSERT_EQ(
      ::setxattr((p + "/opaque").c_str(), "user.overlay.opaque", "y", 1, 0), 0)
      << strerror(errno);
  WriteText(p + "/opaque/c", "c");
  MakeDir(p + "/plain");  // a dir without the xattr is not a path
  ASSERT_EQ(::mkfifo((p + "/plain/fifo").c_str(), 0600), 0);

  uint64_t bytes = 0;
  for (const char* e :
       {"/a.txt", "/dir", "/dir/b.txt", "/dir/link", "/dir/gone", "/opaque",
        "/opaque/c", "/plain", "/plain/fifo"})
    bytes += BytesOf(p + e);
  auto s = store.StatsOf(*ref);
  ASSERT_OK(s);
  // a.txt b.txt link gone c fifo + opaque dir.
  EXPECT_EQ(s->paths, 7u);
  EXPECT_EQ(s->bytes, bytes);
  EXPECT_GE(s->bytes, 10000u);

  // Cached: the sidecar is read, not the layer.
  const std::string sidecar = p + ".stats";
  ASSERT_TRUE(Exists(sidecar));
  json j = json::parse(ReadText(sidecar));
  EXPECT_EQ(j["paths"], 7);
  j["paths"] = 12345;
  WriteText(sidecar, j.dump());
  auto again = store.StatsOf(*ref);
  ASSERT_OK(again);
  EXPECT_EQ(again->paths, 12345u);
  // A broken cache is measured again and replaced.
  WriteText(sidecar, "garbage");
  auto fixed = store.StatsOf(*ref);
  ASSERT_OK(fixed);
  EXPECT_EQ(*fixed, *s);
  EXPECT_EQ(json::parse(ReadText(sidecar))["paths"], 7);

  // A legacy ref is measured, not cached.
  MakeLegacy("old");
  auto legacy = store.StatsOf("old/upper");
  ASSERT_OK(legacy);
  EXPECT_EQ(legacy->paths, 1u);
  EXPECT_FALSE(Exists(state_ + "/old/upper.stats"));
  EXPECT_EQ(store.StatsOf("/etc").err(), EINVAL);
}

TEST_F(StackTest, DeepTreeStatsAndRemove) {
  LayerStore store(state_);
  auto ref = store.Create();
  ASSERT_OK(ref);
  constexpr int kDepth = 2000;
  {
    UniqueFd fd(::open(store.Path(*ref).c_str(), O_RDONLY | O_DIRECTORY));
    ASSERT_TRUE(fd);
    for (int i = 0; i < kDepth; ++i) {
      ASSERT_EQ(::mkdirat(fd.get(), "level-directory", 0755), 0) << i;
      UniqueFd next(
          ::openat(fd.get(), "level-directory", O_RDONLY | O_DIRECTORY));
      ASSERT_TRUE(next) << i;
      fd = std::move(next);
    }
    UniqueFd f(::openat(fd.get(), "leaf", O_WRONLY | O_CREAT, 0644));
    ASSERT_TRUE(f);
    ASSERT_EQ(::mknodat(fd.get(), "wh", S_IFCHR | 0600, makedev(0, 0)), 0);
    ASSERT_EQ(::fchmod(fd.get(), 0555), 0);  // the deepest dir read-only
  }
  auto s = store.StatsOf(*ref);
  ASSERT_OK(s);
  EXPECT_EQ(s->paths, 2u);
  EXPECT_GE(s->bytes, 0u);
  ASSERT_OK(store.Remove(*ref));
  EXPECT_FALSE(Exists(store.Path(*ref)));
}

// ---------------------------------------------------------------- GC

TEST_F(StackTest, GcKeepsReferencedRemovesOrphans) {
  LayerStore store(state_);
  std::vector<std::string> refs;
  for (int i = 0; i < 7; ++i) {
    auto r = store.Create();
    ASSERT_OK(r);
    WriteText(store.Path(*r) + "/f", std::string(5000, 'x'));
    refs.push_back(*r);
  }
  // Sandbox one: upper 0, frozen 1, a branch checkpoint on 2.
  StackManifest one;
  one.upper = refs[0];
  one.frozen = {refs[1]};
  one.base = 1;
  one.next_number = 3;
  one.checkpoints = {
      {1, "", 0, {refs[1]}, CheckpointKind::kCheckpoint},
      {2, "", 0, {refs[1], refs[2]}, CheckpointKind::kAutoRewind}};
  MakeDir(state_ + "/one", 0700);
  ASSERT_OK(WriteStack(StackPath(state_, "one"), one));
  // Sandbox two (a fork) shares 1, has its own upper 3.
  auto two = Fork(one, 1, refs[3]);
  ASSERT_OK(two);
  MakeDir(state_ + "/two", 0700);
  ASSERT_OK(WriteStack(StackPath(state_, "two"), *two));
  // A legacy sandbox and a stray file in the state dir are skipped.
  MakeLegacy("old");
  WriteText(state_ + "/stray", "x");
  // Orphans 4, 5, 6; 4 has a sidecar; an orphan sidecar and a crash's
  // temporary file.
  ASSERT_OK(store.StatsOf(refs[4]));
  ASSERT_OK(store.StatsOf(refs[1]));
  WriteText(store.Dir() + "/00000000000000aa.stats", "{}");
  WriteText(store.Dir() + "/.00000000000000bb.stats.0123456789abcdef", "{");
  WriteText(store.Dir() + "/unrelated", "keep me");

  uint64_t orphan_bytes = 0;
  for (int i : {4, 5, 6}) orphan_bytes += BytesOf(store.Path(refs[i]) + "/f");

  auto gc = store.CollectGarbage();
  ASSERT_OK(gc);
  EXPECT_EQ(gc->manifests, 2u);
  EXPECT_EQ(gc->layers_kept, 4u);
  EXPECT_EQ(gc->layers_removed, 3u);
  EXPECT_EQ(gc->sidecars_removed, 1u);  // aa's (4's goes with its layer)
  EXPECT_EQ(gc->temps_removed, 1u);
  EXPECT_GE(gc->bytes_freed, orphan_bytes);
  std::vector<std::string> expect = {refs[4], refs[5], refs[6]};
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(gc->removed, expect);
  for (int i : {0, 1, 2, 3}) {
    EXPECT_TRUE(Exists(store.Path(refs[i]) + "/f")) << i;
  }
  EXPECT_TRUE(Exists(store.Path(refs[1]) + ".stats"));
  for (int i : {4, 5, 6}) EXPECT_FALSE(Exists(store.Path(refs[i]))) << i;
  EXPECT_FALSE(Exists(store.Path(refs[4]) + ".stats"));
  EXPECT_FALSE(Exists(store.Dir() + "/00000000000000aa.stats"));
  EXPECT_FALSE(
      Exists(store.Dir() + "/.00000000000000bb.stats.0123456789abcdef"));
  EXPECT_TRUE(Exists(store.Dir() + "/unrelated"));
  EXPECT_TRUE(Exists(store.Dir() + "/lock"));
  ExpectLegacyDataAt("old/upper");

  // Nothing more to do the second time.
  auto gc2 = CollectGarbage(state_);
  ASSERT_OK(gc2);
  EXPECT_EQ(gc2->layers_removed, 0u);
  EXPECT_EQ(gc2->layers_kept, 4u);
}

TEST_F(StackTest, GcRefusesOnAnUnreadableManifest) {
  LayerStore store(state_);
  auto kept = store.Create();
  ASSERT_OK(kept);
  auto orphan = store.Create();
  ASSERT_OK(orphan);
  StackManifest one;
  one.upper = *kept;
  MakeDir(state_ + "/one", 0700);
  ASSERT_OK(WriteStack(StackPath(state_, "one"), one));
  MakeDir(state_ + "/broken", 0700);
  WriteText(StackPath(state_, "broken"), "{\"version\": 1, \"upper\": 3}");

  auto gc = store.CollectGarbage();
  ASSERT_FALSE(gc.ok());
  EXPECT_EQ(gc.err(), EINVAL);
  EXPECT_EQ(gc.error().path, StackPath(state_, "broken"));
  EXPECT_TRUE(Exists(store.Path(*orphan)));  // nothing removed
  EXPECT_TRUE(Exists(store.Path(*kept)));

  // A stack.json that cannot be opened at all (a directory) refuses too.
  ASSERT_EQ(::unlink(StackPath(state_, "broken").c_str()), 0);
  MakeDir(StackPath(state_, "broken"));
  auto gc2 = store.CollectGarbage();
  ASSERT_FALSE(gc2.ok());
  EXPECT_TRUE(Exists(store.Path(*orphan)));

  ASSERT_EQ(::rmdir(StackPath(state_, "broken").c_str()), 0);
  auto gc3 = store.CollectGarbage();
  ASSERT_OK(gc3);
  EXPECT_EQ(gc3->layers_removed, 1u);
  EXPECT_FALSE(Exists(store.Path(*orphan)));
  EXPECT_TRUE(Exists(store.Path(*kept)));
}

TEST_F(StackTest, GcWaitsForTheStoreLock) {
  auto lock = StoreLock::Take(state_);
  ASSERT_OK(lock);
  LayerStore store(state_);
  auto orphan = store.Create();
  ASSERT_OK(orphan);
  auto gc = store.CollectGarbage(std::chrono::milliseconds(200));
  ASSERT_FALSE(gc.ok());
  EXPECT_EQ(gc.err(), ETIMEDOUT);
  EXPECT_TRUE(Exists(store.Path(*orphan)));
}

// ---------------------------------------------------------------- loading

TEST_F(StackTest, LoadStackLegacyAndMissing) {
  MakeLegacy("old");
  auto l = LoadStack(state_, "old", false);
  ASSERT_OK(l);
  EXPECT_TRUE(l->legacy);
  EXPECT_EQ(l->manifest.upper, "old/upper");
  EXPECT_TRUE(l->manifest.frozen.empty());
  EXPECT_EQ(l->manifest.base, 0u);
  EXPECT_EQ(l->manifest.next_number, 1u);
  EXPECT_TRUE(l->manifest.checkpoints.empty());
  EXPECT_EQ(l->UpperRef(), "old/upper");

  auto none = LoadStack(state_, "nobody", true);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.err(), ENOENT);
  EXPECT_EQ(none.error().path, StackPath(state_, "nobody"));

  StackManifest m = Sample();
  MakeDir(state_ + "/new", 0700);
  ASSERT_OK(WriteStack(StackPath(state_, "new"), m));
  auto n = LoadStack(state_, "new", false);
  ASSERT_OK(n);
  EXPECT_FALSE(n->legacy);
  EXPECT_EQ(n->manifest, m);

  WriteText(StackPath(state_, "new"), "{");
  auto bad = LoadStack(state_, "new", true);
  EXPECT_EQ(bad.err(), EINVAL);
}

TEST_F(StackTest, MigrateLegacy) {
  MakeLegacy("box");
  StackManifest m;
  ASSERT_OK(MigrateLegacy(state_, "box", &m));
  EXPECT_FALSE(m.moved_from);
  EXPECT_EQ(m.upper.substr(0, 8), ".layers/");
  EXPECT_TRUE(ValidLayerRef(m.upper));
  EXPECT_FALSE(Exists(state_ + "/box/upper"));
  ExpectLegacyDataAt(m.upper);
  EXPECT_TRUE(Exists(state_ + "/box/meta.json"));
  auto l = LoadStack(state_, "box", false);
  ASSERT_OK(l);
  EXPECT_FALSE(l->legacy);
  EXPECT_EQ(l->manifest, m);
  struct stat st;
  ASSERT_EQ(::stat(StackPath(state_, "box").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // Twice: refused.
  StackManifest again;
  EXPECT_EQ(MigrateLegacy(state_, "box", &again).err(), EEXIST);
  // GC keeps the migrated upper.
  auto gc = CollectGarbage(state_);
  ASSERT_OK(gc);
  EXPECT_EQ(gc->layers_removed, 0u);
  EXPECT_EQ(gc->layers_kept, 1u);
  ExpectLegacyDataAt(m.upper);
  // A name that is no sandbox name.
  EXPECT_EQ(MigrateLegacy(state_, "../x", &again).err(), EINVAL);
  EXPECT_EQ(MigrateLegacy(state_, "nobody", &again).err(), ENOENT);
}

// The crash states of a migration, written by hand: each must load, and
// with repair become the finished stack with the data.
TEST_F(StackTest, MigrationCrashAtEachStep) {
  const std::string id_ref = ".layers/00000000c0ffee00";
  StackManifest mid;
  mid.upper = id_ref;
  mid.moved_from = "box/upper";
  StackManifest done;
  done.upper = id_ref;

  // Crash before stack.json: still a legacy sandbox.
  {
    MakeLegacy("box");
    auto l = LoadStack(state_, "box", true);
    ASSERT_OK(l);
    EXPECT_TRUE(l->legacy);
    ExpectLegacyDataAt(l->UpperRef());
    ASSERT_OK(sys::RemoveTree(AT_FDCWD, state_ + "/box", state_));
  }
  // Crash after stack.json (with moved_from), before the rename.
  {
    MakeLegacy("box");
    ASSERT_OK(LayerStore(state_).Ensure());
    ASSERT_OK(WriteStack(StackPath(state_, "box"), mid));
    // Without repair: read the upper where it still is.
    auto ro = LoadStack(state_, "box", false);
    ASSERT_OK(ro);
    EXPECT_TRUE(ro->upper_at_moved_from);
    EXPECT_EQ(ro->UpperRef(), "box/upper");
    ExpectLegacyDataAt(ro->UpperRef());
    EXPECT_EQ(ro->manifest, mid);
    // GC in this state removes nothing and keeps the sandbox whole.
    auto gc = CollectGarbage(state_);
    ASSERT_OK(gc);
    ExpectLegacyDataAt("box/upper");
    // Repair.
    auto l = LoadStack(state_, "box", true);
    ASSERT_OK(l);
    EXPECT_FALSE(l->upper_at_moved_from);
    EXPECT_EQ(l->manifest, done);
    EXPECT_EQ(l->UpperRef(), id_ref);
    ExpectLegacyDataAt(id_ref);
    EXPECT_FALSE(Exists(state_ + "/box/upper"));
    auto reread = ReadStack(StackPath(state_, "box"));
    ASSERT_OK(reread);
    EXPECT_EQ(*reread, done);
    ASSERT_OK(sys::RemoveTree(AT_FDCWD, state_ + "/box", state_));
    ASSERT_OK(LayerStore(state_).Remove(id_ref));
  }
  // Crash after the rename, before the manifest without moved_from.
  {
    MakeLegacy("box");
    ASSERT_OK(WriteStack(StackPath(state_, "box"), mid));
    ASSERT_EQ(::rename((state_ + "/box/upper").c_str(),
                       LayerStore(state_).Path(id_ref).c_str()),
              0);
    auto ro = LoadStack(state_, "box", false);
    ASSERT_OK(ro);
    EXPECT_FALSE(ro->upper_at_moved_from);
    ExpectLegacyDataAt(ro->UpperRef());
    auto l = LoadStack(state_, "box", true);
    ASSERT_OK(l);
    EXPECT_EQ(l->manifest, done);
    ExpectLegacyDataAt(l->UpperRef());
    auto reread = ReadStack(StackPath(state_, "box"));
    ASSERT_OK(reread);
    EXPECT_FALSE(reread->moved_from);
    // Loading again is a no-op.
    auto l2 = LoadStack(state_, "box", true);
    ASSERT_OK(l2);
    EXPECT_EQ(l2->manifest, done);
  }
  // Crash after the final manifest: done (the previous block's end state).
  {
    auto l = LoadStack(state_, "box", true);
    ASSERT_OK(l);
    EXPECT_EQ(l->manifest, done);
    ExpectLegacyDataAt(id_ref);
  }
  // Both dirs present (someone made one by hand): refused, nothing moved.
  {
    MakeDir(state_ + "/box/upper");
    StackManifest both = mid;
    ASSERT_OK(WriteStack(StackPath(state_, "box"), both));
    auto l = LoadStack(state_, "box", true);
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.err(), EEXIST);
    ExpectLegacyDataAt(id_ref);
  }
}

}  // namespace
}  // namespace acqfs::cli
