// Several rendezvous handlers as threads of one test, each on its own counting
// view of one shared store: as many nodes as the test wants, no sockets.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "counting_store.hpp"
#include "ddp/rdzv/rendezvous.hpp"

namespace ddp::test {

// One simulated agent: a handler plus the events it received. The handler is
// declared last so it goes first: its callback writes into `events`.
struct SimNode {
  std::shared_ptr<CountingStore> store;
  std::mutex mu;
  std::vector<std::pair<rdzv::RoundEvent, std::string>> events;
  std::unique_ptr<rdzv::RendezvousHandler> handler;

  bool has_event(rdzv::RoundEvent e) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, d] : events) {
      if (k == e) return true;
    }
    return false;
  }
  std::vector<std::pair<rdzv::RoundEvent, std::string>> take_events() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(events, {});
  }
  std::string detail_of(rdzv::RoundEvent e) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, d] : events) {
      if (k == e) return d;
    }
    return "";
  }
};

inline rdzv::RendezvousConfig dynamic_config(int min_nodes, int max_nodes,
                                             const std::string& run_id = "job") {
  rdzv::RendezvousConfig c;
  c.backend = "c10d";
  c.run_id = run_id;
  c.endpoint = Endpoint{"127.0.0.1", 29400};
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.join_timeout = std::chrono::seconds(20);
  c.last_call_timeout = std::chrono::milliseconds(200);
  c.close_timeout = std::chrono::seconds(5);
  // Keepalives are not part of a round's cost and would blur the request counts.
  c.keep_alive_interval = std::chrono::seconds(30);
  c.keep_alive_max_attempt = 3;
  return c;
}

inline std::unique_ptr<SimNode> make_node(std::shared_ptr<store::Store> shared,
                                          const rdzv::RendezvousConfig& config, const std::string& id,
                                          int nproc = 1) {
  auto node = std::make_unique<SimNode>();
  node->store = std::make_shared<CountingStore>(std::move(shared));
  rdzv::NodeSpec spec{id, "127.0.0.1", nproc};
  node->handler = rdzv::create_handler(config, spec, node->store);
  auto* raw = node.get();
  node->handler->set_event_callback([raw](std::int64_t, rdzv::RoundEvent e, const std::string& d) {
    std::lock_guard<std::mutex> lock(raw->mu);
    raw->events.emplace_back(e, d);
  });
  return node;
}

// `n` nodes "node0".."node<n-1>" (`id_prefix` instead of "node") on one shared
// store, with nproc[i] workers each (1 when `nproc` is empty).
inline std::vector<std::unique_ptr<SimNode>> make_nodes(const std::shared_ptr<store::Store>& store,
                                                        const rdzv::RendezvousConfig& cfg, int n,
                                                        const std::vector<int>& nproc = {},
                                                        const std::string& id_prefix = "node") {
  std::vector<std::unique_ptr<SimNode>> nodes;
  for (int i = 0; i < n; ++i) {
    const int p = nproc.empty() ? 1 : nproc[static_cast<std::size_t>(i)];
    nodes.push_back(make_node(store, cfg, id_prefix + std::to_string(i), p));
  }
  return nodes;
}

// The message of the exception of type E that f throws; "<no exception>" if none
// (any other exception type escapes and fails the test).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

// next_rendezvous on a thread of its own: the node joins while the test goes on.
inline std::future<rdzv::RendezvousResult> rendezvous_async(const SimNode& node) {
  return std::async(std::launch::async, [h = node.handler.get()] { return h->next_rendezvous(); });
}

// next_rendezvous on every node at once; results in node order.
inline std::vector<rdzv::RendezvousResult> rendezvous_all(
    const std::vector<std::unique_ptr<SimNode>>& nodes) {
  std::vector<std::future<rdzv::RendezvousResult>> fs;
  for (const auto& n : nodes) fs.push_back(rendezvous_async(*n));
  std::vector<rdzv::RendezvousResult> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

}  // namespace ddp::test
