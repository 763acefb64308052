// libFuzzer target: the shared reader of outside JSON (parse_json) and the
// terminal escaping of outside text (printable). Input: any bytes; the first
// picks the depth bound. Findings: a crash or sanitizer report (a deep value
// that overflows the stack in a later dump, copy or compare), an exception
// other than JsonError, a value past its bound, or printable() output that
// holds a control byte or does not read back to the input.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ddp/common/json_input.hpp"
#include "ddp/common/printable.hpp"

namespace {

std::size_t depth_of(const nlohmann::json& j) {
  std::size_t deepest = 0;
  if (j.is_structured()) {
    for (const auto& child : j) deepest = std::max(deepest, depth_of(child));
    return deepest + 1;
  }
  return 0;
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  __builtin_trap();  // printable() writes lowercase hex digits only
}

// printable()'s escapes back to bytes: \\ \n \t \r \xHH, and \uHHHH /
// \UHHHHHHHH as UTF-8.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    const char k = s.at(++i);
    if (k == '\\' || k == 'n' || k == 't' || k == 'r') {
      out += k == '\\' ? '\\' : k == 'n' ? '\n' : k == 't' ? '\t' : '\r';
    } else if (k == 'x') {
      out += static_cast<char>(hex(s.at(i + 1)) * 16 + hex(s.at(i + 2)));
      i += 2;
    } else if (k == 'u' || k == 'U') {
      const std::size_t n = k == 'u' ? 4 : 8;
      char32_t cp = 0;
      for (std::size_t d = 1; d <= n; ++d) cp = cp * 16 + static_cast<char32_t>(hex(s.at(i + d)));
      i += n;
      // Re-encode as UTF-8: escaped code points are C1 controls and format characters.
      if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      }
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      __builtin_trap();  // an escape printable() never writes
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const ddp::JsonLimits limits{2048, 1 + data[0] % 8u};
  nlohmann::json j;
  bool accepted = true;
  try {
    j = ddp::parse_json(text, limits);
  } catch (const ddp::JsonError&) {
    accepted = false;
  }
  if (accepted) {
    if (depth_of(j) > limits.max_depth) __builtin_trap();
    const nlohmann::json copy = j;
    if (!(copy == j)) __builtin_trap();
    // What was accepted dumps, and that reads back within the same depth bound
    // (compared as text: an out-of-range float reads as infinity, dumped as null).
    const auto dumped = j.dump();
    const auto again = ddp::try_parse_json(dumped, {dumped.size(), limits.max_depth});
    if (again.is_discarded() || again.dump() != dumped) __builtin_trap();
  }
  std::string why;
  (void)ddp::try_parse_json(text, ddp::json_input::kFileTimerRequest, &why);

  for (const auto mode : {ddp::Newlines::kEscape, ddp::Newlines::kKeep}) {
    const auto shown = ddp::printable(text, mode);
    for (const char c : shown) {
      const auto b = static_cast<unsigned char>(c);
      const bool kept = mode == ddp::Newlines::kKeep && (c == '\n' || c == '\t');
      if ((b < 0x20 && !kept) || b == 0x7f) __builtin_trap();
    }
    if (unescape(shown) != text) __builtin_trap();
  }
  return 0;
}
