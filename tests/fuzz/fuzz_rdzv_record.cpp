// libFuzzer target: a node's rendezvous record as the handlers read it from
// the store (decode_node, json_input::kRendezvousRecord). Input: the record's
// bytes. Findings: a crash, a sanitizer report or an exception other than
// the InternalError decode_node documents.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ddp/common/error.hpp"
#include "keys.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto n = ddp::rdzv::detail::decode_node(std::string_view(reinterpret_cast<const char*>(data), size),
                                                  "/job/rdzv/round_0/node/0");
    // What decodes encodes and decodes the same.
    const auto again = ddp::rdzv::detail::decode_node(ddp::rdzv::detail::encode_node(n), "again");
    if (again.node_id != n.node_id || again.host != n.host || again.local_world_size != n.local_world_size)
      __builtin_trap();
  } catch (const ddp::InternalError&) {
  }
  return 0;
}
