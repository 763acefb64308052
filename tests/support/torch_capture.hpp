// Real PyTorch TCPStore conversations, as captured on loopback by a byte-logging
// proxy between torch's client and torch's own server
// (tests/unit/server/torch_captures/*.txt; the header of each file says which
// torch, which calls, and how it was captured). The server's TCPStore tests
// replay them: the unit test through the codec a session makes, the
// integration test through the real ddp-rendezvousd.
//
// File format, one event per line, in the order the proxy saw them across
// connections; '#' starts a comment (kept as the event's note):
//   cN open        connection N was opened
//   cN > HEX       bytes the client sent
//   cN < HEX       bytes torch's server answered
//   cN close       the client closed its connection
// Torch's server answers LIST (a send of the one byte 0x11) in its hash map's
// order, which no client relies on; such a reply is marked `unordered` and is
// compared with sorted_list_reply() on both sides.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "test_support.hpp"

namespace ddp::test {

struct CaptureEvent {
  enum class Kind : std::uint8_t { kOpen, kSend, kReply, kClose };
  Kind kind = Kind::kOpen;
  int conn = 0;
  std::string bytes;  // kSend, kReply
  std::string note;   // the line's comment (the decoded op), for failure messages
  int line = 0;
  bool unordered = false;  // a kReply to LIST: the keys in any order
};

inline fs::path torch_capture_dir() { return source_dir() / "tests" / "unit" / "server" / "torch_captures"; }

inline std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xF];
  }
  return out;
}

// A LIST reply (i64 n, then n keys as u64 length + bytes) with its keys sorted;
// anything that does not parse as one comes back unchanged.
inline std::string sorted_list_reply(std::string_view reply) {
  auto u64_at = [&](std::size_t at) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i)
      v |= std::uint64_t{static_cast<unsigned char>(reply[at + i])} << (8 * i);
    return v;
  };
  if (reply.size() < 8) return std::string(reply);
  std::vector<std::string> keys;
  std::size_t at = 8;
  for (std::uint64_t n = u64_at(0); n > 0; --n) {
    if (reply.size() - at < 8) return std::string(reply);
    const auto len = u64_at(at);
    if (reply.size() - at - 8 < len) return std::string(reply);
    keys.emplace_back(reply.substr(at, 8 + len));
    at += 8 + len;
  }
  if (at != reply.size()) return std::string(reply);
  std::sort(keys.begin(), keys.end());
  std::string out(reply.substr(0, 8));
  for (const auto& k : keys) out += k;
  return out;
}

// Throws std::runtime_error naming the file and line for anything malformed.
inline std::vector<CaptureEvent> load_capture(const std::string& name) {
  const auto path = torch_capture_dir() / name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::vector<CaptureEvent> events;
  std::map<int, std::string> last_sent;  // per connection
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    const auto bad = [&](const std::string& why) {
      return std::runtime_error(path.string() + ":" + std::to_string(line) + ": " + why);
    };
    CaptureEvent e;
    e.line = line;
    if (const auto hash = text.find('#'); hash != std::string::npos) {
      e.note = text.substr(hash + 1);
      text.erase(hash);
    }
    std::istringstream words(text);
    std::string conn, kind, hex, extra;
    if (!(words >> conn)) continue;  // blank or comment only
    words >> kind >> hex >> extra;
    if (conn.size() < 2 || conn[0] != 'c') throw bad("expected a connection such as c0, got '" + conn + "'");
    e.conn = std::stoi(conn.substr(1));
    if (kind == "open" || kind == "close") {
      if (!hex.empty()) throw bad("nothing may follow " + kind);
      e.kind = kind == "open" ? CaptureEvent::Kind::kOpen : CaptureEvent::Kind::kClose;
    } else if (kind == ">" || kind == "<") {
      if (hex.empty() || hex.size() % 2 != 0 ||
          hex.find_first_not_of("0123456789abcdef") != std::string::npos || !extra.empty()) {
        throw bad("expected one run of lowercase hex digits, an even number of them");
      }
      e.kind = kind == ">" ? CaptureEvent::Kind::kSend : CaptureEvent::Kind::kReply;
      for (std::size_t i = 0; i < hex.size(); i += 2) {
        e.bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      }
      if (e.kind == CaptureEvent::Kind::kSend) {
        last_sent[e.conn] = e.bytes;
      } else {
        e.unordered = last_sent[e.conn] == std::string(1, '\x11');
      }
    } else {
      throw bad("expected open, close, > or <, got '" + kind + "'");
    }
    events.push_back(std::move(e));
  }
  if (events.empty()) throw std::runtime_error(path.string() + ": no events");
  return events;
}

}  // namespace ddp::test
