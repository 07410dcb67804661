// The handle-less mode's unlinked files (Overlay::SetOpensUnknown): an
// upper file unlinked while the kernel may hold it open keeps its data,
// through a descriptor while the budget lasts and in acqfs-tmp beyond it,
// until the kernel forgets the node.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "fs/overlay.h"
#include "overlay_test_fixture.h"

namespace acqfs {
namespace {

using acqfs_test::Exists;
using acqfs_test::ListDir;

class OverlayUnlinked : public acqfs_test::OverlayTest {
 protected:
  // Creates `name` in the upper with `data`, looked up once (as the kernel
  // would hold it after a CREATE).
  Node* MakeFile(const std::string& name, const std::string& data) {
    auto made = ov_->Create(root(), name, 0644, O_WRONLY,
                            Creds{::getuid(), ::getgid()});
    EXPECT_TRUE(made.ok());
    if (!made) return nullptr;
    EXPECT_EQ(::write(made->second.get(), data.data(), data.size()),
              static_cast<ssize_t>(data.size()));
    ov_->ReleaseOpen(made->first);  // the kernel's RELEASE of the CREATE
    return made->first;
  }
  std::string ReadAll(Node* node) {
    bool from_lower = true;
    auto fd = ov_->Open(node, O_RDONLY, &from_lower);
    EXPECT_TRUE(fd.ok());
    if (!fd) return "";
    EXPECT_FALSE(from_lower);
    std::string out(64, '\0');
    ssize_t n = ::pread(fd->get(), out.data(), out.size(), 0);
    ov_->ReleaseOpen(node);
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return out;
  }
};

TEST_F(OverlayUnlinked, WithinTheBudgetADescriptorKeepsTheData) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ov_->SetOpensUnknown(true, 4);
  Node* f = MakeFile("f", "kept data");
  ASSERT_NE(f, nullptr);
  ASSERT_OK(ov_->Unlink(root(), "f"));
  EXPECT_FALSE(Exists(t_.U("f")));
  EXPECT_TRUE(ListDir(t_.tmp()).empty());  // nothing parked
  EXPECT_EQ(ReadAll(f), "kept data");
  // Writable too, through the kept descriptor.
  bool from_lower = true;
  ASSERT_OK_AND_ASSIGN(UniqueFd w, ov_->Open(f, O_WRONLY, &from_lower));
  EXPECT_EQ(::pwrite(w.get(), "K", 1, 0), 1);
  ov_->ReleaseOpen(f);
  EXPECT_EQ(ReadAll(f), "Kept data");
  ov_->Forget(f, 1);
}

TEST_F(OverlayUnlinked, BeyondTheBudgetTheDataIsParkedInAcqfsTmp) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ov_->SetOpensUnknown(true, 1);
  Node* a = MakeFile("a", "first");
  Node* b = MakeFile("b", "second");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK(ov_->Unlink(root(), "a"));  // takes the one descriptor
  ASSERT_OK(ov_->Unlink(root(), "b"));  // parked
  EXPECT_EQ(ListDir(t_.tmp()).size(), 1u);
  EXPECT_EQ(ReadAll(a), "first");
  EXPECT_EQ(ReadAll(b), "second");
  // FORGET frees both: the parked copy goes, and the descriptor budget
  // comes back for the next file.
  ov_->Forget(b, 1);
  ov_->Forget(a, 1);
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
  Node* c = MakeFile("c", "third");
  ASSERT_NE(c, nullptr);
  ASSERT_OK(ov_->Unlink(root(), "c"));
  EXPECT_TRUE(ListDir(t_.tmp()).empty());
  EXPECT_EQ(ReadAll(c), "third");
  ov_->Forget(c, 1);
}

}  // namespace
}  // namespace acqfs
