#include "daemon/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <utility>
#include <vector>

namespace acqfs::cli {
namespace {

using Clock = std::chrono::steady_clock;

// One path component: not empty, no '/', not "." or "..".
Status CheckName(const std::string& name, const std::string& shown) {
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return Error::Of(EINVAL, "control socket name", shown);
  }
  return Ok();
}

Result<UniqueFd> OpenDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error::Errno("open directory", dir);
  return UniqueFd(fd);
}

// The address of `name` inside the folder `dirfd` stands for, reached
// through the descriptor's /proc/self/fd link so that the folder's own path
// may be longer than sun_path.
Status MakeAddress(int dirfd, const std::string& name, const std::string& shown,
                   struct sockaddr_un* addr, socklen_t* len) {
  std::string path = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() + 1 > sizeof(addr->sun_path)) {
    return Error::Of(ENAMETOOLONG, "control socket address", shown);
  }
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  *len = static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) +
                                path.size() + 1);
  return Ok();
}

Result<UniqueFd> NewSocket(int flags, const std::string& shown) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | flags, 0);
  if (fd < 0) return Error::Errno("socket", shown);
  return UniqueFd(fd);
}

// Receives one message of at most kMaxControlMessage bytes into `out`;
// `*truncated` says it was longer (its tail is dropped). A message of 0
// bytes and the end of the connection both give an empty `out`.
Status ReceiveMessage(int fd, const char* op, const std::string& shown,
                      std::string* out, bool* truncated) {
  std::vector<char> buf(kMaxControlMessage + 1);
  struct iovec iov = {buf.data(), buf.size()};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Error::Errno(op, shown);
  *truncated = (msg.msg_flags & MSG_TRUNC) != 0 ||
               static_cast<size_t>(n) > kMaxControlMessage;
  out->assign(buf.data(), std::min(static_cast<size_t>(n), kMaxControlMessage));
  return Ok();
}

// Milliseconds left until `deadline` (0 when it has passed).
int MsLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string ControlSocketPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

nlohmann::json ErrorReply(const Error& error) {
  return nlohmann::json{{"ok", false},
                        {"errno", error.err},
                        {"op", error.op},
                        {"path", error.path},
                        {"message", error.Message()}};
}

Result<nlohmann::json> ReplyToResult(const nlohmann::json& reply,
                                     const std::string& socket) {
  if (!reply.is_object()) return Error::Of(EPROTO, "control reply", socket);
  auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) {
    return Error::Of(EPROTO, "control reply", socket);
  }
  if (ok->get<bool>()) return reply;
  auto err = reply.find("errno");
  if (err == reply.end() || !err->is_number_integer() ||
      err->get<int64_t>() <= 0 || err->get<int64_t>() > 4095) {
    return Error::Of(EPROTO, "control reply", socket);
  }
  Error e;
  e.err = static_cast<int>(err->get<int64_t>());
  auto op = reply.find("op");
  if (op != reply.end() && op->is_string()) e.op = op->get<std::string>();
  auto path = reply.find("path");
  if (path != reply.end() && path->is_string()) {
    e.path = path->get<std::string>();
  }
  return e;
}

// --- ControlServer ---

ControlServer::ControlServer(std::string shown, std::string name,
                             Handler handler, Options options)
    : shown_(std::move(shown)),
      name_(std::move(name)),
      handler_(std::move(handler)),
      options_(options) {}

ControlServer::~ControlServer() { (void)Stop(); }

Result<std::unique_ptr<ControlServer>> ControlServer::Start(
    const std::string& dir, const std::string& name, Handler handler) {
  return Start(dir, name, std::move(handler), Options{});
}

Result<std::unique_ptr<ControlServer>> ControlServer::Start(
    const std::string& dir, const std::string& name, Handler handler,
    Options options) {
  std::string shown = ControlSocketPath(dir, name);
  ACQFS_TRY(CheckName(name, shown));
  if (!handler || options.receive_timeout_ms <= 0) {
    return Error::Of(EINVAL, "start control server", shown);
  }
  // Owned from here: on failure its destructor closes what is open and
  // removes the socket file once it is bound (dev_/ino_ set).
  std::unique_ptr<ControlServer> s(
      new ControlServer(shown, name, std::move(handler), options));
  auto dirfd = OpenDir(dir);
  if (!dirfd.ok()) return dirfd.error();
  s->dir_ = std::move(*dirfd);
  int d = s->dir_.get();

  struct stat st;
  if (::fstatat(d, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    // A dead daemon's socket is replaced; anything else is not ours to
    // delete.
    if (!S_ISSOCK(st.st_mode)) return Error::Of(EEXIST, "bind", shown);
    if (::unlinkat(d, name.c_str(), 0) != 0 && errno != ENOENT) {
      return Error::Errno("unlink stale socket", shown);
    }
  } else if (errno != ENOENT) {
    return Error::Errno("fstatat", shown);
  }

  auto sock = NewSocket(SOCK_NONBLOCK, shown);
  if (!sock.ok()) return sock.error();
  s->listen_ = std::move(*sock);
  struct sockaddr_un addr;
  socklen_t len;
  ACQFS_TRY(MakeAddress(d, name, shown, &addr, &len));
  if (::bind(s->listen_.get(), reinterpret_cast<struct sockaddr*>(&addr),
             len) != 0) {
    return Error::Errno("bind", shown);
  }
  if (::fstatat(d, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Error::Errno("fstatat", shown);
  }
  if (!S_ISSOCK(st.st_mode)) return Error::Of(EEXIST, "bind", shown);
  s->dev_ = st.st_dev;
  s->ino_ = st.st_ino;
  // bind made it 0777 & ~umask; the folder (0700) keeps others out until
  // this narrows it.
  if (::fchmodat(d, name.c_str(), 0600, 0) != 0) {
    return Error::Errno("fchmodat", shown);
  }
  // A root daemon in another user's folder: the socket is the folder
  // owner's, so that the owner's commands (and root's, which act as the
  // owner there: state/as_owner.h) reach it.
  struct stat ds;
  if (::geteuid() == 0 && ::fstat(d, &ds) == 0 && ds.st_uid != 0 &&
      ::fchownat(d, name.c_str(), ds.st_uid, ds.st_gid, AT_SYMLINK_NOFOLLOW) !=
          0)
    return Error::Errno("fchownat", shown);
  if (::listen(s->listen_.get(), 64) != 0) return Error::Errno("listen", shown);
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) return Error::Errno("eventfd", shown);
  s->wake_ = UniqueFd(efd);

  {
    std::lock_guard<std::mutex> lock(s->stop_mu_);
    s->thread_ = std::thread([srv = s.get()] { srv->Run(); });
  }
  return s;
}

Status ControlServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return Ok();
  if (thread_.joinable()) {
    if (std::this_thread::get_id() == thread_.get_id()) {
      // Called from the handler (which it must not be): ask the thread to
      // end after this request; a later Stop() from elsewhere finishes.
      uint64_t one = 1;
      (void)!::write(wake_.get(), &one, sizeof(one));
      return Ok();
    }
    uint64_t one = 1;
    ssize_t n;
    do {
      n = ::write(wake_.get(), &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
    // EAGAIN: the counter is already (nearly) full, which wakes it as well.
    if (n < 0 && errno != EAGAIN) {
      return Error::Errno("write eventfd", shown_);
    }
    thread_.join();
  }
  stopped_ = true;
  Status status;
  if (ino_ != 0 && dir_) {
    struct stat st;
    if (::fstatat(dir_.get(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISSOCK(st.st_mode) && st.st_dev == dev_ && st.st_ino == ino_ &&
          ::unlinkat(dir_.get(), name_.c_str(), 0) != 0 && errno != ENOENT) {
        status = Error::Errno("unlink", shown_);
      }
    } else if (errno != ENOENT) {
      status = Error::Errno("fstatat", shown_);
    }
  }
  // Queued clients see their connection closed.
  listen_.reset();
  wake_.reset();
  dir_.reset();
  return status;
}

void ControlServer::Run() {
  // Accepted connections whose request has not arrived, oldest first.
  struct Waiting {
    UniqueFd conn;
    Clock::time_point deadline;
  };
  std::deque<Waiting> waiting;
  const auto timeout = std::chrono::milliseconds(options_.receive_timeout_ms);
  std::vector<struct pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listen_.get(), POLLIN, 0});
    for (const Waiting& w : waiting) fds.push_back({w.conn.get(), POLLIN, 0});
    int wait_ms = -1;
    if (!waiting.empty()) wait_ms = MsLeft(waiting.front().deadline);
    int n = ::poll(fds.data(), fds.size(), wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      // ENOMEM: try again shortly rather than stop serving.
      ::poll(&fds[0], 1, 50);
      continue;
    }
    if (fds[0].revents != 0) return;
    // Requests that arrived (or connections that closed), then those whose
    // time is up: each answered and closed.
    std::deque<Waiting> still;
    const auto now = Clock::now();
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (fds[2 + i].revents != 0 || waiting[i].deadline <= now)
        Serve(waiting[i].conn.release(), waiting[i].deadline);
      else
        still.push_back(std::move(waiting[i]));
    }
    waiting = std::move(still);
    if (fds[1].revents == 0) continue;
    // One new connection a round, so each gets a poll before any is made
    // to give way.
    int conn = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM ||
          errno == ENOBUFS) {
        // The connection stays queued; wait (for Stop, or a while) before
        // trying again instead of spinning.
        struct pollfd w = {wake_.get(), POLLIN, 0};
        ::poll(&w, 1, 50);
      }
      // EAGAIN, EINTR, ECONNABORTED: nothing to accept now.
      continue;
    }
    if (waiting.size() >= kMaxPending) {
      Serve(waiting.front().conn.release(), Clock::now());
      waiting.pop_front();
    }
    waiting.push_back({UniqueFd(conn), Clock::now() + timeout});
  }
}

void ControlServer::Serve(int fd, Clock::time_point deadline) {
  UniqueFd conn(fd);
  // A refused peer's request is still read (and dropped) before the reply:
  // closing a connection whose request is unread makes the kernel report
  // ECONNRESET to the peer ahead of the reply queued for it.
  Status allowed;
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    allowed = Error::Errno("SO_PEERCRED", shown_);
  } else if (cred.uid != ::geteuid() && cred.uid != 0) {
    refused_.fetch_add(1);
    allowed = Error::Of(EACCES, "peer check", shown_);
  }

  nlohmann::json reply;
  for (;;) {
    struct pollfd fds[2] = {{conn.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, MsLeft(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      reply = ErrorReply(Error::Errno("poll", shown_));
    } else if (fds[1].revents != 0) {
      return;  // stopping: the client sees its connection closed
    } else if (n == 0) {
      reply = ErrorReply(Error::Of(ETIMEDOUT, "receive request", shown_));
    } else {
      std::string message;
      bool truncated = false;
      Status got = ReceiveMessage(conn.get(), "receive request", shown_,
                                  &message, &truncated);
      if (!got.ok()) {
        reply = ErrorReply(got.error());
      } else if (allowed.ok()) {
        reply = Answer(message, truncated);
      }
    }
    break;
  }
  if (!allowed.ok()) reply = ErrorReply(allowed.error());
  // Counted first, so that a client holding its reply sees the count.
  if (allowed.ok()) served_.fetch_add(1);
  SendReply(conn.get(), reply);
  // Drop whatever else the client sent (one request per connection), for
  // the same reason as above.
  char drop[256];
  for (int i = 0; i < 64; ++i) {
    if (::recv(conn.get(), drop, sizeof(drop), MSG_DONTWAIT | MSG_TRUNC) < 0 &&
        errno != EINTR) {
      break;
    }
  }
}

nlohmann::json ControlServer::Answer(const std::string& message,
                                     bool truncated) {
  if (truncated) {
    return ErrorReply(Error::Of(EMSGSIZE, "receive request", shown_));
  }
  // An empty message (or a client that closed without one) is no JSON. A
  // NUL byte is refused here: the parser would take it for the end.
  if (message.find('\0') != std::string::npos) {
    return ErrorReply(Error::Of(EBADMSG, "parse request", shown_));
  }
  nlohmann::json request = nlohmann::json::parse(message, nullptr, false);
  if (request.is_discarded()) {
    return ErrorReply(Error::Of(EBADMSG, "parse request", shown_));
  }
  if (!request.is_object()) {
    return ErrorReply(Error::Of(EINVAL, "parse request", shown_));
  }
  nlohmann::json reply;
  try {
    reply = handler_(request);
  } catch (const std::exception&) {
    return ErrorReply(Error::Of(EIO, "control handler", shown_));
  } catch (...) {
    return ErrorReply(Error::Of(EIO, "control handler", shown_));
  }
  if (!reply.is_object()) {
    return ErrorReply(Error::Of(EIO, "control handler", shown_));
  }
  if (!reply.contains("ok")) reply["ok"] = true;
  return reply;
}

void ControlServer::SendReply(int conn, const nlohmann::json& reply) {
  std::string text = Dump(reply);
  if (text.size() > kMaxControlMessage) {
    text = Dump(ErrorReply(Error::Of(EMSGSIZE, "send reply", shown_)));
  }
  // One message fits in an idle socket's buffer, so this does not wait; a
  // client that has gone (EPIPE, ECONNRESET) has no one left to tell.
  ssize_t n;
  do {
    n = ::send(conn, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
}

// --- client ---

Result<std::string> ExchangeControlMessage(const std::string& dir,
                                           const std::string& name,
                                           const std::string& message,
                                           int timeout_ms) {
  std::string shown = ControlSocketPath(dir, name);
  ACQFS_TRY(CheckName(name, shown));
  if (timeout_ms <= 0) return Error::Of(EINVAL, "control call", shown);
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);

  auto dirfd = OpenDir(dir);
  if (!dirfd.ok()) {
    // No folder: no server listens there either.
    if (dirfd.err() == ENOENT) return Error::Of(ENOENT, "connect", shown);
    return dirfd.error();
  }
  auto sock = NewSocket(0, shown);
  if (!sock.ok()) return sock.error();
  int fd = sock->get();
  struct sockaddr_un addr;
  socklen_t len;
  ACQFS_TRY(MakeAddress(dirfd->get(), name, shown, &addr, &len));

  // connect() waits while the server's listen queue is full, and send()
  // while its buffer is; SO_SNDTIMEO bounds both.
  int ms = MsLeft(deadline);
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return Error::Errno("setsockopt SO_SNDTIMEO", shown);
  }
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<struct sockaddr*>(&addr), len);
  } while (rc != 0 && errno == EINTR && MsLeft(deadline) > 0);
  if (rc != 0) {
    if (errno == EAGAIN || errno == EINPROGRESS || errno == EINTR) {
      return Error::Of(ETIMEDOUT, "connect", shown);
    }
    return Error::Errno("connect", shown);
  }
  dirfd->reset();

  ssize_t n;
  do {
    n = ::send(fd, message.data(), message.size(), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR && MsLeft(deadline) > 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) {
      return Error::Of(ETIMEDOUT, "send request", shown);
    }
    return Error::Errno("send request", shown);
  }

  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    int left = MsLeft(deadline);
    if (left == 0) return Error::Of(ETIMEDOUT, "receive reply", shown);
    int r = ::poll(&p, 1, left);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Error::Errno("poll", shown);
    }
    if (r == 0) return Error::Of(ETIMEDOUT, "receive reply", shown);
    break;
  }
  std::string reply;
  bool truncated = false;
  ACQFS_TRY(ReceiveMessage(fd, "receive reply", shown, &reply, &truncated));
  if (truncated) return Error::Of(EMSGSIZE, "receive reply", shown);
  // The server never sends an empty reply: this is the connection's end.
  if (reply.empty()) return Error::Of(ECONNRESET, "receive reply", shown);
  return reply;
}

Result<nlohmann::json> CallControl(const std::string& dir,
                                   const std::string& name,
                                   const nlohmann::json& request,
                                   int timeout_ms) {
  std::string shown = ControlSocketPath(dir, name);
  std::string text = Dump(request);
  if (text.size() > kMaxControlMessage) {
    return Error::Of(EMSGSIZE, "send request", shown);
  }
  auto bytes = ExchangeControlMessage(dir, name, text, timeout_ms);
  if (!bytes.ok()) return bytes.error();
  nlohmann::json reply = nlohmann::json::parse(*bytes, nullptr, false);
  if (reply.is_discarded()) return Error::Of(EPROTO, "control reply", shown);
  return ReplyToResult(reply, shown);
}

}  // namespace acqfs::cli
