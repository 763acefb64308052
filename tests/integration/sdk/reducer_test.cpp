// The Reducer across ranks as threads, each with its own Gloo group over
// loopback and a shared in-process store.
#include <catch2/catch.hpp>
#include <thread>

#include "ddp/sdk.hpp"
#include "ddp/store/memory_store.hpp"

namespace {

constexpr int kWorld = 3;
const std::vector<std::size_t> kSizes{100, 3000, 1, 70000, 50};

float grad_value(int rank, std::size_t param, std::size_t i) {
  return static_cast<float>(rank + 1) + static_cast<float>(param) + static_cast<float>(i % 100) * 0.001f;
}

}  // namespace

TEST_CASE("the Reducer averages gradients across ranks whatever order they are marked in") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  std::vector<std::string> errors(kWorld);
  std::vector<std::vector<std::vector<float>>> results(kWorld);
  std::vector<std::size_t> bucket_counts(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        ddp::ProcessGroupOptions options;
        options.backend = "gloo";
        options.interface = std::string("lo");  // a literal: a GCC 12 -Wmaybe-uninitialized false positive
        options.timeout = std::chrono::seconds(30);
        ddp::ProcessGroup pg(store, "reducer/", rank, kWorld, options);
        std::vector<std::vector<float>> grads;
        std::vector<std::span<float>> spans;
        for (std::size_t s : kSizes) grads.emplace_back(s);
        for (auto& g : grads) spans.emplace_back(g);
        ddp::Reducer reducer(pg, spans, {.bucket_cap_bytes = 8 << 10, .first_bucket_cap_bytes = 1 << 10});
        bucket_counts[static_cast<std::size_t>(rank)] = reducer.buckets().size();
        auto fill = [&] {
          for (std::size_t p = 0; p < grads.size(); ++p)
            for (std::size_t i = 0; i < grads[p].size(); ++i) grads[p][i] = grad_value(rank, p, i);
        };
        // Each rank marks in its own order; buckets still launch in the same order everywhere.
        std::vector<std::size_t> order{0, 1, 2, 3, 4};
        if (rank == 1) std::reverse(order.begin(), order.end());
        if (rank == 2) order = {2, 4, 0, 3, 1};
        fill();
        for (auto p : order) reducer.mark_ready(p);
        reducer.finalize();
        {
          // Accumulation step: nothing is communicated, gradients stay local.
          auto scope = reducer.no_sync();
          for (auto& g : grads)
            for (auto& v : g) v += 1.0f;
          for (auto p : order) reducer.mark_ready(p);
          reducer.finalize();
        }
        results[static_cast<std::size_t>(rank)] = grads;
        // A step after the scope communicates again (and may skip mark_ready).
        fill();
        reducer.finalize();
        for (std::size_t p = 0; p < grads.size(); ++p) {
          if (grads[p][0] != Approx(grad_value(1, p, 0)))
            errors[static_cast<std::size_t>(rank)] = "post-scope step not averaged";
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    INFO("rank " << rank);
    CHECK(errors[static_cast<std::size_t>(rank)].empty());
    CHECK(bucket_counts[static_cast<std::size_t>(rank)] == 3);  // {4,3} {2,1} {0}: several buckets in play
    const auto& grads = results[static_cast<std::size_t>(rank)];
    REQUIRE(grads.size() == kSizes.size());
    for (std::size_t p = 0; p < grads.size(); ++p) {
      for (std::size_t i = 0; i < grads[p].size(); i += 37) {
        // The mean over ranks is rank 1's value; +1 from the local no_sync step.
        REQUIRE(grads[p][i] == Approx(grad_value(1, p, i) + 1.0f).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("marking a gradient twice in one step is refused") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  ddp::ProcessGroupOptions options;
  options.backend = "gloo";
  ddp::ProcessGroup pg(store, "twice/", 0, 1, options);
  std::vector<float> g(10, 1.0f);
  ddp::Reducer reducer(pg, {std::span<float>(g)});
  reducer.mark_ready(0);
  CHECK_THROWS_WITH(reducer.mark_ready(0), Catch::Contains("marked ready twice"));
  CHECK_THROWS_WITH(reducer.mark_ready(5), Catch::Contains("out of range"));
  reducer.finalize();
  CHECK(g[3] == 1.0f);
}
