// Dispatcher, continued: the requests that wait (blocking get, wait,
// barrier), parked in the WaiterTable until a put or their deadline, and
// their cancel.
#include "ddp/common/parse.hpp"
#include "dispatcher.hpp"

namespace ddp::store::server {

bool Dispatcher::refuse_pending(const std::shared_ptr<Session>& s, const Request& req) {
  if (s->pending().count(req.id) != 0) {
    s->send(
        reply(req.id, Status::kBadRequest, "request id " + std::to_string(req.id) + " is already pending"));
    return true;
  }
  if (s->pending().size() >= options_.limits.max_pending_per_connection) {
    s->send(reply(req.id, Status::kLimitExceeded,
                  "more than " + std::to_string(options_.limits.max_pending_per_connection) +
                      " pending gets/waits/watches on one connection"));
    return true;
  }
  return false;
}

void Dispatcher::handle_blocking(const std::shared_ptr<Session>& s, Request& req) {
  const auto now = Clock::now();
  auto resp = core_.execute(req, now);
  if (resp.status == Status::kNotFound && req.op == Op::kWait && !queues_.empty() &&
      still_missing(req).empty()) {
    resp = reply(req.id, Status::kOk);
  }
  if (resp.status != Status::kNotFound) return s->send(resp);
  if (req.b == 0) {
    resp.status = Status::kTimeout;
    resp.message = "timed out after 0 ms";
    return s->send(resp);
  }
  park(s, req, still_missing(req), now);
}

void Dispatcher::park(const std::shared_ptr<Session>& s, Request& req, const std::vector<std::string>& keys,
                      Clock::time_point now) {
  if (refuse_pending(s, req)) return;
  // A timeout past the clock's range is forever, as a negative one.
  const auto deadline = req.b < 0 ? Clock::time_point::max() : saturating_add(now, Millis(req.b));
  const WaiterId id = next_handle_++;
  waiters_.add(id, keys, deadline);
  s->pending()[req.id] = {Pending::Kind::kWaiter, id};
  waiter_info_[id] = {s, std::move(req), deadline};
}

void Dispatcher::handle_barrier(const std::shared_ptr<Session>& s, Request& req) {
  if (req.keys.size() != 1) return s->send(reply(req.id, Status::kBadRequest, "barrier takes one key"));
  const auto now = Clock::now();
  Request arrive;
  arrive.op = Op::kAdd;
  arrive.keys = req.keys;
  arrive.b = 1;
  auto resp = core_.execute(arrive, now);
  resp.id = req.id;
  if (resp.status != Status::kOk || resp.num >= req.a) return s->send(resp);
  if (req.b == 0) return s->send(reply(req.id, Status::kTimeout, "barrier timed out after 0 ms"));
  park(s, req, req.keys, now);
}

std::optional<Response> Dispatcher::barrier_reached(const Request& req) {
  Request read;
  read.op = Op::kTryGet;
  read.keys = req.keys;
  const auto now = core_.execute(read, Clock::now());
  if (now.items.empty()) return std::nullopt;  // deleted: the next arrival starts it again
  const auto& text = now.items[0].value;
  const auto count = parse_int<std::int64_t>(text);
  if (!count || *count < req.a) return std::nullopt;
  auto resp = reply(req.id, Status::kOk);
  resp.num = *count;
  return resp;
}

void Dispatcher::release_waiter(WaiterId id) {
  auto it = waiter_info_.find(id);
  if (it == waiter_info_.end()) return;
  if (it->second.req.op == Op::kBarrier) {
    auto reached = barrier_reached(it->second.req);
    if (!reached) {  // another write to the counter, not yet the count: keep waiting
      waiters_.add(id, it->second.req.keys, it->second.deadline);
      return;
    }
    auto info = std::move(it->second);
    waiter_info_.erase(it);
    info.session->pending().erase(info.req.id);
    info.session->send(*reached);
    return;
  }
  auto resp = core_.execute(it->second.req, Clock::now());
  if (resp.status == Status::kNotFound && it->second.req.op == Op::kWait &&
      still_missing(it->second.req).empty()) {
    resp = reply(it->second.req.id, Status::kOk);  // a queue it waits on is not empty
  }
  if (resp.status == Status::kNotFound) {  // deleted again before we got here: keep waiting
    waiters_.add(id, still_missing(it->second.req), it->second.deadline);
    return;
  }
  auto info = std::move(it->second);
  waiter_info_.erase(it);
  info.session->pending().erase(info.req.id);
  info.session->send(resp);
}

void Dispatcher::handle_cancel(const std::shared_ptr<Session>& s, const Request& req) {
  auto resp = reply(req.id, Status::kOk);
  const auto target = static_cast<std::uint32_t>(req.a);
  auto it = s->pending().find(target);
  if (it != s->pending().end()) {
    if (it->second.kind == Pending::Kind::kWaiter) {
      waiters_.remove(it->second.handle);
      waiter_info_.erase(it->second.handle);
    } else {
      hub_.remove(it->second.handle);
      watch_info_.erase(it->second.handle);
    }
    s->pending().erase(it);
    if ((req.b & kCancelQuiet) != 0) return;
    s->send(reply(target, Status::kCancelled, "cancelled by the client"));
    resp.num = 1;
  }
  if ((req.b & kCancelQuiet) == 0) s->send(resp);
}

void Dispatcher::on_waiter_timer() {
  waiter_armed_.reset();
  for (auto id : waiters_.take_expired(Clock::now())) {
    auto it = waiter_info_.find(id);
    if (it == waiter_info_.end()) continue;
    auto info = std::move(it->second);
    waiter_info_.erase(it);
    info.session->pending().erase(info.req.id);
    if (info.req.op == Op::kBarrier) {
      info.session->send(reply(info.req.id, Status::kTimeout,
                               "barrier on '" + info.req.keys[0] + "' timed out after " +
                                   std::to_string(info.req.b) + " ms; fewer than " +
                                   std::to_string(info.req.a) + " arrived"));
      continue;
    }
    auto missing = core_.missing(info.req.keys);
    std::string msg = std::string(op_name(info.req.op)) + " timed out after " + std::to_string(info.req.b) +
                      " ms; missing key(s):";
    for (std::size_t i = 0; i < missing.size() && i < 5; ++i) msg += " '" + missing[i] + "'";
    if (missing.size() > 5) msg += " and " + std::to_string(missing.size() - 5) + " more";
    info.session->send(reply(info.req.id, Status::kTimeout, msg));
  }
  after_work();
}

}  // namespace ddp::store::server
