// Writes coalesced into one record per file (audit/write_coalescer): the
// merging of byte ranges, the max_ranges and max_files bounds, the ways a
// pending record is taken, and writes whose data the daemon did not see.
#include "audit/write_coalescer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace acqfs::audit {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

Record First(const std::string& path, int64_t time_ns = 1000) {
  Record r;
  r.op = Op::kCreate;  // made kWrite by the coalescer
  r.time_ns = time_ns;
  r.pid = 42;
  r.tid = 43;
  r.comm = "writer";
  r.path = path;
  r.layer = "0001";
  r.size = 999;         // replaced
  r.ranges = {{5, 6}};  // replaced
  return r;
}

Ranges Merge(const std::vector<std::pair<uint64_t, uint64_t>>& writes) {
  Ranges r;
  for (const auto& [off, size] : writes) AddRange(&r, off, size);
  return r;
}

TEST(AddRange, Disjoint) {
  EXPECT_EQ(Merge({{0, 10}, {20, 5}}), (Ranges{{0, 10}, {20, 25}}));
}

TEST(AddRange, Overlapping) {
  EXPECT_EQ(Merge({{0, 10}, {5, 10}}), (Ranges{{0, 15}}));
  EXPECT_EQ(Merge({{5, 10}, {0, 10}}), (Ranges{{0, 15}}));
}

TEST(AddRange, AdjacentMerge) {
  EXPECT_EQ(Merge({{0, 10}, {10, 10}}), (Ranges{{0, 20}}));
  EXPECT_EQ(Merge({{10, 10}, {0, 10}}), (Ranges{{0, 20}}));
  // Filling the gap between two joins all three.
  EXPECT_EQ(Merge({{0, 10}, {20, 10}, {10, 10}}), (Ranges{{0, 30}}));
}

TEST(AddRange, Contained) {
  EXPECT_EQ(Merge({{0, 100}, {10, 10}}), (Ranges{{0, 100}}));
  EXPECT_EQ(Merge({{10, 10}, {0, 100}}), (Ranges{{0, 100}}));
  EXPECT_EQ(Merge({{10, 10}, {30, 10}, {50, 10}, {0, 100}}),
            (Ranges{{0, 100}}));
}

TEST(AddRange, OutOfOrder) {
  EXPECT_EQ(Merge({{50, 10}, {10, 10}, {30, 10}, {0, 5}}),
            (Ranges{{0, 5}, {10, 20}, {30, 40}, {50, 60}}));
  // One write spanning some ranges but not others.
  EXPECT_EQ(Merge({{50, 10}, {10, 10}, {30, 10}, {0, 5}, {15, 20}}),
            (Ranges{{0, 5}, {10, 40}, {50, 60}}));
}

TEST(AddRange, ZeroSizeAddsNothing) {
  EXPECT_EQ(Merge({{10, 0}}), Ranges{});
  EXPECT_EQ(Merge({{0, 10}, {100, 0}}), (Ranges{{0, 10}}));
}

TEST(AddRange, ClampsAtTheTop) {
  EXPECT_EQ(Merge({{kMax - 5, 100}}), (Ranges{{kMax - 5, kMax}}));
  EXPECT_EQ(Merge({{kMax - 5, 100}, {kMax - 10, 5}}),
            (Ranges{{kMax - 10, kMax}}));
  EXPECT_EQ(Merge({{kMax, 1}}), Ranges{});  // nothing fits there
  EXPECT_EQ(Merge({{0, kMax}, {1, kMax}}), (Ranges{{0, kMax}}));
}

// The bytes of a random set of writes against a byte map, at random.
TEST(AddRange, MatchesABitmapAtRandom) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<bool> bytes(512);
    Ranges r;
    for (int w = 0; w < 30; ++w) {
      uint64_t off = rng() % 500, size = rng() % 12;
      AddRange(&r, off, size);
      for (uint64_t i = off; i < off + size; ++i) bytes[i] = true;
    }
    Ranges want;
    for (uint64_t i = 0; i < bytes.size(); ++i) {
      if (!bytes[i]) continue;
      if (!want.empty() && want.back().second == i)
        ++want.back().second;
      else
        want.emplace_back(i, i + 1);
    }
    ASSERT_EQ(r, want) << "trial " << trial;
  }
}

TEST(WriteCoalescer, OneRecordPerFile) {
  WriteCoalescer c;
  EXPECT_TRUE(c.Add(1, 0, 10, First("a")).empty());
  EXPECT_TRUE(c.Add(1, 10, 10, First("ignored", 5000)).empty());
  EXPECT_TRUE(c.Add(2, 100, 4, First("b")).empty());
  EXPECT_TRUE(c.Add(1, 5, 10, First("a")).empty());  // overwrite
  EXPECT_EQ(c.pending(), 2u);
  std::optional<Record> a = c.Take(1);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->op, Op::kWrite);
  EXPECT_EQ(a->path, "a");  // from the first write
  EXPECT_EQ(a->time_ns, 1000);
  EXPECT_EQ(a->pid, 42);
  EXPECT_EQ(a->comm, "writer");
  EXPECT_EQ(a->layer, "0001");
  EXPECT_EQ(a->ranges, (Ranges{{0, 20}}));
  EXPECT_EQ(a->size, 30u);  // every write's bytes, not the union
  EXPECT_TRUE(a->ranges_known);
  EXPECT_FALSE(c.Take(1));
  EXPECT_EQ(c.pending(), 1u);
  std::optional<Record> b = c.Take(2);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->path, "b");
  EXPECT_EQ(b->ranges, (Ranges{{100, 104}}));
  EXPECT_EQ(b->size, 4u);
  EXPECT_EQ(c.pending(), 0u);
}

TEST(WriteCoalescer, ZeroSizeWriteStartsARecordWithoutARange) {
  WriteCoalescer c;
  EXPECT_TRUE(c.Add(1, 50, 0, First("a")).empty());
  EXPECT_EQ(c.pending(), 1u);
  std::optional<Record> r = c.Take(1);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ranges.empty());
  EXPECT_EQ(r->size, 0u);
}

TEST(WriteCoalescer, SizeSaturates) {
  WriteCoalescer c;
  EXPECT_TRUE(c.Add(1, 0, kMax, First("a")).empty());
  EXPECT_TRUE(c.Add(1, 0, kMax, First("a")).empty());
  std::optional<Record> r = c.Take(1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->size, kMax);
  EXPECT_EQ(r->ranges, (Ranges{{0, kMax}}));
}

TEST(WriteCoalescer, AMillionTinyAppendsMakeOneRange) {
  WriteCoalescer c;
  const Record first = First("log");
  for (uint64_t i = 0; i < 1'000'000; ++i) {
    ASSERT_TRUE(c.Add(9, i * 3, 3, first).empty());
  }
  EXPECT_EQ(c.pending(), 1u);
  std::optional<Record> r = c.Take(9);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ranges, (Ranges{{0, 3'000'000}}));
  EXPECT_LE(r->ranges.capacity(), 4u);  // memory did not grow with writes
  EXPECT_EQ(r->size, 3'000'000u);
}

TEST(WriteCoalescer, MaxRangesEmitsTheRecordAndStartsAnew) {
  WriteCoalescer c(/*max_ranges=*/3);
  EXPECT_TRUE(c.Add(1, 0, 1, First("a", 1)).empty());
  EXPECT_TRUE(c.Add(1, 10, 1, First("a", 2)).empty());
  std::vector<Record> out = c.Add(1, 20, 1, First("a", 3));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ranges, (Ranges{{0, 1}, {10, 11}, {20, 21}}));
  EXPECT_EQ(out[0].size, 3u);
  EXPECT_EQ(out[0].time_ns, 1);
  EXPECT_EQ(c.pending(), 0u);
  // The next write starts a new record from its own `first`.
  EXPECT_TRUE(c.Add(1, 30, 1, First("a", 4)).empty());
  std::optional<Record> next = c.Take(1);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->ranges, (Ranges{{30, 31}}));
  EXPECT_EQ(next->time_ns, 4);
}

TEST(WriteCoalescer, MaxRangesAtRandomCoversEveryByte) {
  constexpr size_t kMaxRanges = 8;
  WriteCoalescer c(kMaxRanges);
  std::mt19937_64 rng(11);
  std::vector<bool> written(100'000);
  std::vector<Record> records;
  uint64_t total = 0;
  for (int w = 0; w < 20'000; ++w) {
    uint64_t off = rng() % 99'900, size = 1 + rng() % 64;
    for (uint64_t i = off; i < off + size; ++i) written[i] = true;
    total += size;
    for (Record& r : c.Add(5, off, size, First("f"))) {
      records.push_back(std::move(r));
    }
  }
  if (std::optional<Record> last = c.Take(5)) records.push_back(*last);
  EXPECT_GT(records.size(), 1u);
  std::vector<bool> covered(written.size());
  uint64_t sum = 0;
  for (const Record& r : records) {
    EXPECT_LE(r.ranges.size(), kMaxRanges);
    EXPECT_TRUE(std::is_sorted(r.ranges.begin(), r.ranges.end()));
    for (size_t i = 0; i < r.ranges.size(); ++i) {
      EXPECT_LT(r.ranges[i].first, r.ranges[i].second);
      if (i > 0) {
        EXPECT_LT(r.ranges[i - 1].second, r.ranges[i].first);
      }
      for (uint64_t b = r.ranges[i].first; b < r.ranges[i].second; ++b)
        covered[b] = true;
    }
    sum += r.size;
  }
  EXPECT_EQ(covered, written);
  EXPECT_EQ(sum, total);
}

TEST(WriteCoalescer, MaxFilesEvictsTheOldest) {
  WriteCoalescer c(256, /*max_files=*/3);
  EXPECT_TRUE(c.Add(1, 0, 1, First("a", 10)).empty());
  EXPECT_TRUE(c.Add(2, 0, 1, First("b", 20)).empty());
  EXPECT_TRUE(c.Add(3, 0, 1, First("c", 30)).empty());
  // More writes to pending files evict nothing; the order is that of the
  // first writes.
  EXPECT_TRUE(c.Add(1, 1, 1, First("a", 40)).empty());
  std::vector<Record> out = c.Add(4, 0, 1, First("d", 50));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].path, "a");
  EXPECT_EQ(out[0].ranges, (Ranges{{0, 2}}));
  EXPECT_EQ(c.pending(), 3u);
  out = c.Add(5, 0, 1, First("e", 60));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].path, "b");
  // A taken file leaves room.
  ASSERT_TRUE(c.Take(3));
  EXPECT_TRUE(c.Add(6, 0, 1, First("f", 70)).empty());
  std::vector<Record> all = c.TakeAll();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].path, "d");
  EXPECT_EQ(all[1].path, "e");
  EXPECT_EQ(all[2].path, "f");
}

TEST(WriteCoalescer, TakeOlderThan) {
  WriteCoalescer c;
  EXPECT_TRUE(c.Add(1, 0, 1, First("a", 100)).empty());
  EXPECT_TRUE(c.Add(2, 0, 1, First("b", 300)).empty());
  EXPECT_TRUE(c.Add(3, 0, 1, First("c", 200)).empty());  // clock went back
  EXPECT_TRUE(c.Add(2, 5, 1, First("b", 50)).empty());   // not its first
  std::vector<Record> old = c.TakeOlderThan(250);
  ASSERT_EQ(old.size(), 2u);
  EXPECT_EQ(old[0].path, "a");
  EXPECT_EQ(old[1].path, "c");
  EXPECT_EQ(c.pending(), 1u);
  EXPECT_TRUE(c.TakeOlderThan(300).empty());  // strictly older
  old = c.TakeOlderThan(301);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].path, "b");
  EXPECT_EQ(old[0].ranges, (Ranges{{0, 1}, {5, 6}}));
  EXPECT_EQ(c.pending(), 0u);
}

TEST(WriteCoalescer, TakeAllEmptiesIt) {
  WriteCoalescer c;
  EXPECT_TRUE(c.TakeAll().empty());
  for (uint64_t n = 1; n <= 5; ++n)
    EXPECT_TRUE(c.Add(n, 0, n, First(std::to_string(n))).empty());
  std::vector<Record> all = c.TakeAll();
  ASSERT_EQ(all.size(), 5u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].path, std::to_string(i + 1));
    EXPECT_EQ(all[i].size, i + 1);
  }
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_FALSE(c.Take(1));
}

TEST(WriteCoalescer, AddIfPendingAndHas) {
  WriteCoalescer c(/*max_ranges=*/2);
  std::vector<Record> out;
  EXPECT_FALSE(c.Has(1));
  EXPECT_FALSE(c.AddIfPending(1, 0, 10, &out));
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_TRUE(c.Add(1, 0, 10, First("a")).empty());
  EXPECT_TRUE(c.Has(1));
  EXPECT_FALSE(c.Has(2));
  EXPECT_TRUE(c.AddIfPending(1, 10, 5, &out));
  EXPECT_TRUE(out.empty());
  // The second range reaches max_ranges: the record comes out.
  EXPECT_TRUE(c.AddIfPending(1, 100, 1, &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].path, "a");
  EXPECT_EQ(out[0].ranges, (Ranges{{0, 15}, {100, 101}}));
  EXPECT_EQ(out[0].size, 16u);
  EXPECT_FALSE(c.Has(1));
  EXPECT_FALSE(c.AddIfPending(1, 200, 1, &out));
  EXPECT_EQ(out.size(), 1u);
}

TEST(WriteCoalescer, AddUnseen) {
  WriteCoalescer c;
  // Unseen after seen writes: the ranges stay, marked not all known.
  EXPECT_TRUE(c.Add(1, 0, 10, First("a")).empty());
  EXPECT_TRUE(c.AddUnseen(1, First("a", 9999)).empty());
  EXPECT_TRUE(c.Add(1, 20, 5, First("a")).empty());
  std::optional<Record> a = c.Take(1);
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->ranges_known);
  EXPECT_EQ(a->ranges, (Ranges{{0, 10}, {20, 25}}));
  EXPECT_EQ(a->size, 15u);
  EXPECT_EQ(a->time_ns, 1000);
  // Unseen with nothing pending: a record from `first`, no ranges.
  EXPECT_TRUE(c.AddUnseen(2, First("b", 77)).empty());
  EXPECT_EQ(c.pending(), 1u);
  std::optional<Record> b = c.Take(2);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->op, Op::kWrite);
  EXPECT_EQ(b->path, "b");
  EXPECT_EQ(b->time_ns, 77);
  EXPECT_FALSE(b->ranges_known);
  EXPECT_TRUE(b->ranges.empty());
  EXPECT_EQ(b->size, 0u);
}

TEST(WriteCoalescer, AddUnseenEvictsTheOldestToo) {
  WriteCoalescer c(256, 1);
  EXPECT_TRUE(c.Add(1, 0, 1, First("a")).empty());
  std::vector<Record> out = c.AddUnseen(2, First("b"));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].path, "a");
  EXPECT_EQ(c.pending(), 1u);
}

TEST(WriteCoalescer, ConcurrentWritersLoseNothing) {
  WriteCoalescer c(4, 16);
  constexpr int kThreads = 4, kWrites = 20'000;
  std::vector<std::vector<Record>> out(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int w = 0; w < kWrites; ++w) {
        for (Record& r : c.Add(rng() % 64, rng() % 4096, 1, First("x")))
          out[t].push_back(std::move(r));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  uint64_t sum = 0;
  for (const auto& v : out)
    for (const Record& r : v) sum += r.size;
  for (const Record& r : c.TakeAll()) sum += r.size;
  EXPECT_EQ(sum, uint64_t{kThreads} * kWrites);
  EXPECT_EQ(c.pending(), 0u);
}

}  // namespace
}  // namespace acqfs::audit
