#include "etcd_codec.hpp"

#include <array>
#include <charconv>

#include "ddp/common/error.hpp"

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
  if (it->is_number()) return it->get<std::int64_t>();
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

bool parse_decimal(std::string_view text, std::int64_t& out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace ddp::store::etcd
