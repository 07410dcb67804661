// The control channel of a mounted sandbox: a Unix socket in the sandbox's
// state folder through which the CLI asks the running daemon to act
// (checkpoint, rewind, squash, ping: daemon/serve_control.h ServeControl). This
// unit is only the transport; it knows
// nothing of FUSE or the filesystem engine. See docs/control.md.
//
// Protocol: AF_UNIX, SOCK_SEQPACKET, one request and one reply per
// connection, each one JSON object of at most kMaxControlMessage bytes. A
// reply is {"ok": true, ...} or, on failure, ErrorReply(error):
//   {"ok": false, "errno": N, "op": "...", "path": "...",
//    "message": "<op>: <path>: <strerror>"}.
//
// The socket is bound and connected through "/proc/self/fd/<dirfd>/<name>"
// with a descriptor of the folder, so the folder's path may have any length
// (sun_path holds 108 bytes). The socket file is mode 0600 and the server
// answers only peers whose uid (SO_PEERCRED) is its own euid or 0.
//
// Thread-safety: ControlServer runs one thread of its own that accepts
// connections and calls the handler for one request at a time, in arrival
// order, so the handler need not be reentrant; it runs on that thread and
// must not call Stop() or destroy the server. Stop(), refused(), served()
// and socket_path() may be called from any thread. CallControl and the reply
// helpers are plain functions, safe from any thread.
#ifndef ACQFS_DAEMON_CONTROL_H_
#define ACQFS_DAEMON_CONTROL_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/handle.h"

namespace acqfs::cli {

// The largest request or reply, in bytes (the JSON text).
constexpr size_t kMaxControlMessage = 64 * 1024;
// How long the server waits for a connected client's request.
constexpr int kDefaultControlReceiveTimeoutMs = 5000;

// The failure reply for `error` (see the header comment).
nlohmann::json ErrorReply(const Error& error);
// The Result a reply stands for: the reply itself when its "ok" is true, its
// Error (errno, op, path) when it is false. A reply that is not an object
// with a boolean "ok", or whose errno is not a positive number, is EPROTO
// with op "control reply" and `socket` as the path.
Result<nlohmann::json> ReplyToResult(const nlohmann::json& reply,
                                     const std::string& socket);

// The path the socket `name` in `dir` is shown by in errors: "<dir>/<name>".
std::string ControlSocketPath(const std::string& dir, const std::string& name);

class ControlServer {
 public:
  // Answers one request (always a JSON object). Its reply gets "ok": true
  // unless it sets "ok" itself (ErrorReply sets false). A reply that is not
  // an object, cannot be serialised or is larger than kMaxControlMessage,
  // and an exception the handler throws, become an error reply (EIO,
  // EMSGSIZE). May take long: later clients wait in the listen queue.
  using Handler = std::function<nlohmann::json(const nlohmann::json& request)>;

  // Connections accepted whose request has not arrived, at most.
  static constexpr size_t kMaxPending = 32;

  struct Options {
    // How long a connected client may take to send its request; then it
    // gets an ETIMEDOUT reply. Clients that have not sent theirs yet wait
    // side by side (at most kMaxPending; beyond, the one waiting longest is
    // answered ETIMEDOUT to make room), so a silent one never delays
    // another's request. (Replies are sent without waiting: one message
    // fits in the socket's buffer.)
    int receive_timeout_ms = kDefaultControlReceiveTimeoutMs;
  };

  // Binds <dir>/<name> (name: one component) and starts serving. A socket
  // already at that name (left by a dead daemon) is replaced: the caller
  // guarantees that no other server serves `dir` (it holds the sandbox's
  // lock). Anything else there is refused with EEXIST and kept.
  static Result<std::unique_ptr<ControlServer>> Start(const std::string& dir,
                                                      const std::string& name,
                                                      Handler handler);
  static Result<std::unique_ptr<ControlServer>> Start(const std::string& dir,
                                                      const std::string& name,
                                                      Handler handler,
                                                      Options options);

  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;
  // Stop()s, ignoring its error.
  ~ControlServer();

  // Stops the thread (waiting for a running handler, whose reply is still
  // sent), closes the sockets (clients still queued get a closed
  // connection) and removes the socket file if it is still the one this
  // server bound (same st_dev and st_ino). Idempotent: a later call returns
  // Ok. The error is the removal's.
  Status Stop();

  // Connections refused by the peer check (each gets an EACCES reply once
  // its request is read or its receive timeout passes), and the other
  // connections answered (any reply, error replies included).
  uint64_t refused() const { return refused_.load(); }
  uint64_t served() const { return served_.load(); }
  // "<dir>/<name>", as errors show it.
  const std::string& socket_path() const { return shown_; }

 private:
  ControlServer(std::string shown, std::string name, Handler handler,
                Options options);
  void Run();
  // Reads, answers and closes one accepted connection, waiting for its
  // request until `deadline` (then ETIMEDOUT).
  void Serve(int conn, std::chrono::steady_clock::time_point deadline);
  // The reply to `message` (the request's bytes; `truncated`: it was longer
  // than kMaxControlMessage).
  nlohmann::json Answer(const std::string& message, bool truncated);
  void SendReply(int conn, const nlohmann::json& reply);

  // Set by the constructor and Start, then read-only (the server thread
  // reads them while it runs; Stop joins it before it changes the fds).
  const std::string shown_;
  const std::string name_;
  const Handler handler_;
  const Options options_;
  UniqueFd dir_;     // O_PATH descriptor of the folder
  UniqueFd listen_;  // the listening socket
  UniqueFd wake_;    // eventfd; Stop() writes it to end the thread
  dev_t dev_ = 0;    // the bound socket file's identity
  ino_t ino_ = 0;

  // Written only by the server thread; atomics for readers elsewhere.
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> served_{0};

  // Held through all of Stop(): serialises concurrent Stops and guards
  // thread_ and stopped_ (and, once thread_ is joined, the fds above).
  std::mutex stop_mu_;
  std::thread thread_;    // guarded by stop_mu_
  bool stopped_ = false;  // guarded by stop_mu_
};

// Sends `request` to the server at <dir>/<name> and returns its reply,
// waiting at most `timeout_ms` in all (connect, send, receive). Errors:
// ENOENT or ECONNREFUSED with op "connect" and the socket's path when no
// server listens there; ETIMEDOUT naming the socket when no reply came in
// time; ECONNRESET (op "receive reply") when the server closed the
// connection without a reply (it stopped); EMSGSIZE when the request is
// larger than kMaxControlMessage; EPROTO when the reply is not JSON or not a
// reply; and a reply with "ok": false is the Error it carries.
Result<nlohmann::json> CallControl(const std::string& dir,
                                   const std::string& name,
                                   const nlohmann::json& request,
                                   int timeout_ms);

// The transport under CallControl: sends `message` as it is (any bytes, any
// size the socket takes) and returns the reply's bytes. For tests and tools
// that must send what CallControl would not.
Result<std::string> ExchangeControlMessage(const std::string& dir,
                                           const std::string& name,
                                           const std::string& message,
                                           int timeout_ms);

}  // namespace acqfs::cli

#endif  // ACQFS_DAEMON_CONTROL_H_
