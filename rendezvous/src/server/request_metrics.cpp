#include "request_metrics.hpp"

namespace ddp::store::server {

void RequestMetrics::record(Op op, std::chrono::nanoseconds took) {
  const auto index = static_cast<std::size_t>(op);
  if (index < by_op_.size()) ++by_op_[index];
  const auto us = took.count() / 1000;
  std::size_t b = 0;
  while (b < kBucketsUs.size() && us > kBucketsUs[b]) ++b;
  ++buckets_[b];
  sum_ns_ += took.count();
  ++count_;
}

void RequestMetrics::append_to(std::map<std::string, std::int64_t>& out) const {
  for (std::size_t i = 1; i < by_op_.size(); ++i) {
    out[std::string("requests.") + op_name(static_cast<Op>(i))] = by_op_[i];
  }
  std::int64_t cumulative = 0;
  for (std::size_t b = 0; b < kBucketsUs.size(); ++b) {
    cumulative += buckets_[b];
    out["latency_le_us." + std::to_string(kBucketsUs[b])] = cumulative;
  }
  out["latency_le_us.+Inf"] = cumulative + buckets_.back();
  out["latency_sum_ns"] = sum_ns_;
  out["latency_count"] = count_;
}

}  // namespace ddp::store::server
