#include "torch_codec.hpp"

#include <array>

#include "ddp/common/error.hpp"
#include "ddp/store/protocol.hpp"

namespace ddp::store::torch {
namespace {

// Query-type numbering of each dialect; index = byte on the wire.
constexpr std::array<TorchOp, 9> kV1Ops = {
    TorchOp::kSet,   TorchOp::kCompareSet, TorchOp::kGet,      TorchOp::kAdd,   TorchOp::kCheck,
    TorchOp::kWait,  TorchOp::kNumKeys,    TorchOp::kWatchKey, TorchOp::kDelete};
constexpr std::array<TorchOp, 14> kV2Ops = {
    TorchOp::kValidate, TorchOp::kSet,     TorchOp::kCompareSet, TorchOp::kGet,
    TorchOp::kAdd,      TorchOp::kCheck,   TorchOp::kWait,       TorchOp::kNumKeys,
    TorchOp::kDelete,   TorchOp::kAppend,  TorchOp::kMultiGet,   TorchOp::kMultiSet,
    TorchOp::kCancelWait, TorchOp::kPing};

// Signals "the command is not complete yet" inside the parser.
struct NeedMore {};

class Cursor {
 public:
  Cursor(const std::string& buf, std::size_t pos) : buf_(buf), pos_(pos) {}
  std::size_t pos() const { return pos_; }

  template <typename T>
  T value() {
    if (buf_.size() - pos_ < sizeof(T)) throw NeedMore{};
    std::uint64_t u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      u |= static_cast<std::uint64_t>(static_cast<unsigned char>(buf_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    return static_cast<T>(u);
  }

  std::string bytes(std::uint64_t max, const char* what) {
    const auto len = value<std::uint64_t>();
    if (len > max) {
      throw ProtocolError(std::string(what) + " of " + std::to_string(len) +
                          " bytes exceeds the limit of " + std::to_string(max));
    }
    if (buf_.size() - pos_ < len) throw NeedMore{};
    std::string s = buf_.substr(pos_, len);
    pos_ += len;
    return s;
  }

  std::uint64_t count(std::uint64_t max) {
    const auto n = value<std::uint64_t>();
    if (n > max) {
      throw ProtocolError("key count " + std::to_string(n) + " exceeds the limit of " +
                          std::to_string(max));
    }
    return n;
  }

 private:
  const std::string& buf_;
  std::size_t pos_;
};

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
    // torch 2.x: VALIDATE(0) + magic CE F7 85 3C. torch 1.x: SET(0) + u64 key length,
    // whose low bytes would have to spell the magic: a 1 GB key, never sent.
    static constexpr unsigned char kMagic[4] = {0xCE, 0xF7, 0x85, 0x3C};
    for (std::size_t i = 1; i < 5; ++i) {
      if (i >= b.size()) return Dialect::kNeedMore;
      if (static_cast<unsigned char>(b[i]) != kMagic[i - 1]) return Dialect::kTorchV1;
    }
    return Dialect::kTorchV2;
  }
  if (first < kV1Ops.size()) return Dialect::kTorchV1;
  return Dialect::kUnknown;
}

const char* dialect_name(Dialect d) {
  switch (d) {
    case Dialect::kNeedMore: return "undecided";
    case Dialect::kNative: return "ddp";
    case Dialect::kTorchV1: return "torch-tcpstore-v1";
    case Dialect::kTorchV2: return "torch-tcpstore-v2";
    case Dialect::kUnknown: return "unknown";
  }
  return "unknown";
}

const char* torch_op_name(TorchOp op) {
  switch (op) {
    case TorchOp::kValidate: return "VALIDATE";
    case TorchOp::kSet: return "SET";
    case TorchOp::kCompareSet: return "COMPARE_SET";
    case TorchOp::kGet: return "GET";
    case TorchOp::kAdd: return "ADD";
    case TorchOp::kCheck: return "CHECK";
    case TorchOp::kWait: return "WAIT";
    case TorchOp::kNumKeys: return "GETNUMKEYS";
    case TorchOp::kWatchKey: return "WATCH_KEY";
    case TorchOp::kDelete: return "DELETE_KEY";
    case TorchOp::kAppend: return "APPEND";
    case TorchOp::kMultiGet: return "MULTI_GET";
    case TorchOp::kMultiSet: return "MULTI_SET";
    case TorchOp::kCancelWait: return "CANCEL_WAIT";
    case TorchOp::kPing: return "PING";
  }
  return "UNKNOWN";
}

TorchParser::TorchParser(Dialect dialect, TorchLimits limits) : dialect_(dialect), limits_(limits) {
  DDP_CHECK(dialect == Dialect::kTorchV1 || dialect == Dialect::kTorchV2, "not a torch dialect");
}

std::optional<std::uint8_t> TorchParser::pending_type() const {
  if (pos_ >= buffer_.size()) return std::nullopt;
  return static_cast<std::uint8_t>(buffer_[pos_]);
}

std::optional<TorchCommand> TorchParser::next() {
  if (pos_ >= buffer_.size()) return std::nullopt;
  const auto type = static_cast<std::uint8_t>(buffer_[pos_]);
  TorchCommand cmd;
  if (dialect_ == Dialect::kTorchV1) {
    if (type >= kV1Ops.size())
      throw ProtocolError("unknown torch 1.x query type " + std::to_string(type));
    cmd.op = kV1Ops[type];
  } else {
    if (type >= kV2Ops.size())
      throw ProtocolError("unknown torch 2.x query type " + std::to_string(type));
    cmd.op = kV2Ops[type];
  }
  Cursor c(buffer_, pos_ + 1);
  try {
    switch (cmd.op) {
      case TorchOp::kValidate:
        cmd.word = c.value<std::uint32_t>();
        if (cmd.word != kValidationMagic) throw ProtocolError("wrong VALIDATE magic");
        break;
      case TorchOp::kPing:
        cmd.word = c.value<std::uint32_t>();
        break;
      case TorchOp::kSet:
      case TorchOp::kAppend:
        cmd.keys.push_back(c.bytes(limits_.max_key_bytes, "key"));
        cmd.values.push_back(c.bytes(limits_.max_value_bytes, "value"));
        break;
      case TorchOp::kCompareSet:
        cmd.keys.push_back(c.bytes(limits_.max_key_bytes, "key"));
        cmd.values.push_back(c.bytes(limits_.max_value_bytes, "expected value"));
        cmd.values.push_back(c.bytes(limits_.max_value_bytes, "desired value"));
        break;
      case TorchOp::kGet:
      case TorchOp::kDelete:
      case TorchOp::kWatchKey:
        cmd.keys.push_back(c.bytes(limits_.max_key_bytes, "key"));
        break;
      case TorchOp::kAdd:
        cmd.keys.push_back(c.bytes(limits_.max_key_bytes, "key"));
        cmd.delta = c.value<std::int64_t>();
        break;
      case TorchOp::kCheck:
      case TorchOp::kWait:
      case TorchOp::kMultiGet: {
        const auto n = c.count(limits_.max_keys_per_request);
        for (std::uint64_t i = 0; i < n; ++i) cmd.keys.push_back(c.bytes(limits_.max_key_bytes, "key"));
        break;
      }
      case TorchOp::kMultiSet: {
        const auto n = c.count(limits_.max_keys_per_request);
        for (std::uint64_t i = 0; i < n; ++i) {
          cmd.keys.push_back(c.bytes(limits_.max_key_bytes, "key"));
          cmd.values.push_back(c.bytes(limits_.max_value_bytes, "value"));
        }
        break;
      }
      case TorchOp::kNumKeys:
      case TorchOp::kCancelWait:
        break;
    }
  } catch (const NeedMore&) {
    if (buffered() > limits_.max_command_bytes) {
      throw ProtocolError(std::string("incomplete ") + torch_op_name(cmd.op) + " command exceeds " +
                          std::to_string(limits_.max_command_bytes) + " bytes");
    }
    return std::nullopt;
  }
  pos_ = c.pos();
  // Drop consumed bytes once they dominate the buffer, keeping appends cheap.
  if (pos_ > 4096 && pos_ * 2 > buffer_.size()) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  return cmd;
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
