// --on_failure=reform's part (docs/reform.md, "The contract between agent and
// SDK"): whether re-forming is still in effect for the run, which of the
// group's failures it has acted on, whether the workers are worker SDK
// trainers (asked of the store once, before the first re-form), the writes
// that tell the workers of a lost slot, and the ranks the job went on
// without. It owns that state and reports what it found; the agent decides
// (agent.cpp, "The policy").
//
// Thread-safety: construct, call and destroy on the io thread; results come
// back there, only while the io_context exists.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/agent/agent_config.hpp"
#include "ddp/agent/failure_report.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "reform_store.hpp"

namespace ddp::agent {

// Whether f's worker let ddp::MembershipChanged end it: its error file's
// extraInfo.error_type says so (the SDK's ddp::run writes it). Such a trainer does not re-form;
// its siblings would wait for it at every generation.
bool uncaught_membership_change(const WorkerFailure& f);

// "rank 1 lost (exit code 1: why)": a lost worker, for the agent's log lines.
std::string loss_text(const WorkerFailure& f);

class Reform {
 public:
  // What the store said of the workers: not asked yet, being asked, or they
  // joined a ddp::ElasticGroup.
  enum class Workers : std::uint8_t { kUnknown, kProbing, kElastic };

  Reform(boost::asio::io_context& io, const AgentConfig& cfg);
  Reform(const Reform&) = delete;
  Reform& operator=(const Reform&) = delete;

  // --on_failure=reform, until fall_back(): then every later failure restarts
  // every worker, for the rest of the run.
  bool active() const { return active_; }
  void fall_back();
  Workers workers() const { return workers_; }

  // The oldest failure of `attempt` not acted on yet, or null: a hung
  // worker's record is made before it is killed, and another failure may be
  // announced before it. take() marks it acted on.
  const WorkerFailure* next(int attempt, const std::vector<WorkerFailure>& failures);
  void take() { ++seen_; }

  // Whether a worker of `round` ever joined a ddp::ElasticGroup; workers()
  // says kElastic from then on when one did.
  void probe(const rdzv::RendezvousResult& round, std::function<void(bool joined)> done,
             std::function<void(const std::string&)> failed);
  // As probe, for a lost node: leaves a probe under way alone.
  void ask_elastic(const rdzv::RendezvousResult& round, std::function<void(bool joined)> done,
                   std::function<void(const std::string&)> failed);
  // Tells the workers of `round` that the slots of a lost node are lost:
  // taken by a hot spare's workers (`replace`, the size unchanged) or given
  // up, unless that falls below the job's minimum.
  void lose_node(const rdzv::RendezvousResult& round, std::vector<int> slots, std::string reason,
                 bool replace, std::function<void(const ReformStore::Outcome&)> done,
                 std::function<void(const std::string&)> failed);
  // Tells the workers of `round` that this node's `nproc` workers join them
  // (R/size grows by that much, the generation moves on).
  void grow_node(const rdzv::RendezvousResult& round, int nproc,
                 std::function<void(const ReformStore::Outcome&)> done,
                 std::function<void(const std::string&)> failed);
  // Places of lost nodes the current round gave up (the job went on
  // smaller), and their workers; begin_round() starts the count again (and
  // forgets the generation began()).
  int nodes_given_up() const { return nodes_given_up_; }
  std::int64_t workers_given_up() const { return workers_given_up_; }
  void gave_up_node(int workers) {
    ++nodes_given_up_;
    workers_given_up_ += workers;
  }
  void begin_round() {
    nodes_given_up_ = 0;
    workers_given_up_ = 0;
    began_ = 0;
  }
  // Tells the workers of `round` that f's slot is lost: replaced (its size
  // unchanged) or given up (one fewer), unless that falls below the job's
  // minimum. `done` gets the store's counters.
  void lose(const rdzv::RendezvousResult& round, const WorkerFailure& f, bool replace,
            std::function<void(const ReformStore::Outcome&)> done,
            std::function<void(const std::string&)> failed);
  // The loss as the store took it: a slot given up is remembered; below the
  // minimum, stop_line() says why the job ends.
  void written(const WorkerFailure& f, bool replaced, const ReformStore::Outcome& out, std::int64_t world);
  // The line the job stops with when too few workers are left; "" otherwise.
  const std::string& stop_line() const { return stop_line_; }
  // A replacement is decided for the failure next() returned last (counted
  // before the store is written: its workers may fail of it at once).
  void replacing() { ++replaced_; }
  // Replacements decided in `attempt`: a fall back to restart stops them,
  // and the restart of every worker spends the restart the last one took.
  int replaced_in(int attempt) const { return attempt == attempt_ ? replaced_ : 0; }
  // Whether this node's last write of a loss or a growth began `generation`.
  bool began(std::int64_t generation) const { return generation > 0 && generation == began_; }

  // A slot that never joins (docs/reform.md, "A slot that never joins"):
  // from the start of `round`'s workers, `stalled` gets each generation that
  // a member names stalled. `failed`: the watch could not start or ended.
  void watch(const rdzv::RendezvousResult& round, std::function<void(std::int64_t generation)> stalled,
             std::function<void(const std::string&)> failed);
  // The slots that joined `generation` while it is current and not full;
  // nullopt when nothing is missing from it any more.
  void joined(const rdzv::RendezvousResult& round, std::int64_t generation,
              std::function<void(std::optional<std::vector<int>>, std::int64_t finished)> done,
              std::function<void(const std::string&)> failed);
  // A worker of `round` exited 0: counted under R/finished for every agent.
  void finished(const rdzv::RendezvousResult& round);
  // How many workers of `round` exited 0 while it ran, on any node.
  void finished_count(const rdzv::RendezvousResult& round, std::function<void(std::int64_t)> done,
                      std::function<void(const std::string&)> failed);

  bool busy() const { return store_ && store_->busy(); }

 private:
  const AgentConfig& cfg_;
  bool active_;
  Workers workers_ = Workers::kUnknown;
  int attempt_ = -1;       // of the failures counted in seen_
  std::size_t seen_ = 0;   // failures of attempt_ acted on
  int replaced_ = 0;       // replacements started in attempt_
  std::vector<int> lost_;  // ranks the job went on without
  std::string stop_line_;
  int nodes_given_up_ = 0;
  std::int64_t workers_given_up_ = 0;
  std::int64_t min_workers_ = 0;  // the minimum of the last lose(), for stop_line()
  std::int64_t began_ = 0;        // the generation this node's last write began
  // `done`, after noting the generation the write began in began_.
  std::function<void(const ReformStore::Outcome&)> noting_generation(
      std::function<void(const ReformStore::Outcome&)> done);
  // A write to `round`'s workers' store: where, and under which R.
  ReformStore::Loss writes_to(const rdzv::RendezvousResult& round) const;
  std::unique_ptr<ReformStore> store_;  // with --on_failure=reform only
};

}  // namespace ddp::agent
