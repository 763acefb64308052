// Hand-written rather than libbsd's strvis(3): that one decides what prints
// by the process's locale (a C locale escapes every non-ASCII byte, names in
// any other script included) and knows nothing of the format characters.
#include "ddp/common/printable.hpp"

#include <cstdio>

namespace ddp {
namespace {

// Length of the valid UTF-8 sequence `s` starts with, its code point in `cp`;
// 0 when it does not start with one (a stray continuation byte, a truncated,
// overlong or surrogate sequence, past U+10FFFF).
std::size_t utf8_sequence(std::string_view s, char32_t& cp) {
  const auto lead = static_cast<unsigned char>(s[0]);
  std::size_t len = 0;
  char32_t least = 0;
  if (lead < 0x80) {
    cp = lead;
    return 1;
  }
  if ((lead & 0xe0) == 0xc0) {
    len = 2;
    least = 0x80;
  } else if ((lead & 0xf0) == 0xe0) {
    len = 3;
    least = 0x800;
  } else if ((lead & 0xf8) == 0xf0) {
    len = 4;
    least = 0x10000;
  } else {
    return 0;
  }
  cp = lead & (0x7fu >> len);  // the lead byte's payload bits
  if (s.size() < len) return 0;
  for (std::size_t i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

// Code points that print nothing but that a terminal or a reader acts on:
// C1 controls (0x9b is a CSI on some terminals), the bidirectional marks and
// overrides that reorder what follows, zero-width characters, line and
// paragraph separators, the byte-order mark, annotation and tag characters.
bool invisible(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff ||
         (cp >= 0xfff9 && cp <= 0xfffb) || (cp >= 0xe0000 && cp <= 0xe007f);
}

void append_hex(std::string& out, const char* format, unsigned value) {
  char buf[16];
  const int n = std::snprintf(buf, sizeof buf, format, value);
  out.append(buf, static_cast<std::size_t>(n));
}

}  // namespace

std::string printable(std::string_view bytes, Newlines newlines) {
  std::string out;
  out.reserve(bytes.size());
  const bool keep = newlines == Newlines::kKeep;
  while (!bytes.empty()) {
    char32_t cp = 0;
    const std::size_t len = utf8_sequence(bytes, cp);
    if (len == 0) {
      append_hex(out, "\\x%02x", static_cast<unsigned char>(bytes[0]));
      bytes.remove_prefix(1);
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += keep ? "\n" : "\\n";
    } else if (cp == '\t') {
      out += keep ? "\t" : "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7f) {
      append_hex(out, "\\x%02x", static_cast<unsigned>(cp));
    } else if (invisible(cp)) {
      append_hex(out, cp > 0xffff ? "\\U%08x" : "\\u%04x", static_cast<unsigned>(cp));
    } else {
      out.append(bytes.substr(0, len));
    }
    bytes.remove_prefix(len);
  }
  return out;
}

bool needs_escape(std::string_view text) {
  while (!text.empty()) {
    const auto byte = static_cast<unsigned char>(text[0]);
    if (byte >= 0x20 && byte < 0x7f) {  // the usual case: printable ASCII
      text.remove_prefix(1);
      continue;
    }
    if (byte == '\n' || byte == '\t') {
      text.remove_prefix(1);
      continue;
    }
    char32_t cp = 0;
    const std::size_t len = utf8_sequence(text, cp);
    if (len == 0 || cp < 0x20 || cp == 0x7f || invisible(cp)) return true;
    text.remove_prefix(len);
  }
  return false;
}

std::string terminal_safe(std::string_view text) {
  return needs_escape(text) ? printable(text, Newlines::kKeep) : std::string(text);
}

}  // namespace ddp
