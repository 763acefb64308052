// libFuzzer target: the native protocol's decoders and the server's streaming
// codec. Input: any bytes. The first byte picks where the stream is split in
// two reads, so frames cut at every point are exercised. Only ProtocolError
// may come out; anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "codec.hpp"
#include "ddp/common/error.hpp"
#include "ddp/store/protocol.hpp"

using namespace ddp::store;

namespace {

Limits small_limits() {
  Limits l;  // small, so the fuzzer reaches the limit checks
  l.max_key_bytes = 64;
  l.max_value_bytes = 4096;
  l.max_frame_bytes = 8192;
  l.max_keys_per_request = 16;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const auto limits = small_limits();
  const std::string_view body = all.substr(1);

  // One frame body, both directions; a decoded request re-encodes and decodes the same.
  try {
    auto req = decode_request(body, limits);
    std::string wire;
    encode_request(req, wire);
    auto again = decode_request(std::string_view(wire).substr(4), limits);
    if (again.op != req.op || again.keys != req.keys || again.values != req.values) __builtin_trap();
  } catch (const ddp::ProtocolError&) {
  }
  try {
    auto resp = decode_response(body, limits);
    std::string wire;
    encode_response(resp, wire);
  } catch (const ddp::ProtocolError&) {
  }

  // The server's codec over a stream: preamble + frames, split in two reads.
  auto codec = server::make_codec(static_cast<unsigned char>(kPreamble[0]), limits, false);
  std::string stream(kPreamble, sizeof kPreamble);
  stream.append(body);
  const std::size_t cut = data[0] % (stream.size() + 1);
  try {
    auto on_request = [&](Request&& r) {
      Response resp;
      resp.id = r.id;
      resp.items.push_back({ItemKind::kPresent, r.keys.empty() ? "" : r.keys[0], "", 0});
      std::string out;
      codec->encode(resp, out);
      return true;
    };
    codec->feed(std::string_view(stream).substr(0, cut), on_request);
    codec->feed(std::string_view(stream).substr(cut), on_request);
    if (codec->buffered_bytes() > limits.max_frame_bytes + std::size_t{1 << 20}) __builtin_trap();
  } catch (const ddp::ProtocolError&) {
  }
  return 0;
}
