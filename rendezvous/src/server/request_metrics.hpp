// Counters behind ddp-rendezvousd's /metrics: requests per op and a latency
// histogram of the time the loop spends on each request (parse to queued
// reply; a blocked get/wait counts until it is parked, not while it waits),
// plus the rendezvous round of every job found in the key space.
//
// Thread-safety: none; owned by the Dispatcher on the loop thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "ddp/store/protocol.hpp"
#include "kv_state.hpp"

namespace ddp::store::server {

class RequestMetrics {
 public:
  // Upper bounds of the latency buckets in microseconds; a last bucket is +Inf.
  // 10 us .. 100 ms spans a hash-map hit up to a large list/multi_get or an
  // fsync-bound write with --data-dir.
  static constexpr std::array<std::int64_t, 9> kBucketsUs = {10,   50,    100,   500,   1000,
                                                             5000, 10000, 50000, 100000};

  void record(Op op, std::chrono::nanoseconds took);
  // Adds "requests.<op>", "latency_le_us.<bound>" (cumulative, "+Inf" last),
  // "latency_sum_ns" and "latency_count" to `out`.
  void append_to(std::map<std::string, std::int64_t>& out) const;

 private:
  std::array<std::int64_t, kMaxOp + 1> by_op_{};
  std::array<std::int64_t, kBucketsUs.size() + 1> buckets_{};
  std::int64_t sum_ns_ = 0;
  std::int64_t count_ = 0;
};

// Adds "rdzv_round.<run_id>" = the value of /<run_id>/rdzv/round (the c10d
// layout of docs/rendezvous.md) for every job that has one. Scans all keys:
// fine for a scrape every few seconds, never on the request path.
// Also "rdzv_spares.<run_id>" (hot spares waiting beside the current round)
// and "rdzv_excluded.<run_id>" (hosts excluded by --max_node_failures) for
// every job that has any (docs/rendezvous.md, "Hot spares");
// "rdzv_unhealthy.<run_id>" (nodes whose status record reads unhealthy) for
// every job with status records, and "rdzv_stragglers.<run_id>" (ranks the
// stragglers verdict of the current round names) for every job with a verdict
// (docs/agent.md). All derive from keys the agents write, so a job's series go
// when the Reclaimer removes its keys.
void append_rendezvous_rounds(const KvState& kv, std::map<std::string, std::int64_t>& out);

}  // namespace ddp::store::server
