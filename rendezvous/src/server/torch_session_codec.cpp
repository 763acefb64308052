#include "torch_session_codec.hpp"

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "torch_queues.hpp"

namespace ddp::store::server {

using torch::TorchOp;

TorchCodec::TorchCodec(const Limits& limits, torch::Dialect unvalidated)
    : limits_(limits), unvalidated_(unvalidated) {}

const char* TorchCodec::name() const { return torch::dialect_name(dialect_); }

bool TorchCodec::mid_frame() const {
  if (!parser_) return !head_.empty();
  return parser_->buffered() > 0;
}

void TorchCodec::feed(std::string_view bytes, const std::function<bool(Request&&)>& on_request) {
  if (!parser_) {
    head_.append(bytes);
    dialect_ = torch::sniff(head_);
    if (dialect_ == torch::Dialect::kNeedMore) return;
    if (dialect_ != torch::Dialect::kTorchV1 && dialect_ != torch::Dialect::kTorchV2) {
      throw ProtocolError("first bytes are not a PyTorch TCPStore protocol this server speaks");
    }
    if (dialect_ == torch::Dialect::kTorchV1) dialect_ = unvalidated_;
    torch::TorchLimits tl;
    tl.max_key_bytes = limits_.max_key_bytes;
    tl.max_value_bytes = limits_.max_value_bytes;
    tl.max_keys_per_request = limits_.max_keys_per_request;
    tl.max_command_bytes = limits_.max_frame_bytes;
    parser_.emplace(dialect_, tl);
    bytes = head_;
  }
  parser_->feed(bytes);
  head_.clear();
  while (true) {
    // A ProtocolError (unknown op byte, size over a limit) goes to the session,
    // which logs it with the peer and the dialect and closes this connection.
    auto cmd = parser_->next();
    if (!cmd) return;
    ++decoded_;
    if (!translate(std::move(*cmd), on_request)) return;
  }
}

bool TorchCodec::translate(torch::TorchCommand&& cmd, const std::function<bool(Request&&)>& on_request) {
  Request req;
  req.id = next_id_++;
  Expect expect{cmd.op};
  switch (cmd.op) {
    case TorchOp::kValidate:
      return true;  // the parser already checked the magic; no reply
    case TorchOp::kPing:
      req.op = Op::kPing;
      expect.word = cmd.word;
      break;
    case TorchOp::kSet:
      req.op = Op::kSet;
      break;
    case TorchOp::kCompareSet:
      req.op = Op::kCompareSet;
      break;
    case TorchOp::kGet:
      // torch sends WAIT before GET, so the key exists; a blocking get with no
      // deadline also covers a client that skips the WAIT.
      req.op = Op::kGet;
      req.b = -1;
      break;
    case TorchOp::kAdd:
      req.op = Op::kAdd;
      req.b = cmd.delta;
      break;
    case TorchOp::kCheck:
      req.op = Op::kCheck;
      break;
    case TorchOp::kWait:
      // The torch client owns the timeout (2.x cancels with CANCEL_WAIT).
      req.op = Op::kWait;
      req.b = -1;
      last_wait_ = req.id;
      break;
    case TorchOp::kNumKeys:
      req.op = Op::kNumKeys;
      break;
    case TorchOp::kDelete:
      req.op = Op::kDelete;
      break;
    case TorchOp::kAppend:
      req.op = Op::kAppend;
      break;
    case TorchOp::kMultiGet:
      req.op = Op::kMultiGet;
      expect.keys = cmd.keys.size();
      break;
    case TorchOp::kMultiSet:
      req.op = Op::kMultiSet;
      break;
    case TorchOp::kCancelWait:
      req.op = Op::kCancel;
      req.a = last_wait_.value_or(0);
      last_wait_.reset();
      break;
    case TorchOp::kQueuePush:
      req.op = kOpQueuePush;
      break;
    case TorchOp::kQueuePop:
      // A blocking pop is the client's WAIT on the queue's name, then this.
      req.op = kOpQueuePop;
      break;
    case TorchOp::kQueueLen:
      req.op = kOpQueueLen;
      break;
    case TorchOp::kBarrier:
      // Parked like a WAIT: the client owns the timeout and cancels with CANCEL_WAIT.
      req.op = Op::kBarrier;
      req.a = cmd.delta;
      req.b = -1;
      last_wait_ = req.id;
      break;
    case TorchOp::kList:
      req.op = Op::kList;
      cmd.keys.assign(1, std::string());  // every key; the client strips its prefix
      break;
    case TorchOp::kWatchKey:
      // torch 1.13's and 2.0's Python APIs never send it; a torch 2.1 client's DELETE_KEY has the same byte.
      throw ProtocolError(
          "WATCH_KEY (torch 1.x key callbacks) is not supported; if this is a torch 2.1 client's DELETE_KEY, "
          "torch 2.1 clients need torch_legacy_protocol=2.1");
  }
  req.keys = std::move(cmd.keys);
  req.values = std::move(cmd.values);
  expect_.emplace(req.id, expect);
  return on_request(std::move(req));
}

void TorchCodec::encode(const Response& resp, std::string& out) {
  auto it = expect_.find(resp.id);
  if (it == expect_.end()) return;  // nothing the torch client waits for
  const Expect expect = it->second;
  if (resp.status == Status::kEvent) return;
  expect_.erase(it);
  if (resp.status == Status::kCancelled) return;  // CANCEL_WAIT's own reply says so
  if (resp.status != Status::kOk && expect.op != TorchOp::kCancelWait) {
    // torch has no error replies: its own server drops the connection, which the
    // client reports as a store error. The session closes us after this reply.
    throw ProtocolError(std::string(torch::torch_op_name(expect.op)) + " failed: " +
                        status_name(resp.status) + (resp.message.empty() ? "" : ": " + resp.message));
  }
  switch (expect.op) {
    case TorchOp::kSet:
    case TorchOp::kAppend:
    case TorchOp::kMultiSet:
    case TorchOp::kValidate:
    case TorchOp::kQueuePush:
      return;  // torch expects no reply
    case TorchOp::kPing:
      torch::put_u32(out, expect.word);
      return;
    case TorchOp::kCompareSet:
    case TorchOp::kGet:
      torch::put_bytes(out, resp.items.empty() ? std::string_view() : std::string_view(resp.items[0].value));
      return;
    case TorchOp::kAdd:
    case TorchOp::kNumKeys:
    case TorchOp::kDelete:
    case TorchOp::kQueueLen:
      torch::put_i64(out, resp.num);
      return;
    case TorchOp::kQueuePop:
      // The length before the pop, then the value when there was one; a client
      // that finds 0 reports an empty queue.
      torch::put_i64(out, resp.num);
      if (resp.num > 0 && !resp.items.empty()) torch::put_bytes(out, resp.items[0].value);
      return;
    case TorchOp::kList:
      torch::put_i64(out, static_cast<std::int64_t>(resp.items.size()));
      for (const auto& item : resp.items) torch::put_bytes(out, item.key);
      return;
    case TorchOp::kCheck:
      torch::put_u8(out, resp.num == 1 ? torch::kCheckReady : torch::kCheckNotReady);
      return;
    case TorchOp::kWait:
    case TorchOp::kBarrier:
      torch::put_u8(out, torch::kWaitStopWaiting);
      return;
    case TorchOp::kCancelWait:
      torch::put_u8(out, torch::kWaitCanceled);
      return;
    case TorchOp::kMultiGet:
      for (std::size_t i = 0; i < expect.keys; ++i) {
        torch::put_bytes(out,
                         i < resp.items.size() ? std::string_view(resp.items[i].value) : std::string_view());
      }
      return;
    case TorchOp::kWatchKey:
      return;
  }
}

}  // namespace ddp::store::server
