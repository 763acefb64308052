// The native protocol of protocol.hpp: the 4-byte preamble, then
// length-prefixed frames. The frame length is checked against max_frame_bytes
// as soon as its 4 bytes arrive; the body buffer grows only with bytes actually
// received, so a client announcing a huge frame and sending nothing costs nothing.
#pragma once

#include "codec.hpp"

namespace ddp::store::server {

class NativeCodec final : public Codec {
 public:
  explicit NativeCodec(const Limits& limits) : limits_(limits) {}

  void feed(std::string_view bytes, const std::function<bool(Request&&)>& on_request) override;
  bool mid_frame() const override { return !buf_.empty() && preamble_done_; }
  std::uint64_t requests_decoded() const override { return decoded_; }
  void encode(const Response& resp, std::string& out) override { encode_response(resp, out); }
  std::size_t buffered_bytes() const override { return buf_.capacity(); }
  void limit_frame_bytes(std::uint32_t max) override { limits_.max_frame_bytes = max; }
  bool requires_hello() const override { return true; }
  const char* name() const override { return "native"; }

 private:
  Limits limits_;
  std::string buf_;  // bytes of an incomplete preamble or frame
  bool preamble_done_ = false;
  std::uint64_t decoded_ = 0;
};

}  // namespace ddp::store::server
