#include "vanish_hook.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

namespace acqfs::test {
namespace {

struct Armed {
  std::string dir, name, graveyard;
  VanishWhen when = VanishWhen::kBeforeStat;
  bool fired = false;
};

std::atomic<bool> g_armed{false};
std::mutex g_mu;  // guards g_hook
Armed g_hook;     // g_mu

using FstatatFn = int (*)(int, const char*, struct stat*, int);

FstatatFn RealFstatat() {
  static FstatatFn real =
      reinterpret_cast<FstatatFn>(::dlsym(RTLD_NEXT, "fstatat"));
  if (!real) {
    ::fprintf(stderr, "vanish_hook: no fstatat to wrap\n");
    ::abort();
  }
  return real;
}

// The directory `dirfd` names, "" when it cannot tell.
std::string DirOf(int dirfd) {
  char link[64], buf[4096];
  ::snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
  ssize_t n = ::readlink(link, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Should this fstatat fire the hook? Then it is spent.
bool Matches(int dirfd, const char* path, VanishWhen when) {
  if (!g_armed.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> l(g_mu);
  if (!path || g_hook.fired || g_hook.when != when || g_hook.name != path ||
      DirOf(dirfd) != g_hook.dir)
    return false;
  g_hook.fired = true;
  return true;
}

void MoveAway(int dirfd, const char* path) {
  std::string to;
  {
    std::lock_guard<std::mutex> l(g_mu);
    to = g_hook.graveyard + "/" + path;
  }
  const int saved = errno;
  if (::renameat(dirfd, path, AT_FDCWD, to.c_str()) != 0) {
    ::fprintf(stderr, "vanish_hook: rename %s away: %s\n", path,
              ::strerror(errno));
    ::abort();
  }
  errno = saved;
}

}  // namespace

VanishHook::VanishHook(const std::string& dir, const std::string& name,
                       VanishWhen when, const std::string& graveyard) {
  RealFstatat();
  std::lock_guard<std::mutex> l(g_mu);
  g_hook = Armed{dir, name, graveyard, when, false};
  g_armed.store(true, std::memory_order_release);
}

VanishHook::~VanishHook() {
  g_armed.store(false, std::memory_order_release);
  std::lock_guard<std::mutex> l(g_mu);
  g_hook = Armed{};
}

bool VanishHook::fired() const {
  std::lock_guard<std::mutex> l(g_mu);
  return g_hook.fired;
}

}  // namespace acqfs::test

// The interposer: the executable's fstatat wins over libc's for every call
// in it (the layer library is linked statically).
extern "C" int fstatat(int dirfd, const char* path, struct stat* st,
                       int flags) noexcept {
  using acqfs::test::VanishWhen;
  if (acqfs::test::Matches(dirfd, path, VanishWhen::kBeforeStat))
    acqfs::test::MoveAway(dirfd, path);
  const int rc = acqfs::test::RealFstatat()(dirfd, path, st, flags);
  if (rc == 0 && acqfs::test::Matches(dirfd, path, VanishWhen::kAfterStat))
    acqfs::test::MoveAway(dirfd, path);
  return rc;
}
