// PyTorch TCPStore clients on the store's port. Translates torch commands into
// the native Requests the dispatcher already serves, and the dispatcher's
// Responses back into the bytes a torch client expects, so torch 1.x and 2.x
// clients get the same store (waiters, persistence, stats) as native ones.
//
// torch clients are synchronous (one request in flight), except CANCEL_WAIT,
// which follows a WAIT still pending; requests get ids from a counter and the
// codec remembers, per id, which reply shape the torch client waits for.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "codec.hpp"
#include "torch_codec.hpp"  // rendezvous/src/torchstore: sniffing and parsing

namespace ddp::store::server {

class TorchCodec final : public Codec {
 public:
  // `unvalidated`: the dialect of a client that opens without VALIDATE
  // (kTorchV1: torch 1.x and 2.0; kTorchV2Early: torch 2.1; per the server's
  // configuration).
  TorchCodec(const Limits& limits, torch::Dialect unvalidated);

  void feed(std::string_view bytes, const std::function<bool(Request&&)>& on_request) override;
  bool mid_frame() const override;
  std::uint64_t requests_decoded() const override { return decoded_; }
  void encode(const Response& resp, std::string& out) override;
  std::size_t buffered_bytes() const override { return head_.size() + (parser_ ? parser_->buffered() : 0); }
  bool requires_hello() const override { return false; }
  const char* name() const override;

 private:
  struct Expect {
    torch::TorchOp op;
    std::uint32_t word = 0;  // ping nonce
    std::size_t keys = 0;    // multi_get
  };
  bool translate(torch::TorchCommand&& cmd, const std::function<bool(Request&&)>& on_request);

  Limits limits_;
  torch::Dialect unvalidated_;
  torch::Dialect dialect_ = torch::Dialect::kNeedMore;
  std::string head_;  // first bytes, until the dialect is known
  std::optional<torch::TorchParser> parser_;
  std::unordered_map<std::uint32_t, Expect> expect_;
  std::uint32_t next_id_ = 1;
  std::optional<std::uint32_t> last_wait_;  // id of the WAIT a CANCEL_WAIT targets
  std::uint64_t decoded_ = 0;
};

}  // namespace ddp::store::server
