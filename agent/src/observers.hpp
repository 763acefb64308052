// What the agent tells the outside world about its lifecycle: --event_log
// lines and the status record other tools (`ddp-store status`) read from the
// store. Both are written on lifecycle events; the status record also every
// few seconds while workers heartbeat (WorkerGroupEvents::heartbeat_ages).
//
// Thread-safety: the io thread only; status writes go to the store on their
// own thread so they never wait behind a rendezvous join.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "blocking_caller.hpp"
#include "ddp/agent/agent_config.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "event_log.hpp"
#include "lifecycle.hpp"
#include "startup_times.hpp"
#include "straggler_watch.hpp"
#include "worker_group.hpp"

namespace ddp::agent {

// The store key of a node's status record: "/<run_id>/agent/status/<node_id>".
std::string status_key(const std::string& run_id, const std::string& node_id);

class Observers {
 public:
  Observers(const AgentConfig& cfg, const Lifecycle& life);
  Observers(const Observers&) = delete;
  Observers& operator=(const Observers&) = delete;

  // Opens --event_log (throws ConfigError naming it) before anything connects.
  void open();
  // Where the status record goes, and the workers it lists.
  void attach(std::shared_ptr<rdzv::RendezvousHandler> handler, const WorkerGroup& group);

  // The job's named stragglers and the workers' step times go in the status record.
  void attach_stragglers(const StragglerWatch& stragglers) { stragglers_ = &stragglers; }

  // The attempt's startup times: in "startup"/"first_step" lines and the status record.
  void attach_startup(StartupTimes& startup) { startup_ = &startup; }
  // A "startup" or "first_step" line with the attempt's times.
  void emit_startup(const std::string& event);
  // One --event_log line with the run's common fields added.
  void emit(const std::string& event, nlohmann::json fields);
  // A spawn reported back: worker_start once every spawn of the group has.
  void spawn_reported(int local_rank, pid_t pid);
  void worker_exited(const Worker& w);
  // success/failure and shutdown lines, the final status record.
  void finished(int code, const std::string& reason);
  // Writes this node's failure report (/<run>/agent/failure/<node>) for the
  // daemon's status page: its root cause, stack and stderr tail, bounded.
  void publish_failure(const FailureReport& report, const WorkerFailure& root, const std::string& summary);
  // Writes this node's status record (`final_state` overrides the phase).
  void publish_status(const std::string& final_state = "");
  // Waits (bounded) for the last status write; false when it is stuck and the
  // process must be abandoned. `store_lost`: do not wait at all.
  bool flush(bool store_lost);

  // The status record of a node that failed its health checks and does not
  // join: state "unhealthy: <reason>", no workers, its local world size, and
  // the round and ranks it last held; written even before any round.
  void publish_unhealthy(const std::string& reason, int failures);

 private:
  // The fields every status record has: who wrote it, its restarts, when.
  nlohmann::json record_base(const std::string& state) const;
  // Queues the write of `record` as this node's status record (advisory:
  // a failed write is dropped, the rendezvous path reports a lost store).
  void write_record(const nlohmann::json& record);
  // Queues the write of `value` at `key` (advisory, as above).
  void write_key(std::string key, std::string value);

  const AgentConfig& cfg_;
  const Lifecycle& life_;
  const WorkerGroup* group_ = nullptr;
  StartupTimes* startup_ = nullptr;
  const StragglerWatch* stragglers_ = nullptr;
  std::shared_ptr<rdzv::RendezvousHandler> handler_;
  std::unique_ptr<EventLog> event_log_;
  std::unique_ptr<BlockingCaller> status_caller_;  // status writes never wait behind a join
  std::vector<int> deferred_exits_;                // local ranks that exited before worker_start was logged
  int started_attempt_ = -1;                       // the attempt whose group worker_start is logged
};

}  // namespace ddp::agent
