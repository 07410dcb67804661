// The passthrough bookkeeping without a mount (fuse/passthrough.h): how an
// open is answered from the node's live opens, the count kept per node
// (with /dev/null for /dev/fuse: every backing id is refused there, which
// is how a mount without the privilege behaves), and the rewritten OPEN
// and CREATE replies.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fuse.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "fuse/fuse_uapi.h"
#include "fuse/passthrough.h"

namespace acqfs {
namespace {

TEST(DecideOpen, OneKindOfOpenPerNodeAtATime) {
  EXPECT_EQ(DecideOpen(0, 0), OpenAnswer::kCreate);
  EXPECT_EQ(DecideOpen(1, 0), OpenAnswer::kCached);
  EXPECT_EQ(DecideOpen(0, 1), OpenAnswer::kReuse);
  EXPECT_EQ(DecideOpen(5, 0), OpenAnswer::kCached);
}

TEST(BackingTable, ARefusedBackingIsACachedOpenAndTurnsPassthroughOff) {
  int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  {
    BackingTable t(fd);
    int node = 0;
    // Off until INIT asked for it: cached, and the source is not opened.
    bool asked = false;
    auto source = [&]() -> Result<int> {
      asked = true;
      return fd;
    };
    EXPECT_EQ(t.Open(&node, source), 0u);
    EXPECT_FALSE(asked);
    t.Release(&node, false);
    t.Enable();
    // /dev/null refuses the ioctl (ENOTTY): this open is cached, and
    // counted so; the table stays on (not a refusal for every file).
    EXPECT_EQ(t.Open(&node, source), 0u);
    EXPECT_TRUE(asked);
    EXPECT_TRUE(t.Live().empty());
    t.Release(&node, false);
    // A node whose file may not be a backing: cached.
    EXPECT_EQ(
        t.Open(&node, [] { return Result<int>(Error::Of(EXDEV, "x", "")); }),
        0u);
    t.Release(&node, false);
    EXPECT_EQ(t.passed_through(), 0u);
  }
  ::close(fd);
}

TEST(PassthroughReply, TheOpenOutCarriesTheFlagAndTheIdAndNoKeepCache) {
  fuse_out_header h{};
  h.len = sizeof h + sizeof(fuse_entry_out) + sizeof(fuse_open_out);
  h.unique = 7;
  struct {
    fuse_entry_out e;
    fuse_open_out o;
  } body{};
  body.e.nodeid = 42;
  body.o.fh = 2;
  body.o.open_flags = FOPEN_KEEP_CACHE | FOPEN_NOFLUSH;
  struct iovec iov[2] = {{&h, sizeof h}, {&body, sizeof body}};
  std::vector<struct iovec> out;
  std::vector<char> bytes;
  ASSERT_TRUE(PassthroughReply(iov, 2, 9, &out, &bytes));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].iov_base, &h);
  decltype(body) got;
  ASSERT_EQ(out[1].iov_len, sizeof got);
  std::memcpy(&got, out[1].iov_base, sizeof got);
  EXPECT_EQ(got.e.nodeid, 42u);
  EXPECT_EQ(got.o.fh, 2u);
  EXPECT_EQ(got.o.open_flags, FOPEN_NOFLUSH | fuse_uapi::kFopenPassthrough);
  EXPECT_EQ(got.o.padding, 9u);
  // The caller's reply is left as it was.
  EXPECT_EQ(body.o.open_flags, FOPEN_KEEP_CACHE | FOPEN_NOFLUSH);
  // An error reply, or one too short, is not touched.
  h.error = -ENOENT;
  EXPECT_FALSE(PassthroughReply(iov, 2, 9, &out, &bytes));
  h.error = 0;
  struct iovec shortv[2] = {{&h, sizeof h}, {&body, 8}};
  EXPECT_FALSE(PassthroughReply(shortv, 2, 9, &out, &bytes));
}

}  // namespace
}  // namespace acqfs
