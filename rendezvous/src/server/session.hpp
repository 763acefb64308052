// One client connection on the server's loop thread: reads bytes, picks a codec
// from the first byte, hands decoded requests to its SessionHost, and writes
// responses in order through a bounded write queue.
//
// Defences, each closing only this connection: unknown first byte; malformed
// frame (ProtocolError from the codec, logged with the peer; the replies to the
// requests before it are written first); no complete HELLO, or a frame stalled
// mid-way, for idle_frame_timeout; more than max_queued_bytes of responses the
// client does not read; before HELLO, a frame larger than a HELLO can be;
// buffered request bytes that would take all authenticated connections
// together past max_buffered_request_bytes; holding the most unread replies
// while all connections together hold more than their ReplyBudget (the queue
// is freed at once, the close posted). Until its handshake is done a
// connection's bytes count in the PreauthPool instead, which closes the
// oldest unauthenticated connections when they hold too much.
//
// Thread-safety: loop thread only. Lifetime: shared_ptr held by pending async
// operations and by the host until on_closed().
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>

#include "ack_gate.hpp"
#include "codec.hpp"
#include "preauth_pool.hpp"
#include "reply_budget.hpp"

namespace ddp::store::server {

class Session;

class SessionHost {
 public:
  virtual ~SessionHost() = default;
  virtual void on_request(const std::shared_ptr<Session>& session, Request&& req) = 0;
  // Called once, when the connection closes for any reason.
  virtual void on_closed(Session& session) = 0;
  // Called (posted, never from inside send()) once the output asked for by
  // notify_when_drained() has been written out.
  virtual void on_drained(const std::shared_ptr<Session>& /*session*/) {}
};

// Why 64 KiB: a HELLO is 33 bytes plus its token; no token needs more, and it
// is all an unauthenticated client may make the server buffer.
inline constexpr std::uint32_t kMaxHelloFrameBytes = 64 * 1024;

struct SessionOptions {
  Limits limits;
  std::chrono::milliseconds idle_frame_timeout{30000};
  std::size_t max_queued_bytes = 0;
  bool allow_torch = true;  // false when the server requires a token
  TorchLegacyProtocol torch_legacy_protocol = TorchLegacyProtocol::kTorch1;
  // Global cap on bytes of incomplete requests held by all sessions together
  // (0: none); `buffered_total` is the loop's shared counter.
  std::size_t max_buffered_request_bytes = 0;
  std::size_t* buffered_total = nullptr;
  // Where the connection waits, and its bytes count, until its handshake is
  // done (nullptr: nowhere, its bytes count in buffered_total from the start).
  PreauthPool* preauth = nullptr;
  // Output waits for the log records it may depend on to be on disk (group
  // commit, ack_gate.hpp); nullptr: never.
  AckGate* ack_gate = nullptr;
  // Where the replies queued for clients that do not read count, all
  // connections together (nullptr: nowhere; max_queued_bytes still holds).
  ReplyBudget* reply_budget = nullptr;
};

// A blocked get/wait or a watch of this session, by request id.
struct Pending {
  enum class Kind : std::uint8_t { kWaiter, kWatch };
  Kind kind = Kind::kWaiter;
  std::uint64_t handle = 0;  // WaiterId or WatchId
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(boost::asio::ip::tcp::socket socket, SessionHost& host, const SessionOptions& options,
          std::string* shared_read_buffer);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  void start();

  // Queues a response; written in order.
  void send(const Response& resp);
  // Closes now; pending output is dropped.
  void close(const std::string& reason);
  // Stops reading and closes once queued output is written (an error reply
  // before a close, a malformed frame after valid ones, the client's EOF, a
  // graceful shutdown), or after idle_frame_timeout if the client does not read.
  // With `hold`, the queued output waits that long first (a held answer to a
  // wrong token); a later call without one releases it at once.
  void close_after_flush(std::chrono::milliseconds hold = std::chrono::milliseconds::zero());
  // Closed, or dropped by the ReplyBudget and about to close: nothing more is sent.
  bool closed() const { return closed_ || dropped_; }
  // For the ReplyBudget: frees the queued replies now (they no longer count
  // there) and closes the connection in a later handler, logging `why`.
  void drop_replies(const std::string& why);

  const std::string& peer() const { return peer_; }
  // The peer's address without the port (what authentication limits key on).
  const std::string& peer_address() const { return peer_address_; }
  bool hello_done() const { return hello_done_ || (codec_ && !codec_->requires_hello()); }
  void set_hello_done();
  // Response bytes queued or being written.
  std::size_t queued_bytes() const { return out_.size() + writing_.size(); }
  // Asks for one host on_drained() call once all queued output is written.
  void notify_when_drained();
  // More log records are on disk: writes what waited for them.
  void on_durable();
  std::unordered_map<std::uint32_t, Pending>& pending() { return pending_; }

 private:
  void read();
  void on_first_read(boost::system::error_code ec, std::size_t n);
  void on_readable();
  bool feed(std::string_view bytes);
  void update_idle_timer(bool frame_completed);
  // One timer per connection: the handshake or a stalled frame, or once
  // closing, a held answer and then the last write; on_timer() releases the
  // held answer or closes the connection.
  void arm_timer(std::chrono::milliseconds after);
  void on_timer();
  // Re-counts this session's buffered request bytes; false when that takes
  // the server past its global cap (the session is then closed).
  bool account_buffered();
  // Out of the PreauthPool: the handshake is done, or the connection closed.
  void leave_preauth();
  void flush();
  void write_queued();
  // Tells the ReplyBudget what this connection's reply buffers hold now.
  void recharge();
  // Runs the work of one of this connection's handlers: an exception it lets
  // out (a bug) closes this connection and never reaches the loop.
  template <typename F>
  void guarded(F&& work);

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer idle_timer_;
  SessionHost& host_;
  SessionOptions options_;
  // One read buffer for the whole loop, for what does not fit first_read_:
  // reads happen one at a time on it, so 10,000 idle connections do not each
  // hold a big buffer.
  std::string* read_buffer_;
  // Each readiness's first read: most requests, and most batches of them, fit
  // (an agent's first write of a round is ~300 bytes).
  std::array<char, 512> first_read_{};
  std::string peer_;
  std::string peer_address_;
  std::size_t buffered_ = 0;  // this session's share of *options_.buffered_total
  bool in_preauth_ = false;
  std::unique_ptr<Codec> codec_;
  std::unordered_map<std::uint32_t, Pending> pending_;

  std::string out_;      // queued, not yet handed to the socket
  std::string writing_;  // being written by an async_write
  bool write_in_flight_ = false;
  bool in_read_handler_ = false;  // batch responses to one read into one write
  bool idle_armed_ = false;
  bool hello_done_ = false;
  bool closing_ = false;
  bool held_ = false;  // close_after_flush(hold): output waits for the timer
  bool drain_wanted_ = false;
  bool gated_ = false;             // in the AckGate's list of held sessions
  std::deque<AckMark> ack_marks_;  // bytes of out_ that wait for a log record
  bool closed_ = false;
  bool dropped_ = false;     // by the ReplyBudget: the close is posted
  std::size_t charged_ = 0;  // what the ReplyBudget was last told this connection holds
};

}  // namespace ddp::store::server
