#include "request_metrics.hpp"

#include <charconv>
#include <string_view>

#include "ddp/store/job_keys.hpp"

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

void append_rendezvous_rounds(const KvState& kv, std::map<std::string, std::int64_t>& out) {
  for (const auto& [key, entry] : kv.entries()) {
    const auto run = store::keys::run_of_round_pointer(key);
    if (!run) continue;
    std::int64_t round = 0;
    const auto* first = entry.value.data();
    const auto* last = first + entry.value.size();
    if (auto [p, ec] = std::from_chars(first, last, round); ec != std::errc() || p != last) continue;
    out["rdzv_round." + std::string(*run)] = round;
  }
  // Spares and exclusions: counted once the rounds above are known.
  for (const auto& [key, entry] : kv.entries()) {
    if (const auto run = store::keys::run_of_excluded(key)) {
      ++out["rdzv_excluded." + std::string(*run)];
    } else if (const auto spare = store::keys::spare_of(key)) {
      const auto current = out.find("rdzv_round." + std::string(spare->run));
      if (current != out.end() && current->second == spare->round)
        ++out["rdzv_spares." + std::string(spare->run)];
    }
  }
}

}  // namespace ddp::store::server
