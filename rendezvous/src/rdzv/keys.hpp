// The rendezvous key layout (docs/rendezvous.md has the table) and the value
// encodings shared by the handlers. Private to ddp_rdzv.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/job_keys.hpp"

namespace ddp::rdzv::detail {

// Throws ConfigError naming --rdzv_id when the id cannot namespace keys (empty,
// or containing '/' which would let one job's prefix cover another's).
void validate_run_id(const std::string& run_id);

// The key layout itself lives in ddp/store/job_keys.hpp, shared with the agent,
// `ddp-store status` and the server's metrics.
using store::keys::grown_key;
using store::keys::node_index;
using store::keys::node_key;
using store::keys::nodes_prefix;
using store::keys::rdzv_prefix;
using store::keys::round_pointer_key;
using store::keys::round_prefix;
using store::keys::worker_prefix;

// A node's record, readable in `ddp-store list`: {"id":..,"host":..,"nproc":..}.
std::string encode_node(const NodeSpec& node);
// Throws InternalError naming `key` on a malformed record, or one past
// json_input::kRendezvousRecord (naming the bound and what it holds).
NodeSpec decode_node(std::string_view text, const std::string& key);

// A lost member's place offered to the hot spares (P/offer/<g>/<revision>):
// its record and, when the offering member knew it, "offset" (its rank
// offset). `rank_offset` -1: unknown (an offer without it).
struct Offer {
  NodeSpec node;
  int rank_offset = -1;
};
std::string encode_offer(const NodeSpec& node, int rank_offset);
// Throws as decode_node.
Offer decode_offer(std::string_view text, const std::string& key);

// One atomic add hands a joiner both its arrival index and its rank offset: the
// counter holds (arrivals << 32) | (sum of local_world_size), so the value the
// add returns is this node's index and the prefix sum of workers up to it.
inline constexpr int kPackShift = 32;
inline constexpr std::int64_t kPackLowMask = (std::int64_t{1} << kPackShift) - 1;
inline std::int64_t pack_join(int local_world_size) {
  return (std::int64_t{1} << kPackShift) | local_world_size;
}
inline int packed_count(std::int64_t v) { return static_cast<int>(v >> kPackShift); }
inline int packed_workers(std::int64_t v) { return static_cast<int>(v & kPackLowMask); }

std::string seconds_text(std::chrono::milliseconds ms);  // "1.5s"

}  // namespace ddp::rdzv::detail
