#include "etcd_codec.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::store::etcd {

namespace {
constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int, 256> make_reverse() {
  std::array<int, 256> rev{};
  for (auto& r : rev) r = -1;
  for (std::size_t i = 0; i < kAlphabet.size(); ++i)
    rev[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int>(i);
  return rev;
}
constexpr auto kReverse = make_reverse();
}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const auto n = (static_cast<unsigned char>(bytes[i]) << 16) |
                   (static_cast<unsigned char>(bytes[i + 1]) << 8) | static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  const auto rest = bytes.size() - i;
  if (rest > 0) {
    unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  unsigned buf = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = kReverse[static_cast<unsigned char>(c)];
    if (v < 0) throw ProtocolError("etcd sent malformed base64");
    buf = (buf << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xff);
    }
  }
  return out;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

std::int64_t get_i64(const nlohmann::json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return 0;
  // Not a float: converting one out of int64's range is undefined.
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    std::int64_t v = 0;
    if (parse_decimal(it->get_ref<const std::string&>(), v)) return v;
  }
  throw ProtocolError(std::string("etcd sent a non-integer '") + field + "'");
}

std::string get_bytes(const nlohmann::json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end() || !it->is_string()) return {};
  return base64_decode(it->get_ref<const std::string&>());
}

namespace {

// Why a field is refused; decode_watch_message says of what.
ProtocolError malformed(const std::string& why) { return ProtocolError(why); }

bool flag(const nlohmann::json& obj, const char* field) {
  const auto it = obj.find(field);
  if (it == obj.end()) return false;
  if (!it->is_boolean()) throw malformed(std::string("'") + field + "' is not a boolean");
  return it->get<bool>();
}

WatchMessage decode_watch_fields(const nlohmann::json& msg, std::size_t strip) {
  WatchMessage out;
  if (const auto err = msg.find("error"); err != msg.end()) {
    out.error = err->is_string() ? err->get<std::string>() : err->dump();
    return out;
  }
  const auto it = msg.find("result");
  if (it == msg.end()) return out;
  const nlohmann::json& r = *it;
  if (!r.is_object()) throw malformed("'result' is not an object");
  out.has_result = true;
  out.created = flag(r, "created");
  if (const auto header = r.find("header"); header != r.end()) {
    if (!header->is_object()) throw malformed("'header' is not an object");
    out.header_revision = get_i64(*header, "revision");
  }
  out.compact_revision = get_i64(r, "compact_revision");
  out.canceled = flag(r, "canceled");
  if (const auto reason = r.find("cancel_reason"); reason != r.end() && reason->is_string()) {
    out.cancel_reason = reason->get<std::string>();
  }
  const auto events = r.find("events");
  if (events == r.end()) return out;
  if (!events->is_array()) throw malformed("'events' is not an array");
  for (const auto& ev : *events) {
    const auto kv = ev.is_object() ? ev.find("kv") : ev.end();
    if (kv == ev.end() || !kv->is_object()) throw malformed("an event has no 'kv' object");
    const auto type = ev.find("type");
    WatchEvent e;
    e.type = type != ev.end() && *type == "DELETE" ? EventType::kDelete : EventType::kPut;
    e.key = get_bytes(*kv, "key");
    e.key.erase(0, std::min(strip, e.key.size()));
    e.value = get_bytes(*kv, "value");
    e.revision = get_i64(*kv, "mod_revision");
    out.events.push_back(std::move(e));
  }
  return out;
}

}  // namespace

WatchMessage decode_watch_message(std::string_view line, std::size_t strip) {
  nlohmann::json msg;
  try {
    msg = parse_json(line, json_input::kEtcdReply);
  } catch (const JsonError& e) {
    throw ProtocolError(std::string("sent a watch message that ") + e.what());
  }
  try {
    if (!msg.is_object()) throw ProtocolError("not a JSON object");
    return decode_watch_fields(msg, strip);
  } catch (const ProtocolError& e) {  // a field of the wrong type, or one get_i64 or base64_decode refused
    throw ProtocolError(std::string("sent a malformed watch message: ") + e.what());
  }
}

bool parse_decimal(std::string_view text, std::int64_t& out) {
  const auto v = parse_int<std::int64_t>(text);
  if (v) out = *v;
  return v.has_value();
}

}  // namespace ddp::store::etcd
