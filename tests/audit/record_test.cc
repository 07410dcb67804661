// The audit record's line format (audit/record.h): every Op and field
// round-trips, defaults are left out, paths keep their exact bytes (invalid
// UTF-8, newlines, control bytes, long paths), and a line that is not a
// record is refused with EINVAL, never a crash.
#include "audit/record.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "harness/result_assert.h"

namespace acqfs::audit {
namespace {

constexpr int kOps = static_cast<int>(Op::kRotated) + 1;

// A record with every field away from its default.
Record FullRecord(Op op) {
  Record r;
  r.seq = 18446744073709551615ull;  // the largest uint64
  r.time_ns = 1700000000123456789;
  r.op = op;
  r.pid = 4242;
  r.tid = 4243;
  r.uid = 1000;
  r.gid = 4294967295u;
  r.comm = "cc1plus";
  r.exe = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus";
  r.path = "src/a b/\xc3\xa9t\xc3\xa9.c";
  r.path2 = "src/target";
  r.name = "user.mime_type";
  r.result = EACCES;
  r.boundary = kBoundaryReadOnly;
  r.size = 1ull << 40;
  r.mode = 0100644;
  r.owner_uid = 1001;
  r.owner_gid = 0;
  r.ranges = {{0, 4096}, {8192, 8193}, {1ull << 50, (1ull << 50) + 1}};
  r.ranges_known = false;
  r.layer = "01HZX3";
  r.count = 77;
  r.from_ns = -5;
  r.to_ns = 9223372036854775807;
  return r;
}

void ExpectSame(const Record& a, const Record& b) {
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.time_ns, b.time_ns);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.tid, b.tid);
  EXPECT_EQ(a.uid, b.uid);
  EXPECT_EQ(a.gid, b.gid);
  EXPECT_EQ(a.comm, b.comm);
  EXPECT_EQ(a.exe, b.exe);
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.path2, b.path2);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.result, b.result);
  EXPECT_EQ(a.boundary, b.boundary);
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.owner_uid, b.owner_uid);
  EXPECT_EQ(a.owner_gid, b.owner_gid);
  EXPECT_EQ(a.ranges, b.ranges);
  EXPECT_EQ(a.ranges_known, b.ranges_known);
  EXPECT_EQ(a.layer, b.layer);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.from_ns, b.from_ns);
  EXPECT_EQ(a.to_ns, b.to_ns);
}

// Encodes, checks that the line is one line, decodes.
Record RoundTrip(const Record& r) {
  const std::string line = EncodeRecord(r);
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  auto back = DecodeRecord(line);
  EXPECT_TRUE(back.ok()) << line << ": " << back.error().Message();
  return back.ok() ? *back : Record();
}

TEST(Record, OpNamesAreUniqueAndParseBack) {
  std::vector<std::string> seen;
  for (int i = 0; i < kOps; ++i) {
    const Op op = static_cast<Op>(i);
    const std::string name(OpName(op));
    EXPECT_FALSE(name.empty());
    for (const auto& s : seen) EXPECT_NE(s, name);
    seen.push_back(name);
    auto back = OpFromName(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, op);
  }
  EXPECT_EQ(OpName(Op::kOpenRead), "open_read");
  EXPECT_EQ(OpName(Op::kRemoveXattr), "removexattr");
  EXPECT_FALSE(OpFromName("Create").has_value());
  EXPECT_FALSE(OpFromName("").has_value());
}

TEST(Record, EveryOpRoundTripsWithEveryField) {
  for (int i = 0; i < kOps; ++i) {
    SCOPED_TRACE(OpName(static_cast<Op>(i)));
    const Record r = FullRecord(static_cast<Op>(i));
    ExpectSame(RoundTrip(r), r);
  }
}

TEST(Record, EachFieldAloneRoundTripsAndOnlyItIsWritten) {
  struct Case {
    const char* key;
    void (*set)(Record*);
  };
  const Case cases[] = {
      {"pid", [](Record* r) { r->pid = -7; }},
      {"tid", [](Record* r) { r->tid = 2147483647; }},
      {"uid", [](Record* r) { r->uid = 65534; }},
      {"gid", [](Record* r) { r->gid = 65534; }},
      {"comm", [](Record* r) { r->comm = "bash"; }},
      {"exe", [](Record* r) { r->exe = "/bin/bash"; }},
      {"path", [](Record* r) { r->path = "a/b"; }},
      {"path2", [](Record* r) { r->path2 = "c"; }},
      {"name", [](Record* r) { r->name = "user.x"; }},
      {"result", [](Record* r) { r->result = ENOENT; }},
      {"boundary", [](Record* r) { r->boundary = kBoundaryHidden; }},
      {"size", [](Record* r) { r->size = 12; }},
      {"mode", [](Record* r) { r->mode = 0755; }},
      {"owner_uid", [](Record* r) { r->owner_uid = 0; }},
      {"owner_gid", [](Record* r) { r->owner_gid = 5; }},
      {"ranges",
       [](Record* r) {
         r->ranges = {{3, 9}};
       }},
      {"ranges_known", [](Record* r) { r->ranges_known = false; }},
      {"layer", [](Record* r) { r->layer = "L1"; }},
      {"count", [](Record* r) { r->count = 3; }},
      {"from_ns", [](Record* r) { r->from_ns = 1; }},
      {"to_ns", [](Record* r) { r->to_ns = 2; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    Record r;
    r.seq = 5;
    r.time_ns = 6;
    r.op = Op::kWrite;
    c.set(&r);
    const std::string line = EncodeRecord(r);
    // Exactly the three fields always there, and this one.
    EXPECT_EQ(
        line.rfind(std::string("{\"seq\":5,\"time_ns\":6,\"op\":\"write\",\"") +
                       c.key + "\":",
                   0),
        0u)
        << line;
    size_t colons = 0;
    for (size_t i = 0; i < line.size(); ++i)
      if (line[i] == '"' && i + 1 < line.size() && line[i + 1] == ':') ++colons;
    EXPECT_EQ(colons, 4u) << line;
    ExpectSame(RoundTrip(r), r);
  }
}

TEST(Record, DefaultsAreLeftOut) {
  Record r;
  r.seq = 1;
  r.time_ns = 2;
  EXPECT_EQ(EncodeRecord(r), "{\"seq\":1,\"time_ns\":2,\"op\":\"create\"}\n");
  // seq, time_ns and op are there even at their defaults.
  EXPECT_EQ(EncodeRecord(Record()),
            "{\"seq\":0,\"time_ns\":0,\"op\":\"create\"}\n");
  r.ranges_known = false;
  EXPECT_EQ(EncodeRecord(r),
            "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"ranges_known\":false}"
            "\n");
  r.ranges_known = true;
  r.op = Op::kWrite;
  r.ranges = {{0, 5}, {10, 20}};
  EXPECT_EQ(EncodeRecord(r),
            "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges\":[[0,5],[10,"
            "20]]}\n");
}

TEST(Record, InvalidUtf8IsWrittenLossyWithExactHex) {
  Record r;
  r.seq = 1;
  r.time_ns = 1;
  r.path = "a\xff/b";
  r.path2 = "\xc3";            // a sequence cut short
  r.name = "\xed\xa0\x80";     // a surrogate
  r.comm = "\xc0\xaf";         // an overlong '/'
  r.exe = "\xf4\x90\x80\x80";  // past U+10FFFF
  const std::string line = EncodeRecord(r);
  EXPECT_NE(line.find("\"path\":\"a\xef\xbf\xbd/b\""), std::string::npos)
      << line;
  EXPECT_NE(line.find("\"path_hex\":\"61ff2f62\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"path2_hex\":\"c3\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"name_hex\":\"eda080\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"comm_hex\":\"c0af\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"exe_hex\":\"f4908080\""), std::string::npos) << line;
  ExpectSame(RoundTrip(r), r);
  // Valid UTF-8 gets no hex twin.
  r = Record();
  r.path = "\xc3\xa9\xf0\x9f\x98\x80";
  EXPECT_EQ(EncodeRecord(r).find("_hex"), std::string::npos);
  ExpectSame(RoundTrip(r), r);
}

TEST(Record, HexIsPreferredOverTheLossyString) {
  auto r = DecodeRecord(
      "{\"seq\":1,\"time_ns\":2,\"op\":\"rename\",\"path\":\"x\",\"path_hex\":"
      "\"ff00\",\"path2\":\"\xef\xbf\xbd\",\"path2_hex\":\"\"}");
  ASSERT_OK(r);
  EXPECT_EQ(r->path, std::string("\xff\0", 2));
  EXPECT_EQ(r->path2, "");
  EXPECT_EQ(r->op, Op::kRename);
}

TEST(Record, NewlinesAndControlBytesStayOnOneLine) {
  Record r;
  r.seq = 3;
  r.time_ns = 4;
  std::string p = "dir\nname\r\t\"q\"\\";
  for (int c = 1; c < 0x20; ++c) p += static_cast<char>(c);
  p += '\x7f';
  r.path = p;
  r.path2 = p + "\xfe\n";  // control bytes and invalid UTF-8 together
  r.comm = "a\nb";
  const std::string line = EncodeRecord(r);
  ASSERT_EQ(line.find('\n'), line.size() - 1) << line;
  for (char c : line.substr(0, line.size() - 1))
    EXPECT_GE(static_cast<unsigned char>(c), 0x20) << line;
  ExpectSame(RoundTrip(r), r);
}

TEST(Record, LongPathsRoundTrip) {
  Record r;
  r.seq = 9;
  r.time_ns = 9;
  r.op = Op::kSymlink;
  std::string p;
  for (int i = 0; p.size() < 4000; ++i) {
    p += (i % 7 == 0) ? '/' : static_cast<char>('a' + i % 26);
    if (i % 97 == 0) p += "\x80\n\x01";
  }
  p.resize(4000);
  r.path = p;
  r.path2 = std::string(4000, 'z');
  r.exe = std::string(4000, '\xff');
  ASSERT_EQ(r.path.size(), 4000u);
  ExpectSame(RoundTrip(r), r);
}

TEST(Record, DecodeTakesALineWithOrWithoutItsNewline) {
  const Record r = FullRecord(Op::kWrite);
  std::string line = EncodeRecord(r);
  auto with = DecodeRecord(line);
  ASSERT_OK(with);
  ExpectSame(*with, r);
  line.pop_back();
  auto back = DecodeRecord(line);
  ASSERT_OK(back);
  ExpectSame(*back, r);
}

TEST(Record, UnknownFieldsAreIgnored) {
  auto r = DecodeRecord(
      "{\"seq\":1,\"time_ns\":2,\"op\":\"mount\",\"future\":[1,{\"x\":2}]}");
  ASSERT_OK(r);
  EXPECT_EQ(r->op, Op::kMount);
}

TEST(Record, MalformedLinesAreEinval) {
  const std::string big_nest =
      std::string(100000, '[') + std::string(100000, ']');
  const std::vector<std::string> lines = {
      "",
      "\n",
      "not json",
      "{",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"cre",
      "[]",
      "[1,2]",
      "1",
      "\"create\"",
      "null",
      "true",
      "{}",
      "{\"time_ns\":2,\"op\":\"create\"}",
      "{\"seq\":1,\"op\":\"create\"}",
      "{\"seq\":1,\"time_ns\":2}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"explode\"}",
      "{\"seq\":1,\"time_ns\":2,\"op\":3}",
      "{\"seq\":1,\"time_ns\":2,\"op\":null}",
      "{\"seq\":\"1\",\"time_ns\":2,\"op\":\"create\"}",
      "{\"seq\":-1,\"time_ns\":2,\"op\":\"create\"}",
      "{\"seq\":1.5,\"time_ns\":2,\"op\":\"create\"}",
      "{\"seq\":1,\"time_ns\":1e400,\"op\":\"create\"}",
      "{\"seq\":1,\"time_ns\":18446744073709551615,\"op\":\"create\"}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"pid\":2147483648}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"uid\":-1}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"mode\":true}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"path\":5}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"path\":[\"a\"]}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"path_hex\":\"abc\"}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"path_hex\":\"zz\"}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"path_hex\":\"FF\"}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"path_hex\":7}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"boundary\":{}}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges\":5}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges\":[[1]]}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges\":[[1,2,3]]}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges\":[[1,\"a\"]]}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges\":[[-1,2]]}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges\":[3]}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges_known\":\"no\"}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"write\",\"ranges_known\":0}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\",\"path\":\"\xff\"}",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\"} trailing",
      "{\"seq\":1,\"time_ns\":2,\"op\":\"create\"}\n{\"seq\":2,\"time_ns\":2,"
      "\"op\":\"create\"}",
      "{\"seq\":1,\"seq\":2,\"time_ns\":2,\"op\":\"create\"",
      std::string("{\"seq\":1,\"time_ns\":2,") + std::string(1, '\0') +
          "\"op\":\"create\"}",
      "\xef\xbb\xbf\x00",
      big_nest,
  };
  for (const std::string& line : lines) {
    SCOPED_TRACE(line.substr(0, 80));
    auto r = DecodeRecord(line);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.err(), EINVAL);
    EXPECT_FALSE(r.error().op.empty());
  }
}

TEST(Record, EveryPrefixOfALineDecodesOrFailsWithoutCrashing) {
  const std::string line = EncodeRecord(FullRecord(Op::kWrite));
  for (size_t n = 0; n + 1 < line.size(); ++n) {
    auto r = DecodeRecord(line.substr(0, n));
    EXPECT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.err(), EINVAL);
  }
  // Every byte flipped: decoded or refused, never a crash.
  for (size_t i = 0; i + 1 < line.size(); ++i) {
    std::string bad = line;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    auto r = DecodeRecord(bad);
    if (!r.ok()) {
      EXPECT_EQ(r.err(), EINVAL);
    }
  }
}

}  // namespace
}  // namespace acqfs::audit
