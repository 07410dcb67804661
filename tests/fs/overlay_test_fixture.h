// OverlayTest: a TempTree plus an Overlay engine over it, for the engine's
// unit tests. A test builds the lower (and maybe the upper) with plain
// syscalls, then calls Start() and drives the engine through Node pointers.
// Lookups are counted by the engine; the tests do not Forget (the engine is
// destroyed with the fixture).
// Thread-safety: single-threaded test code.
#ifndef ACQFS_TESTS_FS_OVERLAY_TEST_FIXTURE_H_
#define ACQFS_TESTS_FS_OVERLAY_TEST_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "fs/overlay.h"
#include "harness/layer_tree.h"

namespace acqfs::test {

class OverlayTest : public ::testing::Test {
 protected:
  // The engine gives a new entry exactly the mode it is passed (the kernel
  // has applied the caller's umask), whatever the process umask; the tests'
  // own files are made with a fixed one.
  void SetUp() override { old_umask_ = ::umask(022); }
  void TearDown() override { ::umask(old_umask_); }

  // Opens the layers and creates the engine. Use as
  // ASSERT_NO_FATAL_FAILURE(Start()).
  void Start(acqfs::XattrNamespace ns = acqfs::XattrNamespace::kUser,
             std::shared_ptr<const acqfs::Policy> policy = nullptr) {
    ASSERT_OK_AND_ASSIGN(acqfs::Layers l, OpenLayers(t_, ns));
    l.policy = std::move(policy);
    ASSERT_OK_AND_ASSIGN(ov_, acqfs::Overlay::Create(std::move(l)));
    ASSERT_NE(ov_->root(), nullptr);
  }

  acqfs::Node* root() { return ov_->root(); }

  // Looks up a relative path component by component.
  acqfs::Result<acqfs::Node*> Walk(const std::string& rel) {
    acqfs::Node* n = root();
    size_t pos = 0;
    while (pos <= rel.size() && !rel.empty()) {
      size_t slash = rel.find('/', pos);
      std::string part = rel.substr(
          pos, slash == std::string::npos ? std::string::npos : slash - pos);
      auto r = ov_->Lookup(n, part);
      if (!r.ok()) return r;
      n = *r;
      if (slash == std::string::npos) break;
      pos = slash + 1;
    }
    return n;
  }

  // Sorted names of the merged listing of `dir`.
  std::vector<std::string> ReadDirNames(acqfs::Node* dir) {
    std::vector<std::string> out;
    auto r = ov_->ReadDir(dir);
    if (!r.ok()) {
      ADD_FAILURE() << "ReadDir: " << r.error().Message();
      return out;
    }
    for (const auto& e : *r) out.push_back(e.name);
    std::sort(out.begin(), out.end());
    return out;
  }

  // Overlay::Open (a counted open: ReleaseOpen gives it back), also saying
  // whether the descriptor reads the lower copy.
  acqfs::Result<acqfs::FileLease> OpenVia(acqfs::Node* node, int flags,
                                          bool* from_lower) {
    auto f = ov_->Open(node, flags);
    if (f.ok()) *from_lower = (*f)->from_lower;
    return f;
  }

  // Opens `node` read-only through the engine and reads it all.
  std::string ReadVia(acqfs::Node* node, bool* from_lower = nullptr) {
    bool fl = false;
    auto fd = OpenVia(node, O_RDONLY, &fl);
    if (!fd.ok()) {
      ADD_FAILURE() << "Open: " << fd.error().Message();
      return "";
    }
    if (from_lower) *from_lower = fl;
    std::string out = ReadAll(fd->get());
    ov_->ReleaseOpen(node);
    return out;
  }

  static std::string ReadAll(int fd) {
    std::string out;
    char buf[65536];
    for (off_t off = 0;;) {
      ssize_t n = ::pread(fd, buf, sizeof buf, off);
      if (n < 0) {
        ADD_FAILURE() << "pread failed";
        break;
      }
      if (n == 0) break;
      out.append(buf, n);
      off += n;
    }
    return out;
  }

  static acqfs::Creds Me() { return acqfs::Creds{::geteuid(), ::getegid()}; }

  TempTree t_;
  std::unique_ptr<acqfs::Overlay> ov_;
  mode_t old_umask_ = 022;
};

}  // namespace acqfs::test

#endif  // ACQFS_TESTS_FS_OVERLAY_TEST_FIXTURE_H_
