// NodeTable (fs/node_table.h) alone, without layers or a mount: names and
// hard-link aliases, the upper hard-link map, freeing once the kernel holds
// neither a lookup nor an open, what freeing leaves for Reap, and what a
// FORGET of more lookups than a node holds, or a RELEASE of an open it does
// not hold, does under each CountCheck (and the one log line of a clamp).
#include "fs/node_table.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "fs/file_cache.h"
#include "fs/kept_data.h"

namespace acqfs {
namespace {

using TableLock = std::lock_guard<std::mutex>;

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

class NodeTableTest : public ::testing::Test {
 protected:
  explicit NodeTableTest(CountCheck check = kDefaultCountCheck)
      : table_(&mu_, &files_, &kept_, check) {
    auto root = std::make_unique<Node>(1, S_IFDIR);
    root->nlookup = 1;
    root_ = table_.AddRoot(std::move(root));
  }

  // A new node named `name` in `parent`, holding `lookups` lookups.
  Node* Add(Node* parent, const std::string& name, mode_t type,
            uint64_t lookups, uint64_t ino) {
    auto node = std::make_unique<Node>(ino, type);
    node->nlookup = lookups;
    Node* raw = node.get();
    TableLock t(mu_);
    table_.AddNodeLocked(std::move(node));
    table_.AttachLocked(raw, parent, name);
    return raw;
  }
  void Forget(Node* node, uint64_t count) {
    TableLock t(mu_);
    table_.UncountLookupsLocked(node, count);
    table_.MaybeFreeLocked(node);
  }

  // Declared before the table, which gives freed nodes' files back to them.
  FileCache files_{8};
  KeptStore kept_{nullptr, 4};  // no kept data in these tests
  std::mutex mu_;               // the table's table_mu_
  NodeTable table_;
  Node* root_ = nullptr;
};

TEST_F(NodeTableTest, AttachDetachAndMoveNames) {
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  Node* f = Add(d, "a", S_IFREG, 1, 3);
  EXPECT_EQ(table_.node_count(), 3u);
  EXPECT_EQ(d->Child("a"), f);
  EXPECT_EQ(f->parent, d);
  EXPECT_EQ(f->name(), "a");
  {
    TableLock t(mu_);
    table_.MoveNameLocked(f, d, "a", root_, "b");
  }
  EXPECT_EQ(d->Child("a"), nullptr);
  EXPECT_FALSE(d->HasChildren());
  EXPECT_EQ(root_->Child("b"), f);
  EXPECT_EQ(f->parent, root_);
  EXPECT_EQ(f->name(), "b");
  {
    TableLock t(mu_);
    table_.DetachNameLocked(f, root_, "b");
  }
  EXPECT_EQ(root_->Child("b"), nullptr);
  EXPECT_EQ(f->parent, nullptr);
  EXPECT_TRUE(f->unlinked);
  // Unlinked, it is still held while the kernel holds its lookup.
  EXPECT_EQ(table_.node_count(), 3u);
  Forget(f, 1);
  EXPECT_EQ(table_.node_count(), 2u);
}

TEST_F(NodeTableTest, HardLinkNamesAreAliasesAndTheMapForgetsAFreedNode) {
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  Node* f = Add(root_, "a", S_IFREG, 1, 3);
  {
    TableLock t(mu_);
    table_.SetUpperLinkLocked(f, 77);
    EXPECT_EQ(table_.UpperLinkLocked(77), f);
    table_.AttachLocked(f, d, "b");  // a second name: an alias
  }
  EXPECT_EQ(f->parent, root_);
  ASSERT_TRUE(f->HasAliases());
  ASSERT_EQ(f->aliases().size(), 1u);
  EXPECT_EQ(f->aliases().front()->parent, d);
  EXPECT_EQ(f->aliases().front()->name(), "b");
  EXPECT_EQ(f->aliases().front()->node, f);
  EXPECT_EQ(d->Child("b"), f);
  {
    TableLock t(mu_);
    table_.MoveNameLocked(f, d, "b", d, "c");  // moves the alias
  }
  ASSERT_EQ(f->aliases().size(), 1u);
  EXPECT_EQ(f->aliases().front()->parent, d);
  EXPECT_EQ(f->aliases().front()->name(), "c");
  EXPECT_EQ(d->Child("b"), nullptr);
  EXPECT_EQ(d->Child("c"), f);
  EXPECT_EQ(f->parent, root_);
  {
    // Losing its position, the node takes the alias's place.
    TableLock t(mu_);
    table_.DetachNameLocked(f, root_, "a");
  }
  EXPECT_EQ(f->parent, d);
  EXPECT_EQ(f->name(), "c");
  EXPECT_FALSE(f->HasAliases());
  EXPECT_FALSE(f->unlinked);
  EXPECT_EQ(root_->Child("a"), nullptr);

  Forget(f, 1);
  EXPECT_EQ(table_.node_count(), 2u);
  EXPECT_EQ(d->Child("c"), nullptr);
  TableLock t(mu_);
  EXPECT_EQ(table_.UpperLinkLocked(77), nullptr);
}

TEST_F(NodeTableTest, FreesANodeOnceLookupsAndOpensAreGoneAndItsParentsToo) {
  Node* d = Add(root_, "d", S_IFDIR, 0, 2);  // held only by its child
  Node* f = Add(d, "f", S_IFREG, 2, 3);
  OpenFile file;
  file.fd.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(file.fd.is_valid());
  const int fd = files_.Put(f, std::move(file)).get();
  {
    TableLock t(mu_);
    table_.AddOpenLocked(f);
  }
  Forget(f, 1);
  EXPECT_EQ(table_.node_count(), 3u);
  Forget(f, 1);  // the open still holds it
  EXPECT_EQ(table_.node_count(), 3u);
  {
    TableLock t(mu_);
    EXPECT_TRUE(table_.MayBeOpenLocked(f));
    table_.ReleaseOpenLocked(f);
    EXPECT_FALSE(table_.MayBeOpenLocked(f));
    table_.MaybeFreeLocked(f);
  }
  // Both go: the directory was held only by the file below it.
  EXPECT_EQ(table_.node_count(), 1u);
  EXPECT_FALSE(root_->HasChildren());
  // The file's cached descriptor is doomed: closed by Reap, not before.
  EXPECT_EQ(files_.size(), 0u);
  EXPECT_TRUE(IsOpen(fd));
  table_.Reap();
  EXPECT_FALSE(IsOpen(fd));
  EXPECT_EQ(table_.clamped_forgets(), 0u);
}

TEST_F(NodeTableTest, AStaleNameUnlinksTheNodeAndTheNodesBelowIt) {
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  Node* f = Add(d, "f", S_IFREG, 1, 3);
  {
    TableLock t(mu_);
    table_.DropStaleNameLocked(d, root_, "d");
  }
  EXPECT_TRUE(d->unlinked);
  EXPECT_TRUE(f->unlinked);
  EXPECT_FALSE(d->HasChildren());
  EXPECT_EQ(root_->Child("d"), nullptr);
  EXPECT_EQ(table_.node_count(), 3u);
  Forget(f, 1);
  Forget(d, 1);
  EXPECT_EQ(table_.node_count(), 1u);
}

std::string LongName(size_t length, size_t i) {
  std::string n = std::to_string(i) + "_";
  while (n.size() < length) n += static_cast<char>('a' + n.size() % 26);
  return n.substr(0, std::max(length, std::to_string(i).size() + 1));
}

TEST_F(NodeTableTest, NamesOfEveryLengthMoveBetweenDirectories) {
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  Node* e = Add(root_, "e", S_IFDIR, 1, 3);
  std::vector<Node*> files;
  for (size_t len = 1; len <= 255; ++len)
    files.push_back(Add(d, LongName(len, len), S_IFREG, 1, 100 + len));
  for (size_t len = 1; len <= 255; ++len) {
    Node* f = files[len - 1];
    EXPECT_EQ(d->Child(LongName(len, len)), f);
    EXPECT_EQ(f->name(), LongName(len, len));
  }
  {
    // Each to e under a name of another length (long becomes short).
    TableLock t(mu_);
    for (size_t len = 1; len <= 255; ++len)
      table_.MoveNameLocked(files[len - 1], d, LongName(len, len), e,
                            LongName(256 - len, len));
  }
  EXPECT_FALSE(d->HasChildren());
  for (size_t len = 1; len <= 255; ++len) {
    Node* f = files[len - 1];
    EXPECT_EQ(f->parent, e);
    EXPECT_EQ(f->name(), LongName(256 - len, len));
    EXPECT_EQ(e->Child(LongName(256 - len, len)), f);
    EXPECT_EQ(e->Child(LongName(len, len)), len == 128 ? f : nullptr);
  }
  for (Node* f : files) Forget(f, 1);
  EXPECT_FALSE(e->HasChildren());
  EXPECT_EQ(table_.node_count(), 3u);
}

TEST_F(NodeTableTest, AnExchangeSwapsTheTwoNames) {
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  const std::string long_a(200, 'a'), long_b(40, 'b');
  Node* a = Add(root_, long_a, S_IFREG, 1, 3);
  Node* b = Add(d, long_b, S_IFREG, 1, 4);
  {
    // As RecordRenameLocked does for RENAME_EXCHANGE.
    TableLock t(mu_);
    table_.MoveNameLocked(a, root_, long_a, d, long_b);
    table_.MoveNameLocked(b, d, long_b, root_, long_a);
  }
  EXPECT_EQ(d->Child(long_b), a);
  EXPECT_EQ(root_->Child(long_a), b);
  EXPECT_EQ(a->parent, d);
  EXPECT_EQ(a->name(), long_b);
  EXPECT_EQ(b->parent, root_);
  EXPECT_EQ(b->name(), long_a);
}

TEST_F(NodeTableTest, AnAliasTakingThePositionKeepsItsNameFindable) {
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  const std::string name_a(30, 'a'), name_b(5, 'b'), name_c(100, 'c');
  Node* f = Add(root_, name_a, S_IFREG, 1, 3);
  {
    TableLock t(mu_);
    table_.AttachLocked(f, d, name_b);
    table_.AttachLocked(f, d, name_c);
    EXPECT_EQ(d->Child(name_b), f);
    EXPECT_EQ(d->Child(name_c), f);
    table_.DetachNameLocked(f, root_, name_a);  // name_c takes its place
    EXPECT_EQ(f->parent, d);
    EXPECT_EQ(f->name(), name_c);
    EXPECT_EQ(d->Child(name_c), f);
    EXPECT_EQ(d->Child(name_b), f);
    EXPECT_EQ(root_->Child(name_a), nullptr);
    table_.DetachNameLocked(f, d, name_c);  // then name_b
    EXPECT_EQ(f->name(), name_b);
    EXPECT_FALSE(f->HasAliases());
    EXPECT_EQ(d->Child(name_c), nullptr);
    EXPECT_EQ(d->Child(name_b), f);
    table_.DetachNameLocked(f, d, name_b);
  }
  EXPECT_TRUE(f->unlinked);
  EXPECT_EQ(f->parent, nullptr);
  EXPECT_EQ(f->name(), "");
  EXPECT_FALSE(d->HasChildren());
}

TEST_F(NodeTableTest, AStaleDirectoryOfManyNamesAndAliasesUnlinksThemAll) {
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  Node* keep = Add(root_, "keep", S_IFREG, 1, 3);
  std::vector<Node*> files;
  for (size_t i = 0; i < 3000; ++i)
    files.push_back(Add(d, LongName(1 + i % 255, i), S_IFREG, 1, 10 + i));
  {
    TableLock t(mu_);
    // `keep` has a second name in d: it loses only that one.
    table_.AttachLocked(keep, d, "alias-of-keep");
    table_.DropStaleNameLocked(d, root_, "d");
  }
  EXPECT_FALSE(d->HasChildren());
  for (Node* f : files) EXPECT_TRUE(f->unlinked);
  EXPECT_FALSE(keep->unlinked);
  EXPECT_FALSE(keep->HasAliases());
  EXPECT_EQ(root_->Child("keep"), keep);
  for (Node* f : files) Forget(f, 1);
  Forget(d, 1);
  EXPECT_EQ(table_.node_count(), 2u);
}

TEST_F(NodeTableTest, TheRootIsNeverFreed) {
  Forget(root_, 1);
  EXPECT_EQ(table_.node_count(), 1u);
  EXPECT_EQ(table_.root(), root_);
}

class NodeTableClamp : public NodeTableTest {
 protected:
  NodeTableClamp() : NodeTableTest(CountCheck::kClamp) {}
};

TEST_F(NodeTableClamp, AForgetOfMoreThanWasLookedUpCountsZeroAndIsCounted) {
  Node* f = Add(root_, "f", S_IFREG, 1, 3);
  {
    TableLock t(mu_);
    table_.UncountLookupsLocked(f, 5);
    EXPECT_EQ(f->nlookup, 0u);
    table_.MaybeFreeLocked(f);
  }
  EXPECT_EQ(table_.clamped_forgets(), 1u);
  EXPECT_EQ(table_.node_count(), 1u);
}

// Counts the lines a test makes the default spdlog logger write.
class LogCapture {
 public:
  LogCapture()
      : old_(spdlog::default_logger()),
        sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("node_table_test", sink_));
  }
  ~LogCapture() { spdlog::set_default_logger(old_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::vector<std::string> Lines() {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> old_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST_F(NodeTableClamp, AClampedForgetIsLoggedOnceNamingTheNode) {
  LogCapture log;
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  Node* f = Add(d, "f", S_IFREG, 1, 3);
  {
    TableLock t(mu_);
    table_.UncountLookupsLocked(f, 2);
    table_.UncountLookupsLocked(f, 1);
    EXPECT_EQ(f->nlookup, 0u);
  }
  EXPECT_EQ(table_.clamped_forgets(), 2u);
  auto lines = log.Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("2 lookups given back on the node of ino 3 (/d/f)"),
            std::string::npos)
      << lines[0];
}

TEST_F(NodeTableClamp, AReleaseOfAnOpenNotHeldIsCountedAndLoggedOnce) {
  LogCapture log;
  Node* d = Add(root_, "d", S_IFDIR, 1, 2);
  Node* f = Add(d, "f", S_IFREG, 1, 3);
  {
    TableLock t(mu_);
    table_.AddOpenLocked(f);
    table_.ReleaseOpenLocked(f);  // the one it held
    EXPECT_EQ(f->opens, 0u);
    table_.ReleaseOpenLocked(f);
    table_.ReleaseOpenLocked(f);
    EXPECT_EQ(f->opens, 0u);
  }
  EXPECT_EQ(table_.clamped_releases(), 2u);
  EXPECT_EQ(table_.clamped_forgets(), 0u);
  auto lines = log.Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("1 opens released on the node of ino 3 (/d/f)"),
            std::string::npos)
      << lines[0];
  // The node is still freed when the kernel forgets it.
  Forget(f, 1);
  Forget(d, 1);
  EXPECT_EQ(table_.node_count(), 1u);
}

class NodeTableAbort : public NodeTableTest {
 protected:
  NodeTableAbort() : NodeTableTest(CountCheck::kAbort) {}
};

// Whatever the build type: the policy is the table's.
TEST_F(NodeTableAbort, AForgetOfMoreThanWasLookedUpAbortsNamingTheCounts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Node* f = Add(root_, "f", S_IFREG, 1, 42);
  EXPECT_DEATH(Forget(f, 2),
               "2 lookups given back on node 0x[0-9a-f]+ \\(ino 42, name "
               "\"f\"\\), which holds 1");
  // An exact count is fine.
  Forget(f, 1);
  EXPECT_EQ(table_.node_count(), 1u);
}

TEST_F(NodeTableAbort, AReleaseOfAnOpenNotHeldAbortsNamingTheNode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Node* f = Add(root_, "f", S_IFREG, 1, 44);
  auto release = [&] {
    TableLock t(mu_);
    table_.ReleaseOpenLocked(f);
  };
  EXPECT_DEATH(release(),
               "1 opens released on node 0x[0-9a-f]+ \\(ino 44, name "
               "\"f\"\\), which holds 0 \\(path /f\\)");
}

#ifndef NDEBUG
// A debug build's default policy is the loud one.
TEST_F(NodeTableTest, ADebugBuildAbortsOnANegativeLookupCount) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Node* f = Add(root_, "f", S_IFREG, 3, 43);
  EXPECT_DEATH(Forget(f, 4), "4 lookups given back on node .*which holds 3");
  Forget(f, 3);
}
#else
TEST_F(NodeTableTest, AReleaseBuildClampsANegativeLookupCount) {
  Node* f = Add(root_, "f", S_IFREG, 3, 43);
  Forget(f, 4);
  EXPECT_EQ(table_.node_count(), 1u);
  EXPECT_EQ(table_.clamped_forgets(), 1u);
}
#endif

}  // namespace
}  // namespace acqfs
