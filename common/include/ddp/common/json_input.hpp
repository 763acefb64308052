// JSON that comes from outside the process: a worker's error file, a record in
// the store, a config file, an etcd reply or watch message, a line from the
// preload zygote or a FileTimer client. Every such document is read through
// parse_json with one of the bounds below, so a broken or hostile producer
// costs one clear error for its own input, never the reader's stack or memory.
//
// Why depth: nlohmann's parser is iterative, but much of what follows a parse
// is not. dump(), copies and operator== recurse once per level, so a
// 100,000-deep document parses fine and then overflows the stack wherever it
// is printed or copied. Refusing it at parse time bounds every later use of
// what was accepted, and of anything built from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "ddp/common/error.hpp"

namespace ddp {

struct JsonLimits {
  std::size_t max_bytes = 0;
  std::size_t max_depth = 0;  // containers inside containers; a scalar is depth 0, [] is 1
};

// The bound of each kind of outside JSON, in one place so that they can be
// reviewed together (docs/errors.md lists them too).
namespace json_input {

// What ddp reads nests at most 5 levels (an etcd watch event, torch's error
// file). At 64 a recursive walk of an accepted value takes a few KiB of
// stack, ASan's larger frames included.
inline constexpr std::size_t kMaxDepth = 64;

// TORCHELASTIC_ERROR_FILE: a message and a Python traceback, which can be long.
inline constexpr JsonLimits kErrorFile{4u << 20, kMaxDepth};
// An agent's record under /<rdzv_id>/agent/status/: a few hundred bytes per worker.
inline constexpr JsonLimits kStatusRecord{1u << 20, kMaxDepth};
// A node's rendezvous record ({"id", "host", "nproc"}): under 1 KiB.
inline constexpr JsonLimits kRendezvousRecord{64u << 10, kMaxDepth};
// ddprun's --config and ddp-rendezvousd's --config: a few dozen settings.
inline constexpr JsonLimits kConfigFile{1u << 20, kMaxDepth};
// An answer or a watch message of etcd's JSON gateway. A list() of a big
// prefix is the largest; this also bounds the HTTP body read for it.
inline constexpr JsonLimits kEtcdReply{256u << 20, kMaxDepth};
// The preload zygote's reply and exit lines: a few dozen bytes.
inline constexpr JsonLimits kZygoteLine{64u << 10, kMaxDepth};
// A FileTimer request line: torch's clients write at most PIPE_BUF bytes.
inline constexpr JsonLimits kFileTimerRequest{4096, kMaxDepth};

}  // namespace json_input

// Why an outside JSON document was refused. what() is a phrase for the
// caller to put after the name of the input, whose subject it is:
//   "is not valid JSON: parse error at line 1, column 2: syntax error ..."
//   "is 209715200 bytes; at most 4194304 are read"
//   "nests 100001 levels deep; at most 64 are read"
//   "cannot be read: Permission denied"
class JsonError : public Error {
 public:
  enum class Kind : std::uint8_t { kMalformed, kTooLarge, kTooDeep, kUnreadable };
  JsonError(Kind kind, const std::string& what, std::string detail = {}, std::size_t byte = 0);

  Kind kind() const noexcept { return kind_; }
  // kMalformed: nlohmann's description ("parse error at line 1, column 2: ...");
  // kUnreadable: why ("Permission denied", "it is a FIFO, not a regular file").
  const std::string& detail() const noexcept { return detail_; }
  // kMalformed: the offset of the syntax error (1-based, as nlohmann counts).
  std::size_t byte() const noexcept { return byte_; }

 private:
  Kind kind_;
  std::string detail_;
  std::size_t byte_;
};

// Parses `text` as one JSON document within `limits`, in two passes: the
// first only measures size, depth and syntax, so nothing past a bound is ever
// built. Throws JsonError (kMalformed, kTooLarge, kTooDeep).
nlohmann::json parse_json(std::string_view text, const JsonLimits& limits);

// The same without exceptions, as nlohmann's parse(text, nullptr, false): a
// discarded value (is_discarded()) when `text` is refused, and the reason,
// JsonError's what(), in `why` when given.
nlohmann::json try_parse_json(std::string_view text, const JsonLimits& limits, std::string* why = nullptr);

// The whole text of the file at `path`, to give to parse_json. nullopt when no
// such file exists. Throws JsonError: kTooLarge when it holds more than
// `max_bytes` (nothing past the bound is read), kUnreadable when it cannot be
// opened or read, or, with `regular_only`, when it is a FIFO, a device or a
// directory (a file a worker leaves must not block or flood its reader).
std::optional<std::string> read_json_file(const std::filesystem::path& path, std::size_t max_bytes,
                                          bool regular_only);

}  // namespace ddp
