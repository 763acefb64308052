// The etcd arrival step (docs/rendezvous.md "Arrival on etcd"): EtcdStore's
// create-revision counting, and c10d rounds over etcd handing out contiguous
// ranks when nodes run different numbers of workers.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/etcd_store.hpp"
#include "etcd_cluster.hpp"

using namespace ddp::store;
using ddp::test::EtcdCluster;
using ddp::test::TempDir;

TEST_CASE(
    "etcd store: concurrent creates each count a distinct arrival index, and a repeat keeps its place") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  s.set("a-other", "outside the counted prefix");

  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::map<std::int64_t, Revision> index_to_revision;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      EtcdStore mine(etcd.options());
      const auto c = mine.create("a/" + std::to_string(t % 2 + 1) + "/n" + std::to_string(t), "x", 0, {"a/"});
      std::lock_guard lock(mu);
      index_to_revision[c.counts.at(0)] = c.revision;
    });
  for (auto& t : threads) t.join();
  REQUIRE(index_to_revision.size() == kThreads);  // no two creates saw the same count
  CHECK(index_to_revision.begin()->first == 1);
  CHECK(index_to_revision.rbegin()->first == kThreads);
  for (auto it = std::next(index_to_revision.begin()); it != index_to_revision.end(); ++it)
    CHECK(it->second > std::prev(it)->second);  // indices follow create revisions

  // Counting at a past revision and listing by create revision agree with it.
  const auto third = index_to_revision.at(3);
  CHECK(s.count_at({"a/"}, third).counts == std::vector<std::int64_t>{3});
  CHECK(s.keys_created("a/", third).size() == 3);
  CHECK(s.count_at({"a/", "a/1/", "a/2/"}, 0).counts == std::vector<std::int64_t>{kThreads, 4, 4});

  // Creating an existing key changes nothing and reports its first place.
  const auto again = s.create("a/1/n0", "y", 0, {"a/"});
  CHECK(again.counts.at(0) <= kThreads);
  CHECK(index_to_revision.at(again.counts.at(0)) == again.revision);
  CHECK(s.try_get("a/1/n0") == std::optional<std::string>("x"));
}

TEST_CASE("etcd rendezvous: nodes with different nproc get contiguous ranks in arrival order") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  const std::vector<int> nprocs{2, 2, 3, 1, 2};
  const int n = static_cast<int>(nprocs.size());
  ddp::rdzv::RendezvousConfig rc;
  rc.backend = "etcd";
  rc.run_id = "mixed";
  rc.etcd.endpoints = etcd.options().endpoints;
  rc.endpoint = rc.etcd.endpoints.front();
  rc.min_nodes = n;
  rc.max_nodes = n;
  rc.list_nodes = false;

  std::vector<std::unique_ptr<ddp::rdzv::RendezvousHandler>> handlers(nprocs.size());
  std::vector<ddp::rdzv::RendezvousResult> results(nprocs.size());
  std::vector<std::string> errors(nprocs.size());
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        handlers[i] = ddp::rdzv::create_handler(rc, {"node" + std::to_string(i), "127.0.0.1", nprocs[i]});
        results[i] = handlers[i]->next_rendezvous();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) REQUIRE(e.empty());

  std::vector<int> by_rank(nprocs.size(), -1);
  for (int i = 0; i < n; ++i) {
    CHECK(results[i].group_world_size == n);
    CHECK(results[i].world_size == 10);
    REQUIRE(results[i].group_rank >= 0);
    REQUIRE(results[i].group_rank < n);
    REQUIRE(by_rank[results[i].group_rank] == -1);  // each group rank once
    by_rank[results[i].group_rank] = i;
  }
  int offset = 0;
  for (int r = 0; r < n; ++r) {
    const int i = by_rank[r];
    CHECK(results[i].rank_offset == offset);
    offset += nprocs[i];
  }
  CHECK(offset == 10);
}
