// PyTorch TCPStore wire protocol, server side: sniffing, request parsing and
// reply encoding. Two dialects exist (see docs/store-protocol.md):
//   v1: torch 1.x (verified with 1.13) — no handshake, query types 0..8.
//   v2: torch 2.x — opens with VALIDATE + magic, query types 0..13.
// Integers are little-endian (x86 and arm64 hosts); strings and byte values are
// u64 length + bytes. Pure code, no sockets: the store session feeds it bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::store::torch {

// What the first bytes of a connection say it speaks.
enum class Dialect : std::uint8_t { kNeedMore, kNative, kTorchV1, kTorchV2, kUnknown };

// Needs at most 5 bytes to decide; returns kNeedMore while it cannot.
Dialect sniff(std::string_view first_bytes);
const char* dialect_name(Dialect d);

inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;

// Operations, independent of the dialect's numbering.
enum class TorchOp : std::uint8_t {
  kValidate, kSet, kCompareSet, kGet, kAdd, kCheck, kWait, kNumKeys,
  kWatchKey, kDelete, kAppend, kMultiGet, kMultiSet, kCancelWait, kPing,
};
const char* torch_op_name(TorchOp op);

struct TorchCommand {
  TorchOp op = TorchOp::kPing;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // set/append: [value]; compare_set: [expected, desired]
  std::int64_t delta = 0;           // add
  std::uint32_t word = 0;           // validate magic, ping nonce
};

struct TorchLimits {
  std::uint64_t max_key_bytes = 8 * 1024;
  std::uint64_t max_value_bytes = 64 * 1024 * 1024;
  std::uint64_t max_keys_per_request = 128 * 1024;
  // A command still incomplete past this many buffered bytes is rejected.
  std::uint64_t max_command_bytes = 80 * 1024 * 1024;
};

// Incremental parser: feed() appends bytes, next() returns each complete command
// in order. Throws ddp::ProtocolError for an unknown query type (the message names
// the byte), a size over the limits, or (v2) a wrong validation magic. A partial
// command stays buffered; the buffer never holds more than one command plus what
// the socket delivered, because sizes are checked before waiting for the body.
class TorchParser {
 public:
  TorchParser(Dialect dialect, TorchLimits limits);
  void feed(std::string_view bytes) { buffer_.append(bytes); }
  std::optional<TorchCommand> next();
  std::size_t buffered() const { return buffer_.size() - pos_; }
  // Query type byte of the command being parsed (for error logs), if any.
  std::optional<std::uint8_t> pending_type() const;

 private:
  Dialect dialect_;
  TorchLimits limits_;
  std::string buffer_;
  std::size_t pos_ = 0;
};

// Reply encoders (append to `out`).
void put_bytes(std::string& out, std::string_view value);  // u64 length + bytes
void put_i64(std::string& out, std::int64_t value);
void put_u32(std::string& out, std::uint32_t value);
void put_u8(std::string& out, std::uint8_t value);

// Reply bytes of CHECK and WAIT.
inline constexpr std::uint8_t kCheckReady = 0;
inline constexpr std::uint8_t kCheckNotReady = 1;
inline constexpr std::uint8_t kWaitStopWaiting = 0;
inline constexpr std::uint8_t kWaitCanceled = 1;
inline constexpr std::uint8_t kWatchCallbackRegistered = 3;

}  // namespace ddp::store::torch
