#include "proxy_connection.hpp"

#include <poll.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>

#include "contained.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "failpoints.hpp"
#include "resolve_endpoints.hpp"

namespace ddp::store::server {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::size_t kReadBytes = 64 * 1024;
constexpr std::chrono::milliseconds kMaxBackoff{1000};
// The HELLO's id: the TCPStore codec numbers its requests from 1.
constexpr std::uint32_t kHelloId = 0;

}  // namespace

template <typename F>
void ProxyConnection::guarded(F&& work) {
  run_contained(std::forward<F>(work), [this](const std::string& error) {
    ddp::log::get("store.proxy")->error("closing torch client: its handler failed peer={}{}", peer_, error);
    close("handler failed");
  });
}

ProxyConnection::ProxyConnection(asio::io_context& io, tcp::socket down,
                                 std::shared_ptr<const TorchProxyTarget> target, std::string key_prefix,
                                 const TorchProxyOptions& options, ProxyCounters& counters,
                                 OnClosed on_closed)
    : down_(std::move(down)),
      up_(io),
      resolver_(io),
      retry_(io),
      target_(std::move(target)),
      options_(options),
      counters_(counters),
      on_closed_(std::move(on_closed)),
      codec_(options.limits, options.torch_legacy_protocol == TorchLegacyProtocol::kTorch21
                                 ? torch::Dialect::kTorchV2Early
                                 : torch::Dialect::kTorchV1),
      ns_(std::move(key_prefix)),
      down_in_(kReadBytes, '\0'),
      up_read_(kReadBytes, '\0') {}

bool ProxyConnection::client_gone() {
  if (closed_) return true;
  pollfd p{};
  p.fd = down_.native_handle();
  p.events = POLLRDHUP;
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void ProxyConnection::start() {
  error_code ec;
  const auto peer = down_.remote_endpoint(ec);
  peer_ = ec ? std::string("unknown") : peer.address().to_string() + ":" + std::to_string(peer.port());
  down_.set_option(tcp::no_delay(true), ec);
  connect_deadline_ = std::chrono::steady_clock::now() + options_.connect_timeout;
  connect_up();
}

void ProxyConnection::connect_up() {
  auto self = shared_from_this();
  auto retry_or_fail = [this, self](const std::string& error) {
    if (closed_) return;
    if (std::chrono::steady_clock::now() + backoff_ < connect_deadline_) {
      retry_.expires_after(backoff_);
      backoff_ = std::min(backoff_ * 2, kMaxBackoff);
      retry_.async_wait([this, self](error_code ec) {
        if (!ec && !closed_) guarded([&] { connect_up(); });
      });
      return;
    }
    ++counters_.failed_connects;
    ddp::log::get("store.proxy")
        ->error(
            "cannot reach the job's store store={} error=\"{}\" waited_ms={}; closing torch client peer={}",
            target_->store.to_string(), error, options_.connect_timeout.count(), peer_);
    close("store unreachable");
  };
  auto connect = [this, self, retry_or_fail](std::vector<tcp::endpoint> endpoints) {
    asio::async_connect(up_, endpoints, [this, self, retry_or_fail](error_code cec, const tcp::endpoint&) {
      guarded([&] {
        if (closed_) return;
        if (cec) {
          error_code ignored;
          up_.close(ignored);
          return retry_or_fail(cec.message());
        }
        on_connected();
      });
    });
  };
  resolve_endpoints(
      resolver_, target_->store.host, target_->store.port,
      [this, self, retry_or_fail, connect](const error_code& ec, std::vector<tcp::endpoint> endpoints) {
        guarded([&] {
          if (closed_) return;
          if (ec) return retry_or_fail(ec.message());
          connect(std::move(endpoints));
        });
      });
}

void ProxyConnection::on_connected() {
  error_code ec;
  up_.set_option(tcp::no_delay(true), ec);
  read_down();
  read_up();
}

void ProxyConnection::choose_mode(char first_byte) {
  if (first_byte == kPreamble[0]) {
    // A native client (ddp-store, the C++ SDK) names its own keys and
    // presents its own token: its bytes pass unchanged.
    relay_ = true;
    ddp::log::get("store.proxy")->debug("relaying a native-protocol client peer={}", peer_);
    return;
  }
  // A TCPStore client: the proxy speaks for it. Its requests follow the HELLO
  // on the same stream and the store answers in order, so nothing waits for
  // the HELLO's reply.
  Request hello;
  hello.op = Op::kHello;
  hello.id = kHelloId;
  hello.a = kProtocolVersion;
  hello.values.push_back(target_->token);
  up_out_.assign(kPreamble, sizeof kPreamble);
  encode_request(hello, up_out_);
}

void ProxyConnection::read_down() {
  auto self = shared_from_this();
  down_.async_read_some(asio::buffer(down_in_), [this, self](error_code ec, std::size_t n) {
    guarded([&] { on_down_read(ec, n); });
  });
}

void ProxyConnection::on_down_read(error_code ec, std::size_t n) {
  if (closed_) return;
  if (ec) return close(ec == asio::error::eof ? "client closed" : "client: " + ec.message());
  failpoints::maybe_throw("proxy.read");
  if (!mode_chosen_) {
    mode_chosen_ = true;
    choose_mode(down_in_[0]);
  }
  if (relay_) {
    up_out_.append(down_in_.data(), n);
  } else {
    try {
      codec_.feed(std::string_view(down_in_.data(), n), [this](Request&& req) {
        ++counters_.requests;
        ns_.to_store(req);
        encode_request(req, up_out_);
        return true;
      });
    } catch (const Error& e) {
      ddp::log::get("store.proxy")->warn("closing torch client peer={} error=\"{}\"", peer_, e.what());
      return close("bad request");
    }
  }
  if (up_out_.empty()) return read_down();
  write_then(up_, up_out_, "write to store: ", &ProxyConnection::read_down);
}

void ProxyConnection::write_then(tcp::socket& to, std::string& out, const char* what,
                                 void (ProxyConnection::*next)()) {
  auto self = shared_from_this();
  asio::async_write(to, asio::buffer(out), [this, self, &out, what, next](error_code wec, std::size_t) {
    guarded([&] {
      if (closed_) return;
      if (wec) return close(what + wec.message());
      out.clear();
      (this->*next)();
    });
  });
}

void ProxyConnection::read_up() {
  auto self = shared_from_this();
  up_.async_read_some(asio::buffer(up_read_),
                      [this, self](error_code ec, std::size_t n) { guarded([&] { on_up_read(ec, n); }); });
}

void ProxyConnection::on_up_read(error_code ec, std::size_t n) {
  if (closed_) return;
  if (ec) {
    ddp::log::get("store.proxy")
        ->warn("the job's store closed the connection store={} error=\"{}\"; closing torch client peer={}",
               target_->store.to_string(), ec.message(), peer_);
    return close("store closed");
  }
  if (relay_) {
    down_out_.append(up_read_.data(), n);
  } else {
    up_in_.append(up_read_.data(), n);
    if (!drain_up_frames()) return;
  }
  if (down_out_.empty()) return read_up();
  write_then(down_, down_out_, "write to client: ", &ProxyConnection::read_up);
}

bool ProxyConnection::drain_up_frames() {
  auto log = ddp::log::get("store.proxy");
  std::size_t pos = 0;
  while (up_in_.size() - pos >= 4) {
    const std::uint32_t len = decode_frame_length(std::string_view(up_in_).substr(pos, 4));
    if (len > options_.limits.max_frame_bytes) {
      log->error("frame of {} bytes from the store store={} exceeds the limit", len,
                 target_->store.to_string());
      close("bad frame from store");
      return false;
    }
    if (up_in_.size() - pos - 4 < len) break;
    Response resp;
    try {
      resp = decode_response(std::string_view(up_in_).substr(pos + 4, len), options_.limits);
    } catch (const Error& e) {
      log->error("bad reply from the store store={} error=\"{}\"", target_->store.to_string(), e.what());
      close("bad reply from store");
      return false;
    }
    pos += 4 + len;
    if (!hello_answered_) {
      hello_answered_ = true;
      if (resp.status != Status::kOk) {
        log->error(
            "the job's store refused the proxy store={} status={} error=\"{}\"; closing torch client peer={}",
            target_->store.to_string(), status_name(resp.status), resp.message, peer_);
        close("refused by store");
        return false;
      }
      continue;
    }
    ns_.from_store(resp);
    try {
      codec_.encode(resp, down_out_);
    } catch (const Error& e) {
      // torch's own server closes the connection on an error; its client
      // reports that as a failed store operation.
      log->info("closing torch client peer={} error=\"{}\"", peer_, e.what());
      close("request failed");
      return false;
    }
  }
  up_in_.erase(0, pos);
  return true;
}

void ProxyConnection::close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  ddp::log::get("store.proxy")->debug("torch client closed peer={} reason=\"{}\"", peer_, why);
  error_code ignored;
  down_.close(ignored);
  up_.close(ignored);
  resolver_.cancel();
  retry_.cancel();
  if (on_closed_) on_closed_(this);
}

}  // namespace ddp::store::server
