#include "straggler_detector.hpp"

#include <algorithm>

namespace ddp::agent {

double lower_median(std::vector<double> values) {
  if (values.empty()) return -1;
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>((values.size() - 1) / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

StragglerDetector::Verdict StragglerDetector::update(const std::vector<RankSteps>& ranks) {
  Verdict v;
  std::vector<double> times;
  for (const auto& r : ranks) {
    if (r.step_s >= 0) times.push_back(r.step_s);
  }
  v.ranks = times.size();
  v.median_s = lower_median(std::move(times));
  // Alone, a rank has nobody to be slower than.
  if (v.ranks < 2 || !(v.median_s > 0)) return v;
  const double bar = factor_ * v.median_s;
  for (const auto& r : ranks) {
    if (r.step_s < 0) continue;
    auto& seen = seen_[r.rank];
    if (r.steps > seen.steps) {
      const std::uint64_t fresh = r.steps - seen.steps;
      seen.slow = r.step_s > bar ? seen.slow + fresh : 0;
    } else if (r.steps < seen.steps) {
      seen.slow = 0;  // its counter started over (a new attempt)
    }
    seen.steps = r.steps;
    if (seen.slow >= steps_ && steps_ > 0) {
      v.stragglers.push_back(
          {r.rank, r.node, r.host, r.step_s, v.median_s, r.step_s / v.median_s, seen.slow});
    }
  }
  std::sort(v.stragglers.begin(), v.stragglers.end(),
            [](const Straggler& a, const Straggler& b) { return a.rank < b.rank; });
  return v;
}

}  // namespace ddp::agent
