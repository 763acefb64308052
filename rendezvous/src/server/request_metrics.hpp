// Counters behind ddp-rendezvousd's /metrics: requests per op and a latency
// histogram of the time the loop spends on each request (parse to queued
// reply; a blocked get/wait counts until it is parked, not while it waits).
// The per-job series come from the job listing (job_scan.hpp), off this path.
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

}  // namespace ddp::store::server
