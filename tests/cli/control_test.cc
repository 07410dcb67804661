// Tests of cli/control: the control socket's server and client, on real
// Unix sockets in temporary folders. Every wait is bounded.
#include "daemon/control.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace acqfs::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kName[] = "control.sock";

long long MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

// A fresh 0700 folder under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/acqfs-control-XXXXXX";
    char* p = ::mkdtemp(tmpl);
    EXPECT_NE(p, nullptr) << std::strerror(errno);
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string sock() const { return path_ + "/" + kName; }

 private:
  std::string path_;
};

// A gate the handler waits at; every wait gives up after `ms`.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool Wait(int ms = 10000) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, milliseconds(ms), [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Polls `cond` every 5 ms for at most `ms`.
template <class F>
bool WaitFor(F cond, int ms = 10000) {
  auto end = Clock::now() + milliseconds(ms);
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return cond();
}

nlohmann::json Echo(const nlohmann::json& req) {
  return nlohmann::json{{"echo", req}};
}

std::unique_ptr<ControlServer> MustStart(
    const std::string& dir, ControlServer::Handler h,
    ControlServer::Options o = ControlServer::Options{}) {
  auto s = ControlServer::Start(dir, kName, std::move(h), o);
  EXPECT_TRUE(s.ok()) << s.error().Message();
  return s.ok() ? std::move(*s) : nullptr;
}

// A socket connected to `path` directly (the test folders are short), or -1.
int RawConnect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) {
    ::close(fd);
    return -1;
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Receives one reply on `fd` within `ms` and parses it ("null" on failure).
nlohmann::json RawReceive(int fd, int ms = 10000) {
  struct pollfd p = {fd, POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return nullptr;
  std::vector<char> buf(kMaxControlMessage + 1);
  ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
  if (n <= 0) return nullptr;
  return nlohmann::json::parse(std::string(buf.data(), n), nullptr, false);
}

// Makes a socket file at `path` with no server behind it (a dead daemon's).
void MakeStaleSocket(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  ASSERT_GE(fd, 0);
  struct sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(a.sun_path));
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0)
      << std::strerror(errno);
  ASSERT_EQ(::listen(fd, 1), 0);
  ::close(fd);
  struct stat st;
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  ASSERT_TRUE(S_ISSOCK(st.st_mode));
}

TEST(ControlReplyTest, ErrorReplyRoundTrips) {
  Error e = Error::Of(ENOSPC, "checkpoint", "/state/box");
  nlohmann::json j = ErrorReply(e);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["errno"], ENOSPC);
  EXPECT_EQ(j["op"], "checkpoint");
  EXPECT_EQ(j["path"], "/state/box");
  EXPECT_EQ(j["message"], e.Message());
  auto r = ReplyToResult(j, "/s");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOSPC);
  EXPECT_EQ(r.error().op, "checkpoint");
  EXPECT_EQ(r.error().path, "/state/box");

  auto good = ReplyToResult({{"ok", true}, {"n", 3}}, "/s");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ((*good)["n"], 3);

  for (const nlohmann::json& bad :
       {nlohmann::json::array(), nlohmann::json{{"n", 1}},
        nlohmann::json{{"ok", "yes"}}, nlohmann::json{{"ok", false}},
        nlohmann::json{{"ok", false}, {"errno", 0}},
        nlohmann::json{{"ok", false}, {"errno", "EIO"}}}) {
    auto r2 = ReplyToResult(bad, "/s");
    ASSERT_FALSE(r2.ok()) << bad.dump();
    EXPECT_EQ(r2.error().err, EPROTO) << bad.dump();
    EXPECT_EQ(r2.error().op, "control reply");
    EXPECT_EQ(r2.error().path, "/s");
  }
}

TEST(ControlTest, RoundTrip) {
  TempDir d;
  std::atomic<int> calls{0};
  auto s = MustStart(d.path(), [&](const nlohmann::json& req) {
    ++calls;
    return nlohmann::json{{"echo", req}, {"n", 42}};
  });
  ASSERT_TRUE(s);
  EXPECT_EQ(s->socket_path(), d.sock());
  nlohmann::json req = {{"op", "status"}, {"x", {1, 2, 3}}};
  auto r = CallControl(d.path(), kName, req, 5000);
  ASSERT_TRUE(r.ok()) << r.error().Message();
  EXPECT_EQ((*r)["ok"], true);
  EXPECT_EQ((*r)["n"], 42);
  EXPECT_EQ((*r)["echo"], req);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(s->served(), 1u);
  EXPECT_EQ(s->refused(), 0u);
  // The handler may set "ok" itself; the server keeps it.
  auto again = CallControl(d.path(), kName, {{"op", "status"}}, 5000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(calls.load(), 2);
}

TEST(ControlTest, HandlerErrorsComeBackAsErrors) {
  TempDir d;
  auto s = MustStart(d.path(), [](const nlohmann::json& req) {
    std::string what = req.value("what", "");
    if (what == "error") {
      return ErrorReply(Error::Of(ENOSPC, "checkpoint", "/upper/dir"));
    }
    if (what == "throw") return nlohmann::json(req.at("missing"));
    if (what == "array") return nlohmann::json::array({1, 2});
    return nlohmann::json::object();
  });
  ASSERT_TRUE(s);
  auto r = CallControl(d.path(), kName, {{"what", "error"}}, 5000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOSPC);
  EXPECT_EQ(r.error().op, "checkpoint");
  EXPECT_EQ(r.error().path, "/upper/dir");
  EXPECT_EQ(r.error().Message(),
            "checkpoint: /upper/dir: " + std::string(std::strerror(ENOSPC)));

  // An exception and a reply that is not an object are EIO, not a crash.
  for (const char* what : {"throw", "array"}) {
    auto e = CallControl(d.path(), kName, {{"what", what}}, 5000);
    ASSERT_FALSE(e.ok()) << what;
    EXPECT_EQ(e.error().err, EIO) << what;
    EXPECT_EQ(e.error().op, "control handler") << what;
    EXPECT_EQ(e.error().path, d.sock()) << what;
  }
  auto ok = CallControl(d.path(), kName, {{"what", "fine"}}, 5000);
  ASSERT_TRUE(ok.ok()) << ok.error().Message();
  EXPECT_EQ((*ok)["ok"], true);
}

TEST(ControlTest, BadRequestsGetErrorRepliesAndServingGoesOn) {
  TempDir d;
  std::atomic<int> calls{0};
  auto s = MustStart(d.path(), [&](const nlohmann::json& req) {
    ++calls;
    if (req.contains("a")) {
      return nlohmann::json{{"size", req["a"].get<std::string>().size()}};
    }
    return Echo(req);
  });
  ASSERT_TRUE(s);
  struct Case {
    std::string message;
    int err;
    const char* op;
  };
  std::string big = "{\"a\":\"" + std::string(100 * 1024, 'x') + "\"}";
  std::string just_over =
      "{\"a\":\"" + std::string(kMaxControlMessage - 7, 'x') + "\"}";
  ASSERT_EQ(just_over.size(), kMaxControlMessage + 1);
  std::vector<Case> cases = {
      {"{not json", EBADMSG, "parse request"},
      {"[1, 2]", EINVAL, "parse request"},
      {"\"text\"", EINVAL, "parse request"},
      {"", EBADMSG, "parse request"},
      {std::string("{\"a\":1}\0\xff", 9), EBADMSG, "parse request"},
      {big, EMSGSIZE, "receive request"},
      {just_over, EMSGSIZE, "receive request"},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("message of " + std::to_string(c.message.size()) + " bytes");
    auto bytes = ExchangeControlMessage(d.path(), kName, c.message, 5000);
    ASSERT_TRUE(bytes.ok()) << bytes.error().Message();
    nlohmann::json reply = nlohmann::json::parse(*bytes, nullptr, false);
    ASSERT_TRUE(reply.is_object()) << *bytes;
    EXPECT_EQ(reply["ok"], false);
    EXPECT_EQ(reply["errno"], c.err);
    EXPECT_EQ(reply["op"], c.op);
    EXPECT_EQ(reply["path"], d.sock());
    // The server goes on serving.
    auto r = CallControl(d.path(), kName, {{"n", n}}, 5000);
    ASSERT_TRUE(r.ok()) << r.error().Message();
    EXPECT_EQ((*r)["echo"]["n"], n);
    ++n;
  }
  EXPECT_EQ(calls.load(), n);  // the handler saw only the good requests

  // A message of exactly the limit is accepted.
  std::string at_limit =
      "{\"a\":\"" + std::string(kMaxControlMessage - 8, 'x') + "\"}";
  ASSERT_EQ(at_limit.size(), kMaxControlMessage);
  auto fits = ExchangeControlMessage(d.path(), kName, at_limit, 5000);
  ASSERT_TRUE(fits.ok());
  nlohmann::json fit_reply = nlohmann::json::parse(*fits, nullptr, false);
  EXPECT_EQ(fit_reply["ok"], true) << *fits;
  EXPECT_EQ(fit_reply["size"], kMaxControlMessage - 8);
  EXPECT_EQ(calls.load(), n + 1);

  // CallControl refuses an oversize request itself.
  auto over =
      CallControl(d.path(), kName, {{"a", std::string(70000, 'y')}}, 5000);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().err, EMSGSIZE);
  EXPECT_EQ(over.error().path, d.sock());
}

TEST(ControlTest, ExtraMessagesDoNotCostTheReply) {
  TempDir d;
  auto s = MustStart(d.path(), Echo);
  ASSERT_TRUE(s);
  int fd = RawConnect(d.sock());
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // The first is the request; the others may find the connection already
  // closed (EPIPE) when the server was quick.
  const char* first = "{\"first\":1}";
  ASSERT_EQ(::send(fd, first, std::strlen(first), MSG_NOSIGNAL),
            static_cast<ssize_t>(std::strlen(first)));
  for (const char* m : {"{\"second\":2}", "{}"}) {
    (void)::send(fd, m, std::strlen(m), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  // Let the server answer and close before reading: unread messages on
  // its side must not turn into ECONNRESET here.
  ASSERT_TRUE(WaitFor([&] { return s->served() == 1; }));
  std::this_thread::sleep_for(milliseconds(50));
  nlohmann::json r = RawReceive(fd);
  ::close(fd);
  EXPECT_EQ(r["echo"]["first"], 1) << r.dump();
}

TEST(ControlTest, OversizeReplyBecomesAnError) {
  TempDir d;
  auto s = MustStart(d.path(), [](const nlohmann::json&) {
    return nlohmann::json{{"blob", std::string(kMaxControlMessage, 'z')}};
  });
  ASSERT_TRUE(s);
  auto r = CallControl(d.path(), kName, nlohmann::json::object(), 5000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EMSGSIZE);
  EXPECT_EQ(r.error().op, "send reply");
}

// A client that connects and sends nothing gets ETIMEDOUT when its time is
// up, and delays no one meanwhile: 13 of them made the owner's real
// checkpoint wait 13 receive timeouts (65 s) and fail after its own 60 s.
TEST(ControlTest, SilentClientTimesOutAndDelaysNoOther) {
  TempDir d;
  ControlServer::Options o;
  o.receive_timeout_ms = 300;
  auto s = MustStart(d.path(), Echo, o);
  ASSERT_TRUE(s);
  int silent = RawConnect(d.sock());
  ASSERT_GE(silent, 0) << std::strerror(errno);
  // Let the server accept the silent client first.
  std::this_thread::sleep_for(milliseconds(50));
  auto t0 = Clock::now();
  auto r = CallControl(d.path(), kName, {{"k", "v"}}, 10000);
  long long waited = MsSince(t0);
  ASSERT_TRUE(r.ok()) << r.error().Message();
  EXPECT_EQ((*r)["echo"]["k"], "v");
  EXPECT_LT(waited, 200);  // not the silent one's timeout
  nlohmann::json reply = RawReceive(silent);
  ::close(silent);
  ASSERT_TRUE(reply.is_object()) << reply.dump();
  EXPECT_EQ(reply["ok"], false);
  EXPECT_EQ(reply["errno"], ETIMEDOUT);
  EXPECT_EQ(reply["op"], "receive request");
}

// More silent clients than the server keeps waiting (kMaxPending): the
// oldest are answered ETIMEDOUT to make room, and a real request is still
// served at once, long before any receive timeout.
TEST(ControlTest, AFloodOfSilentClientsDelaysNoRealRequest) {
  TempDir d;
  auto s = MustStart(d.path(), Echo);  // the default 5 s receive timeout
  ASSERT_TRUE(s);
  std::vector<int> silent;
  for (size_t i = 0; i < ControlServer::kMaxPending + 8; ++i) {
    int fd = RawConnect(d.sock());
    ASSERT_GE(fd, 0) << std::strerror(errno);
    silent.push_back(fd);
  }
  std::this_thread::sleep_for(milliseconds(100));
  auto t0 = Clock::now();
  auto r = CallControl(d.path(), kName, {{"k", "v"}}, 10000);
  long long waited = MsSince(t0);
  for (int fd : silent) ::close(fd);
  ASSERT_TRUE(r.ok()) << r.error().Message();
  EXPECT_EQ((*r)["echo"]["k"], "v");
  EXPECT_LT(waited, 1000);
}

TEST(ControlTest, RequestsAreSerialised) {
  TempDir d;
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  std::atomic<int> calls{0};
  auto s = MustStart(d.path(), [&](const nlohmann::json& req) {
    if (inside.fetch_add(1) != 0) overlap = true;
    ++calls;
    std::this_thread::sleep_for(milliseconds(20));
    inside.fetch_sub(1);
    return Echo(req);
  });
  ASSERT_TRUE(s);
  constexpr int kThreads = 4, kCalls = 5;
  std::atomic<int> good{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        auto r = CallControl(d.path(), kName, {{"t", t}, {"i", i}}, 20000);
        if (r.ok() && (*r)["echo"]["t"] == t && (*r)["echo"]["i"] == i) ++good;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_FALSE(overlap.load());
  EXPECT_EQ(good.load(), kThreads * kCalls);
  EXPECT_EQ(calls.load(), kThreads * kCalls);
}

TEST(ControlTest, RequestsAreHandledInArrivalOrder) {
  TempDir d;
  Gate gate;
  std::atomic<bool> entered{false};
  std::mutex mu;
  std::vector<int> order;  // guarded by mu
  auto s = MustStart(d.path(), [&](const nlohmann::json& req) {
    {
      std::lock_guard<std::mutex> l(mu);
      order.push_back(req["seq"].get<int>());
    }
    if (req["seq"] == 0) {
      entered = true;
      gate.Wait();
    }
    return Echo(req);
  });
  ASSERT_TRUE(s);
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) {
    int fd = RawConnect(d.sock());
    ASSERT_GE(fd, 0) << std::strerror(errno);
    std::string m = nlohmann::json{{"seq", i}}.dump();
    ASSERT_EQ(::send(fd, m.data(), m.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(m.size()));
    fds.push_back(fd);
    if (i == 0) {
      ASSERT_TRUE(WaitFor([&] { return entered.load(); }));
    }
  }
  gate.Open();
  for (int i = 0; i < 5; ++i) {
    nlohmann::json r = RawReceive(fds[i]);
    ::close(fds[i]);
    EXPECT_EQ(r["echo"]["seq"], i) << r.dump();
  }
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(ControlTest, ClientTimesOutOnASlowHandler) {
  TempDir d;
  Gate gate;
  auto s = MustStart(d.path(), [&](const nlohmann::json& req) {
    gate.Wait(5000);
    return Echo(req);
  });
  ASSERT_TRUE(s);
  auto t0 = Clock::now();
  auto r = CallControl(d.path(), kName, {{"slow", true}}, 200);
  long long took = MsSince(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ETIMEDOUT);
  EXPECT_EQ(r.error().op, "receive reply");
  EXPECT_EQ(r.error().path, d.sock());
  EXPECT_GE(took, 150);
  EXPECT_LT(took, 3000);
  gate.Open();
}

TEST(ControlTest, StopWhileClientsWaitEndsThemAndWaitsForTheHandler) {
  TempDir d;
  Gate gate;
  std::atomic<bool> entered{false};
  std::atomic<bool> handler_done{false};
  auto s = MustStart(d.path(), [&](const nlohmann::json& req) {
    entered = true;
    gate.Wait();
    handler_done = true;
    return Echo(req);
  });
  ASSERT_TRUE(s);
  Result<nlohmann::json> first = Error::Of(EIO, "unset", "");
  Result<nlohmann::json> second = Error::Of(EIO, "unset", "");
  std::atomic<long long> second_ms{-1};
  std::thread a([&] {
    first = CallControl(d.path(), kName, {{"a", 1}}, 30000);
  });
  ASSERT_TRUE(WaitFor([&] { return entered.load(); }));
  std::thread b([&] {
    auto t0 = Clock::now();
    second = CallControl(d.path(), kName, {{"b", 1}}, 30000);
    second_ms = MsSince(t0);
  });
  // Let b queue its connection behind a's.
  std::this_thread::sleep_for(milliseconds(200));
  std::atomic<bool> stopped{false};
  Status stop_status;
  std::thread st([&] {
    stop_status = s->Stop();
    stopped = true;
  });
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_FALSE(stopped.load());  // Stop waits for the running handler
  gate.Open();
  st.join();
  EXPECT_TRUE(handler_done.load());
  EXPECT_TRUE(stop_status.ok()) << stop_status.error().Message();
  a.join();
  b.join();
  // The request being handled still gets its reply.
  ASSERT_TRUE(first.ok()) << first.error().Message();
  EXPECT_EQ((*first)["echo"]["a"], 1);
  // The queued one gets an error, soon, not a hang.
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().err, ETIMEDOUT) << second.error().Message();
  EXPECT_TRUE(second.error().err == ECONNRESET ||
              second.error().err == ECONNREFUSED ||
              second.error().err == ENOENT || second.error().err == EPIPE)
      << second.error().Message();
  EXPECT_LT(second_ms.load(), 10000);
  EXPECT_EQ(second.error().path, d.sock());
}

TEST(ControlTest, StopDoesNotWaitForASilentClient) {
  TempDir d;
  ControlServer::Options o;
  o.receive_timeout_ms = 30000;
  auto s = MustStart(d.path(), Echo, o);
  ASSERT_TRUE(s);
  int silent = RawConnect(d.sock());
  ASSERT_GE(silent, 0);
  std::this_thread::sleep_for(milliseconds(50));
  auto t0 = Clock::now();
  EXPECT_TRUE(s->Stop().ok());
  EXPECT_LT(MsSince(t0), 2000);
  // The silent client sees its connection end, without a reply.
  struct pollfd p = {silent, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  char c;
  EXPECT_LE(::recv(silent, &c, 1, MSG_DONTWAIT), 0);
  ::close(silent);
}

TEST(ControlTest, StopUnlinksTheSocketAndIsIdempotent) {
  TempDir d;
  auto s = MustStart(d.path(), Echo);
  ASSERT_TRUE(s);
  struct stat st;
  ASSERT_EQ(::lstat(d.sock().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_TRUE(s->Stop().ok());
  EXPECT_EQ(::lstat(d.sock().c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_TRUE(s->Stop().ok());
  auto r = CallControl(d.path(), kName, {{"x", 1}}, 2000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_EQ(r.error().op, "connect");
  s.reset();  // the destructor after Stop is fine
}

TEST(ControlTest, StopLeavesAFileThatReplacedTheSocket) {
  TempDir d;
  auto s = MustStart(d.path(), Echo);
  ASSERT_TRUE(s);
  ASSERT_EQ(::unlink(d.sock().c_str()), 0);
  MakeStaleSocket(d.sock());  // another socket now has the name
  struct stat before;
  ASSERT_EQ(::lstat(d.sock().c_str(), &before), 0);
  EXPECT_TRUE(s->Stop().ok());
  struct stat after;
  ASSERT_EQ(::lstat(d.sock().c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
}

TEST(ControlTest, DestructorStopsAndUnlinks) {
  TempDir d;
  {
    auto s = MustStart(d.path(), Echo);
    ASSERT_TRUE(s);
    ASSERT_TRUE(CallControl(d.path(), kName, {{"x", 1}}, 5000).ok());
  }
  struct stat st;
  EXPECT_EQ(::lstat(d.sock().c_str(), &st), -1);
}

TEST(ControlTest, StaleSocketIsReplaced) {
  TempDir d;
  MakeStaleSocket(d.sock());
  struct stat old_st;
  ASSERT_EQ(::lstat(d.sock().c_str(), &old_st), 0);
  auto dead = CallControl(d.path(), kName, {{"x", 1}}, 2000);
  ASSERT_FALSE(dead.ok());
  EXPECT_EQ(dead.error().err, ECONNREFUSED);
  EXPECT_EQ(dead.error().op, "connect");
  EXPECT_EQ(dead.error().path, d.sock());

  auto s = MustStart(d.path(), Echo);
  ASSERT_TRUE(s);
  struct stat st;
  ASSERT_EQ(::lstat(d.sock().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  auto r = CallControl(d.path(), kName, {{"x", 1}}, 5000);
  ASSERT_TRUE(r.ok()) << r.error().Message();
  EXPECT_EQ((*r)["echo"]["x"], 1);
}

TEST(ControlTest, NonSocketAtTheNameIsRefusedAndKept) {
  TempDir d;
  {
    std::ofstream f(d.sock());
    f << "keep me";
  }
  auto s = ControlServer::Start(d.path(), kName, Echo);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, EEXIST);
  EXPECT_EQ(s.error().path, d.sock());
  std::ifstream in(d.sock());
  std::string content((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "keep me");

  // A directory and a symlink are refused as well.
  TempDir d2;
  ASSERT_EQ(::mkdir(d2.sock().c_str(), 0700), 0);
  auto s2 = ControlServer::Start(d2.path(), kName, Echo);
  ASSERT_FALSE(s2.ok());
  EXPECT_EQ(s2.error().err, EEXIST);
  struct stat st;
  EXPECT_EQ(::lstat(d2.sock().c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  TempDir d3;
  ASSERT_EQ(::symlink("/nonexistent", d3.sock().c_str()), 0);
  auto s3 = ControlServer::Start(d3.path(), kName, Echo);
  ASSERT_FALSE(s3.ok());
  EXPECT_EQ(s3.error().err, EEXIST);
  EXPECT_EQ(::lstat(d3.sock().c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST(ControlTest, BadNamesAndOptionsAreRefused) {
  TempDir d;
  for (const char* name : {"", ".", "..", "a/b"}) {
    auto s = ControlServer::Start(d.path(), name, Echo);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.error().err, EINVAL) << name;
  }
  ControlServer::Options o;
  o.receive_timeout_ms = 0;
  auto s = ControlServer::Start(d.path(), kName, Echo, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, EINVAL);
  auto missing = ControlServer::Start(d.path() + "/nope", kName, Echo);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().err, ENOENT);
  EXPECT_EQ(missing.error().path, d.path() + "/nope");
}

TEST(ControlTest, SocketIsMode0600WhateverTheUmask) {
  TempDir d;
  mode_t old = ::umask(0);
  auto s = MustStart(d.path(), Echo);
  ::umask(old);
  ASSERT_TRUE(s);
  struct stat st;
  ASSERT_EQ(::lstat(d.sock().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
}

TEST(ControlTest, LongFolderPathWorks) {
  TempDir d;
  std::string dir = d.path();
  for (char c : {'a', 'b', 'c'}) {
    dir += "/" + std::string(100, c);
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0) << std::strerror(errno);
  }
  ASSERT_GE(dir.size(), 300u);
  auto s = MustStart(dir, Echo);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->socket_path(), dir + "/" + kName);
  struct stat st;
  ASSERT_EQ(::lstat((dir + "/" + kName).c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto r = CallControl(dir, kName, {{"long", true}}, 5000);
  ASSERT_TRUE(r.ok()) << r.error().Message();
  EXPECT_EQ((*r)["echo"]["long"], true);
  EXPECT_TRUE(s->Stop().ok());
  EXPECT_EQ(::lstat((dir + "/" + kName).c_str(), &st), -1);
  auto gone = CallControl(dir, kName, {{"long", true}}, 2000);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().err, ENOENT);
  EXPECT_EQ(gone.error().path, dir + "/" + kName);
}

// Forks a child that becomes uid/gid 65534, connects to `path` and sends
// `{}`. Returns "C<errno>" when connect failed, "R<reply>" with the reply, or
// "X..." on another failure. The child makes system calls only (the test
// process has threads).
std::string CallAsNobody(const std::string& path) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return "Xpipe";
  struct sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) return "Xpath";
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  static char buf[kMaxControlMessage + 2];
  pid_t pid = ::fork();
  if (pid < 0) return "Xfork";
  if (pid == 0) {
    ::close(pipefd[0]);
    int w = pipefd[1];
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 ||
        ::setuid(65534) != 0) {
      (void)!::write(w, "Xsetuid", 7);
      ::_exit(1);
    }
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd < 0) ::_exit(1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      int e = errno;
      char m[16] = {'C'};
      int n = 1;
      char digits[8];
      int k = 0;
      do {
        digits[k++] = static_cast<char>('0' + e % 10);
        e /= 10;
      } while (e > 0);
      while (k > 0) m[n++] = digits[--k];
      (void)!::write(w, m, n);
      ::_exit(0);
    }
    (void)!::send(fd, "{}", 2, MSG_NOSIGNAL);
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) {
      (void)!::write(w, "Xtimeout", 8);
      ::_exit(1);
    }
    buf[0] = 'R';
    ssize_t n = ::recv(fd, buf + 1, kMaxControlMessage, MSG_DONTWAIT);
    if (n <= 0) {
      (void)!::write(w, n < 0 ? "Xrecv" : "Xeof", n < 0 ? 5 : 4);
      ::_exit(1);
    }
    (void)!::write(w, buf, n + 1);
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string out;
  struct pollfd p = {pipefd[0], POLLIN, 0};
  auto end = Clock::now() + milliseconds(10000);
  while (Clock::now() < end) {
    int left = static_cast<int>(
        std::chrono::duration_cast<milliseconds>(end - Clock::now()).count());
    if (::poll(&p, 1, left < 1 ? 1 : left) != 1) break;
    char chunk[4096];
    ssize_t n = ::read(pipefd[0], chunk, sizeof(chunk));
    if (n <= 0) break;
    out.append(chunk, n);
  }
  ::close(pipefd[0]);
  if (Clock::now() >= end) ::kill(pid, SIGKILL);
  int status;
  ::waitpid(pid, &status, 0);
  return out.empty() ? "Xnothing" : out;
}

TEST(ControlTest, PeerWithAnotherUidIsRefused) {
  // Run as root (as CI does): becoming another uid needs it.
  ASSERT_EQ(::geteuid(), 0u) << "needs root to become another uid";
  TempDir d;
  std::atomic<int> calls{0};
  auto s = MustStart(d.path(), [&](const nlohmann::json& req) {
    ++calls;
    return Echo(req);
  });
  ASSERT_TRUE(s);
  ASSERT_EQ(::chmod(d.path().c_str(), 0755), 0);

  // First the socket's 0600 mode keeps another user out at connect().
  std::string got = CallAsNobody(d.sock());
  EXPECT_EQ(got, "C" + std::to_string(EACCES));
  EXPECT_EQ(s->refused(), 0u);

  // With the file opened up, the peer check refuses it.
  ASSERT_EQ(::chmod(d.sock().c_str(), 0666), 0);
  got = CallAsNobody(d.sock());
  ASSERT_EQ(got.substr(0, 1), "R") << got;
  nlohmann::json reply = nlohmann::json::parse(got.substr(1), nullptr, false);
  ASSERT_TRUE(reply.is_object()) << got;
  EXPECT_EQ(reply["ok"], false);
  EXPECT_EQ(reply["errno"], EACCES);
  EXPECT_EQ(reply["op"], "peer check");
  EXPECT_EQ(reply["path"], d.sock());
  EXPECT_EQ(s->refused(), 1u);
  EXPECT_EQ(calls.load(), 0);

  // The owner (root here) is still served.
  auto r = CallControl(d.path(), kName, {{"me", 1}}, 5000);
  ASSERT_TRUE(r.ok()) << r.error().Message();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(s->refused(), 1u);
}

TEST(ControlTest, NoServerIsENOENTOrECONNREFUSED) {
  TempDir d;
  auto r = CallControl(d.path(), kName, {{"x", 1}}, 2000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_EQ(r.error().op, "connect");
  EXPECT_EQ(r.error().path, d.sock());
  auto nodir = CallControl(d.path() + "/gone", kName, {{"x", 1}}, 2000);
  ASSERT_FALSE(nodir.ok());
  EXPECT_EQ(nodir.error().err, ENOENT);
  EXPECT_EQ(nodir.error().op, "connect");
  MakeStaleSocket(d.sock());
  auto refused = CallControl(d.path(), kName, {{"x", 1}}, 2000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().err, ECONNREFUSED);
  EXPECT_EQ(refused.error().op, "connect");
  EXPECT_EQ(refused.error().path, d.sock());
  auto bad = CallControl(d.path(), kName, {{"x", 1}}, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().err, EINVAL);
}

// The descriptors of this process without FD_CLOEXEC.
std::set<int> InheritableFds() {
  std::set<int> fds;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = std::atoi(e.path().filename().c_str());
    int fl = ::fcntl(fd, F_GETFD);
    if (fl >= 0 && !(fl & FD_CLOEXEC)) fds.insert(fd);
  }
  return fds;
}

TEST(ControlTest, DescriptorsAreCloseOnExec) {
  TempDir d;
  // Whatever the test runner left open without it is not the server's.
  std::set<int> before = InheritableFds();
  auto s = MustStart(d.path(), [&](const nlohmann::json&) {
    // Every descriptor the server holds while serving (the folder, the
    // listening socket, the eventfd, the connection) is O_CLOEXEC.
    std::set<int> now = InheritableFds();
    nlohmann::json extra = nlohmann::json::array();
    for (int fd : now) {
      if (!before.count(fd)) extra.push_back(fd);
    }
    return nlohmann::json{
        {"without_cloexec", extra},
        {"open",
         std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                       std::filesystem::directory_iterator())}};
  });
  ASSERT_TRUE(s);
  auto r = CallControl(d.path(), kName, nlohmann::json::object(), 5000);
  ASSERT_TRUE(r.ok()) << r.error().Message();
  EXPECT_EQ((*r)["without_cloexec"], nlohmann::json::array());
  // The check saw the server's own descriptors: at least 4 beyond stdio.
  EXPECT_GE((*r)["open"].get<int>(), 7);
}

}  // namespace
}  // namespace acqfs::cli
