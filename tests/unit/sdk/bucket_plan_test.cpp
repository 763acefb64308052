#include <catch2/catch.hpp>

#include "ddp/reducer.hpp"

using ddp::plan_buckets;
using ddp::ReducerOptions;
using Plan = std::vector<std::vector<std::size_t>>;

namespace {
constexpr std::size_t kMiB = 1u << 20;
}

TEST_CASE("buckets fill in reverse registration order with a small first bucket") {
  // 8 parameters of 0.5 MiB: first bucket closes at 1 MiB, the rest at 25 MiB.
  const std::vector<std::size_t> bytes(8, kMiB / 2);
  CHECK(plan_buckets(bytes, {}) == Plan{{7, 6}, {5, 4, 3, 2, 1, 0}});
}

TEST_CASE("default caps are PyTorch's 25 MiB and 1 MiB") {
  ReducerOptions o;
  CHECK(o.bucket_cap_bytes == 25 * kMiB);
  CHECK(o.first_bucket_cap_bytes == kMiB);
}

TEST_CASE("a bucket closes once it reaches its cap, so a large parameter gets its own") {
  const std::vector<std::size_t> bytes{10 * kMiB, 30 * kMiB, 4 * kMiB, 2 * kMiB};
  CHECK(plan_buckets(bytes, {}) == Plan{{3}, {2, 1}, {0}});
}

TEST_CASE("every parameter lands in exactly one bucket, none over cap plus one parameter") {
  std::vector<std::size_t> bytes;
  for (std::size_t i = 0; i < 200; ++i) bytes.push_back((i * 7919 % 97 + 1) * 4096);
  const ReducerOptions o{.bucket_cap_bytes = kMiB, .first_bucket_cap_bytes = kMiB / 4};
  const Plan plan = plan_buckets(bytes, o);
  std::vector<int> count(bytes.size(), 0);
  std::size_t expected_next = bytes.size();
  for (std::size_t b = 0; b < plan.size(); ++b) {
    std::size_t total = 0;
    for (auto p : plan[b]) {
      ++count[p];
      CHECK(p + 1 == expected_next);  // strictly reverse order across buckets
      expected_next = p;
      total += bytes[p];
    }
    const std::size_t cap = b == 0 ? o.first_bucket_cap_bytes : o.bucket_cap_bytes;
    CHECK(total - bytes[plan[b].back()] < cap);  // closed as soon as it reached the cap
    if (b + 1 < plan.size()) CHECK(total >= cap);
  }
  for (int c : count) CHECK(c == 1);
}

TEST_CASE("no parameters give no buckets") { CHECK(plan_buckets({}, {}).empty()); }
