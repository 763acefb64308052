#include "ddp/store/protocol.hpp"

#include <cstring>

#include "ddp/common/error.hpp"

namespace ddp::store {
namespace {

// Little-endian writers. x86 and arm64 are little-endian, but the byte loop keeps
// the code honest and the compiler turns it into a single store; one append
// per field (a push_back per byte checked the capacity eight times).
template <typename T>
void put_le(std::string& out, T value) {
  auto u = static_cast<std::make_unsigned_t<T>>(value);
  char bytes[sizeof(T)];
  for (std::size_t i = 0; i < sizeof(T); ++i) bytes[i] = static_cast<char>((u >> (8 * i)) & 0xFF);
  out.append(bytes, sizeof(T));
}

void put_str(std::string& out, std::string_view s) {
  put_le<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}

  template <typename T>
  T get(const char* field) {
    need(sizeof(T), field);
    std::make_unsigned_t<T> u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      u |= static_cast<std::make_unsigned_t<T>>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    return static_cast<T>(u);
  }

  std::string str(std::uint32_t max, const char* field) {
    auto len = get<std::uint32_t>(field);
    if (len > max) {
      throw ProtocolError(std::string(field) + " of " + std::to_string(len) + " bytes exceeds the limit of " +
                          std::to_string(max));
    }
    need(len, field);
    std::string s(data_.substr(pos_, len));
    pos_ += len;
    return s;
  }

  // A count of elements, each at least `min_element_bytes` long: checked against the
  // limit and against the bytes left before the caller reserves anything.
  std::uint32_t count(std::uint32_t max, std::size_t min_element_bytes, const char* field) {
    auto n = get<std::uint32_t>(field);
    if (n > max) {
      throw ProtocolError(std::string(field) + " count " + std::to_string(n) + " exceeds the limit of " +
                          std::to_string(max));
    }
    if (static_cast<std::size_t>(n) * min_element_bytes > data_.size() - pos_) {
      throw ProtocolError(std::string("truncated frame: ") + field + " count " + std::to_string(n) +
                          " does not fit in the frame");
    }
    return n;
  }

  void finish() const {
    if (pos_ != data_.size()) {
      throw ProtocolError(std::to_string(data_.size() - pos_) + " trailing bytes after the message");
    }
  }

 private:
  void need(std::size_t n, const char* field) const {
    if (data_.size() - pos_ < n) throw ProtocolError(std::string("truncated frame reading ") + field);
  }

  std::string_view data_;
  std::size_t pos_ = 0;
};

void finish_frame(std::string& out, std::size_t start) {
  const auto body = static_cast<std::uint32_t>(out.size() - start - 4);
  for (int i = 0; i < 4; ++i) out[start + i] = static_cast<char>((body >> (8 * i)) & 0xFF);
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kTryGet:
      return "try_get";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compare_set";
    case Op::kDelete:
      return "delete";
    case Op::kCheck:
      return "check";
    case Op::kWait:
      return "wait";
    case Op::kMultiGet:
      return "multi_get";
    case Op::kMultiSet:
      return "multi_set";
    case Op::kAppend:
      return "append";
    case Op::kNumKeys:
      return "num_keys";
    case Op::kList:
      return "list";
    case Op::kLeaseGrant:
      return "lease_grant";
    case Op::kLeaseKeepAlive:
      return "lease_keepalive";
    case Op::kLeaseRevoke:
      return "lease_revoke";
    case Op::kWatch:
      return "watch";
    case Op::kCancel:
      return "cancel";
    case Op::kStat:
      return "stat";
    case Op::kPing:
      return "ping";
    case Op::kQueuePush:
      return "queue_push";
    case Op::kQueuePop:
      return "queue_pop";
    case Op::kQueueLen:
      return "queue_len";
    case Op::kBarrier:
      return "barrier";
    case Op::kJobs:
      return "jobs";
    case Op::kCount:
      return "count";
  }
  return "unknown";
}

const char* status_name(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kNotFound:
      return "not found";
    case Status::kTimeout:
      return "timed out";
    case Status::kBadRequest:
      return "bad request";
    case Status::kAuthFailed:
      return "authentication failed";
    case Status::kVersionMismatch:
      return "protocol version mismatch";
    case Status::kLimitExceeded:
      return "limit exceeded";
    case Status::kShuttingDown:
      return "server shutting down";
    case Status::kLeaseNotFound:
      return "lease not found";
    case Status::kNotANumber:
      return "value is not a number";
    case Status::kCancelled:
      return "cancelled";
    case Status::kCompacted:
      return "revision compacted";
    case Status::kEvent:
      return "event";
    case Status::kInternal:
      return "internal server error";
  }
  return "unknown status";
}

bool is_read_only(Op op) {
  switch (op) {
    case Op::kGet:
    case Op::kTryGet:
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
    case Op::kNumKeys:
    case Op::kList:
    case Op::kStat:
    case Op::kPing:
    case Op::kJobs:
    case Op::kCount:
      return true;
    default:
      return false;
  }
}

void encode_request(const Request& req, std::string& out) {
  const auto start = out.size();
  out.append(4, '\0');
  put_le<std::uint8_t>(out, static_cast<std::uint8_t>(req.op));
  put_le<std::uint32_t>(out, req.id);
  put_le<std::int64_t>(out, req.a);
  put_le<std::int64_t>(out, req.b);
  put_le<std::uint32_t>(out, static_cast<std::uint32_t>(req.keys.size()));
  for (const auto& k : req.keys) put_str(out, k);
  put_le<std::uint32_t>(out, static_cast<std::uint32_t>(req.values.size()));
  for (const auto& v : req.values) put_str(out, v);
  finish_frame(out, start);
}

void encode_response(const Response& resp, std::string& out) {
  const auto start = out.size();
  // The frame's size up front: one growth of `out` at most, not one per item.
  std::size_t size = 4 + 4 + 1 + 8 + 8 + 4 + resp.message.size() + 4;
  for (const auto& item : resp.items) size += 1 + 4 + item.key.size() + 4 + item.value.size() + 8;
  out.reserve(start + size);
  out.append(4, '\0');
  put_le<std::uint32_t>(out, resp.id);
  put_le<std::uint8_t>(out, static_cast<std::uint8_t>(resp.status));
  put_le<std::int64_t>(out, resp.revision);
  put_le<std::int64_t>(out, resp.num);
  put_str(out, resp.message);
  put_le<std::uint32_t>(out, static_cast<std::uint32_t>(resp.items.size()));
  for (const auto& item : resp.items) {
    put_le<std::uint8_t>(out, static_cast<std::uint8_t>(item.kind));
    put_str(out, item.key);
    put_str(out, item.value);
    put_le<std::int64_t>(out, item.revision);
  }
  finish_frame(out, start);
}

std::uint32_t decode_frame_length(std::string_view header) {
  Reader r(header.substr(0, 4));
  return r.get<std::uint32_t>("frame length");
}

Request decode_request(std::string_view body, const Limits& limits) {
  Reader r(body);
  Request req;
  const auto op = r.get<std::uint8_t>("op");
  if (op == 0 || op > kMaxOp) throw ProtocolError("unknown op " + std::to_string(op));
  req.op = static_cast<Op>(op);
  req.id = r.get<std::uint32_t>("request id");
  req.a = r.get<std::int64_t>("argument a");
  req.b = r.get<std::int64_t>("argument b");
  const auto nkeys = r.count(limits.max_keys_per_request, 4, "keys");
  req.keys.reserve(nkeys);
  for (std::uint32_t i = 0; i < nkeys; ++i) req.keys.push_back(r.str(limits.max_key_bytes, "key"));
  const auto nvalues = r.count(limits.max_keys_per_request, 4, "values");
  req.values.reserve(nvalues);
  for (std::uint32_t i = 0; i < nvalues; ++i) req.values.push_back(r.str(limits.max_value_bytes, "value"));
  r.finish();
  return req;
}

Response decode_response(std::string_view body, const Limits& limits) {
  Reader r(body);
  Response resp;
  resp.id = r.get<std::uint32_t>("request id");
  const auto status = r.get<std::uint8_t>("status");
  if (status > static_cast<std::uint8_t>(Status::kInternal))
    throw ProtocolError("unknown status " + std::to_string(status));
  resp.status = static_cast<Status>(status);
  resp.revision = r.get<std::int64_t>("revision");
  resp.num = r.get<std::int64_t>("num");
  resp.message = r.str(limits.max_value_bytes, "message");
  // A list response may legitimately hold more items than one request may name keys.
  const auto nitems = r.count(UINT32_MAX, 1 + 4 + 4 + 8, "items");
  resp.items.reserve(nitems);
  // The frame as if its delete runs were plain deletions (plain_deletion_bytes).
  std::uint64_t expanded_bytes = body.size();
  for (std::uint32_t i = 0; i < nitems; ++i) {
    Item item;
    const auto kind = r.get<std::uint8_t>("item kind");
    if (kind > static_cast<std::uint8_t>(ItemKind::kDeleteRuns))
      throw ProtocolError("unknown item kind " + std::to_string(kind));
    item.kind = static_cast<ItemKind>(kind);
    item.key = r.str(limits.max_key_bytes, "item key");
    item.value = r.str(limits.max_value_bytes, "item value");
    item.revision = r.get<std::int64_t>("item revision");
    if (item.kind == ItemKind::kDeleteRuns) {  // refused here, not when expanded
      expanded_bytes += plain_deletion_bytes(item);
      if (expanded_bytes > limits.max_frame_bytes) {
        throw ProtocolError("an EVENT frame whose delete runs stand for more keys than a frame of " +
                            std::to_string(limits.max_frame_bytes) +
                            " bytes can carry as plain deletions (a forged or corrupt frame)");
      }
    }
    resp.items.push_back(std::move(item));
  }
  r.finish();
  return resp;
}

}  // namespace ddp::store
