// A wire protocol spoken on the server's port. A session sniffs the first byte a
// client sends and picks the codec for it, so the native protocol (first byte
// 0xDD) and, later, PyTorch's TCPStore protocol (first byte 0x00..0x0D, its
// query type) can share one port. A codec only translates bytes <-> Request /
// Response; all semantics stay in the dispatcher, so a second protocol gets the
// same store for free.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ddp/store/protocol.hpp"
#include "ddp/store/store_server.hpp"

namespace ddp::store::server {

class Codec {
 public:
  virtual ~Codec() = default;
  // Consumes `bytes` (any split of the stream) and calls `on_request` for each
  // complete request; stops early when it returns false. Throws ProtocolError on
  // malformed input, checking sizes against the limits before allocating.
  virtual void feed(std::string_view bytes, const std::function<bool(Request&&)>& on_request) = 0;
  // True while a request has begun arriving but is not complete.
  virtual bool mid_frame() const = 0;
  // Complete requests decoded so far (lets the session restart its stall timer).
  virtual std::uint64_t requests_decoded() const = 0;
  // Appends the wire form of `resp` to `out`.
  virtual void encode(const Response& resp, std::string& out) = 0;
  // Bytes held for incomplete requests (counted against the server's global cap).
  virtual std::size_t buffered_bytes() const = 0;
  // Lowers or restores the largest frame accepted (before HELLO, only a HELLO's
  // worth may be buffered); protocols without a handshake ignore it.
  virtual void limit_frame_bytes(std::uint32_t /*max*/) {}
  // Whether this protocol needs a HELLO before anything else (the native one does).
  virtual bool requires_hello() const = 0;
  virtual const char* name() const = 0;
};

// The codec for a stream starting with `first_byte`; nullptr when no protocol
// starts that way (the session then closes the connection). PyTorch's TCPStore
// protocol has no way to present a token, so `allow_torch` is false on a server
// that requires one.
// `legacy` says how to read a TCPStore client that opens without VALIDATE.
std::unique_ptr<Codec> make_codec(unsigned char first_byte, const Limits& limits, bool allow_torch,
                                  TorchLegacyProtocol legacy = TorchLegacyProtocol::kTorch1);

}  // namespace ddp::store::server
