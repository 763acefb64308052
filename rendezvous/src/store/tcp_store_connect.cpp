// TcpStore's connect cycle, run on the I/O thread: resolve, connect, preamble +
// HELLO, retried with exponential backoff and full jitter until
// options.first_connect_timeout (the first cycle, when set) or
// options.connect_timeout. One cycle at a time; callers wait on connect_cv_.
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>

#include "ddp/common/error.hpp"
#include "resolve_endpoints.hpp"
#include "tcp_store_impl.hpp"

namespace ddp::store {

namespace {
// First retry within 20 ms (a daemon that is just starting), later ones spread up
// to 1 s so a restarted server is not hit by every client at the same instant.
constexpr std::chrono::milliseconds kBackoffBase{20};
constexpr std::chrono::milliseconds kBackoffCap{1000};
// A store answers the HELLO at once; a peer silent for this long is not one
// (or is stopped).
constexpr std::chrono::milliseconds kHandshakeTimeout{5000};
// A resolve and TCP connect that take longer are tried again: a firewall
// that drops the SYNs would otherwise hold one attempt for the kernel's two
// minutes of retransmits, with nothing said (the caller hears of each failed
// attempt) and no new DNS answer looked at.
constexpr std::chrono::milliseconds kAttemptTimeout{5000};

// The first bytes a peer sent, for the error that says what answered.
std::string printable(std::string_view bytes) {
  std::string out;
  for (char ch : bytes.substr(0, 48)) {
    const auto u = static_cast<unsigned char>(ch);
    if (u == '\r' || u == '\n') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else if (u >= 0x20 && u < 0x7F) {
      out += ch;
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xF];
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}
}  // namespace

std::string TcpStore::Impl::printable_prefix() const {
  return printable(std::string_view(rbuf_.data(), rlen_));
}

void TcpStore::Impl::not_a_store(const std::string& what_happened) {
  finish_connect(std::make_exception_ptr(
      ProtocolError(where() + " " + what_happened + ": it is not a ddp-rendezvousd or ddprun store")));
}

void TcpStore::Impl::begin_connect() {
  cycle_active_ = true;
  ++cycle_;
  cycle_timeout_ = !ever_connected_ && options_.first_connect_timeout.count() > 0
                       ? options_.first_connect_timeout
                       : options_.connect_timeout;
  connect_deadline_ = Deadline::after(cycle_timeout_);
  backoff_ = Backoff(kBackoffBase, kBackoffCap);
  last_connect_error_ = "timed out";
  arm_connect_timer();
  attempt_connect();
}

void TcpStore::Impl::arm_connect_timer() {
  connect_timer_.expires_at(connect_deadline_.at());
  const auto cycle = cycle_;
  connect_timer_.async_wait([this, cycle](const boost::system::error_code& ec) {
    // cancel() cannot recall a handler already queued, hence the cycle check.
    if (ec || !cycle_active_ || cycle != cycle_) return;
    // The deadline passed while an attempt (or a backoff sleep) was still going.
    finish_connect(std::make_exception_ptr(NetworkError("cannot connect to store at " + where() + " within " +
                                                        std::to_string(cycle_timeout_.count()) +
                                                        " ms: " + last_connect_error_)));
  });
}

void TcpStore::Impl::attempt_connect() {
  const auto seq = ++attempt_seq_;
  boost::system::error_code ignored;
  socket_.close(ignored);
  handshake_done_ = false;
  rlen_ = 0;
  // Re-armed for the handshake once connected (connect_to). An attempt that
  // would outlast the whole connect_timeout is left to its timer, which names
  // the last real failure (a refused connect) rather than this attempt's cut.
  if (kAttemptTimeout < connect_deadline_.remaining()) {
    handshake_timer_.expires_after(kAttemptTimeout);
    handshake_timer_.async_wait([this, seq](const boost::system::error_code& tec) {
      if (tec || seq != attempt_seq_ || connected_attempt_ == seq) return;
      resolver_.cancel();
      on_attempt_failed("no answer within " + std::to_string(kAttemptTimeout.count() / 1000) + " s");
    });
  }
  resolve_endpoints(
      resolver_, options_.endpoint.host, options_.endpoint.port,
      [this, seq](const boost::system::error_code& ec, std::vector<asio::ip::tcp::endpoint> endpoints) {
        if (seq != attempt_seq_) return;
        if (ec) {
          return on_attempt_failed("cannot resolve '" + options_.endpoint.host + "': " + ec.message());
        }
        connect_to(seq, std::move(endpoints));
      });
}

void TcpStore::Impl::connect_to(std::uint64_t seq, std::vector<asio::ip::tcp::endpoint> endpoints) {
  asio::async_connect(
      socket_, endpoints, [this, seq](const boost::system::error_code& cec, const asio::ip::tcp::endpoint&) {
        if (seq != attempt_seq_) return;
        if (cec) return on_attempt_failed(cec.message());
        connected_attempt_ = seq;
        boost::system::error_code opt_ec;
        socket_.set_option(asio::ip::tcp::no_delay(true), opt_ec);
        hello_frame_.assign(kPreamble, sizeof(kPreamble));
        Request hello;
        hello.op = Op::kHello;
        hello.id = 0;  // ids of ordinary requests start at 1
        hello.a = kProtocolVersion;
        hello.values.push_back(options_.token);
        encode_request(hello, hello_frame_);
        asio::async_write(
            socket_, asio::buffer(hello_frame_),
            [this, seq](const boost::system::error_code& wec, std::size_t) {
              if (seq != attempt_seq_) return;
              if (wec) return on_attempt_failed(wec.message());
              handshake_timer_.expires_after(std::min(kHandshakeTimeout, connect_deadline_.remaining()));
              handshake_timer_.async_wait([this, seq](const boost::system::error_code& tec) {
                if (tec || seq != attempt_seq_ || handshake_done_) return;
                if (!ever_connected_ && !connect_deadline_.expired()) {
                  return not_a_store(
                      "accepted the connection but did not answer the handshake "
                      "within " +
                      std::to_string(kHandshakeTimeout.count() / 1000) +
                      " s (or the store process is stopped)");
                }
                on_attempt_failed("no answer to the handshake");
              });
              read_more(seq);
            });
      });
}

void TcpStore::Impl::on_attempt_failed(const std::string& why) {
  last_connect_error_ = why;
  ++attempt_seq_;  // stale handlers of this attempt become no-ops
  boost::system::error_code ignored;
  socket_.close(ignored);
  if (connect_deadline_.expired()) {
    finish_connect(
        std::make_exception_ptr(NetworkError("cannot connect to store at " + where() + " within " +
                                             std::to_string(cycle_timeout_.count()) + " ms: " + why)));
    return;
  }
  if (!ever_connected_ && options_.on_connect_retry) options_.on_connect_retry(why);
  const auto delay = std::min(backoff_.next(), connect_deadline_.remaining());
  backoff_timer_.expires_after(delay);
  const auto seq = attempt_seq_;
  backoff_timer_.async_wait([this, seq](const boost::system::error_code& ec) {
    // A backoff cut short by the deadline ends where the connect timer fires:
    // it reports the last attempt's error. A new attempt would have no time
    // left and fail as "no answer" at once.
    if (ec || seq != attempt_seq_ || connect_deadline_.expired()) return;
    attempt_connect();
  });
}

void TcpStore::Impl::on_handshake_reply(const Response& hello) {
  switch (hello.status) {
    case Status::kOk:
      handshake_done_ = true;
      ever_connected_ = true;
      finish_connect(nullptr);
      return;
    case Status::kAuthFailed:
      // Retrying cannot fix a wrong token: fail now.
      finish_connect(
          std::make_exception_ptr(AuthError("authentication failed at store " + where() +
                                            (hello.message.empty() ? "" : " (" + hello.message + ")") +
                                            ": the token does not match the server's; check --token-file")));
      return;
    case Status::kVersionMismatch:
      finish_connect(std::make_exception_ptr(AuthError("store at " + where() +
                                                       " speaks another protocol version (client " +
                                                       std::to_string(kProtocolVersion) + ", server " +
                                                       std::to_string(hello.num) + "): " + hello.message)));
      return;
    case Status::kShuttingDown:
      on_attempt_failed("the server is shutting down");
      return;
    default:
      on_attempt_failed(std::string("handshake refused: ") + status_name(hello.status) +
                        (hello.message.empty() ? "" : ": " + hello.message));
      return;
  }
}

void TcpStore::Impl::finish_connect(std::exception_ptr error) {
  cycle_active_ = false;
  boost::system::error_code ignored;
  connect_timer_.cancel();
  backoff_timer_.cancel();
  handshake_timer_.cancel();
  if (!error) {
    {
      std::lock_guard<std::mutex> lk(write_mu_);
      write_fd_ = socket_.native_handle();
      write_broken_ = false;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      connected_ = true;
      connecting_ = false;
      connect_error_ = nullptr;
      ++connect_epoch_;
    }
    connect_cv_.notify_all();
    resend_watches();
    if (std::exchange(had_connection_, true)) {
      std::lock_guard<std::mutex> lk(reconnect_mu_);
      if (on_reconnect_) on_reconnect_();
    }
    return;
  }
  ++attempt_seq_;
  resolver_.cancel();
  socket_.close(ignored);
  handshake_done_ = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    connecting_ = false;
    connect_error_ = error;
    ++connect_epoch_;
  }
  connect_cv_.notify_all();
  std::string reason;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    reason = e.what();
  }
  fail_watches(reason);
}

void TcpStore::Impl::set_on_reconnect(std::function<void()> fn) {
  std::lock_guard<std::mutex> lk(reconnect_mu_);
  on_reconnect_ = std::move(fn);
}

}  // namespace ddp::store
