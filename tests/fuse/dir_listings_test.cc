// ListingCache: the handle-less mode's directory listings. What is cached,
// when a directory is listed afresh, and that the cache stays within its
// bounds however many directories are read, evicting the least recently
// used.
#include "fuse/dir_listings.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace acqfs {
namespace {

// Stand-ins for the kernel's nodes: the cache only keys by address.
struct FakeDirs {
  explicit FakeDirs(size_t n) {
    for (size_t i = 0; i < n; i++)
      nodes.push_back(std::make_unique<Node>(100 + i, S_IFDIR));
  }
  const Node* operator[](size_t i) const { return nodes[i].get(); }
  std::vector<std::unique_ptr<Node>> nodes;
};

// A lister that makes `n` entries named after `tag` and counts its calls.
struct CountingLister {
  size_t n = 3;
  std::string tag = "a";
  int calls = 0;
  ListingCache::Lister Fn() {
    return [this](DirListing* out) {
      calls++;
      out->clear();
      for (size_t i = 0; i < n; i++)
        out->Add(tag + std::to_string(i), DT_REG, i + 1);
      out->listed = true;
      return Ok();
    };
  }
};

TEST(ListingCache, OffsetZeroListsAfreshAndLaterOffsetsReadTheNewest) {
  FakeDirs dirs(1);
  ListingCache cache;
  CountingLister lister;
  auto first = cache.Get(dirs[0], 0, lister.Fn());
  ASSERT_TRUE(first) << first.error().Message();
  EXPECT_EQ(lister.calls, 1);
  auto again = cache.Get(dirs[0], 2, lister.Fn());
  ASSERT_TRUE(again);
  EXPECT_EQ(lister.calls, 1) << "a later offset must read the cached listing";
  EXPECT_EQ(again->get(), first->get());

  lister.tag = "b";  // the directory changed; rewinddir must see it
  auto rewound = cache.Get(dirs[0], 0, lister.Fn());
  ASSERT_TRUE(rewound);
  EXPECT_EQ(lister.calls, 2);
  EXPECT_EQ((*rewound)->at(0).name, "b0");
  auto next = cache.Get(dirs[0], 1, lister.Fn());
  ASSERT_TRUE(next);
  EXPECT_EQ((*next)->at(0).name, "b0");
  // The earlier holder still reads the listing it got.
  EXPECT_EQ((*first)->at(0).name, "a0");
  EXPECT_EQ(cache.listings(), 1u);
  EXPECT_EQ(cache.entries(), 3u);
}

TEST(ListingCache, ALaterOffsetWithNothingCachedLists) {
  FakeDirs dirs(1);
  ListingCache cache;
  CountingLister lister;
  ASSERT_TRUE(cache.Get(dirs[0], 5, lister.Fn()));
  EXPECT_EQ(lister.calls, 1);
}

TEST(ListingCache, AFailedListingCachesNothing) {
  FakeDirs dirs(1);
  ListingCache cache;
  auto r = cache.Get(dirs[0], 0, [](DirListing*) -> Status {
    return Error::Of(EACCES, "readdir", "d");
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), EACCES);
  EXPECT_EQ(cache.listings(), 0u);
  CountingLister lister;
  ASSERT_TRUE(cache.Get(dirs[0], 3, lister.Fn()));
  EXPECT_EQ(lister.calls, 1);
}

TEST(ListingCache, KeepsAtMostMaxListingsEvictingTheLeastRecentlyUsed) {
  FakeDirs dirs(5);
  ListingCache cache(/*max_listings=*/3, /*max_entries=*/1000);
  CountingLister lister;
  for (size_t i = 0; i < 3; i++)
    ASSERT_TRUE(cache.Get(dirs[i], 0, lister.Fn()));
  // Reading dir 0 again makes dir 1 the least recently used.
  ASSERT_TRUE(cache.Get(dirs[0], 1, lister.Fn()));
  EXPECT_EQ(lister.calls, 3);
  ASSERT_TRUE(cache.Get(dirs[3], 0, lister.Fn()));
  EXPECT_EQ(cache.listings(), 3u);
  EXPECT_EQ(cache.entries(), 9u);

  lister.calls = 0;
  ASSERT_TRUE(cache.Get(dirs[0], 1, lister.Fn()));
  ASSERT_TRUE(cache.Get(dirs[2], 1, lister.Fn()));
  ASSERT_TRUE(cache.Get(dirs[3], 1, lister.Fn()));
  EXPECT_EQ(lister.calls, 0) << "dirs 0, 2 and 3 must still be cached";
  ASSERT_TRUE(cache.Get(dirs[1], 1, lister.Fn()));
  EXPECT_EQ(lister.calls, 1) << "dir 1 was the one evicted";

  for (int round = 0; round < 100; round++)
    for (size_t i = 0; i < 5; i++) {
      ASSERT_TRUE(cache.Get(dirs[i], round % 2, lister.Fn()));
      ASSERT_LE(cache.listings(), 3u);
    }
}

TEST(ListingCache, KeepsAtMostMaxEntriesButAlwaysTheNewestListing) {
  FakeDirs dirs(4);
  ListingCache cache(/*max_listings=*/100, /*max_entries=*/10);
  CountingLister lister;
  lister.n = 4;
  ASSERT_TRUE(cache.Get(dirs[0], 0, lister.Fn()));
  ASSERT_TRUE(cache.Get(dirs[1], 0, lister.Fn()));
  EXPECT_EQ(cache.entries(), 8u);
  ASSERT_TRUE(cache.Get(dirs[2], 0, lister.Fn()));  // 12 > 10: dir 0 goes
  EXPECT_EQ(cache.listings(), 2u);
  EXPECT_EQ(cache.entries(), 8u);

  lister.n = 50;  // larger than the whole budget: kept, alone
  auto big = cache.Get(dirs[3], 0, lister.Fn());
  ASSERT_TRUE(big);
  EXPECT_EQ(cache.listings(), 1u);
  EXPECT_EQ(cache.entries(), 50u);
  lister.calls = 0;
  ASSERT_TRUE(cache.Get(dirs[3], 7, lister.Fn()));
  EXPECT_EQ(lister.calls, 0);
}

TEST(ListingCache, ReplacingAListingCountsItsEntriesOnce) {
  FakeDirs dirs(1);
  ListingCache cache;
  CountingLister lister;
  for (int i = 0; i < 10; i++) ASSERT_TRUE(cache.Get(dirs[0], 0, lister.Fn()));
  EXPECT_EQ(cache.listings(), 1u);
  EXPECT_EQ(cache.entries(), 3u);
}

TEST(ListingCache, DropForgetsOneDirectory) {
  FakeDirs dirs(2);
  ListingCache cache;
  CountingLister lister;
  ASSERT_TRUE(cache.Get(dirs[0], 0, lister.Fn()));
  ASSERT_TRUE(cache.Get(dirs[1], 0, lister.Fn()));
  cache.Drop(dirs[0]);
  cache.Drop(dirs[0]);  // twice is harmless
  EXPECT_EQ(cache.listings(), 1u);
  EXPECT_EQ(cache.entries(), 3u);
  lister.calls = 0;
  ASSERT_TRUE(cache.Get(dirs[0], 1, lister.Fn()));
  ASSERT_TRUE(cache.Get(dirs[1], 1, lister.Fn()));
  EXPECT_EQ(lister.calls, 1);
}

TEST(DirListing, KeepsEveryNameTypeAndNumberInOrder) {
  DirListing l;
  EXPECT_EQ(l.size(), 0u);
  std::vector<std::string> names = {".", "..", ""};
  for (size_t len = 1; len <= 255; ++len)
    names.push_back(std::string(len, static_cast<char>('a' + len % 26)));
  l.reserve(names.size(), 0);  // a short reserve only costs a reallocation
  for (size_t i = 0; i < names.size(); ++i)
    l.Add(names[i], i % 2 ? DT_DIR : DT_REG, 1000 + i);
  ASSERT_EQ(l.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    DirListing::Entry e = l.at(i);
    EXPECT_EQ(e.name, names[i]);
    EXPECT_EQ(e.name.data()[e.name.size()], '\0');  // a C string for libfuse
    EXPECT_EQ(e.type, i % 2 ? DT_DIR : DT_REG);
    EXPECT_EQ(e.ino, 1000 + i);
  }
  l.clear();
  EXPECT_EQ(l.size(), 0u);
  l.Add("again", DT_LNK, 5);
  EXPECT_EQ(l.at(0).name, "again");
  EXPECT_EQ(l.at(0).type, DT_LNK);
}

// A listing of `names` as ListInto makes one: ".", "..", then sealed.
DirListing Listing(const std::vector<std::string>& names) {
  DirListing l;
  l.Add(".", DT_DIR, 1);
  l.Add("..", DT_DIR, 2);
  uint64_t ino = 10;
  for (const std::string& n : names) l.Add(n, DT_REG, ino++);
  l.Seal();
  return l;
}

// What a reader gets that reads `first` entries of `a`, then goes on at the
// offset it was given in `b` (a listing made afresh after changes).
std::vector<std::string> ReadAcross(const DirListing& a, size_t first,
                                    const DirListing& b) {
  std::vector<std::string> got;
  size_t i = a.IndexAfter(0);
  uint64_t off = 0;
  for (; i < a.size() && got.size() < first; i++) {
    got.emplace_back(a.at(i).name);
    off = a.CookieAt(i);
  }
  for (size_t j = b.IndexAfter(off); j < b.size(); j++)
    got.emplace_back(b.at(j).name);
  return got;
}

TEST(DirListing, AReaderGoingOnInANewerListingSeesEveryUnchangedNameOnce) {
  std::vector<std::string> before, after;
  for (int i = 0; i < 300; i++) before.push_back("f" + std::to_string(i));
  // Made since: 200 new names; 50 of the old ones removed.
  for (int i = 0; i < 300; i++)
    if (i % 6 != 0) after.push_back("f" + std::to_string(i));
  for (int i = 0; i < 200; i++) after.push_back("new" + std::to_string(i));
  const DirListing a = Listing(before), b = Listing(after);
  for (size_t first : {0, 1, 2, 3, 57, 150, 299, 302}) {
    std::vector<std::string> got = ReadAcross(a, first, b);
    std::map<std::string, int> seen;
    for (const std::string& n : got) seen[n]++;
    for (int i = 0; i < 300; i++) {
      const std::string n = "f" + std::to_string(i);
      const int count = seen.count(n) ? seen.at(n) : 0;
      if (i % 6 != 0)
        EXPECT_EQ(count, 1) << n << " after " << first;
      else
        EXPECT_LE(count, 1) << n << " after " << first;
    }
    for (const auto& [n, count] : seen) EXPECT_EQ(count, 1) << n;
    EXPECT_EQ(seen["."], 1);
    EXPECT_EQ(seen[".."], 1);
  }
}

TEST(DirListing, CookiesAreFixedPositiveAndOrderTheListing) {
  const DirListing l = Listing({"b", "a", "c", "zz", "longer-name"});
  EXPECT_EQ(l.at(0).name, ".");
  EXPECT_EQ(l.at(1).name, "..");
  EXPECT_EQ(l.CookieAt(0), 1u);
  EXPECT_EQ(l.CookieAt(1), 2u);
  for (size_t i = 2; i < l.size(); i++) {
    EXPECT_EQ(l.CookieAt(i), DirListing::CookieOf(l.at(i).name));
    EXPECT_GE(l.CookieAt(i), 3u);
    EXPECT_LT(l.CookieAt(i), 1ull << 63);
    if (i > 2) {
      EXPECT_LT(l.CookieAt(i - 1), l.CookieAt(i));
    }
    EXPECT_EQ(l.IndexAfter(l.CookieAt(i - 1)), i);
  }
  EXPECT_EQ(l.IndexAfter(l.CookieAt(l.size() - 1)), l.size());
  EXPECT_EQ(DirListing::CookieOf("a"), DirListing::CookieOf(std::string("a")));
}

TEST(DirHandle, TheHandleNamesTheListingAndTakingItBackFreesIt) {
  auto owned = std::make_unique<DirListing>();
  owned->Add("x", DT_REG, 7);
  const uint64_t fh = HandleOf(owned.get());
  EXPECT_NE(fh, 0u);
  DirListing* raw = owned.release();
  EXPECT_EQ(BorrowHandle(fh), raw);
  EXPECT_EQ(BorrowHandle(fh)->at(0).name, "x");
  EXPECT_EQ(BorrowHandle(0), nullptr);
  std::unique_ptr<DirListing> back = TakeHandle(fh);
  EXPECT_EQ(back.get(), raw);
}

}  // namespace
}  // namespace acqfs
