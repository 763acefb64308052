#include "session.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <utility>

#include "contained.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "failpoints.hpp"
#include "server_log.hpp"

namespace ddp::store::server {
namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// Reads per readiness before yielding to other connections, so one client
// streaming bytes cannot starve the rest of the loop.
constexpr int kReadsPerTurn = 64;

// An emptied reply buffer keeps its memory up to this much (most replies fit,
// so most reuse it); a bigger one is freed, so that an idle connection never
// pins the buffer of a large reply it once got.
constexpr std::size_t kKeepBufferBytes = 4096;

void empty_buffer(std::string& buffer) {
  if (buffer.capacity() > kKeepBufferBytes)
    std::string().swap(buffer);
  else
    buffer.clear();
}

// The memory a non-empty reply buffer holds (its capacity: a string grown by
// appends holds up to twice its size); an empty one counts nothing.
std::size_t held(const std::string& buffer) { return buffer.empty() ? 0 : buffer.capacity(); }

// The peer's address (IPv6 in brackets), or "unknown".
std::string address_of(const asio::ip::tcp::endpoint& ep, bool known) {
  if (!known) return "unknown";
  auto addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr;
}

}  // namespace

template <typename F>
void Session::guarded(F&& work) {
  run_contained(std::forward<F>(work), [this](const std::string& error) {
    server_log().error("closing connection: its handler failed peer={}{}", peer_, error);
    close("handler failed");
  });
}

Session::Session(asio::ip::tcp::socket socket, SessionHost& host, const SessionOptions& options,
                 std::string* shared_read_buffer)
    : socket_(std::move(socket)),
      idle_timer_(socket_.get_executor()),
      host_(host),
      options_(options),
      read_buffer_(shared_read_buffer) {
  // One getpeername() for both names.
  error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  peer_address_ = address_of(ep, !ec);
  peer_ = ec ? peer_address_ : peer_address_ + ":" + std::to_string(ep.port());
}

Session::~Session() {
  leave_preauth();
  if (options_.reply_budget != nullptr && charged_ > 0) options_.reply_budget->charge(*this, charged_, 0);
}

void Session::recharge() {
  if (options_.reply_budget == nullptr || closed_ || dropped_) return;
  const std::size_t now = held(out_) + held(writing_);
  if (now == charged_) return;
  const std::size_t before = std::exchange(charged_, now);
  options_.reply_budget->charge(*this, before, now);  // may drop this connection
}

void Session::drop_replies(const std::string& why) {
  if (closed_ || dropped_) return;
  dropped_ = true;
  closing_ = true;  // no more reads: its requests would only queue more replies
  charged_ = 0;     // the budget took them off when it chose this connection
  drain_wanted_ = false;
  std::string().swap(out_);
  // Not closed here: this runs inside another connection's send, and a close
  // reaches the host (its watches and waiters) at once.
  asio::post(socket_.get_executor(), [self = shared_from_this(), why] { self->close(why); });
}

void Session::leave_preauth() {
  if (!in_preauth_) return;
  in_preauth_ = false;
  options_.preauth->leave(*this);
}

void Session::set_hello_done() {
  hello_done_ = true;
  leave_preauth();
  if (codec_) codec_->limit_frame_bytes(options_.limits.max_frame_bytes);
}

void Session::notify_when_drained() {
  drain_wanted_ = true;
  if (!in_read_handler_) flush();  // nothing queued: flush() posts the call at once
}

bool Session::account_buffered() {
  const auto now = codec_ ? codec_->buffered_bytes() : 0;
  if (in_preauth_ && hello_done()) leave_preauth();  // a protocol without a handshake
  if (in_preauth_) return options_.preauth->charge(*this, now);
  if (options_.buffered_total == nullptr) return true;
  *options_.buffered_total += now;
  *options_.buffered_total -= buffered_;
  buffered_ = now;
  if (options_.max_buffered_request_bytes == 0 ||
      *options_.buffered_total <= options_.max_buffered_request_bytes)
    return true;
  server_log().warn(
      "closing connection: buffered request bytes over the server's cap peer={} buffered_bytes={} "
      "total_bytes={} max_buffered_request_bytes={}",
      peer_, buffered_, *options_.buffered_total, options_.max_buffered_request_bytes);
  close("buffered request bytes over the cap");
  return false;
}

void Session::start() {
  error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);
  if (options_.preauth != nullptr) {
    in_preauth_ = true;
    options_.preauth->enter(*this);
  }
  update_idle_timer(false);
  read();
}

void Session::read() {
  // A read, not a wait for readiness: asio re-arms epoll (EPOLL_CTL_MOD) for
  // every wait, while a read that finds nothing parks in the reactor with the
  // descriptor's edge-triggered registration as it is. Into the session's own
  // small buffer, since reads of many connections may complete before their
  // handlers run; a request that does not fit goes on in on_readable().
  socket_.async_read_some(asio::buffer(first_read_),
                          [self = shared_from_this()](error_code ec, std::size_t n) {
                            if (self->closed_ || ec == asio::error::operation_aborted) return;
                            self->guarded([&] {
                              failpoints::maybe_throw("server.read");
                              self->on_first_read(ec, n);
                            });
                          });
}

void Session::on_first_read(error_code ec, std::size_t n) {
  // Closing stops reading: what arrived is not looked at, as before a read.
  if (closing_) return flush();
  if (ec == asio::error::eof) {
    // A client may half-close after its last request: it still gets the replies.
    in_read_handler_ = true;
    close_after_flush();
    in_read_handler_ = false;
    flush();
    return;
  }
  if (ec) return close(ec.message());
  in_read_handler_ = true;
  const bool more = feed(std::string_view(first_read_.data(), n));
  // A short read drained the socket; a full one may have left more.
  if (more && n == first_read_.size()) return on_readable();
  in_read_handler_ = false;
  flush();
  if (!closed_ && !closing_) read();
}

void Session::on_readable() {
  in_read_handler_ = true;
  bool more = true;
  int reads = 0;
  while (more && !closed_ && !closing_) {
    if (++reads > kReadsPerTurn) {
      in_read_handler_ = false;
      flush();
      asio::post(socket_.get_executor(), [self = shared_from_this()] {
        if (!self->closed_ && !self->closing_) self->guarded([&] { self->on_readable(); });
      });
      return;
    }
    error_code ec;
    const auto n = socket_.read_some(asio::buffer(read_buffer_->data(), read_buffer_->size()), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec == asio::error::eof) {
      // A client may half-close after its last request: it still gets the replies.
      close_after_flush();
      break;
    }
    if (ec) {
      close(ec.message());
      break;
    }
    more = feed(std::string_view(read_buffer_->data(), n));
    // A short read drained the socket: skip the read that would only say
    // EAGAIN. Safe because the next read() tries the socket first.
    if (n < read_buffer_->size()) break;
  }
  in_read_handler_ = false;
  flush();
  if (!closed_ && !closing_) read();
}

bool Session::feed(std::string_view bytes) {
  auto& log = server_log();
  if (!codec_) {
    codec_ = make_codec(static_cast<unsigned char>(bytes[0]), options_.limits, options_.allow_torch,
                        options_.torch_legacy_protocol);
    if (!codec_) {
      const bool torch_refused = !options_.allow_torch && static_cast<unsigned char>(bytes[0]) < 0x0E;
      log.warn("closing connection: {} peer={} first_byte=0x{:02x}",
               torch_refused ? "PyTorch TCPStore client refused because this server requires a token"
                             : "unknown protocol",
               peer_, static_cast<unsigned>(static_cast<unsigned char>(bytes[0])));
      close("unknown protocol");
      return false;
    }
    if (codec_->requires_hello() && !hello_done_) codec_->limit_frame_bytes(kMaxHelloFrameBytes);
  }
  const auto before = codec_->requests_decoded();
  try {
    codec_->feed(bytes, [this](Request&& req) {
      host_.on_request(shared_from_this(), std::move(req));
      return !closed_ && !closing_;
    });
  } catch (const ProtocolError& e) {
    // The requests before the bad frame were valid: their replies go out first.
    log.warn("closing connection: malformed frame peer={} protocol={} error=\"{}\"", peer_, codec_->name(),
             e.what());
    close_after_flush();
    return false;
  }
  if (closed_) return false;
  if (!account_buffered()) return false;
  update_idle_timer(codec_->requests_decoded() != before);
  return !closing_;
}

void Session::update_idle_timer(bool frame_completed) {
  if (closing_) return;  // the timer now bounds the last write
  // A connection that has sent nothing yet is left alone on a server that serves
  // torch clients: torch 1.x opens a second, silent connection per store for key
  // callbacks and busy-loops if the server closes it. With a token required, no
  // torch client can be served, and silence counts as a stalled handshake.
  const bool needed = codec_ ? (!hello_done() || codec_->mid_frame()) : !options_.allow_torch;
  if (!needed) {
    if (idle_armed_) idle_timer_.cancel();
    idle_armed_ = false;
    return;
  }
  // The clock measures one frame (or the handshake), not the gap since the
  // last byte: a client trickling a byte a second is still stalled.
  if (idle_armed_ && !frame_completed) return;
  arm_timer(options_.idle_frame_timeout);
}

void Session::arm_timer(std::chrono::milliseconds after) {
  idle_armed_ = true;
  idle_timer_.expires_after(after);
  idle_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->closed_ || !self->idle_armed_) return;
    if (self->idle_timer_.expiry() > asio::steady_timer::clock_type::now()) return;  // re-armed
    self->idle_armed_ = false;
    self->guarded([&] { self->on_timer(); });
  });
}

void Session::on_timer() {
  if (held_) {
    held_ = false;
    arm_timer(options_.idle_frame_timeout);
    flush();
    return;
  }
  const char* why = closing_       ? "did not read its last replies"
                    : hello_done() ? "stalled mid-frame"
                                   : "no hello";
  server_log().warn("closing connection: {} peer={} timeout_ms={}", why, peer_,
                    options_.idle_frame_timeout.count());
  close(why);
}

void Session::send(const Response& resp) {
  if (closed_ || dropped_) return;
  const auto begin = out_.size();
  try {
    codec_->encode(resp, out_);
    if (options_.ack_gate != nullptr) options_.ack_gate->mark(ack_marks_, begin, out_.size());
  } catch (const ProtocolError& e) {
    // A reply the client's protocol cannot express (torch has no error replies):
    // closing is how torch's own server reports it.
    server_log().warn("closing connection: peer={} protocol={} error=\"{}\"", peer_, codec_->name(),
                      e.what());
    close("unexpressible reply");
    return;
  }
  if (out_.size() + writing_.size() > options_.max_queued_bytes) {
    server_log().warn("closing connection: client does not read its responses peer={} queued_bytes={}", peer_,
                      out_.size() + writing_.size());
    close("write queue full");
    return;
  }
  recharge();
  if (!in_read_handler_) flush();
}

void Session::on_durable() {
  gated_ = false;
  guarded([&] { flush(); });
}

void Session::flush() {
  write_queued();
  recharge();
}

void Session::write_queued() {
  if (held_ || dropped_) return;
  while (!closed_ && !write_in_flight_) {
    if (out_.empty()) {
      if (closing_) {
        close("closed after reply");
      } else if (drain_wanted_) {
        drain_wanted_ = false;
        asio::post(socket_.get_executor(), [self = shared_from_this()] {
          if (!self->closed_) self->guarded([&] { self->host_.on_drained(self); });
        });
      }
      return;
    }
    // Only what the disk has caught up with (--fsync=always): the rest waits.
    const auto ready =
        options_.ack_gate != nullptr ? options_.ack_gate->writable(ack_marks_, out_.size()) : out_.size();
    if (ready == 0) {
      if (!std::exchange(gated_, true)) options_.ack_gate->hold(shared_from_this());
      return;
    }
    if (ready == out_.size()) {
      writing_.swap(out_);
      empty_buffer(out_);
      ack_marks_.clear();
    } else {
      writing_.assign(out_, 0, ready);
      out_.erase(0, ready);
      AckGate::consumed(ack_marks_, ready);
    }
    // Try the write at once: most replies fit the socket buffer, which saves a
    // trip through the reactor per response.
    error_code ec;
    const auto n = socket_.write_some(asio::buffer(writing_), ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
      close(ec.message());
      return;
    }
    if (n == writing_.size()) {
      empty_buffer(writing_);
      continue;
    }
    write_in_flight_ = true;
    asio::async_write(socket_, asio::buffer(writing_.data() + n, writing_.size() - n),
                      [self = shared_from_this()](error_code wec, std::size_t) {
                        self->write_in_flight_ = false;
                        if (wec) {
                          if (wec != asio::error::operation_aborted) self->close(wec.message());
                          return;
                        }
                        empty_buffer(self->writing_);
                        self->guarded([&] { self->flush(); });
                      });
  }
}

void Session::close_after_flush(std::chrono::milliseconds hold) {
  if (closed_) return;
  const bool first = !closing_;
  closing_ = true;
  if (first && hold > std::chrono::milliseconds::zero()) {
    held_ = true;
    arm_timer(hold);
    return;
  }
  // A client that does not read its last replies is not waited for forever.
  if (first || held_) arm_timer(options_.idle_frame_timeout);
  held_ = false;
  if (!in_read_handler_) flush();
}

void Session::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  server_log().debug("connection closed peer={} reason=\"{}\"", peer_, reason);
  error_code ec;
  idle_timer_.cancel();
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  out_.clear();
  ack_marks_.clear();
  if (options_.reply_budget != nullptr && charged_ > 0)
    options_.reply_budget->charge(*this, std::exchange(charged_, 0), 0);
  if (options_.buffered_total != nullptr) *options_.buffered_total -= buffered_;
  buffered_ = 0;
  leave_preauth();
  host_.on_closed(*this);
}

}  // namespace ddp::store::server
