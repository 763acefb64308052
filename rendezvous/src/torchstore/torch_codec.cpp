#include "torch_codec.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

#include "ddp/common/error.hpp"
#include "ddp/store/protocol.hpp"

namespace ddp::store::torch {
namespace {

// Query-type numbering of each dialect; index = byte on the wire.
constexpr std::array<TorchOp, 9> kV1Ops = {TorchOp::kSet,     TorchOp::kCompareSet, TorchOp::kGet,
                                           TorchOp::kAdd,     TorchOp::kCheck,      TorchOp::kWait,
                                           TorchOp::kNumKeys, TorchOp::kWatchKey,   TorchOp::kDelete};
constexpr std::array<TorchOp, 12> kV2EarlyOps = {
    TorchOp::kSet,    TorchOp::kCompareSet, TorchOp::kGet,      TorchOp::kAdd,
    TorchOp::kCheck,  TorchOp::kWait,       TorchOp::kNumKeys,  TorchOp::kDelete,
    TorchOp::kAppend, TorchOp::kMultiGet,   TorchOp::kMultiSet, TorchOp::kCancelWait};
constexpr std::array<TorchOp, 19> kV2Ops = {
    TorchOp::kValidate, TorchOp::kSet,      TorchOp::kCompareSet, TorchOp::kGet,    TorchOp::kAdd,
    TorchOp::kCheck,    TorchOp::kWait,     TorchOp::kNumKeys,    TorchOp::kDelete, TorchOp::kAppend,
    TorchOp::kMultiGet, TorchOp::kMultiSet, TorchOp::kCancelWait, TorchOp::kPing,   TorchOp::kQueuePush,
    TorchOp::kQueuePop, TorchOp::kQueueLen, TorchOp::kList,       TorchOp::kBarrier};

// The fields of a request, in wire order: `fixed` first; when it ends with a
// count, `group` then repeats that many times.
enum class F : std::uint8_t { kU32, kI64, kKey, kValue, kCount };
struct Layout {
  std::array<F, 3> fixed{};
  std::size_t nfixed = 0;
  std::array<F, 2> group{};
  std::size_t ngroup = 0;
};

Layout layout_of(TorchOp op) {
  switch (op) {
    case TorchOp::kValidate:
    case TorchOp::kPing:
      return {{F::kU32}, 1, {}, 0};
    case TorchOp::kSet:
    case TorchOp::kAppend:
    case TorchOp::kQueuePush:
      return {{F::kKey, F::kValue}, 2, {}, 0};
    case TorchOp::kCompareSet:
      return {{F::kKey, F::kValue, F::kValue}, 3, {}, 0};
    case TorchOp::kGet:
    case TorchOp::kDelete:
    case TorchOp::kWatchKey:
    case TorchOp::kQueuePop:
    case TorchOp::kQueueLen:
      return {{F::kKey}, 1, {}, 0};
    case TorchOp::kAdd:
    case TorchOp::kBarrier:
      return {{F::kKey, F::kI64}, 2, {}, 0};
    case TorchOp::kCheck:
    case TorchOp::kWait:
    case TorchOp::kMultiGet:
      return {{F::kCount}, 1, {F::kKey}, 1};
    case TorchOp::kMultiSet:
      return {{F::kCount}, 1, {F::kKey, F::kValue}, 2};
    case TorchOp::kNumKeys:
    case TorchOp::kCancelWait:
    case TorchOp::kList:
      return {};
  }
  return {};
}

// A string body is allocated as it arrives, never all at once from the length
// prefix: a client announcing 64 MiB and sending nothing costs no memory.
constexpr std::size_t kBodyReserveBytes = 64 * 1024;

}  // namespace

Dialect sniff(std::string_view b) {
  if (b.empty()) return Dialect::kNeedMore;
  const auto first = static_cast<unsigned char>(b[0]);
  if (first == static_cast<unsigned char>(kPreamble[0])) {
    const auto n = std::min<std::size_t>(b.size(), sizeof(kPreamble));
    if (b.substr(0, n) != std::string_view(kPreamble, n)) return Dialect::kUnknown;
    return n == sizeof(kPreamble) ? Dialect::kNative : Dialect::kNeedMore;
  }
  if (first == 0) {
    // torch 2.2+: VALIDATE(0) + magic CE F7 85 3C. torch 1.x, 2.0, 2.1: SET(0) +
    // u64 key length, whose low bytes would have to spell the magic: a 1 GB key,
    // never sent.
    static constexpr unsigned char kMagic[4] = {0xCE, 0xF7, 0x85, 0x3C};
    for (std::size_t i = 1; i < 5; ++i) {
      if (i >= b.size()) return Dialect::kNeedMore;
      if (static_cast<unsigned char>(b[i]) != kMagic[i - 1]) return Dialect::kTorchV1;
    }
    return Dialect::kTorchV2;
  }
  // Without VALIDATE: torch 1.x, 2.0 or 2.1; the server's configuration says which.
  if (first < kV2EarlyOps.size()) return Dialect::kTorchV1;
  return Dialect::kUnknown;
}

const char* dialect_name(Dialect d) {
  switch (d) {
    case Dialect::kNeedMore:
      return "undecided";
    case Dialect::kNative:
      return "ddp";
    case Dialect::kTorchV1:
      return "torch-tcpstore-v1";
    case Dialect::kTorchV2:
      return "torch-tcpstore-v2";
    case Dialect::kTorchV2Early:
      return "torch-tcpstore-v2-early";
    case Dialect::kUnknown:
      return "unknown";
  }
  return "unknown";
}

const char* torch_op_name(TorchOp op) {
  switch (op) {
    case TorchOp::kValidate:
      return "VALIDATE";
    case TorchOp::kSet:
      return "SET";
    case TorchOp::kCompareSet:
      return "COMPARE_SET";
    case TorchOp::kGet:
      return "GET";
    case TorchOp::kAdd:
      return "ADD";
    case TorchOp::kCheck:
      return "CHECK";
    case TorchOp::kWait:
      return "WAIT";
    case TorchOp::kNumKeys:
      return "GETNUMKEYS";
    case TorchOp::kWatchKey:
      return "WATCH_KEY";
    case TorchOp::kDelete:
      return "DELETE_KEY";
    case TorchOp::kAppend:
      return "APPEND";
    case TorchOp::kMultiGet:
      return "MULTI_GET";
    case TorchOp::kMultiSet:
      return "MULTI_SET";
    case TorchOp::kCancelWait:
      return "CANCEL_WAIT";
    case TorchOp::kPing:
      return "PING";
    case TorchOp::kQueuePush:
      return "QUEUE_PUSH";
    case TorchOp::kQueuePop:
      return "QUEUE_POP";
    case TorchOp::kQueueLen:
      return "QUEUE_LEN";
    case TorchOp::kList:
      return "LIST";
    case TorchOp::kBarrier:
      return "BARRIER";
  }
  return "UNKNOWN";
}

std::optional<TorchOp> op_of(Dialect dialect, std::uint8_t type) {
  switch (dialect) {
    case Dialect::kTorchV1:
      if (type < kV1Ops.size()) return kV1Ops[type];
      return std::nullopt;
    case Dialect::kTorchV2Early:
      if (type < kV2EarlyOps.size()) return kV2EarlyOps[type];
      return std::nullopt;
    case Dialect::kTorchV2:
      if (type < kV2Ops.size()) return kV2Ops[type];
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

TorchParser::TorchParser(Dialect dialect, TorchLimits limits) : dialect_(dialect), limits_(limits) {
  DDP_CHECK(dialect == Dialect::kTorchV1 || dialect == Dialect::kTorchV2 || dialect == Dialect::kTorchV2Early,
            "not a torch dialect");
}

std::optional<std::uint8_t> TorchParser::pending_type() const {
  if (!active_) return std::nullopt;
  return type_;
}

void TorchParser::begin(std::uint8_t type) {
  const auto op = op_of(dialect_, type);
  if (!op) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", type);
    // A torch 2.1 client read as 1.x/2.0 fails here at MULTI_GET, MULTI_SET or
    // CANCEL_WAIT (9..11): say what the operator has to change.
    const bool maybe_21 = dialect_ == Dialect::kTorchV1 && type < kV2EarlyOps.size();
    throw ProtocolError(std::string("unknown query type ") + std::to_string(type) + " (" + hex + ") for " +
                        dialect_name(dialect_) +
                        (maybe_21 ? " (torch 2.1 clients need torch_legacy_protocol=2.1)" : ""));
  }
  active_ = true;
  type_ = type;
  cmd_ = TorchCommand{};
  cmd_.op = *op;
  field_ = 0;
  repeat_left_ = 0;
  group_field_ = 0;
  in_command_ = 1;
  if (layout_of(cmd_.op).nfixed == 0) finish();
}

int TorchParser::current(std::uint8_t& kind) const {
  const auto l = layout_of(cmd_.op);
  if (field_ < l.nfixed) {
    kind = static_cast<std::uint8_t>(l.fixed[field_]);
    return 0;
  }
  if (repeat_left_ > 0) {
    kind = static_cast<std::uint8_t>(l.group[group_field_]);
    return 1;
  }
  return -1;
}

void TorchParser::advance() {
  std::uint8_t kind = 0;
  const int where = current(kind);
  if (where == 0) {
    ++field_;
  } else if (where == 1) {
    if (++group_field_ == layout_of(cmd_.op).ngroup) {
      group_field_ = 0;
      --repeat_left_;
    }
  }
  if (current(kind) < 0) finish();
}

void TorchParser::finish() {
  ready_.push_back(std::move(cmd_));
  cmd_ = TorchCommand{};
  active_ = false;
  in_command_ = 0;
}

void TorchParser::integer(std::uint64_t v) {
  std::uint8_t kind = 0;
  current(kind);
  switch (static_cast<F>(kind)) {
    case F::kU32:
      cmd_.word = static_cast<std::uint32_t>(v);
      if (cmd_.op == TorchOp::kValidate && cmd_.word != kValidationMagic) {
        throw ProtocolError("wrong VALIDATE magic");
      }
      break;
    case F::kI64:
      cmd_.delta = static_cast<std::int64_t>(v);
      break;
    case F::kCount: {
      if (v > limits_.max_keys_per_request) {
        throw ProtocolError("key count " + std::to_string(v) + " exceeds the limit of " +
                            std::to_string(limits_.max_keys_per_request));
      }
      cmd_.keys.reserve(std::min<std::uint64_t>(v, 1024));
      ++field_;  // the count is the last fixed field
      repeat_left_ = v;
      group_field_ = 0;
      std::uint8_t next = 0;
      if (current(next) < 0) finish();
      return;
    }
    case F::kKey:
    case F::kValue:
      break;  // string_length()'s
  }
  advance();
}

void TorchParser::string_length(std::uint64_t len) {
  std::uint8_t kind = 0;
  current(kind);
  const bool key = static_cast<F>(kind) == F::kKey;
  const auto max = key ? limits_.max_key_bytes : limits_.max_value_bytes;
  if (len > max) {
    throw ProtocolError(std::string(key ? "key" : "value") + " of " + std::to_string(len) +
                        " bytes exceeds the limit of " + std::to_string(max) + " in " +
                        torch_op_name(cmd_.op));
  }
  auto& list = key ? cmd_.keys : cmd_.values;
  list.emplace_back();
  if (len == 0) return advance();
  body_ = &list.back();
  body_->reserve(static_cast<std::size_t>(std::min<std::uint64_t>(len, kBodyReserveBytes)));
  body_left_ = len;
  in_body_ = true;
}

void TorchParser::count(std::size_t n) {
  in_command_ += n;
  if (in_command_ > limits_.max_command_bytes) {
    throw ProtocolError(std::string(torch_op_name(cmd_.op)) + " command exceeds " +
                        std::to_string(limits_.max_command_bytes) + " bytes");
  }
}

void TorchParser::feed(std::string_view data) {
  if (error_) return;  // the connection is being closed; nothing after the error counts
  std::size_t i = 0;
  try {
    while (i < data.size()) {
      if (!active_) {
        begin(static_cast<std::uint8_t>(data[i++]));
        continue;
      }
      if (in_body_) {
        const auto took = static_cast<std::size_t>(std::min<std::uint64_t>(body_left_, data.size() - i));
        body_->append(data.data() + i, took);
        i += took;
        count(took);
        body_left_ -= took;
        if (body_left_ == 0) {
          in_body_ = false;
          body_ = nullptr;
          advance();
        }
        continue;
      }
      // An integer, a count or a string's length prefix.
      std::uint8_t kind = 0;
      current(kind);
      const auto f = static_cast<F>(kind);
      const std::size_t width = f == F::kU32 ? 4 : 8;
      const auto took = std::min(width - scratch_len_, data.size() - i);
      std::memcpy(scratch_ + scratch_len_, data.data() + i, took);
      scratch_len_ += took;
      i += took;
      count(took);
      if (scratch_len_ < width) continue;
      std::uint64_t v = 0;
      for (std::size_t b = 0; b < width; ++b) v |= static_cast<std::uint64_t>(scratch_[b]) << (8 * b);
      scratch_len_ = 0;
      if (f == F::kKey || f == F::kValue) {
        string_length(v);
      } else {
        integer(v);
      }
    }
  } catch (const ProtocolError& e) {
    error_ = e.what();
  }
}

std::optional<TorchCommand> TorchParser::next() {
  if (ready_pos_ < ready_.size()) return std::move(ready_[ready_pos_++]);
  ready_.clear();
  ready_pos_ = 0;
  if (error_) throw ProtocolError(*error_);
  return std::nullopt;
}

void put_bytes(std::string& out, std::string_view value) {
  put_i64(out, static_cast<std::int64_t>(value.size()));
  out.append(value);
}

void put_i64(std::string& out, std::int64_t value) {
  auto u = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
}

void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void put_u8(std::string& out, std::uint8_t value) { out.push_back(static_cast<char>(value)); }

}  // namespace ddp::store::torch
