// The agent: a coordinator over parts split by role.
//   Lifecycle        lifecycle.hpp        phase, stop reason, restart budget, round, exit codes
//   RendezvousCalls  rendezvous_calls.hpp the handler and its blocking calls
//   HealthGate       health_gate.hpp      the health checks before each rendezvous, their retries
//   WorkerServices   worker_services.hpp  base env, torch store proxy, FileTimer pipe, fence file
//   WorkerGroup      worker_group.hpp     spawn, output, exit, stop of the local workers
//   Reform           reform.hpp           --on_failure=reform: failures acted on, the workers' store
//   RestartLimits    restart_limits.hpp   --max_no_progress_restarts, --max_node_failures
//   FailureRecords   failure_records.hpp  failures told to the other nodes, the job's first failure
//   RoundEvents      round_events.hpp     the event that decided a stop, an event before its round
//   StragglerWatch   straggler_watch.hpp  step times compared across the job
//   Observers        observers.hpp        --event_log and the status record
//   AgentTerminal    agent_terminal.hpp   ptys and the terminal relay for workers
//   StartupTimes     startup_times.hpp    rendezvous, spawn and first-step times per attempt
//   PreloadZygote    preload_zygote.hpp   --preload: the zygote workers are forked from
// The parts own their state and report; the coordinator decides what each
// event means for the run (agent.cpp, "The policy": restart, re-form,
// succeed, fail, exit). Its slices are agent_<topic>.cpp.
//
// Everything here runs on the io thread, except the blocking rendezvous calls
// and ProcessRunner's spawner thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "agent_terminal.hpp"
#include "ddp/agent/agent.hpp"
#include "ddp/agent/failure_report.hpp"
#include "failure_records.hpp"
#include "health_gate.hpp"
#include "lifecycle.hpp"
#include "observers.hpp"
#include "preload_zygote.hpp"
#include "process_runner.hpp"
#include "reform.hpp"
#include "rendezvous_calls.hpp"
#include "restart_limits.hpp"
#include "round_events.hpp"
#include "run_dir.hpp"
#include "startup_times.hpp"
#include "straggler_watch.hpp"
#include "worker_group.hpp"
#include "worker_services.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

struct Agent::Impl {
  Impl(AgentConfig c, std::unique_ptr<rdzv::RendezvousHandler> h);
  ~Impl();

  AgentResult run();

  // agent_setup.cpp: the parts made and wired before the first rendezvous.
  void set_up();
  void make_parts();
  void make_group(const std::shared_ptr<rdzv::RendezvousHandler>& handler);

  // agent.cpp: rendezvous, rounds and their events, stops.
  void start_rendezvous();
  void join_rendezvous();
  void announce_rendezvous_start();
  void on_round(const rdzv::RendezvousResult& round);
  void on_round_event(std::int64_t round, rdzv::RoundEvent event, const std::string& detail);
  void fence_while_stopping(rdzv::RoundEvent event, const std::string& detail);
  void spawn_workers();
  void begin_stop(StopReason reason, int sig);

  // agent.cpp, "The policy": what a failure, a stop or an exit leads to.
  enum class AfterFailure : std::uint8_t { kRestart, kExclude, kFailNoProgress, kFailSpent };
  void on_local_failure();
  void on_all_stopped();
  AfterFailure next_after_failure(bool local, std::string& why);
  void after_local_failure();
  void after_remote_failure();
  void fail_for_good(const std::string& reason, bool print = false, ExitCode code = ExitCode::kFailed);
  void finish(int code, const std::string& error = "");
  void finish(ExitCode code, const std::string& error = "") { finish(exit_code(code), error); }
  void write_failure_report(bool final_report);
  // The root cause of this node's failures ("rank R on HOST: HOW (WHY)").
  const WorkerFailure& root_failure() const;

  // agent_reform.cpp: with --on_failure=reform the failed worker's slot gets
  // a replacement (or, with the restarts spent, the job goes on without it)
  // and the workers re-form; workers that cannot re-form fall back to restart.
  void probe_workers();
  void reform_after(const WorkerFailure& f);
  // A slot that never joins a re-form generation is killed and replaced.
  void watch_reform_stalls();
  void on_reform_stalled(std::int64_t generation);
  void fall_back_to_restart(const std::string& why);
  // A re-form that a finished worker (exit 0) would never join: logs
  // "reform: <why>: restarting every worker" and restarts as `restart` does
  // (for this node's failure, or, with none, as for another node's);
  // `refund`: the restart a replacement spent is given back (one restart for
  // the failure).
  void restart_for_finished(const std::string& why, bool refund);
  void stop_below_minimum();
  // agent_node_loss.cpp: a lost node's place is taken by a hot spare or given
  // up while the other nodes' workers re-form, when they can.
  void watch_departures();
  void on_node_departure(const rdzv::Departure& d);
  // Workers that re-form: a hot spare is offered the place unless a worker of
  // the job already finished (exit 0), which the spare's would wait for.
  void settle_reforming(const rdzv::Departure& d);
  // `offer`: the hot spares may take the place (with `reforming` only).
  void settle_node(const rdzv::Departure& d, bool reforming, bool offer);
  void on_place_settled(const rdzv::Departure& d, const std::vector<int>& slots, const rdzv::Place& p,
                        bool reforming);
  // A hot spare admitted into a running round (RendezvousResult::takes_place).
  void take_lost_place();
  bool taking_place = false;
  int joined_base_world = 0;  // of a round joined while it ran: its workers' DDP_REFORM_BASE_WORLD
  // The world the workers' R/size counts from (docs/reform.md): the round's,
  // or, for a node that joined it running, the world it found.
  std::int64_t reform_base_world() const {
    return joined_base_world > 0 ? joined_base_world : life.round().world_size;
  }
  // The round with that world, for the store writes of Reform.
  rdzv::RendezvousResult reform_round() const {
    auto r = life.round();
    r.world_size = static_cast<int>(reform_base_world());
    return r;
  }
  // A node waits to join the running round (room below MAX): it may grow it.
  void on_newcomer(std::int64_t round, const std::string& detail);

  // agent_success.cpp: this node's workers succeeded; the job's success is
  // confirmed by every node, or by the loss of the store.
  void after_local_success();
  void poll_all_succeeded(std::chrono::milliseconds delay);
  void succeed_unconfirmed(const std::string& why);

  // agent_signals.cpp: signals forwarded, stops, stacks on demand.
  void on_signal(int sig);
  void close_after_signal();

  // agent_exclusion.cpp: keeps this node's host out of the job's later
  // rounds, tells the other nodes, and ends this agent with exit 6.
  void exclude_this_node(const std::string& why, const std::string& last_failure);
  // agent_preload.cpp: the --preload zygote, started before the first rendezvous.
  void start_preload();
  // agent_health.cpp: the health checks before each rendezvous; an unhealthy
  // node retries with backoff and gives up with exit 5.
  void check_health_then_join();
  void on_health(const HealthVerdict& verdict);

  AgentConfig cfg;
  std::shared_ptr<spdlog::logger> log;
  boost::asio::io_context io;
  boost::asio::signal_set signals{io};
  boost::asio::steady_timer poll_timer{io};
  std::unique_ptr<rdzv::RendezvousHandler> initial_handler;  // until run() hands it on

  Lifecycle life;
  StartupTimes startup{io};  // rendezvous, spawn and first-step times of the attempt
  Observers observers;
  std::unique_ptr<ProcessRunner> runner;
  std::unique_ptr<PreloadZygote> zygote;  // --preload; reset before the runner
  std::optional<RunDir> run_dir;
  WorkerServices services{io, cfg, log};  // after run_dir: its pipe goes first
  std::unique_ptr<AgentTerminal> terminal;
  std::unique_ptr<WorkerGroup> group;
  std::unique_ptr<StragglerWatch> stragglers;
  std::unique_ptr<RendezvousCalls> rdzv;  // after io: destroyed before it
  Reform reform{io, cfg};                 // after io: destroyed before it
  HealthGate health{io, cfg};
  RestartLimits limits{cfg};
  FailureRecords records{cfg};

  AgentResult result;
  std::string final_reason;  // why fail_for_good ended the run
  int signal_received = 0;
  int restarts_announced = 0;
  RoundEvents round_events;  // the deciding event, the store-lost detail, an early event
};

}  // namespace ddp::agent
