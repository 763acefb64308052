// PyTorch TCPStore's queues (QUEUE_PUSH / QUEUE_POP / QUEUE_LEN, torch 2.8+):
// named FIFO lists of values, separate from the key space. In memory only —
// not persisted, not replicated to watchers, not counted by num_keys or LIST —
// as in torch's own server. A non-empty queue counts as an existing key for
// WAIT and CHECK, which is how a torch client blocks in a pop.
//
// Thread-safety: none; owned by the Dispatcher on the loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddp/store/protocol.hpp"

namespace ddp::store::server {

// The queue ops are native ops too (protocol.hpp), so the agent's torch store
// proxy forwards a worker's queue ops like any other, under its namespace.
inline constexpr Op kOpQueuePush = Op::kQueuePush;
inline constexpr Op kOpQueuePop = Op::kQueuePop;
inline constexpr Op kOpQueueLen = Op::kQueueLen;
inline bool is_queue_op(Op op) { return op == kOpQueuePush || op == kOpQueuePop || op == kOpQueueLen; }
// op_name() for logs, knowing the queue ops.
const char* server_op_name(Op op);

class TorchQueues {
 public:
  // Returns the length after the push.
  std::int64_t push(const std::string& name, std::string value);
  // The front value, if any; `length_before` gets the length before the pop.
  std::optional<std::string> pop(const std::string& name, std::int64_t& length_before);
  std::int64_t length(const std::string& name) const;
  bool empty() const { return queues_.empty(); }
  // Removes from `keys` those naming a non-empty queue.
  void drop_non_empty(std::vector<std::string>& keys) const;

 private:
  std::unordered_map<std::string, std::deque<std::string>> queues_;  // never holds an empty deque
};

}  // namespace ddp::store::server
