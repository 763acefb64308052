// Stragglers named across the job (docs/agent-diagnosis.md, "Stragglers"). Each agent
// already writes its workers' step times into its status record every status
// interval; the agent of group rank 0 alone reads all the records (one list
// of the status prefix), decides with a StragglerDetector, and writes one
// verdict key. Every other agent reads that one key. Per interval the store
// serves one listing and N small reads: O(N), with no agent reading N keys
// but the one that decides.
//
// Thread-safety: tick(), named() and the hooks on the io thread only; store
// calls run on the watch's own thread and post their results back.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "blocking_caller.hpp"
#include "ddp/agent/agent_config.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "lifecycle.hpp"
#include "straggler_detector.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

// "step 1.503 s, 9.8x the job's median 0.153 s (over 3.0x for 6 steps in a row)"
std::string straggler_detail(const Straggler& s, double factor);

class StragglerWatch {
 public:
  struct Hooks {
    std::function<void(const std::string& event, nlohmann::json fields)> emit;  // --event_log
    std::function<void()> changed;  // the named ranks changed: republish the status record
    // --straggler_action=restart: a rank newly named (any node's; the hook
    // acts on its own ranks only).
    std::function<void(const Straggler&)> act;
    // This node's own latest step time of a global rank (HeartbeatMonitor's),
    // < 0 when it has none yet; nullopt when the rank is another node's.
    std::function<std::optional<double>(int rank)> own_step_s;
  };
  StragglerWatch(boost::asio::io_context& io, const AgentConfig& cfg, const Lifecycle& life,
                 std::shared_ptr<spdlog::logger> log, Hooks hooks);
  ~StragglerWatch();
  StragglerWatch(const StragglerWatch&) = delete;
  StragglerWatch& operator=(const StragglerWatch&) = delete;

  void attach(std::shared_ptr<rdzv::RendezvousHandler> handler) { handler_ = std::move(handler); }
  // Once per status interval while workers beat, after the status record is written.
  void tick();
  // The ranks named now, job-wide, for the status record.
  nlohmann::json named_json() const;

 private:
  // What the store thread may post back to while the watch lives.
  struct Shared {
    std::mutex mu;
    bool alive = true;
  };
  void decide(std::int64_t round, const std::vector<RankSteps>& ranks);
  // `by`: the node the verdict says decided it. A verdict read from the store
  // is taken only from the round's deciding node (group rank 0), and a rank
  // of this node only when this node's own step time bears it out.
  void apply(std::int64_t round, std::vector<Straggler> named, const std::string& by);
  // The round's deciding node: group rank 0's id, from the round's records
  // or, where they were left unread, as read when a verdict came.
  std::string decider(std::int64_t round) const;
  bool borne_out(const Straggler& s);
  template <typename Fn>
  void post(Fn fn);

  boost::asio::io_context& io_;
  const AgentConfig& cfg_;
  const Lifecycle& life_;
  std::shared_ptr<spdlog::logger> log_;
  Hooks hooks_;
  std::shared_ptr<rdzv::RendezvousHandler> handler_;
  StragglerDetector detector_;
  std::int64_t detector_round_ = -1;
  std::int64_t named_round_ = -1;
  std::vector<Straggler> named_;
  // Group rank 0's node id, read from its record when a verdict came in a
  // round whose records the rendezvous left unread (past list_nodes_max).
  std::int64_t decider_round_ = -1;
  std::string decider_;
  // Refusals already logged this round: one line each, not one per interval.
  std::set<std::string> refused_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  // Started at the first look (workers beat or step): a job that never does
  // costs no thread. Last: joined (or detached) before the rest goes.
  BlockingCaller& caller();
  std::unique_ptr<BlockingCaller> caller_;
};

}  // namespace ddp::agent
