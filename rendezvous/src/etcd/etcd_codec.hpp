// The JSON gateway's encoding of etcd's protobuf messages: bytes fields are
// base64, int64 fields are JSON strings, and fields at their default value
// (0, false, empty) are left out of answers entirely.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

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

}  // namespace ddp::store::etcd
