// Dispatcher, continued: a connection's hello: the protocol version, the
// token, and the held answers and summarised log lines of failed attempts.
#include <algorithm>

#include "ddp/common/logging.hpp"
#include "dispatcher.hpp"

namespace ddp::store::server {
namespace {

bool same_token(std::string_view a, std::string_view b) {
  // Constant time in the token's length, so response timing does not leak a prefix.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const auto n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto ca = i < a.size() ? a[i] : '\0';
    const auto cb = i < b.size() ? b[i] : '\0';
    diff |= static_cast<unsigned char>(ca ^ cb);
  }
  return diff == 0;
}

}  // namespace

void Dispatcher::handle_hello(const std::shared_ptr<Session>& s, const Request& req) {
  auto log = ddp::log::get("store.server");
  Response resp = reply(req.id, Status::kOk);
  resp.num = kProtocolVersion;
  resp.revision = core_.revision();
  if (req.a != static_cast<std::int64_t>(kProtocolVersion)) {
    resp.status = Status::kVersionMismatch;
    resp.message = "server speaks protocol version " + std::to_string(kProtocolVersion) + ", client sent " +
                   std::to_string(req.a) + "; use matching ddp versions";
    log->warn("closing connection: protocol version mismatch peer={} client_version={}", s->peer(), req.a);
    s->send(resp);
    s->close_after_flush();
    return;
  }
  if (!options_.token.empty()) {
    // Compared whatever the address's back-off: a guesser sharing the address
    // (a NAT, a host) must not lock out the client that has the token.
    const std::string_view given = req.values.empty() ? std::string_view() : std::string_view(req.values[0]);
    if (!same_token(given, options_.token)) {
      const auto now = Clock::now();
      auth_.record_failure(s->peer_address(), now);
      // Past the free failures the verdict is held: one guesser from an
      // address waits for each answer, 100 ms doubling up to the maximum.
      const auto hold = std::min(auth_.wait_for(s->peer_address(), now), options_.auth_backoff_max);
      resp.status = Status::kAuthFailed;
      resp.message = given.empty() ? "this server requires a token; pass --token-file"
                                   : "wrong token; check --token-file";
      if (hold > Millis::zero()) {
        auth_.record_delayed(s->peer_address());
        resp.message += " (too many failed authentication attempts from " + s->peer_address() +
                        ": this answer was held " + std::to_string(hold.count()) + " ms)";
      }
      log_auth_failure(*s, given.empty() ? "token=missing" : "token=wrong");
      s->send(resp);
      s->close_after_flush(hold);
      return;
    }
  }
  s->set_hello_done();
  s->send(resp);
}

void Dispatcher::log_auth_failure(const Session& s, const char* what) {
  ++auth_failures_;
  if (auth_period_open_) return;  // counted; the period's summary line reports it
  auth_period_open_ = true;
  auth_.take_summary();  // this one is logged here, not in the summary
  ddp::log::get("store.server")
      ->warn(
          "closing connection: authentication failed peer={} {}; further failures are summarised every {} ms",
          s.peer(), what, options_.auth_log_period.count());
  auth_log_timer_.expires_after(options_.auth_log_period);
  auth_log_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_auth_log_timer();
  });
}

void Dispatcher::on_auth_log_timer() {
  const auto sum = auth_.take_summary();
  if (sum.failed == 0) {
    auth_period_open_ = false;  // quiet: the next failure is logged at once
    return;
  }
  ddp::log::get("store.server")
      ->warn(
          "authentication failures in the last {} ms: failed={} delayed={} peers={} top_peer={} "
          "top_peer_count={}",
          options_.auth_log_period.count(), sum.failed, sum.delayed, sum.peers, sum.top_peer, sum.top_count);
  auth_log_timer_.expires_after(options_.auth_log_period);
  auth_log_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_auth_log_timer();
  });
}

}  // namespace ddp::store::server
