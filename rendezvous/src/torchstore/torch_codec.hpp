// PyTorch TCPStore wire protocol, server side: sniffing, request parsing and
// reply encoding. Three numberings exist (see docs/store-protocol.md; each
// verified with a real client's bytes, tests/unit/server/torch_captures/):
//   v1:       torch 1.x and 2.0 (1.13.1, 2.0.1) — no handshake, query types 0..8.
//   v2-early: torch 2.1 only (2.1.2) — no handshake, no WATCH_KEY, query types
//             0..11. Its first bytes look like v1's, so a server only speaks it
//             when configured to (it is never sniffed).
//   v2:       torch 2.2+ — opens with VALIDATE + magic (2.2.2: no PING;
//             2.15.0: PING next), query types 0..18
//             (queues 14..16 from 2.8, LIST 17 from 2.10, BARRIER 18 seen
//             from torch 2.15's client: key, i64 world size).
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
// sniff() answers kTorchV1 for every connection without VALIDATE; a server
// configured for torch 2.1's numbering parses those with kTorchV2Early.
enum class Dialect : std::uint8_t { kNeedMore, kNative, kTorchV1, kTorchV2, kUnknown, kTorchV2Early };

// Needs at most 5 bytes to decide; returns kNeedMore while it cannot.
Dialect sniff(std::string_view first_bytes);
const char* dialect_name(Dialect d);

inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;

// Operations, independent of the dialect's numbering.
enum class TorchOp : std::uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kWatchKey,
  kDelete,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kList,
  kBarrier,
};
const char* torch_op_name(TorchOp op);

struct TorchCommand {
  TorchOp op = TorchOp::kPing;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // set/append: [value]; compare_set: [expected, desired]
  std::int64_t delta = 0;           // add; barrier: the world size
  std::uint32_t word = 0;           // validate magic, ping nonce
};

struct TorchLimits {
  std::uint64_t max_key_bytes = 8 * 1024;
  std::uint64_t max_value_bytes = 64 * 1024 * 1024;
  std::uint64_t max_keys_per_request = 128 * 1024;
  // A command still incomplete past this many buffered bytes is rejected.
  std::uint64_t max_command_bytes = 80 * 1024 * 1024;
};

// The query-type numbering of a torch dialect; nullopt for a byte it does not know.
std::optional<TorchOp> op_of(Dialect dialect, std::uint8_t type);

// Incremental parser, the stable entry point for the server and fuzzers:
// feed() consumes bytes (any split of the stream), next() returns each complete
// command in order. The work is linear in the bytes fed: a field is read once,
// straight into the command being built, whatever the read sizes are.
//
// Bad input — an unknown query type (the message names the byte), a size over
// the limits (checked on the length prefix, before anything is allocated for
// the body), or a wrong VALIDATE magic — makes next() throw ddp::ProtocolError
// once the commands complete before it have been returned; bytes after it are
// ignored. Thread-safety: none.
class TorchParser {
 public:
  TorchParser(Dialect dialect, TorchLimits limits);
  void feed(std::string_view bytes);
  std::optional<TorchCommand> next();
  // Bytes of the command being parsed (0 between commands).
  std::size_t buffered() const { return in_command_; }
  // Query type byte of the command being parsed (for error logs), if any.
  std::optional<std::uint8_t> pending_type() const;

 private:
  void begin(std::uint8_t type);
  // The field just read is complete: step to the next one; finishes the command.
  void advance();
  void finish();
  // Adds `n` bytes to the command's size; throws past max_command_bytes.
  void count(std::size_t n);
  void integer(std::uint64_t v);
  void string_length(std::uint64_t len);
  // 0 fixed field, 1 repeated-group field, -1 none left; `kind` gets the field.
  int current(std::uint8_t& kind) const;

  Dialect dialect_;
  TorchLimits limits_;
  std::vector<TorchCommand> ready_;  // complete, not yet returned
  std::size_t ready_pos_ = 0;
  std::optional<std::string> error_;
  // The command being parsed.
  bool active_ = false;
  std::uint8_t type_ = 0;
  TorchCommand cmd_;
  std::size_t field_ = 0;          // index into the op's fixed fields
  std::uint64_t repeat_left_ = 0;  // group entries still to read after a count
  std::size_t group_field_ = 0;    // index into the repeated group
  // A field in progress: integer bytes so far, or a string's body.
  unsigned char scratch_[8] = {};
  std::size_t scratch_len_ = 0;
  bool in_body_ = false;
  std::uint64_t body_left_ = 0;
  std::string* body_ = nullptr;
  std::size_t in_command_ = 0;
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
