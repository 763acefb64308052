// Dispatcher, continued: the TCPStore queue ops (see torch_queues.hpp). Kept
// apart from dispatcher.cpp because only the TCPStore dialect reaches them.
#include "dispatcher.hpp"

namespace ddp::store::server {

std::vector<std::string> Dispatcher::still_missing(const Request& req) const {
  auto missing = core_.missing(req.keys);
  if (req.op == Op::kWait || req.op == Op::kCheck) queues_.drop_non_empty(missing);
  return missing;
}

void Dispatcher::handle_queue(const std::shared_ptr<Session>& s, Request& req) {
  Response resp;
  resp.id = req.id;
  if (req.keys.size() != 1 || req.values.size() != (req.op == kOpQueuePush ? 1u : 0u)) {
    resp.status = Status::kBadRequest;
    resp.message = std::string(server_op_name(req.op)) + " takes one queue name";
    return s->send(resp);
  }
  const auto& name = req.keys[0];
  if (req.op == kOpQueuePush) {
    resp.num = queues_.push(name, std::move(req.values[0]));
    s->send(resp);
    // One waiter per pushed value, the longest waiting first: a blocking pop
    // is a WAIT on the queue's name followed by QUEUE_POP.
    if (auto id = waiters_.on_push(name)) release_waiter(*id);
    return;
  }
  if (req.op == kOpQueuePop) {
    auto value = queues_.pop(name, resp.num);
    if (value) resp.items.push_back({ItemKind::kPresent, name, std::move(*value), 0});
    return s->send(resp);
  }
  resp.num = queues_.length(name);
  s->send(resp);
}

}  // namespace ddp::store::server
