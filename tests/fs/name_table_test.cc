// NameLink and NameTable (fs/name_table.h) alone: names of every length,
// inline and on the heap; insert, find, erase, replace and rename of names;
// names that collide in the table's slots, around its end too; many
// entries, growing and shrinking; and a long random run checked against a
// std::map.
#include "fs/name_table.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace acqfs {
namespace {

struct Link : NameLink {
  explicit Link(const std::string& n) { SetName(n); }
};

std::string NameOf(size_t length, char seed) {
  std::string s(length, 'x');
  for (size_t i = 0; i < length; ++i)
    s[i] = static_cast<char>('!' + (seed + i * 7) % 90);
  return s;
}

TEST(NameLink, HoldsNamesOfEveryLengthInlineOrOnTheHeap) {
  Link l("");
  EXPECT_EQ(l.name(), "");
  EXPECT_FALSE(l.name_on_heap());
  for (size_t len = 0; len <= 300; ++len) {
    std::string n = NameOf(len, static_cast<char>(len));
    l.SetName(n);
    EXPECT_EQ(l.name(), n) << len;
    EXPECT_EQ(l.name().size(), len);
    EXPECT_EQ(l.name_on_heap(), len > NameLink::kInline) << len;
  }
  // Back and forth between the two forms, and names with NUL bytes.
  l.SetName(NameOf(255, 'a'));
  l.SetName("short");
  EXPECT_EQ(l.name(), "short");
  std::string with_nul("a\0b", 3);
  l.SetName(with_nul);
  EXPECT_EQ(l.name(), with_nul);
  l.SetName(NameOf(NameLink::kInline, 'q'));
  EXPECT_FALSE(l.name_on_heap());
  l.SetName(NameOf(NameLink::kInline + 1, 'q'));
  EXPECT_TRUE(l.name_on_heap());
  EXPECT_EQ(l.name(), NameOf(NameLink::kInline + 1, 'q'));
  EXPECT_FALSE(l.is_alias());
  EXPECT_EQ(l.parent, nullptr);
}

TEST(NameTable, InsertFindEraseAndReplace) {
  NameTable t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.Find("a"), nullptr);
  EXPECT_EQ(t.First(), nullptr);
  EXPECT_EQ(t.bytes(), 0u);
  Link a("a"), b("b"), a2("a");
  EXPECT_EQ(t.Insert(&a), nullptr);
  EXPECT_EQ(t.Insert(&b), nullptr);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Find("a"), &a);
  EXPECT_EQ(t.Find("b"), &b);
  EXPECT_EQ(t.Find("c"), nullptr);
  EXPECT_EQ(t.Find(""), nullptr);
  // Another link of the same name displaces the first.
  EXPECT_EQ(t.Insert(&a2), &a);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Find("a"), &a2);
  // Erase and Replace act only on the link that is there.
  EXPECT_FALSE(t.Erase(&a));
  EXPECT_FALSE(t.Replace(&a, &a));
  EXPECT_EQ(t.Find("a"), &a2);
  EXPECT_TRUE(t.Replace(&a2, &a));
  EXPECT_EQ(t.Find("a"), &a);
  EXPECT_TRUE(t.Erase(&a));
  EXPECT_FALSE(t.Erase(&a));
  EXPECT_EQ(t.Find("a"), nullptr);
  EXPECT_EQ(t.First(), &b);
  EXPECT_TRUE(t.Erase(&b));
  // Empty again: nothing allocated.
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.capacity(), 0u);
}

TEST(NameTable, ARenameIsAnEraseThenAnInsertUnderTheNewName) {
  NameTable a, b;
  NameTable* from = &a;
  NameTable* to = &b;
  Link l(NameOf(16, 'r'));
  from->Insert(&l);
  for (size_t len : {1u, 22u, 23u, 100u, 255u, 3u}) {
    ASSERT_TRUE(from->Erase(&l));
    std::string n = NameOf(len, static_cast<char>(len));
    l.SetName(n);
    to->Insert(&l);
    EXPECT_EQ(to->Find(n), &l);
    EXPECT_TRUE(from->empty());
    std::swap(from, to);
  }
}

// Names whose hashes agree in their low 12 bits: they share a home slot in
// any table of up to 4,096 slots. `low` picks which bits.
std::vector<std::string> Colliding(size_t count, size_t low) {
  std::vector<std::string> out;
  for (size_t i = 0; out.size() < count; ++i) {
    std::string n = "c" + std::to_string(i);
    if ((NameHash(n) & 0xfff) == low) out.push_back(n);
  }
  return out;
}

void CheckAll(const NameTable& t, const std::vector<std::unique_ptr<Link>>& in,
              const std::vector<std::unique_ptr<Link>>& out) {
  for (const auto& l : in) EXPECT_EQ(t.Find(l->name()), l.get()) << l->name();
  for (const auto& l : out) EXPECT_EQ(t.Find(l->name()), nullptr) << l->name();
  EXPECT_EQ(t.size(), in.size());
}

TEST(NameTable, CollidingNamesAreAllFoundThroughEraseInTheMiddle) {
  // Home slot 0xfff: the last slot of a 4,096-slot table, the probe wraps
  // around its end; in smaller tables, the last slot too.
  for (size_t low : {size_t{0}, size_t{0xfff}, size_t{0x7ff}}) {
    std::vector<std::unique_ptr<Link>> in, out;
    for (const auto& n : Colliding(12, low))
      in.push_back(std::make_unique<Link>(n));
    NameTable t;
    for (auto& l : in) EXPECT_EQ(t.Insert(l.get()), nullptr);
    CheckAll(t, in, out);
    // Erase from the middle, the front and the end of the probe run.
    for (size_t pick : {size_t{5}, size_t{0}, size_t{9}, size_t{3}}) {
      ASSERT_TRUE(t.Erase(in[pick].get()));
      out.push_back(std::move(in[pick]));
      in.erase(in.begin() + pick);
      CheckAll(t, in, out);
    }
    // Back in, in another order.
    for (auto& l : out) t.Insert(l.get());
    for (auto& l : out) in.push_back(std::move(l));
    out.clear();
    CheckAll(t, in, out);
  }
}

TEST(NameTable, CollidingNamesMixedWithOthersInASmallTable) {
  // A 16-slot table: runs of colliding names meet runs of other names.
  std::vector<std::unique_ptr<Link>> in, out;
  for (const auto& n : Colliding(4, 0xf))
    in.push_back(std::make_unique<Link>(n));
  for (const auto& n : Colliding(4, 0x0))
    in.push_back(std::make_unique<Link>(n));
  for (const auto& n : Colliding(3, 0x1))
    in.push_back(std::make_unique<Link>(n));
  NameTable t;
  for (auto& l : in) t.Insert(l.get());
  EXPECT_EQ(t.capacity(), 16u);
  CheckAll(t, in, out);
  for (size_t i = 0; i < in.size(); i += 2) {
    ASSERT_TRUE(t.Erase(in[i].get()));
    out.push_back(std::move(in[i]));
  }
  std::vector<std::unique_ptr<Link>> left;
  for (auto& l : in)
    if (l) left.push_back(std::move(l));
  CheckAll(t, left, out);
}

TEST(NameTable, ManyEntriesOfEveryLengthGrowAndShrink) {
  std::vector<std::unique_ptr<Link>> in, out;
  NameTable t;
  for (size_t i = 0; i < 20000; ++i) {
    // Lengths 1 to 255, cycling; the index makes each name unique.
    std::string n = std::to_string(i) + "-";
    n += NameOf(i % 256 > n.size() ? i % 256 - n.size() : 0, 'm');
    in.push_back(std::make_unique<Link>(n));
    ASSERT_EQ(t.Insert(in.back().get()), nullptr) << n;
    // Never more than 3/4 full.
    ASSERT_LE(t.size() * 4, t.capacity() * 3);
  }
  CheckAll(t, in, out);
  size_t seen = 0;
  t.ForEach([&](NameLink*) { ++seen; });
  EXPECT_EQ(seen, in.size());
  const size_t big = t.capacity();
  // Down to 10 entries: the table gives its slots back as it empties.
  while (in.size() > 10) {
    ASSERT_TRUE(t.Erase(in.back().get()));
    out.push_back(std::move(in.back()));
    in.pop_back();
  }
  CheckAll(t, in, out);
  EXPECT_LT(t.capacity(), big / 100);
  EXPECT_LE(t.bytes(), 8 + 8 * t.capacity());
}

TEST(NameTable, ARandomRunAgreesWithAMap) {
  std::mt19937 rng(16);
  std::vector<std::unique_ptr<Link>> links;
  std::map<std::string, Link*> model;
  NameTable t;
  for (int step = 0; step < 200000; ++step) {
    // Few distinct names, so inserts displace and erases hit and miss.
    std::string n = "n" + std::to_string(rng() % 3000);
    if (rng() % 4 == 0) n += NameOf(rng() % 240, 'z');
    switch (rng() % 3) {
      case 0: {
        links.push_back(std::make_unique<Link>(n));
        NameLink* old = t.Insert(links.back().get());
        auto it = model.find(n);
        ASSERT_EQ(old, it == model.end() ? nullptr : it->second);
        model[n] = links.back().get();
        break;
      }
      case 1: {
        auto it = model.find(n);
        if (it == model.end()) {
          ASSERT_EQ(t.Find(n), nullptr);
          break;
        }
        ASSERT_TRUE(t.Erase(it->second));
        model.erase(it);
        break;
      }
      default: {
        auto it = model.find(n);
        ASSERT_EQ(t.Find(n), it == model.end() ? nullptr : it->second);
      }
    }
    ASSERT_EQ(t.size(), model.size());
  }
  for (const auto& [n, l] : model) EXPECT_EQ(t.Find(n), l);
}

}  // namespace
}  // namespace acqfs
