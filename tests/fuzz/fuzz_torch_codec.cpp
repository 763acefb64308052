// libFuzzer target: the PyTorch TCPStore dialects, through the server codec's
// public interface (make_codec + feed + encode) only, so the parser behind it
// can change freely. Input: any bytes; the first byte picks where the stream
// is split in two reads. Only ProtocolError may come out.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "codec.hpp"
#include "ddp/common/error.hpp"
#include "ddp/store/protocol.hpp"

using namespace ddp::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  Limits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 4096;
  limits.max_frame_bytes = 8192;
  limits.max_keys_per_request = 16;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto codec = server::make_codec(static_cast<unsigned char>(stream[0]), limits, true);
  if (!codec || codec->requires_hello()) return 0;  // not a torch first byte
  const std::size_t cut = data[0] % (stream.size() + 1);
  try {
    // Every request answered OK, as the dispatcher would for a set; replies a
    // torch client cannot express raise ProtocolError, which is fine here.
    auto on_request = [&](Request&& r) {
      Response resp;
      resp.id = r.id;
      resp.num = 1;
      for (const auto& k : r.keys) resp.items.push_back({ItemKind::kPresent, k, "v", 0});
      std::string out;
      try {
        codec->encode(resp, out);
      } catch (const ddp::ProtocolError&) {
      }
      return true;
    };
    codec->feed(stream.substr(0, cut), on_request);
    codec->feed(stream.substr(cut), on_request);
    if (codec->buffered_bytes() > limits.max_frame_bytes + std::size_t{1 << 20}) __builtin_trap();
  } catch (const ddp::ProtocolError&) {
  }
  return 0;
}
