// The native store protocol, shared by client and server. docs/store-protocol.md
// is the prose version of this file; keep them in step.
//
// A connection opens with the 4-byte preamble kPreamble (its first byte 0xDD can
// never start a PyTorch TCPStore request, so a server can sniff the protocol),
// then carries frames both ways:
//
//   frame    = u32 length (little-endian, of the body) | body
//   request  = u8 op | u32 id | i64 a | i64 b | u32 nkeys | nkeys x str
//                                             | u32 nvalues | nvalues x str
//   response = u32 id | u8 status | i64 revision | i64 num | str message
//                     | u32 nitems | nitems x item
//   item     = u8 kind | str key | str value | i64 revision
//   str      = u32 length | bytes
//
// Every request and response has this one shape; what `a`, `b`, keys, values,
// `num` and items mean depends on the op (see Op). One uniform layout keeps the
// codec, its limit checks and its fuzz surface in one small place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddp::store {

inline constexpr char kPreamble[4] = {'\xDD', 'D', 'P', 'S'};
inline constexpr std::uint32_t kProtocolVersion = 1;

enum class Op : std::uint8_t {
  kHello = 1,            // a=protocol version, values[0]=token (may be empty). num=server version
  kSet = 2,              // keys[0], values[0], a=lease id (0: none), b=flags (kSetQuiet)
  kGet = 3,              // keys[0], b=timeout ms (<0: forever). Waits for the key. items[0]
  kTryGet = 4,           // keys[0]. NOT_FOUND or items[0]
  kAdd = 5,              // keys[0], b=delta. num=new value; value stored as decimal text
  kCompareSet = 6,       // keys[0], values[0]=expected, values[1]=desired, a=lease.
                         // items[0].value = value after the call; num=1 when swapped.
                         // Missing key and empty expected: creates. Missing key and
                         // non-empty expected: returns expected, sets nothing (torch).
  kDelete = 7,           // keys (one or more). num=number deleted
  kCheck = 8,            // keys. num=1 when all exist
  kWait = 9,             // keys, b=timeout ms (<0: forever). OK once all exist, else TIMEOUT
  kMultiGet = 10,        // keys. one item per key: kind kPresent/kMissing
  kMultiSet = 11,        // keys, values (same count), a=lease
  kAppend = 12,          // keys[0], values[0]. num=new length
  kNumKeys = 13,         // num=number of keys
  kList = 14,            // keys[0]=prefix. items (sorted by key); revision=as of the read
  kLeaseGrant = 15,      // b=ttl ms, a=flags (kLeaseBindToConnection). num=lease id
  kLeaseKeepAlive = 16,  // a=lease id. num=ttl ms. LEASE_NOT_FOUND when expired
  kLeaseRevoke = 17,     // a=lease id. Deletes its keys
  kWatch = 18,           // keys[0]=prefix, b=from revision (0: from now). OK ack, then
                         // kEvent responses with the same id, items kPut/kDelete
  kCancel = 19,          // a=id of a pending get/wait/watch on this connection, b=flags (kCancelQuiet)
  kStat = 20,            // items: key=name, value=decimal text
  kPing = 21,            // no fields
  // PyTorch TCPStore's queues (torch 2.8+), a namespace of their own beside the
  // keys; native so that a proxy can carry a torch client's queue ops.
  kQueuePush = 22,  // keys[0]=queue, values[0]. num=length after
  kQueuePop = 23,   // keys[0]=queue. num=length before; items[0]=value when there was one
  kQueueLen = 24,   // keys[0]=queue. num=length
  // PyTorch TCPStore's BARRIER (Store::barrier): adds 1 to the counter keys[0]
  // (decimal text, as kAdd) and answers OK, num=the count, once the count
  // reaches a (the world size); b=timeout ms (<0: forever), then TIMEOUT. As
  // in torch's server, every arrival stays counted (a timed-out one too) and
  // the counter never resets.
  kBarrier = 25,
  // The ddprun jobs in the store (ddp-store jobs): keys[0] = a run id, or no
  // key for every job. items: one per job, key = run id, value = its row as a
  // JSON object (docs/store-protocol.md); num = the number of items; message
  // "truncated" when more jobs exist than one answer lists. The server reads
  // the key space in slices between other requests, so the answer may come
  // after later requests' answers.
  kJobs = 26,
  // Counts the keys under keys[0] (a prefix) without reading their values:
  // num = the count, revision = as of the read. a = kCountByChild: also one
  // item per child of the prefix, sorted: key = the part of a key after the
  // prefix up to and including its first '/' (the whole rest when it has
  // none), value = how many keys that child holds, as decimal text.
  kCount = 27,
};
inline constexpr std::uint8_t kMaxOp = 27;

// kCount flag (a): count per child of the prefix as well.
inline constexpr std::int64_t kCountByChild = 1;

// kSet flag (b): no answer when the set succeeds; a failure is answered. The
// client learns of the success from the answer to a request it wrote after
// the set on the same connection: requests are applied in order, so the set's
// failure would have been answered first. It spares the server a send where
// the set is followed by a request answered later (a blocked get). A server
// that predates the flag ignores b and answers, which such a client reads as
// well.
inline constexpr std::int64_t kSetQuiet = 1;

// kLeaseGrant flag: the lease is also revoked when the connection that granted
// it closes (the peer's kernel closed it: the process died or let go), so a
// killed agent is noticed at once instead of after the TTL. Not when the
// server itself stops: a restarted daemon restores leases with their TTL.
inline constexpr std::int64_t kLeaseBindToConnection = 1;

// kWatch flag (a): this client reads kDeleteRuns items. A server that predates
// the flag ignores it and sends one kDelete item per key, which such a client
// reads as well; a client without it never gets a kDeleteRuns item.
inline constexpr std::int64_t kWatchDeleteRuns = 1;
// kWatch flag (a): no OK ack; events and a refusal (COMPACTED, BAD_REQUEST,
// LIMIT_EXCEEDED) come as ever. For a watch from a given revision, whose start
// needs no ack's revision: the client does not wait for it. A server that
// predates the flag acks, which such a client ignores.
inline constexpr std::int64_t kWatchQuiet = 2;
// kCancel flag (b): no answer to the cancel, nor CANCELLED to the request it
// ends: for a client that waits for neither (a watch's end). A server that
// predates the flag answers both, which such a client drops.
inline constexpr std::int64_t kCancelQuiet = 1;
// The most keys one kDeleteRuns item stands for: the server splits bigger
// groups, and a client refuses an item that claims more (ProtocolError) before
// building any key.
inline constexpr std::uint64_t kMaxKeysPerDeleteRuns = 65536;

// The longest lease TTL a server grants (kLeaseGrant's b), one year. Leases
// stand for a live agent or worker and are kept alive every few seconds; a
// TTL beyond a year is a unit mistake (seconds given as ms twice over, or a
// sentinel such as INT64_MAX), refused as BAD_REQUEST. Clients check their
// own settings against it to name the flag instead.
inline constexpr std::int64_t kMaxLeaseTtlMs = 365LL * 24 * 3600 * 1000;

enum class Status : std::uint8_t {
  kOk = 0,
  kNotFound = 1,
  kTimeout = 2,
  kBadRequest = 3,
  kAuthFailed = 4,
  kVersionMismatch = 5,
  kLimitExceeded = 6,
  kShuttingDown = 7,
  kLeaseNotFound = 8,
  kNotANumber = 9,
  kCancelled = 10,
  kCompacted = 11,  // watch from a revision older than the server's history
  kEvent = 12,      // a watch event (streamed; not the end of the request)
  kInternal = 13,
};

// kDeleteRuns goes only to a watch that asked with kWatchDeleteRuns: several
// deletions of one revision in one item. key = a stem, value = ascending
// decimal runs ("0-4999,5001,5003-9999"); it stands for deleting stem + n for
// every n in the runs (docs/store-protocol.md, "Watches").
enum class ItemKind : std::uint8_t { kPresent = 0, kMissing = 1, kPut = 2, kDelete = 3, kDeleteRuns = 4 };

// Sizes checked before anything is allocated. Defaults for server and client;
// the server can be configured tighter.
struct Limits {
  std::uint32_t max_key_bytes = 8 * 1024;            // torch's libuv server uses 8 KiB
  std::uint32_t max_value_bytes = 64 * 1024 * 1024;  // checkpoints of metadata, not tensors
  std::uint32_t max_frame_bytes = 80 * 1024 * 1024;  // a value plus headroom
  std::uint32_t max_keys_per_request = 128 * 1024;
  std::uint32_t max_pending_per_connection = 4096;  // blocked gets, waits and watches
};

struct Request {
  Op op = Op::kPing;
  std::uint32_t id = 0;
  std::int64_t a = 0;
  std::int64_t b = 0;
  std::vector<std::string> keys;
  std::vector<std::string> values;
};

struct Item {
  ItemKind kind = ItemKind::kPresent;
  std::string key;
  std::string value;
  std::int64_t revision = 0;
};

struct Response {
  std::uint32_t id = 0;
  Status status = Status::kOk;
  std::int64_t revision = 0;
  std::int64_t num = 0;
  std::string message;
  std::vector<Item> items;
};

const char* op_name(Op op);
// Ops that never change state: the server serves them while its log refuses
// writes, and a client may send them again after a lost answer.
bool is_read_only(Op op);
const char* status_name(Status status);

// Encoders append one whole frame (length prefix included) to `out`.
void encode_request(const Request& req, std::string& out);
void encode_response(const Response& resp, std::string& out);

// Reads the u32 frame length at the start of `header` (4 bytes).
std::uint32_t decode_frame_length(std::string_view header);

// Decoders take one frame body (without its length prefix). They throw
// ddp::ProtocolError on truncation, trailing bytes, an unknown op or status, or
// a size beyond `limits`; the check happens before any allocation.
Request decode_request(std::string_view body, const Limits& limits);
Response decode_response(std::string_view body, const Limits& limits);

// kDeleteRuns (delete_runs.cpp). compact_deletions() rewrites one revision's
// event items for a watch with kWatchDeleteRuns: the kDelete items whose keys
// are one stem followed by a canonical decimal number (no sign, no leading
// zero, at most 18 digits), two or more per stem, become kDeleteRuns items
// placed where the stem's first deletion was; every other item keeps its place.
// A mass lease expiry of N agents' "node/<rank>" keys is then one item per
// watcher instead of N.
std::vector<Item> compact_deletions(std::vector<Item> items);
// The runs of a kDeleteRuns value as inclusive [first, last] pairs, ascending
// and disjoint. ProtocolError when malformed or standing for more than
// kMaxKeysPerDeleteRuns keys.
std::vector<std::pair<std::int64_t, std::int64_t>> parse_delete_runs(std::string_view value);
// Number of keys the item stands for (1 for a kDelete item, 0 for a put).
std::uint64_t deletions_in(const Item& item);
// The bytes the kDeleteRuns item's deletions would take on the wire as plain
// kDelete items (0 for an item of another kind). decode_response() refuses a
// frame whose runs would make it, so expanded, longer than max_frame_bytes:
// delete runs never let a frame stand for more keys than a frame without them
// could carry, so one small frame cannot make a client build millions of keys.
std::uint64_t plain_deletion_bytes(const Item& item);
// The kDelete items a kDeleteRuns item stands for (the item itself when it is
// of another kind), keys ascending by number.
std::vector<Item> expand_delete_runs(Item item);

}  // namespace ddp::store
