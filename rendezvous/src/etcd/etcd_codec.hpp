// The JSON gateway's encoding of etcd's protobuf messages: bytes fields are
// base64, int64 fields are JSON strings, and fields at their default value
// (0, false, empty) are left out of answers entirely.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::store::etcd {

std::string base64_encode(std::string_view bytes);
// Throws ProtocolError on a malformed input (etcd never sends one).
std::string base64_decode(std::string_view text);

// The smallest key greater than every key starting with `prefix`: etcd's
// range_end for a prefix scan. "\0" (every key) for an empty or all-0xff prefix.
std::string prefix_end(std::string_view prefix);

// An int64 field that may be a JSON string ("42"), a number, or absent (0).
std::int64_t get_i64(const nlohmann::json& obj, const char* field);
// A bytes field (base64), "" when absent.
std::string get_bytes(const nlohmann::json& obj, const char* field);

// Parses the decimal text torch's add() keeps; nullopt when not exactly an int64.
bool parse_decimal(std::string_view text, std::int64_t& out);

// One line of /v3/watch's stream. A member, or a proxy in front of it, sends
// these, so every field is checked for its type: nothing of nlohmann's
// exceptions can reach the watch thread.
struct WatchMessage {
  std::string error;        // etcd's "error": the stream is over
  bool has_result = false;  // false: nothing for the watch (a keep-alive)
  bool created = false;
  Revision header_revision = 0;  // of a "created" message
  Revision compact_revision = 0;
  bool canceled = false;
  std::string cancel_reason;
  std::vector<WatchEvent> events;  // keys less their first `strip` bytes
};
// Throws ProtocolError whose what() follows "etcd at HOST:PORT " ("sent a
// watch message that nests 100001 levels deep; ...", "sent a malformed watch
// message: ..."), json_input::kEtcdReply bounding it.
WatchMessage decode_watch_message(std::string_view line, std::size_t strip);

}  // namespace ddp::store::etcd
