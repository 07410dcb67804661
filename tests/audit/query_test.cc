// The queries of `acqfs log` (audit/query): each filter and combinations of
// them, the summary's counts, one record as one escaped line, and the
// summary's text and JSON.
#include "audit/query.h"

#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace acqfs::audit {
namespace {

PathGlob Glob(const std::string& text) {
  auto g = PathGlob::Parse(text);
  EXPECT_TRUE(g.ok()) << text;
  return g ? *g : PathGlob();
}

Record Rec(Op op, const std::string& path, int32_t pid = 100,
           const std::string& comm = "make", int result = 0,
           const std::string& layer = "0001") {
  Record r;
  r.op = op;
  r.path = path;
  r.pid = pid;
  r.tid = pid;
  r.comm = comm;
  r.result = result;
  r.layer = layer;
  r.time_ns = 1'700'000'000'123'456'789;
  return r;
}

Record Meta(Op op, uint64_t count = 0, const std::string& layer = "0001") {
  Record r;
  r.op = op;
  r.count = count;
  r.layer = layer;
  r.time_ns = 1'700'000'000'000'000'000;
  return r;
}

TEST(Filter, EmptyKeepsEverything) {
  Filter f;
  EXPECT_TRUE(Matches(f, Rec(Op::kCreate, "a")));
  EXPECT_TRUE(Matches(f, Rec(Op::kLookup, ".env", 1, "cat", EACCES)));
  EXPECT_TRUE(Matches(f, Meta(Op::kMount)));
}

TEST(Filter, Layers) {
  Filter f;
  f.layers = std::set<std::string>{"0002", "0003"};
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "a", 1, "x", 0, "0001")));
  EXPECT_TRUE(Matches(f, Rec(Op::kCreate, "a", 1, "x", 0, "0002")));
  EXPECT_TRUE(Matches(f, Rec(Op::kCreate, "a", 1, "x", 0, "0003")));
  // The layer test applies to the log's own records too.
  EXPECT_FALSE(Matches(f, Meta(Op::kMount, 0, "0001")));
  EXPECT_TRUE(Matches(f, Meta(Op::kMount, 0, "0002")));
  // An empty set keeps none.
  f.layers = std::set<std::string>{};
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "a")));
}

TEST(Filter, PathsMatchPathOrPath2) {
  Filter f;
  f.paths = {Glob("*.c")};
  EXPECT_TRUE(Matches(f, Rec(Op::kWrite, "src/a.c")));
  EXPECT_FALSE(Matches(f, Rec(Op::kWrite, "src/a.h")));
  Record rename = Rec(Op::kRename, "tmp/x");
  rename.path2 = "src/x.c";
  EXPECT_TRUE(Matches(f, rename));
  rename.path2 = "src/x.o";
  EXPECT_FALSE(Matches(f, rename));
  // The root's "" matches no glob.
  EXPECT_FALSE(Matches(f, Rec(Op::kList, "")));
}

TEST(Filter, PathsAnyOfSeveral) {
  Filter f;
  f.paths = {Glob("/docs/**"), Glob(".env")};
  EXPECT_TRUE(Matches(f, Rec(Op::kCreate, "docs/a/b.md")));
  EXPECT_TRUE(Matches(f, Rec(Op::kLookup, "app/.env")));
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "src/docs/a.md")));
}

TEST(Filter, PathsCoverWhatIsBelowAMatchedDirectory) {
  Filter f;
  f.paths = {Glob("build/")};  // directories only
  EXPECT_TRUE(Matches(f, Rec(Op::kWrite, "build/a/b.o")));
  EXPECT_TRUE(Matches(f, Rec(Op::kMkdir, "build")));
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "build")));  // a file named so
  f.paths = {Glob("node_modules")};
  EXPECT_TRUE(Matches(f, Rec(Op::kCreate, "web/node_modules/x/index.js")));
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "web/node_modules_x/index.js")));
}

TEST(Filter, Ops) {
  Filter f;
  f.ops = {Op::kUnlink, Op::kRmdir};
  EXPECT_TRUE(Matches(f, Rec(Op::kUnlink, "a")));
  EXPECT_TRUE(Matches(f, Rec(Op::kRmdir, "d")));
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "a")));
}

TEST(Filter, Pids) {
  Filter f;
  f.pids = {100, 200};
  EXPECT_TRUE(Matches(f, Rec(Op::kCreate, "a", 100)));
  EXPECT_TRUE(Matches(f, Rec(Op::kCreate, "a", 200)));
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "a", 300)));
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "a", 0)));
}

TEST(Filter, RefusedOnly) {
  Filter f;
  f.refused_only = true;
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "a")));
  EXPECT_TRUE(Matches(f, Rec(Op::kCreate, "a", 1, "x", EROFS)));
  EXPECT_FALSE(Matches(f, Meta(Op::kDropped, 5)));  // result 0
}

TEST(Filter, MetaRecordsPassPathOpPidFilters) {
  Filter f;
  f.paths = {Glob("src/**")};
  f.ops = {Op::kWrite};
  f.pids = {100};
  for (Op op : {Op::kMount, Op::kDropped, Op::kRotated})
    EXPECT_TRUE(Matches(f, Meta(op, 3))) << OpName(op);
  EXPECT_FALSE(Matches(f, Rec(Op::kCreate, "src/a", 100)));
  f.include_meta = false;
  for (Op op : {Op::kMount, Op::kDropped, Op::kRotated})
    EXPECT_FALSE(Matches(f, Meta(op, 3))) << OpName(op);
  // Without include_meta they are tested like any record.
  Filter by_op;
  by_op.include_meta = false;
  by_op.ops = {Op::kDropped};
  EXPECT_TRUE(Matches(by_op, Meta(Op::kDropped, 3)));
  EXPECT_FALSE(Matches(by_op, Meta(Op::kMount)));
}

TEST(Filter, Combined) {
  Filter f;
  f.layers = std::set<std::string>{"0001"};
  f.paths = {Glob("*.c")};
  f.ops = {Op::kWrite, Op::kCreate};
  f.pids = {100};
  f.refused_only = true;
  Record r = Rec(Op::kWrite, "a.c", 100, "cc", EDQUOT, "0001");
  EXPECT_TRUE(Matches(f, r));
  Record other = r;
  other.layer = "0002";
  EXPECT_FALSE(Matches(f, other));
  other = r;
  other.path = "a.h";
  EXPECT_FALSE(Matches(f, other));
  other = r;
  other.op = Op::kUnlink;
  EXPECT_FALSE(Matches(f, other));
  other = r;
  other.pid = 101;
  EXPECT_FALSE(Matches(f, other));
  other = r;
  other.result = 0;
  EXPECT_FALSE(Matches(f, other));
}

TEST(Summary, Counts) {
  Summary s;
  AddToSummary(Rec(Op::kWrite, "a", 100, "make"), &s);
  AddToSummary(Rec(Op::kWrite, "b", 100, "make"), &s);
  AddToSummary(Rec(Op::kCreate, "c", 100, "make", EROFS), &s);
  Record no_comm = Rec(Op::kUnlink, "d", 200, "");
  no_comm.exe = "/usr/bin/rm";
  AddToSummary(no_comm, &s);
  AddToSummary(Rec(Op::kUnlink, "e", 300, ""), &s);
  AddToSummary(Rec(Op::kWrite, "f", 0, ""), &s);
  AddToSummary(Meta(Op::kMount), &s);
  AddToSummary(Meta(Op::kDropped, 7), &s);
  AddToSummary(Meta(Op::kRotated, 1000), &s);
  EXPECT_EQ(s.records, 6u);
  EXPECT_EQ(s.refused, 1u);
  EXPECT_EQ(s.dropped, 1007u);
  EXPECT_EQ(s.by_op, (std::map<std::string, uint64_t>{
                         {"write", 3}, {"create", 1}, {"unlink", 2}}));
  EXPECT_EQ(s.by_process,
            (std::map<std::string, uint64_t>{{"make[100]", 3},
                                             {"/usr/bin/rm[200]", 1},
                                             {"?[300]", 1},
                                             {"kernel", 1}}));
}

std::string LocalTime(int64_t sec) {
  time_t t = static_cast<time_t>(sec);
  struct tm tm;
  EXPECT_NE(::localtime_r(&t, &tm), nullptr);
  char buf[64];
  EXPECT_GT(::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm), 0u);
  return buf;
}

TEST(FormatRecord, AWrite) {
  Record r = Rec(Op::kWrite, "src/a.o", 1234, "make");
  r.ranges = {{0, 10}, {20, 30}, {40, 4096}};
  r.size = 4096;
  EXPECT_EQ(FormatRecord(r), LocalTime(1'700'000'000) +
                                 ".123456 1234/make write src/a.o ok (3 "
                                 "ranges, 4096 bytes) layer=0001");
  r.ranges = {{0, 1}};
  r.size = 1;
  EXPECT_NE(FormatRecord(r).find("(1 range, 1 byte)"), std::string::npos);
  r.ranges.clear();
  r.size = 0;
  r.ranges_known = false;
  EXPECT_NE(FormatRecord(r).find("(data not seen)"), std::string::npos);
}

TEST(FormatRecord, ARefusal) {
  Record r = Rec(Op::kLookup, ".env", 55, "cat", EACCES);
  r.boundary = kBoundaryHidden;
  const std::string line = FormatRecord(r);
  EXPECT_NE(line.find(" 55/cat lookup .env EACCES (" +
                      std::string(std::strerror(EACCES)) +
                      ") boundary=hidden layer=0001"),
            std::string::npos)
      << line;
  EXPECT_NE(FormatRecord(Rec(Op::kUnlink, "x", 1, "rm", ENOENT))
                .find("ENOENT (No such file or directory)"),
            std::string::npos);
}

TEST(FormatRecord, RenameShowsBothPaths) {
  Record r = Rec(Op::kRename, "a/old", 7, "mv");
  r.path2 = "b/new";
  EXPECT_NE(FormatRecord(r).find(" 7/mv rename a/old -> b/new ok layer=0001"),
            std::string::npos)
      << FormatRecord(r);
}

TEST(FormatRecord, TheCallerWhenCommIsUnknown) {
  Record r = Rec(Op::kCreate, "a", 9, "");
  r.exe = "/usr/bin/touch";
  EXPECT_NE(FormatRecord(r).find(" 9/touch create a ok"), std::string::npos);
  r.exe = "";
  EXPECT_NE(FormatRecord(r).find(" 9/? create a ok"), std::string::npos);
  EXPECT_NE(FormatRecord(Rec(Op::kWrite, "a", 0, "")).find(" kernel write a"),
            std::string::npos);
}

TEST(FormatRecord, Details) {
  Record t = Rec(Op::kTruncate, "f");
  t.size = 12;
  EXPECT_NE(FormatRecord(t).find("(to 12 bytes)"), std::string::npos);
  Record m = Rec(Op::kChmod, "f");
  m.mode = 0644;
  EXPECT_NE(FormatRecord(m).find("(mode 0644)"), std::string::npos);
  Record o = Rec(Op::kChown, "f");
  o.owner_uid = 1000;
  EXPECT_NE(FormatRecord(o).find("(owner 1000:-)"), std::string::npos);
  Record x = Rec(Op::kSetXattr, "f");
  x.name = "user.a\nb";
  EXPECT_NE(FormatRecord(x).find("(name user.a\\nb)"), std::string::npos);
  Record d = Meta(Op::kDropped, 12);
  d.from_ns = 1'700'000'000'000'000'000;
  d.to_ns = 1'700'000'001'000'000'000;
  EXPECT_EQ(FormatRecord(d),
            LocalTime(1'700'000'000) + ".000000 dropped (12 records, from " +
                LocalTime(1'700'000'000) + ".000000, to " +
                LocalTime(1'700'000'001) + ".000000) layer=0001");
  EXPECT_EQ(FormatRecord(Meta(Op::kMount)),
            LocalTime(1'700'000'000) + ".000000 mount layer=0001");
}

TEST(FormatRecord, EscapesControlBytesAndBadUtf8OnOneLine) {
  Record r = Rec(Op::kCreate, "evil\nname\there\\x\x01");
  r.path2 = std::string("bad\xff\xc3(\xe2\x82", 8) + "\x7f";
  r.comm = "a\nb";
  const std::string line = FormatRecord(r);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_EQ(line.find('\t'), std::string::npos) << line;
  EXPECT_NE(line.find("100/a\\nb create evil\\nname\\there\\\\x\\x01 -> "
                      "bad\\xff\\xc3(\\xe2\\x82\\x7f ok"),
            std::string::npos)
      << line;
  // Valid UTF-8 is kept as it is.
  EXPECT_NE(FormatRecord(Rec(Op::kCreate, "caf\xc3\xa9/\xe6\x97\xa5"))
                .find(" create caf\xc3\xa9/\xe6\x97\xa5 ok"),
            std::string::npos);
}

TEST(EscapeForDisplay, Cases) {
  EXPECT_EQ(EscapeForDisplay("plain/path.txt"), "plain/path.txt");
  EXPECT_EQ(EscapeForDisplay(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(EscapeForDisplay("\r"), "\\r");
  // Overlong, surrogate, past U+10FFFF, truncated, lone continuation.
  EXPECT_EQ(EscapeForDisplay("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(EscapeForDisplay("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(EscapeForDisplay("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(EscapeForDisplay("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(EscapeForDisplay("\x80"), "\\x80");
  // C1 controls and the line separator, valid but not shown raw.
  EXPECT_EQ(EscapeForDisplay("\xc2\x85"), "\\xc2\\x85");
  EXPECT_EQ(EscapeForDisplay("\xe2\x80\xa8"), "\\xe2\\x80\\xa8");
  EXPECT_EQ(EscapeForDisplay("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
}

TEST(ErrnoName, KnownAndUnknown) {
  EXPECT_EQ(ErrnoName(ENOENT), "ENOENT");
  EXPECT_EQ(ErrnoName(EDQUOT), "EDQUOT");
  EXPECT_EQ(ErrnoName(EROFS), "EROFS");
  EXPECT_EQ(ErrnoName(99999), "E99999");
}

Summary Sample() {
  Summary s;
  for (int i = 0; i < 5; ++i) AddToSummary(Rec(Op::kWrite, "a", 10, "cc"), &s);
  for (int i = 0; i < 2; ++i)
    AddToSummary(Rec(Op::kCreate, "b", 20, "ld", EROFS), &s);
  for (int i = 0; i < 3; ++i) AddToSummary(Rec(Op::kUnlink, "c", 0, ""), &s);
  AddToSummary(Meta(Op::kDropped, 4), &s);
  return s;
}

TEST(FormatSummary, TotalsOpsAndProcessesByCount) {
  EXPECT_EQ(FormatSummary(Sample()),
            "10 records, 2 refused, 4 dropped or rotated away\n"
            "by op: write 5, unlink 3, create 2\n"
            "by process: cc[10] 5, kernel 3, ld[20] 2\n");
  EXPECT_EQ(FormatSummary(Summary()),
            "0 records, 0 refused, 0 dropped or rotated away\n"
            "by op: none\n"
            "by process: none\n");
}

TEST(FormatSummary, EscapesAndLimitsProcesses) {
  Summary s;
  for (int pid = 1; pid <= 25; ++pid)
    AddToSummary(Rec(Op::kWrite, "a", pid, "p\n"), &s);
  const std::string text = FormatSummary(s);
  EXPECT_NE(text.find("p\\n[1] 1"), std::string::npos) << text;
  EXPECT_NE(text.find(", and 5 more\n"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
}

TEST(SummaryJson, Shape) {
  nlohmann::json j = SummaryJson(Sample());
  EXPECT_EQ(j, nlohmann::json::parse(R"({
    "records": 10, "refused": 2, "dropped": 4,
    "by_op": {"write": 5, "unlink": 3, "create": 2},
    "by_process": {"cc[10]": 5, "kernel": 3, "ld[20]": 2}
  })"));
  EXPECT_EQ(SummaryJson(Summary()),
            nlohmann::json::parse(R"({"records": 0, "refused": 0,
      "dropped": 0, "by_op": {}, "by_process": {}})"));
}

TEST(SummaryJson, BadUtf8NamesStillDump) {
  Summary s;
  AddToSummary(Rec(Op::kWrite, "a", 5, "x\xff"), &s);
  nlohmann::json j = SummaryJson(s);
  std::string dumped;
  EXPECT_NO_THROW(dumped = j.dump());
  EXPECT_EQ(j["by_process"]["x\xef\xbf\xbd[5]"], 1);
}

}  // namespace
}  // namespace acqfs::audit
