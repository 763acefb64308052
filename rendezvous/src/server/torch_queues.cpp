#include "torch_queues.hpp"

#include <algorithm>

namespace ddp::store::server {

const char* server_op_name(Op op) {
  if (op == kOpQueuePush) return "queue_push";
  if (op == kOpQueuePop) return "queue_pop";
  if (op == kOpQueueLen) return "queue_len";
  return op_name(op);
}

std::int64_t TorchQueues::push(const std::string& name, std::string value) {
  auto& q = queues_[name];
  q.push_back(std::move(value));
  return static_cast<std::int64_t>(q.size());
}

std::optional<std::string> TorchQueues::pop(const std::string& name, std::int64_t& length_before) {
  auto it = queues_.find(name);
  length_before = it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
  if (it == queues_.end()) return std::nullopt;
  auto value = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return value;
}

std::int64_t TorchQueues::length(const std::string& name) const {
  auto it = queues_.find(name);
  return it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

void TorchQueues::drop_non_empty(std::vector<std::string>& keys) const {
  if (queues_.empty()) return;
  std::erase_if(keys, [this](const std::string& k) { return queues_.count(k) != 0; });
}

}  // namespace ddp::store::server
