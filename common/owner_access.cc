// owner_access (common/owner_access.h).
#include "common/owner_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "common/handle.h"
#include "common/sys.h"

namespace acqfs::owner_access {
namespace {

std::string ProcOf(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

struct State {
  std::mutex mu;  // one widening at a time; guards everything below
  bool on = false;
  std::string upper_path;  // the upper root's path, as the kernel names it
  std::string tmp_path;    // <workdir>/acqfs-tmp, likewise
  int work_root = -1;      // borrowed
  UniqueFd journal;        // opened on first use
};
State& S() {
  static State* s = new State;  // never destroyed: used until exit
  return *s;
}
std::atomic<bool> g_on{false};
std::atomic<uint64_t> g_seq{0};

Result<std::string> LinkOf(int fd) {
  char buf[8192];
  ssize_t n = ::readlink(ProcOf(fd).c_str(), buf, sizeof buf);
  if (n < 0 || static_cast<size_t>(n) >= sizeof buf)
    return Error::Errno("readlink", ProcOf(fd));
  return std::string(buf, static_cast<size_t>(n));
}

bool Below(const std::string& path, const std::string& top, std::string* rel) {
  if (top.empty() || path.size() <= top.size() + 1 ||
      path.compare(0, top.size(), top) != 0 || path[top.size()] != '/')
    return false;
  if (rel) *rel = path.substr(top.size() + 1);
  return true;
}

// Is `now` what widening `mode` gives: the same but for owner bits added?
bool Widens(mode_t mode, mode_t now) {
  constexpr mode_t kOwner = S_IRWXU;
  return now != mode && (now & ~kOwner) == (mode & ~kOwner) &&
         (now & mode) == mode;
}

// A journal record: "<octal mode> <dev> <ino> <rel>\0"; `rel` runs to the
// NUL ("." for the upper root) and may hold spaces and newlines.
std::string Record(mode_t mode, const struct stat& st, const std::string& rel) {
  char head[96];
  std::snprintf(head, sizeof head, "%o %" PRIu64 " %" PRIu64 " ",
                static_cast<unsigned>(mode), static_cast<uint64_t>(st.st_dev),
                static_cast<uint64_t>(st.st_ino));
  return head + (rel.empty() ? std::string(".") : rel) + std::string(1, '\0');
}

struct Parsed {
  mode_t mode = 0;
  uint64_t dev = 0, ino = 0;
  std::string rel;
};

bool ParseRecord(const std::string& text, Parsed* out) {
  if (text.empty() || text.back() != '\0') return false;
  const std::string body = text.substr(0, text.size() - 1);
  if (body.find('\0') != std::string::npos) return false;
  size_t a = body.find(' ');
  size_t b = a == std::string::npos ? a : body.find(' ', a + 1);
  size_t c = b == std::string::npos ? b : body.find(' ', b + 1);
  if (c == std::string::npos || c + 1 >= body.size()) return false;
  auto number = [&](size_t from, size_t to, int base, uint64_t* v) {
    if (to <= from) return false;
    std::string s = body.substr(from, to - from);
    char* end = nullptr;
    errno = 0;
    unsigned long long n = std::strtoull(s.c_str(), &end, base);
    if (errno != 0 || end != s.c_str() + s.size() || s[0] == '-') return false;
    *v = n;
    return true;
  };
  uint64_t mode = 0;
  if (!number(0, a, 8, &mode) || mode > 07777) return false;
  if (!number(a + 1, b, 10, &out->dev) || !number(b + 1, c, 10, &out->ino))
    return false;
  out->mode = static_cast<mode_t>(mode);
  out->rel = body.substr(c + 1);
  if (out->rel == ".") out->rel.clear();
  return true;
}

Status WriteJournal(State& s, const std::string& rec) {
  if (!s.journal.is_valid()) {
    int fd = ::openat(s.work_root, kJournalName,
                      O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return Error::Errno("open the mode journal", kJournalName);
    s.journal.reset(fd);
  }
  if (::ftruncate(s.journal.get(), 0) != 0)
    return Error::Errno("truncate the mode journal", kJournalName);
  return sys::PwriteAll(s.journal.get(), rec.data(), rec.size(), 0,
                        kJournalName);
}

}  // namespace

Status Enable(int upper_root, int work_root) {
  auto up = LinkOf(upper_root);
  if (!up) return up.error();
  auto wk = LinkOf(work_root);
  if (!wk) return wk.error();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  s.upper_path = *up;
  s.tmp_path = *wk + "/acqfs-tmp";
  s.work_root = work_root;
  s.journal.reset();
  s.on = true;
  g_on.store(true);
  return Ok();
}

void Disable() {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  s.on = false;
  g_on.store(false);
  s.journal.reset();
  s.work_root = -1;
}

bool Enabled() { return g_on.load(std::memory_order_relaxed); }

bool Retry(int target, mode_t need, const std::function<void()>& retry) {
  if (!Enabled()) return false;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  if (!s.on) return false;
  struct stat st;
  if (::fstat(target, &st) != 0) return false;
  if (!(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) || st.st_uid != ::geteuid())
    return false;
  const mode_t mode = st.st_mode & 07777;
  const mode_t add = need & S_IRWXU & ~mode;
  if (add == 0) return false;  // not the owner bits that refuse it
  // Where it is: only the upper, acqfs-tmp, or nowhere (no name left).
  bool journaled = false;
  std::string rel;
  if (st.st_nlink > 0) {
    auto where = LinkOf(target);
    if (!where) return false;
    if (*where == s.upper_path) {
      journaled = true;
    } else if (Below(*where, s.upper_path, &rel)) {
      journaled = true;
    } else if (!Below(*where, s.tmp_path, nullptr)) {
      return false;
    }
  }
  if (journaled && !WriteJournal(s, Record(mode, st, rel))) return false;
  const std::string proc = ProcOf(target);
  g_seq.fetch_add(1, std::memory_order_acq_rel);  // odd: widened
  if (::chmod(proc.c_str(), mode | add) != 0) {
    g_seq.fetch_add(1, std::memory_order_acq_rel);
    if (journaled) (void)::ftruncate(s.journal.get(), 0);
    return false;
  }
  retry();
  const bool restored = ::chmod(proc.c_str(), mode) == 0;
  g_seq.fetch_add(1, std::memory_order_acq_rel);  // even: settled
  // A mode that could not be put back stays journaled, for the next claim.
  if (journaled && restored) (void)::ftruncate(s.journal.get(), 0);
  return true;
}

bool RetryAt(const std::string& path, bool follow, mode_t need,
             const std::function<void()>& retry) {
  if (!Enabled()) return false;
  int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) return false;
  UniqueFd owned(fd);
  return Retry(fd, need, retry);
}

uint64_t Seq() { return g_seq.load(std::memory_order_acquire); }

bool Raced(uint64_t before) { return (before & 1) || Seq() != before; }

void Settled() {
  if (!Enabled()) return;
  std::lock_guard<std::mutex> l(S().mu);
}

Status Repair(int upper_root, int work_root, const std::string& shown) {
  int fd = ::openat(work_root, kJournalName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Ok();
    return Error::Errno("open the mode journal", shown);
  }
  UniqueFd j(fd);
  auto text = sys::ReadAll(j.get(), 1 << 20, shown);
  if (!text) return text.error();
  Parsed p;
  if (ParseRecord(*text, &p)) {
    auto obj =
        sys::OpenBeneath(upper_root, p.rel, O_PATH | O_NOFOLLOW, 0, shown);
    struct stat st;
    if (obj && ::fstat(obj->get(), &st) == 0 &&
        static_cast<uint64_t>(st.st_dev) == p.dev &&
        static_cast<uint64_t>(st.st_ino) == p.ino &&
        (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) &&
        st.st_uid == ::geteuid() && Widens(p.mode, st.st_mode & 07777) &&
        ::chmod(ProcOf(obj->get()).c_str(), p.mode) != 0)
      return Error::Errno("chmod (restore a mode the journal names)",
                          shown + ": " + p.rel);
  }
  if (::unlinkat(work_root, kJournalName, 0) != 0 && errno != ENOENT)
    return Error::Errno("unlink the mode journal", shown);
  return Ok();
}

}  // namespace acqfs::owner_access
