#include "native_codec.hpp"

#include <cstring>

#include "ddp/common/error.hpp"
#include "torch_session_codec.hpp"

namespace ddp::store::server {
namespace {

// Buffer capacity a connection keeps between frames; what a large frame grew
// beyond this is given back once the frame is decoded.
constexpr std::size_t kKeptBufferBytes = 256 * 1024;

}  // namespace

std::unique_ptr<Codec> make_codec(unsigned char first_byte, const Limits& limits, bool allow_torch,
                                  TorchLegacyProtocol legacy) {
  if (first_byte == static_cast<unsigned char>(kPreamble[0])) return std::make_unique<NativeCodec>(limits);
  // PyTorch TCPStore clients start with a query type byte (torch 1.x and 2.0:
  // 0..8, 2.1: 0..11, 2.2+: VALIDATE = 0); TorchCodec tells VALIDATE apart and
  // `legacy` says which numbering the others speak.
  if (allow_torch && torch::sniff(std::string_view(reinterpret_cast<const char*>(&first_byte), 1)) !=
                         torch::Dialect::kUnknown) {
    return std::make_unique<TorchCodec>(limits, legacy == TorchLegacyProtocol::kTorch21
                                                    ? torch::Dialect::kTorchV2Early
                                                    : torch::Dialect::kTorchV1);
  }
  return nullptr;
}

void NativeCodec::feed(std::string_view bytes, const std::function<bool(Request&&)>& on_request) {
  // Parse straight from the input when nothing is buffered (the common case of
  // whole frames per read); copy only the incomplete tail.
  std::string_view data = bytes;
  if (!buf_.empty()) {
    buf_.append(bytes);
    data = buf_;
  }
  std::size_t pos = 0;
  if (!preamble_done_) {
    if (data.size() < sizeof(kPreamble)) {
      if (std::memcmp(data.data(), kPreamble, data.size()) != 0) throw ProtocolError("bad preamble");
      if (buf_.empty()) buf_.assign(data);
      return;
    }
    if (std::memcmp(data.data(), kPreamble, sizeof(kPreamble)) != 0) throw ProtocolError("bad preamble");
    pos = sizeof(kPreamble);
    preamble_done_ = true;
  }
  bool go_on = true;
  while (go_on && data.size() - pos >= 4) {
    const auto len = decode_frame_length(data.substr(pos, 4));
    if (len > limits_.max_frame_bytes) {
      throw ProtocolError("frame length " + std::to_string(len) + " exceeds max_frame_bytes " +
                          std::to_string(limits_.max_frame_bytes));
    }
    if (data.size() - pos - 4 < len) break;
    Request req;
    try {
      req = decode_request(data.substr(pos + 4, len), limits_);
    } catch (const ProtocolError& e) {
      // Name the op when the first byte is one, so the log says what was wrong where.
      const auto op = len > 0 ? static_cast<std::uint8_t>(data[pos + 4]) : 0;
      if (op == 0 || op > kMaxOp) throw;
      throw ProtocolError(std::string("op ") + op_name(static_cast<Op>(op)) + ": " + e.what());
    }
    pos += 4 + len;
    ++decoded_;
    go_on = on_request(std::move(req));
  }
  if (!go_on) {
    std::string().swap(buf_);
    return;
  }
  if (data.data() == buf_.data()) {
    buf_.erase(0, pos);
  } else {
    buf_.assign(data.substr(pos));
  }
  // A large frame must not pin its buffer to the connection once it is done.
  if (buf_.capacity() > kKeptBufferBytes && buf_.size() <= kKeptBufferBytes) std::string(buf_).swap(buf_);
}

}  // namespace ddp::store::server
