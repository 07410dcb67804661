// Tests of CopyUpSources (fs/copy_up_source.h): which copy-ups keep what
// they started from, what the store holds, that the mark travels with the
// file to a frozen layer's copy-up, and that a malformed store is refused.
#include "fs/copy_up_source.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/sys.h"
#include "fs/copy_up.h"
#include "fs/layer.h"
#include "harness/layer_tree.h"

namespace acqfs {
namespace {

namespace fs = std::filesystem;
using acqfs::test::MakeFile;
using acqfs::test::ReadFile;

int64_t NowNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

class CopyUpSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = t_.root() + "/sources";
    // "old" changed before the base, "new" after it.
    MakeFile(t_.L("old"), "old host text\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    since_ = NowNs();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    MakeFile(t_.L("dir/new"), "the host's edit\n");
    ASSERT_EQ(::chmod(t_.L("dir/new").c_str(), 0751), 0);
    ASSERT_OK_AND_ASSIGN(layers_, acqfs::test::OpenLayers(t_));
    ASSERT_OK_AND_ASSIGN(layers_.sources,
                         CopyUpSources::Open(store_, since_, true));
    ASSERT_EQ(::mkdir(t_.U("dir").c_str(), 0755), 0);
  }

  std::optional<std::string> KeyOf(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_TRUE(fd.is_valid()) << path;
    auto k = SourceKeyOf(layers_.format, fd.get(), path);
    EXPECT_TRUE(k) << k.error().Message();
    return k ? *k : std::nullopt;
  }

  acqfs::test::TempTree t_;
  std::string store_;
  int64_t since_ = 0;
  Layers layers_;
};

TEST_F(CopyUpSourceTest, OnlyAHostFileChangedSinceTheBaseKeepsItsSource) {
  ASSERT_OK(CopyUp(layers_, "old"));
  ASSERT_OK(CopyUp(layers_, "dir/new"));
  EXPECT_FALSE(KeyOf(t_.U("old")));
  auto key = KeyOf(t_.U("dir/new"));
  ASSERT_TRUE(key);
  EXPECT_EQ(key->size(), 32u);
  // The sandbox then writes the copy: the source stays what it started
  // from.
  MakeFile(t_.U("dir/new"), "the agent's text\n");
  ASSERT_OK_AND_ASSIGN(auto reader, CopyUpSources::Open(store_, 0, false));
  ASSERT_OK_AND_ASSIGN(auto src, reader->Read(*key));
  EXPECT_EQ(src.path, "dir/new");
  EXPECT_EQ(src.data, "the host's edit\n");
  EXPECT_EQ(src.mode, 0751u);
  // One file in the store, no temporary left.
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(store_)) {
    EXPECT_EQ(e.path().filename().string(), *key);
    ++n;
  }
  EXPECT_EQ(n, 1u);
  // The mark is private: a reader of the layers in the user namespace
  // sees it only as the format's own xattr.
  EXPECT_TRUE(layers_.format.IsPrivateXattr(layers_.format.SourceKey()));
}

// A daemon killed while it wrote a source leaves its temporary; the next
// daemon's store removes it, and keeps the finished ones.
TEST_F(CopyUpSourceTest, TheNextWriterRemovesAnUnfinishedSource) {
  ASSERT_OK(CopyUp(layers_, "dir/new"));
  auto key = KeyOf(t_.U("dir/new"));
  ASSERT_TRUE(key);
  MakeFile(store_ + "/#" + std::string(32, 'a'), "acqfs-source 1 644 1\n");
  ASSERT_OK_AND_ASSIGN(auto again, CopyUpSources::Open(store_, since_, true));
  EXPECT_FALSE(fs::exists(store_ + "/#" + std::string(32, 'a')));
  EXPECT_TRUE(again->Read(*key));
}

TEST_F(CopyUpSourceTest, AStoreThatKeepsNothingMarksNothing) {
  ASSERT_OK_AND_ASSIGN(layers_.sources, CopyUpSources::Open(store_, 0, true));
  ASSERT_OK(CopyUp(layers_, "dir/new"));
  EXPECT_FALSE(KeyOf(t_.U("dir/new")));
  layers_.sources = nullptr;
  ASSERT_OK(CopyUp(layers_, "old"));
  EXPECT_FALSE(KeyOf(t_.U("old")));
  EXPECT_TRUE(fs::is_empty(store_));
}

// A checkpoint freezes the upper; the next write copies the file up from
// the frozen layer, and that copy carries the mark (a host file's mark is
// never copied: it cannot have one the sandbox made).
TEST_F(CopyUpSourceTest, ACopyUpFromAFrozenLayerCarriesTheMark) {
  ASSERT_OK(CopyUp(layers_, "dir/new"));
  auto key = KeyOf(t_.U("dir/new"));
  ASSERT_TRUE(key);
  const std::string upper2 = t_.root() + "/upper2", work2 = t_.root() + "/w2";
  ASSERT_EQ(::mkdir(upper2.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(work2.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((upper2 + "/dir").c_str(), 0755), 0);
  ASSERT_OK_AND_ASSIGN(Layers stacked,
                       Layers::Open(t_.lower(), upper2, work2,
                                    XattrNamespace::kUser, {t_.upper()}));
  stacked.sources = layers_.sources;
  ASSERT_OK(CopyUp(stacked, "dir/new", LowerSource{1, 0}));
  EXPECT_EQ(KeyOf(upper2 + "/dir/new"), key);
  EXPECT_EQ(ReadFile(upper2 + "/dir/new"), "the host's edit\n");
}

TEST_F(CopyUpSourceTest, MalformedKeysAndFilesAreRefused) {
  ASSERT_OK_AND_ASSIGN(auto reader, CopyUpSources::Open(store_, 0, false));
  const std::string keys[] = {"", "../x", std::string(32, 'g'),
                              std::string(31, 'a'), std::string(33, 'a')};
  for (const std::string& k : keys) EXPECT_ERRNO(EINVAL, reader->Read(k));
  EXPECT_ERRNO(ENOENT, reader->Read(std::string(32, 'a')));
  const std::string bad[] = {
      "garbage",
      "acqfs-source 1 644 99\nshort\n",
      "acqfs-source 1 644 3\nabcX",
      "acqfs-source 1 99999 3\nabc\n",
      "acqfs-source 1 644 0\n\n",
  };
  for (size_t i = 0; i < std::size(bad); ++i) {
    const std::string k(32, static_cast<char>('a' + i));
    MakeFile(store_ + "/" + k, bad[i]);
    SCOPED_TRACE(bad[i]);
    EXPECT_ERRNO(EINVAL, reader->Read(k));
  }
  // A symlink in the store is never followed.
  const std::string k(32, 'f');
  ASSERT_EQ(::symlink("/etc/passwd", (store_ + "/" + k).c_str()), 0);
  EXPECT_FALSE(reader->Read(k));
  EXPECT_ERRNO(ENOENT, CopyUpSources::Open(t_.root() + "/none", 0, false));
}

}  // namespace
}  // namespace acqfs
