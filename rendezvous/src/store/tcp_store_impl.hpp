// Private half of TcpStore: the connection, its I/O thread and the table of
// requests in flight. tcp_store.cpp turns Store calls into requests and replies
// into values or exceptions; this class moves frames.
//
// Threads: callers write their request frame straight to the socket (under
// write_mu_), which saves a hand-off to the I/O thread per request; the I/O
// thread alone reads, connects and reconnects, and completes waiting callers.
// Lock order: connect_mu_ is never held with mu_; write_mu_ may be taken while
// holding nothing else, or by the I/O thread when it closes the socket.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ddp/common/deadline.hpp"
#include "ddp/store/protocol.hpp"
#include "ddp/store/tcp_store.hpp"

namespace ddp::store {

namespace asio = boost::asio;

// One caller waiting for the reply to its request.
struct PendingCall {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Response response;
  std::exception_ptr error;

  void complete(Response r);
  void fail(std::exception_ptr e);
};

// One watch: survives reconnects (re-sent from last seen revision + 1).
struct WatchState {
  std::uint32_t id = 0;
  std::string prefix;
  Revision from_revision = 0;  // as asked by the user
  Revision resume_after = -1;  // last revision known delivered; -1: none yet
  WatchCallback on_event;
  WatchErrorCallback on_error;
  std::shared_ptr<PendingCall> ack;  // set until the first ack arrives
  // connect_epoch_ of the connection the watch request last went out on (under
  // mu_): a reconnect re-sends only watches of older connections, never one a
  // caller has just sent on the new connection.
  std::uint64_t sent_on = 0;
  // Serialises callbacks against cancel() so that no event starts after cancel returns.
  std::mutex cb_mu;
  std::atomic<bool> cancelled{false};
};

class TcpStore::Impl : public std::enable_shared_from_this<TcpStore::Impl> {
 public:
  explicit Impl(TcpStoreOptions options);
  ~Impl();

  void start();  // starts the I/O thread and connects (throws on failure)
  void shutdown();

  // Sends `req` (its id is assigned here) and waits up to `reply_timeout` for the
  // reply (kNoTimeout: until the connection breaks). Throws NetworkError when the
  // connection breaks or cannot be made, TimeoutError naming the op when no reply came.
  // At most once: see call_batch.
  Response call(Request req, std::chrono::milliseconds reply_timeout);
  // Several requests in one write, waited for together (each within
  // `reply_timeout`); replies in request order. Sent again on a new connection
  // only when the write failed before the first request went out whole (the
  // server applies nothing it has not received whole); a request that went out
  // is never sent twice, and a lost answer to a non-idempotent one says it may
  // have been applied.
  std::vector<Response> call_batch(std::vector<Request>& reqs, std::chrono::milliseconds reply_timeout);

  std::shared_ptr<WatchState> start_watch(const std::string& prefix, Revision from, WatchCallback on_event,
                                          WatchErrorCallback on_error);
  // Several watches in one write, each acknowledged before this returns; if
  // one is refused, none stays started and its error is thrown.
  std::vector<std::shared_ptr<WatchState>> start_watches(std::vector<WatchSpec>& specs);
  void cancel_watch(const std::shared_ptr<WatchState>& w);

  const TcpStoreOptions& options() const { return options_; }
  std::string where() const { return options_.endpoint.to_string(); }
  void set_on_reconnect(std::function<void()> fn);

 private:
  void refuse_on_io_thread(const char* what) const;
  void ensure_connected();
  // Writes all of `frame`, after any deferred frames; `sent` (when given)
  // counts the bytes of `frame` that went out before a failure.
  void write_frame(const std::string& frame, std::size_t* sent = nullptr);
  // Queues a frame nobody waits for (a watch cancel) to go out with the next
  // request, or on its own within kDeferredFlush.
  void defer_frame(const std::string& frame);
  // I/O thread: sends deferred_ after kDeferredFlush unless a request took it.
  void arm_deferred_flush();
  // I/O thread: sends what of deferred_ the socket takes without waiting;
  // true if some is left (then try again later).
  bool flush_deferred();
  // Waits for `pending`'s reply; TimeoutError names `op` after `reply_timeout`.
  Response await_reply(const std::shared_ptr<PendingCall>& pending, std::uint32_t id, Op op,
                       std::chrono::milliseconds reply_timeout);

  // I/O-thread side (tcp_store_connect.cpp): the connect cycle.
  void begin_connect();
  void attempt_connect();
  void connect_to(std::uint64_t seq, std::vector<asio::ip::tcp::endpoint> endpoints);
  void on_attempt_failed(const std::string& why);
  void on_handshake_reply(const Response& hello);
  void finish_connect(std::exception_ptr error);
  void arm_connect_timer();

  // I/O-thread side (tcp_store_impl.cpp): reading and dispatch.
  void read_more(std::uint64_t seq);
  void on_bytes(std::uint64_t seq);
  void dispatch(Response resp);
  void on_broken(const std::string& reason);
  // From a caller thread: has the I/O thread drop the connection of `epoch`
  // (if still current) and waits for it, so the next call reconnects.
  void retire_connection(std::uint64_t epoch, const std::string& reason);

  // I/O-thread side (tcp_store_watch.cpp).
  void on_watch_reply(const std::shared_ptr<WatchState>& w, Response resp);
  void resend_watches();
  void fail_watches(const std::string& reason);

  TcpStoreOptions options_;
  Limits limits_;

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::ip::tcp::socket socket_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer connect_timer_;  // overall connect_timeout deadline
  asio::steady_timer backoff_timer_;
  asio::steady_timer handshake_timer_;  // an attempt's connect, then a peer that accepts but never answers
  asio::steady_timer deferred_timer_;   // sends deferred_ when no request comes to carry it
  std::thread thread_;
  std::thread::id io_thread_id_;

  // Guarded by mu_.
  std::mutex mu_;
  std::condition_variable connect_cv_;
  bool connected_ = false;
  bool connecting_ = false;
  bool stopping_ = false;
  std::uint64_t connect_epoch_ = 0;  // bumps when a connect cycle ends
  std::exception_ptr connect_error_;
  std::uint32_t next_id_ = 1;
  std::unordered_map<std::uint32_t, std::shared_ptr<PendingCall>> pending_;
  std::unordered_map<std::uint32_t, std::shared_ptr<WatchState>> watches_;

  // Guarded by write_mu_: the fd callers write to, -1 while disconnected.
  std::mutex write_mu_;
  int write_fd_ = -1;
  std::string deferred_;  // frames for the next write (defer_frame)
  bool deferred_armed_ = false;
  std::atomic<bool> write_broken_{false};

  // I/O thread only.
  ddp::Backoff backoff_;
  Deadline connect_deadline_ = Deadline::never();
  std::chrono::milliseconds cycle_timeout_{0};  // this cycle's bound (connect_deadline_)
  std::string last_connect_error_;
  bool cycle_active_ = false;
  std::uint64_t cycle_ = 0;              // one per connect cycle, for the deadline timer
  std::uint64_t attempt_seq_ = 0;        // invalidates callbacks of an abandoned attempt
  std::uint64_t connected_attempt_ = 0;  // the last attempt whose TCP connect succeeded
  std::vector<char> rbuf_;
  std::size_t rlen_ = 0;  // bytes of rbuf_ holding unparsed data
  std::string hello_frame_;
  bool handshake_done_ = false;
  // Until the first handshake succeeds, a peer that answers with something
  // else, or not at all, is not a store: the connect fails at once instead
  // of retrying for the whole connect_timeout.
  bool ever_connected_ = false;
  bool had_connection_ = false;  // a connection succeeded before: the next one is a reconnect
  // TcpStore::on_reconnect's callback; held while it runs, so that setting
  // another waits a running call out.
  std::mutex reconnect_mu_;
  std::function<void()> on_reconnect_;
  // The first connect's ProtocolError for a peer that is not a store.
  void not_a_store(const std::string& what_happened);
  // The unparsed bytes received, quoted for a message.
  std::string printable_prefix() const;
};

}  // namespace ddp::store
