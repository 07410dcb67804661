// The audit log's files (audit/log_file.h) on scratch directories, without
// FUSE: the writer (sequence, torn tails, kill -9, symlinks, rotation, a
// full queue, a full disk), ReadLog, Follower and CopyLog.
#include "audit/log_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "harness/fs_util.h"
#include "harness/result_assert.h"
#include "harness/temp_dir.h"

namespace acqfs::audit {
namespace {

using test::ListDir;
using test::ReadFile;
using test::TempDir;
using test::WriteFile;

UniqueFd OpenDir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_TRUE(fd.is_valid()) << path << ": " << test::ErrnoName(errno);
  return fd;
}

// A scratch sandbox state directory and a descriptor of it.
struct State {
  TempDir tmp;
  std::string path = tmp.MakeDir("state");
  UniqueFd fd = OpenDir(path);
  std::string log() const { return path + "/audit/log"; }
  std::string old() const { return path + "/audit/log.1"; }
};

// Record `i` of a test: its path names it, its time is 1000 + i.
Record MakeRecord(uint64_t i, size_t path_bytes = 0) {
  Record r;
  r.op = Op::kWrite;
  r.time_ns = static_cast<int64_t>(1000 + i);
  r.path = "f" + std::to_string(i);
  if (r.path.size() < path_bytes) r.path.resize(path_bytes, 'x');
  r.size = i;
  r.ranges = {{0, i + 1}};
  return r;
}

// The index MakeRecord gave, or -1 for a record it did not make.
int64_t IndexOf(const Record& r) {
  if (r.op != Op::kWrite || r.path.empty() || r.path[0] != 'f') return -1;
  return std::stoll(r.path.substr(1));
}

std::unique_ptr<Writer> OpenWriter(const State& s, WriterOptions o = {}) {
  auto w = Writer::Open(s.fd.get(), s.path, o);
  EXPECT_TRUE(w.ok()) << w.error().Message();
  return w.ok() ? std::move(*w) : nullptr;
}

ReadResult Read(const State& s) {
  auto r = ReadLog(s.fd.get(), s.path);
  EXPECT_TRUE(r.ok()) << r.error().Message();
  return r.ok() ? std::move(*r) : ReadResult();
}

std::string Contents(const std::string& path) {
  std::string out;
  EXPECT_TRUE(ReadFile(path, &out));
  return out;
}

off_t SizeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

void ExpectSeqsIncrease(const std::vector<Record>& records) {
  for (size_t i = 1; i < records.size(); ++i)
    ASSERT_GT(records[i].seq, records[i - 1].seq) << "at " << i;
}

void ExpectSeqsContiguous(const std::vector<Record>& records) {
  for (size_t i = 1; i < records.size(); ++i)
    ASSERT_EQ(records[i].seq, records[i - 1].seq + 1) << "at " << i;
}

TEST(Writer, AppendsRecordsThatReadBackInOrder) {
  State s;
  {
    auto w = OpenWriter(s);
    ASSERT_TRUE(w);
    for (uint64_t i = 0; i < 100; ++i) w->Append(MakeRecord(i));
    Record now;
    now.op = Op::kMount;  // time_ns 0: the writer stamps it
    w->Append(now);
    ASSERT_OK(w->Flush());
    EXPECT_FALSE(w->Incomplete());
    const WriterStats st = w->GetStats();
    EXPECT_EQ(st.appended, 101u);
    EXPECT_EQ(st.written, 101u);
    EXPECT_EQ(st.dropped, 0u);
  }
  struct stat dir, log;
  ASSERT_TRUE(test::Lstat(s.path + "/audit", &dir));
  ASSERT_TRUE(test::Lstat(s.log(), &log));
  EXPECT_EQ(dir.st_mode & 07777, 0700u);
  EXPECT_EQ(log.st_mode & 07777, 0600u);
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u);
  ASSERT_EQ(r.records.size(), 101u);
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(r.records[i].seq, i + 1);
    EXPECT_EQ(IndexOf(r.records[i]), static_cast<int64_t>(i));
    EXPECT_EQ(r.records[i].time_ns, static_cast<int64_t>(1000 + i));
    EXPECT_EQ(r.records[i].ranges, MakeRecord(i).ranges);
  }
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  const int64_t now_ns = int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  EXPECT_EQ(r.records[100].op, Op::kMount);
  EXPECT_GT(r.records[100].time_ns, now_ns - int64_t{60} * 1000000000);
  EXPECT_LE(r.records[100].time_ns, now_ns);
}

TEST(Writer, ContinuesTheSequenceAfterReopening) {
  State s;
  for (int round = 0; round < 3; ++round) {
    auto w = OpenWriter(s);
    ASSERT_TRUE(w);
    for (int i = 0; i < 5; ++i) w->Append(MakeRecord(round * 5 + i));
  }
  const ReadResult r = Read(s);
  ASSERT_EQ(r.records.size(), 15u);
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(r.records[i].seq, i + 1);
}

TEST(Writer, CutsATornLastLineAndContinues) {
  State s;
  {
    auto w = OpenWriter(s);
    ASSERT_TRUE(w);
    for (int i = 0; i < 3; ++i) w->Append(MakeRecord(i));
  }
  const std::string whole = Contents(s.log());
  ASSERT_TRUE(
      test::AppendFile(s.log(), "{\"seq\":4,\"time_ns\":12,\"op\":\"wr"));
  EXPECT_EQ(Read(s).damaged_lines, 1u);  // the reader skips it too
  {
    auto w = OpenWriter(s);
    ASSERT_TRUE(w);
    EXPECT_EQ(Contents(s.log()), whole);  // cut at once
    w->Append(MakeRecord(3));
    w->Append(MakeRecord(4));
  }
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u);
  ASSERT_EQ(r.records.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(r.records[i].seq, i + 1);
    EXPECT_EQ(IndexOf(r.records[i]), static_cast<int64_t>(i));
  }
}

TEST(Writer, ALogWithNoWholeLineBecomesEmptyAndLog1GivesTheSeq) {
  State s;
  ASSERT_EQ(::mkdir((s.path + "/audit").c_str(), 0700), 0);
  Record old = MakeRecord(0);
  old.seq = 41;
  ASSERT_TRUE(WriteFile(s.old(), EncodeRecord(old), 0600));
  ASSERT_TRUE(WriteFile(s.log(), "{\"seq\":42,\"ti", 0600));
  {
    auto w = OpenWriter(s);
    ASSERT_TRUE(w);
    EXPECT_EQ(SizeOf(s.log()), 0);
    w->Append(MakeRecord(1));
  }
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].seq, 41u);
  EXPECT_EQ(r.records[1].seq, 42u);
}

TEST(Writer, AKill9MidAppendDamagesNoWholeRecord) {
  State s;
  int torn_tails = 0;
  for (int round = 0; round < 3; ++round) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto w = Writer::Open(s.fd.get(), s.path, WriterOptions());
      if (!w.ok()) ::_exit(2);
      for (uint64_t i = 0;; ++i) (*w)->Append(MakeRecord(i, 3000));
    }
    // Once it writes (a loaded machine may take a while), let it run on
    // for about 50 ms.
    const off_t before = SizeOf(s.log());
    for (int ms = 0; ms < 20000 && SizeOf(s.log()) == before; ++ms)
      ::usleep(1000);
    ::usleep(50 * 1000);
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited: " << status;
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
    const std::string text = Contents(s.log());
    if (!text.empty() && text.back() != '\n') ++torn_tails;
  }
  ASSERT_GT(SizeOf(s.log()) + SizeOf(s.old()), 0) << "the child wrote nothing";
  {
    auto w = OpenWriter(s);  // repairs the tail
    ASSERT_TRUE(w);
    w->Append(MakeRecord(999999));
  }
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u) << torn_tails << " torn tails were cut";
  ASSERT_GT(r.records.size(), 1u);
  ExpectSeqsIncrease(r.records);
  EXPECT_EQ(IndexOf(r.records.back()), 999999);
  EXPECT_EQ(r.records.back().seq, r.records[r.records.size() - 2].seq + 1);
}

TEST(Writer, RefusesASymlinkAtAudit) {
  State s;
  const std::string victim = s.tmp.MakeDir("victim", 0700);
  const std::string other = s.tmp.MakeDir("other");
  UniqueFd other_fd = OpenDir(other);
  for (const std::string& target : {victim, std::string("../victim")}) {
    SCOPED_TRACE(target);
    ASSERT_EQ(::symlink(target.c_str(), (s.path + "/audit").c_str()), 0);
    EXPECT_ERRNO(ELOOP, Writer::Open(s.fd.get(), s.path, WriterOptions()));
    EXPECT_ERRNO(ELOOP, ReadLog(s.fd.get(), s.path));
    EXPECT_ERRNO(ELOOP, Follower::Open(s.fd.get(), s.path));
    EXPECT_ERRNO(ELOOP, CopyLog(s.fd.get(), s.path, other_fd.get(), other));
    ASSERT_EQ(::unlink((s.path + "/audit").c_str()), 0);
  }
  std::vector<std::string> names;
  ASSERT_TRUE(ListDir(victim, &names));
  EXPECT_TRUE(names.empty());
  // As a copy's destination too.
  {
    auto w = OpenWriter(s);
    ASSERT_TRUE(w);
    w->Append(MakeRecord(0));
  }
  ASSERT_EQ(::symlink(victim.c_str(), (other + "/audit").c_str()), 0);
  EXPECT_ERRNO(ELOOP, CopyLog(s.fd.get(), s.path, other_fd.get(), other));
  ASSERT_TRUE(ListDir(victim, &names));
  EXPECT_TRUE(names.empty());
}

TEST(Writer, RefusesASymlinkAtAuditLog) {
  State s;
  ASSERT_EQ(::mkdir((s.path + "/audit").c_str(), 0700), 0);
  const std::string victim = s.tmp.Sub("victim");
  ASSERT_TRUE(WriteFile(victim, "precious\n"));
  ASSERT_EQ(::symlink(victim.c_str(), s.log().c_str()), 0);
  EXPECT_ERRNO(ELOOP, Writer::Open(s.fd.get(), s.path, WriterOptions()));
  EXPECT_ERRNO(ELOOP, ReadLog(s.fd.get(), s.path));
  EXPECT_ERRNO(ELOOP, Follower::Open(s.fd.get(), s.path));
  EXPECT_EQ(Contents(victim), "precious\n");
  // A dangling one is not created through.
  ASSERT_EQ(::unlink(s.log().c_str()), 0);
  const std::string nothing = s.tmp.Sub("nothing");
  ASSERT_EQ(::symlink(nothing.c_str(), s.log().c_str()), 0);
  EXPECT_ERRNO(ELOOP, Writer::Open(s.fd.get(), s.path, WriterOptions()));
  EXPECT_NE(::access(nothing.c_str(), F_OK), 0);
  // At audit/log.1, for the reader.
  ASSERT_EQ(::unlink(s.log().c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), s.old().c_str()), 0);
  EXPECT_ERRNO(ELOOP, ReadLog(s.fd.get(), s.path));
  EXPECT_EQ(Contents(victim), "precious\n");
}

TEST(Writer, RotationKeepsBothGenerationsUnderTheMax) {
  State s;
  WriterOptions o;
  o.max_bytes = 16 * 1024;
  auto w = OpenWriter(s, o);
  ASSERT_TRUE(w);
  struct stat st;
  ASSERT_EQ(::stat(s.log().c_str(), &st), 0);
  ino_t ino = st.st_ino;
  // What audit/log.1 holds: the next rotation's kRotated record names it.
  uint64_t old_count = 0;
  int64_t old_from = 0, old_to = 0;
  int rotations = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    w->Append(MakeRecord(i));
    ASSERT_OK(w->Flush());
    ASSERT_LE(SizeOf(s.log()) + SizeOf(s.old()), 16 * 1024) << "at " << i;
    ASSERT_EQ(::stat(s.log().c_str(), &st), 0);
    if (st.st_ino == ino) continue;
    ino = st.st_ino;
    ++rotations;
    const std::string log = Contents(s.log());
    auto first = DecodeRecord(log.substr(0, log.find('\n') + 1));
    ASSERT_OK(first);
    ASSERT_EQ(first->op, Op::kRotated) << "at " << i;
    EXPECT_EQ(first->count, old_count) << "at " << i;
    EXPECT_EQ(first->from_ns, old_from);
    EXPECT_EQ(first->to_ns, old_to);
    // The generation just ended, now audit/log.1.
    std::vector<Record> gen;
    const std::string text = Contents(s.old());
    for (size_t p = 0, nl; (nl = text.find('\n', p)) != std::string::npos;
         p = nl + 1) {
      auto r = DecodeRecord(text.substr(p, nl - p));
      ASSERT_OK(r);
      gen.push_back(*r);
    }
    ASSERT_FALSE(gen.empty());
    old_count = gen.size();
    old_from = gen.front().time_ns;
    old_to = gen.back().time_ns;
  }
  EXPECT_GT(rotations, 10);
  w.reset();
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u);
  ExpectSeqsContiguous(r.records);
  EXPECT_EQ(IndexOf(r.records.back()), 9999);
  EXPECT_EQ(r.records.front().op, Op::kRotated);
}

TEST(Writer, RotationUnderABurstStaysUnderTheMax) {
  State s;
  WriterOptions o;
  o.max_bytes = 16 * 1024;
  {
    auto w = OpenWriter(s, o);
    ASSERT_TRUE(w);
    for (uint64_t i = 0; i < 10000; ++i) w->Append(MakeRecord(i));
    ASSERT_OK(w->Flush());
    EXPECT_EQ(w->GetStats().written, 10000u);
  }
  EXPECT_LE(SizeOf(s.log()) + SizeOf(s.old()), 16 * 1024);
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u);
  ExpectSeqsContiguous(r.records);
  ASSERT_FALSE(r.records.empty());
  EXPECT_EQ(IndexOf(r.records.back()), 9999);
  // The newest log starts with a kRotated record.
  const std::string log = Contents(s.log());
  auto first = DecodeRecord(log.substr(0, log.find('\n') + 1));
  ASSERT_OK(first);
  EXPECT_EQ(first->op, Op::kRotated);
  EXPECT_GT(first->count, 0u);
  // Reopened, the writer counts the log.1 it finds when it replaces it.
  uint64_t old_records = 0;
  for (const Record& rec : r.records)
    if (rec.seq < first->seq) ++old_records;
  {
    auto w = OpenWriter(s, o);
    ASSERT_TRUE(w);
    w->Append(MakeRecord(20000, 9000));  // does not fit: rotates
  }
  const std::string log2 = Contents(s.log());
  auto first2 = DecodeRecord(log2.substr(0, log2.find('\n') + 1));
  ASSERT_OK(first2);
  EXPECT_EQ(first2->op, Op::kRotated);
  EXPECT_EQ(first2->count, old_records);
}

TEST(Writer, ARecordLongerThanHalfTheMaxIsStillWritten) {
  State s;
  WriterOptions o;
  o.max_bytes = 1024;
  {
    auto w = OpenWriter(s, o);
    ASSERT_TRUE(w);
    w->Append(MakeRecord(0, 2000));
    ASSERT_OK(w->Flush());
    w->Append(MakeRecord(1, 3000));
    w->Append(MakeRecord(2));
    ASSERT_OK(w->Flush());
  }
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u);
  std::vector<int64_t> seen;
  for (const Record& rec : r.records)
    if (IndexOf(rec) >= 0) seen.push_back(IndexOf(rec));
  // Two generations: the last two records written.
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));
}

TEST(Writer, AFullQueueLeavesADroppedRecordAndLosesNothingSilently) {
  State s;
  WriterOptions o;
  o.queue_limit = 4;
  const uint64_t kRecords = 20000;
  WriterStats st;
  {
    auto w = OpenWriter(s, o);
    ASSERT_TRUE(w);
    for (uint64_t i = 0; i < kRecords; ++i) w->Append(MakeRecord(i, 200));
    ASSERT_OK(w->Flush());
    EXPECT_TRUE(w->Incomplete());
    w->Append(MakeRecord(kRecords));  // after the loss: it is put on record
    ASSERT_OK(w->Flush());
    st = w->GetStats();
  }
  EXPECT_EQ(st.appended, kRecords + 1);
  EXPECT_GT(st.dropped, 0u);
  EXPECT_EQ(st.appended, st.written + st.dropped);
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u);
  ExpectSeqsContiguous(r.records);
  std::set<int64_t> written;
  uint64_t dropped = 0;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const Record& rec : r.records) {
    if (rec.op == Op::kDropped) {
      dropped += rec.count;
      EXPECT_LE(rec.from_ns, rec.to_ns);
      spans.emplace_back(rec.from_ns, rec.to_ns);
    } else {
      written.insert(IndexOf(rec));
    }
  }
  EXPECT_EQ(written.size(), st.written);
  EXPECT_EQ(dropped, st.dropped);
  EXPECT_EQ(written.size() + dropped, kRecords + 1);
  EXPECT_TRUE(written.count(kRecords));
  // Each record missing lies in a kDropped record's span.
  for (uint64_t i = 0; i <= kRecords; ++i) {
    if (written.count(i)) continue;
    const int64_t t = static_cast<int64_t>(1000 + i);
    bool covered = false;
    for (const auto& [from, to] : spans) covered |= from <= t && t <= to;
    ASSERT_TRUE(covered) << "record " << i << " lost silently";
  }
}

// Makes the writes of the log fail with `err` (fail), lets them through
// again (recover), and checks what the writer did meanwhile.
void LoseRecordsAndRecover(const State& s, int err,
                           const std::function<void()>& fail,
                           const std::function<void()>& recover) {
  auto w = OpenWriter(s);
  ASSERT_TRUE(w);
  for (uint64_t i = 0; i < 3; ++i) w->Append(MakeRecord(i));
  ASSERT_OK(w->Flush());
  EXPECT_FALSE(w->Incomplete());
  fail();
  for (uint64_t i = 3; i < 13; ++i) w->Append(MakeRecord(i, 1500));
  EXPECT_ERRNO(err, w->Flush());
  EXPECT_TRUE(w->Incomplete());
  recover();
  w->Append(MakeRecord(100));
  (void)w->Flush();
  const WriterStats st = w->GetStats();
  w.reset();
  EXPECT_GT(st.dropped, 0u);
  EXPECT_EQ(st.appended, 14u);
  EXPECT_EQ(st.appended, st.written + st.dropped);
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 0u);
  ExpectSeqsContiguous(r.records);
  ASSERT_GE(r.records.size(), 2u);
  EXPECT_EQ(IndexOf(r.records.back()), 100);
  // Once a write succeeded again, the loss is on record.
  EXPECT_EQ(r.records[r.records.size() - 2].op, Op::kDropped);
  std::set<int64_t> written;
  uint64_t dropped = 0;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const Record& rec : r.records) {
    if (rec.op == Op::kDropped) {
      dropped += rec.count;
      spans.emplace_back(rec.from_ns, rec.to_ns);
    } else {
      written.insert(IndexOf(rec));
    }
  }
  EXPECT_EQ(dropped, st.dropped);
  EXPECT_EQ(written.size(), st.written);
  for (int64_t i : {0, 1, 2, 100}) EXPECT_TRUE(written.count(i)) << i;
  for (int64_t i = 3; i < 13; ++i) {
    if (written.count(i)) continue;
    bool covered = false;
    for (const auto& [from, to] : spans)
      covered |= from <= 1000 + i && 1000 + i <= to;
    EXPECT_TRUE(covered) << "record " << i << " lost silently";
  }
}

// A tmpfs mounted for the test, unmounted in every outcome.
struct TmpfsMount {
  std::string dir;
  bool mounted = false;
  TmpfsMount(const std::string& d, const char* options) : dir(d) {
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options) == 0;
  }
  ~TmpfsMount() {
    if (mounted) {
      EXPECT_EQ(::umount2(dir.c_str(), MNT_DETACH), 0);
    }
  }
};

// RLIMIT_FSIZE set for the test (writes past it fail with EFBIG: SIGXFSZ
// is ignored), restored in every outcome.
struct FileSizeLimit {
  struct rlimit saved;
  struct sigaction saved_action;
  bool set = false;
  void Set(rlim_t limit) {
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    struct sigaction ign = {};
    ign.sa_handler = SIG_IGN;
    ASSERT_EQ(::sigaction(SIGXFSZ, &ign, &saved_action), 0);
    struct rlimit l = saved;
    l.rlim_cur = limit;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &l), 0);
    set = true;
  }
  void Restore() {
    if (!set) return;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
    EXPECT_EQ(::sigaction(SIGXFSZ, &saved_action, nullptr), 0);
    set = false;
  }
  ~FileSizeLimit() { Restore(); }
};

void LoseRecordsToAFileSizeLimit(const State& s) {
  FileSizeLimit limit;
  LoseRecordsAndRecover(
      s, EFBIG, [&] { limit.Set(SizeOf(s.log()) + 2000); },
      [&] { limit.Restore(); });
}

TEST(Writer, AFullDiskLosesRecordsAndSaysSo) {
  TempDir tmp;
  const std::string disk = tmp.MakeDir("disk");
  if (::geteuid() != 0) {
    // No tmpfs to fill without root: a file size limit fails the writes.
    std::cerr << "not root: a file size limit (EFBIG) stands for ENOSPC\n";
    State s;
    LoseRecordsToAFileSizeLimit(s);
    return;
  }
  TmpfsMount mount(disk, "size=1m,mode=0755");
  ASSERT_TRUE(mount.mounted) << "mount tmpfs: " << test::ErrnoName(errno);
  State s;  // the writer's state directory, on the tmpfs
  s.path = disk + "/state";
  ASSERT_EQ(::mkdir(s.path.c_str(), 0755), 0);
  s.fd = OpenDir(s.path);
  const std::string fill = disk + "/fill";
  LoseRecordsAndRecover(
      s, ENOSPC,
      [&] {
        UniqueFd f(::open(fill.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
        ASSERT_TRUE(f.is_valid());
        const std::string chunk(4096, 'x');
        while (::write(f.get(), chunk.data(), chunk.size()) > 0) {
        }
        EXPECT_EQ(errno, ENOSPC);
      },
      [&] { ASSERT_EQ(::unlink(fill.c_str()), 0); });
}

TEST(Writer, AFileSizeLimitLosesRecordsAndSaysSo) {
  State s;
  LoseRecordsToAFileSizeLimit(s);
}

TEST(LogFile, AMissingLogIsEmpty) {
  State s;
  ReadResult r = Read(s);
  EXPECT_TRUE(r.records.empty());
  EXPECT_EQ(r.damaged_lines, 0u);
  ASSERT_EQ(::mkdir((s.path + "/audit").c_str(), 0700), 0);
  r = Read(s);
  EXPECT_TRUE(r.records.empty());
  EXPECT_EQ(r.damaged_lines, 0u);
}

TEST(LogFile, ReadLogSkipsAndCountsDamagedLines) {
  State s;
  ASSERT_EQ(::mkdir((s.path + "/audit").c_str(), 0700), 0);
  Record a = MakeRecord(0), b = MakeRecord(1), c = MakeRecord(2);
  a.seq = 1;
  b.seq = 2;
  c.seq = 3;
  ASSERT_TRUE(WriteFile(s.old(), EncodeRecord(a) + "garbage\n", 0600));
  ASSERT_TRUE(WriteFile(
      s.log(),
      "\n" + EncodeRecord(b) + "[1]\n" + EncodeRecord(c) + "{\"seq\":4,",
      0600));
  const ReadResult r = Read(s);
  EXPECT_EQ(r.damaged_lines, 4u);
  ASSERT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.records[0].seq, 1u);
  EXPECT_EQ(r.records[1].seq, 2u);
  EXPECT_EQ(r.records[2].seq, 3u);
}

TEST(Follower, StartsAtTheEndAndReturnsWhatFollows) {
  State s;
  auto w = OpenWriter(s);
  ASSERT_TRUE(w);
  for (uint64_t i = 0; i < 5; ++i) w->Append(MakeRecord(i));
  ASSERT_OK(w->Flush());
  ASSERT_OK_AND_ASSIGN(Follower f, Follower::Open(s.fd.get(), s.path));
  ASSERT_OK_AND_ASSIGN(auto none, f.Poll());
  EXPECT_TRUE(none.empty());
  for (uint64_t i = 5; i < 8; ++i) w->Append(MakeRecord(i));
  ASSERT_OK(w->Flush());
  ASSERT_OK_AND_ASSIGN(auto got, f.Poll());
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(IndexOf(got[i]), int64_t(5 + i));
  ASSERT_OK_AND_ASSIGN(auto again, f.Poll());
  EXPECT_TRUE(again.empty());
}

TEST(Follower, FollowsRotations) {
  State s;
  WriterOptions o;
  o.max_bytes = 4096;
  auto w = OpenWriter(s, o);
  ASSERT_TRUE(w);
  w->Append(MakeRecord(0));
  ASSERT_OK(w->Flush());
  ASSERT_OK_AND_ASSIGN(Follower f, Follower::Open(s.fd.get(), s.path));
  std::vector<Record> got;
  for (uint64_t i = 1; i <= 300; ++i) {
    w->Append(MakeRecord(i));
    ASSERT_OK(w->Flush());
    if (i % 7 == 0) {
      ASSERT_OK_AND_ASSIGN(auto more, f.Poll());
      got.insert(got.end(), more.begin(), more.end());
    }
  }
  ASSERT_OK_AND_ASSIGN(auto more, f.Poll());
  got.insert(got.end(), more.begin(), more.end());
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front().seq, 2u);
  ExpectSeqsContiguous(got);
  std::vector<int64_t> seen;
  int rotated = 0;
  for (const Record& r : got) {
    if (r.op == Op::kRotated)
      ++rotated;
    else
      seen.push_back(IndexOf(r));
  }
  EXPECT_GE(rotated, 3);
  ASSERT_EQ(seen.size(), 300u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], int64_t(i + 1));
}

TEST(Follower, KeepsAPartialLineUntilItEnds) {
  State s;
  ASSERT_EQ(::mkdir((s.path + "/audit").c_str(), 0700), 0);
  ASSERT_TRUE(WriteFile(s.log(), "", 0600));
  ASSERT_OK_AND_ASSIGN(Follower f, Follower::Open(s.fd.get(), s.path));
  Record r = MakeRecord(7);
  r.seq = 1;
  const std::string line = EncodeRecord(r);
  ASSERT_TRUE(test::AppendFile(s.log(), line.substr(0, 10)));
  ASSERT_OK_AND_ASSIGN(auto none, f.Poll());
  EXPECT_TRUE(none.empty());
  ASSERT_TRUE(test::AppendFile(s.log(), line.substr(10, 20)));
  ASSERT_OK_AND_ASSIGN(auto still, f.Poll());
  EXPECT_TRUE(still.empty());
  ASSERT_TRUE(test::AppendFile(s.log(), line.substr(30) + line));
  ASSERT_OK_AND_ASSIGN(auto got, f.Poll());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(IndexOf(got[0]), 7);
  EXPECT_EQ(IndexOf(got[1]), 7);
}

TEST(Follower, ALogThatAppearsLaterIsReadFromItsStart) {
  State s;
  ASSERT_OK_AND_ASSIGN(Follower f, Follower::Open(s.fd.get(), s.path));
  ASSERT_OK_AND_ASSIGN(auto none, f.Poll());
  EXPECT_TRUE(none.empty());
  {
    auto w = OpenWriter(s);
    ASSERT_TRUE(w);
    w->Append(MakeRecord(0));
    w->Append(MakeRecord(1));
  }
  ASSERT_OK_AND_ASSIGN(auto got, f.Poll());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].seq, 1u);
  EXPECT_EQ(got[1].seq, 2u);
}

TEST(CopyLog, CopiesBothGenerationsWholeLinesOnly) {
  State from, to;
  WriterOptions o;
  o.max_bytes = 8192;
  {
    auto w = OpenWriter(from, o);
    ASSERT_TRUE(w);
    for (uint64_t i = 0; i < 200; ++i) w->Append(MakeRecord(i));
  }
  const std::string old_text = Contents(from.old());
  const std::string log_text = Contents(from.log());
  ASSERT_FALSE(old_text.empty());
  ASSERT_TRUE(test::AppendFile(from.log(), "{\"seq\":99999,\"ti"));
  // A stale file at the destination is replaced.
  ASSERT_EQ(::mkdir((to.path + "/audit").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(to.log(), "stale\n", 0644));
  ASSERT_OK(CopyLog(from.fd.get(), from.path, to.fd.get(), to.path));
  EXPECT_EQ(Contents(to.old()), old_text);
  EXPECT_EQ(Contents(to.log()), log_text);
  struct stat st;
  ASSERT_TRUE(test::Lstat(to.log(), &st));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_TRUE(test::Lstat(to.old(), &st));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  std::vector<std::string> names;
  ASSERT_TRUE(ListDir(to.path + "/audit", &names));
  EXPECT_EQ(names, (std::vector<std::string>{"log", "log.1"}));
  const ReadResult r = Read(to);
  EXPECT_EQ(r.damaged_lines, 0u);
  ExpectSeqsContiguous(r.records);
  // The copy's writer goes on from the parent's sequence.
  {
    auto w = OpenWriter(to, o);
    ASSERT_TRUE(w);
    w->Append(MakeRecord(500));
  }
  const ReadResult after = Read(to);
  ASSERT_FALSE(after.records.empty());
  EXPECT_EQ(after.records.back().seq, r.records.back().seq + 1);
}

TEST(CopyLog, MakesAPrivateDirectoryAndCopiesNothingFromNothing) {
  State from, to;
  ASSERT_OK(CopyLog(from.fd.get(), from.path, to.fd.get(), to.path));
  EXPECT_NE(::access((to.path + "/audit").c_str(), F_OK), 0);
  {
    auto w = OpenWriter(from);
    ASSERT_TRUE(w);
    w->Append(MakeRecord(0));
  }
  ASSERT_OK(CopyLog(from.fd.get(), from.path, to.fd.get(), to.path));
  struct stat st;
  ASSERT_TRUE(test::Lstat(to.path + "/audit", &st));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(Contents(to.log()), Contents(from.log()));
  EXPECT_NE(::access(to.old().c_str(), F_OK), 0);
}

}  // namespace
}  // namespace acqfs::audit
