// The agent: a coordinator over parts split by role.
//   Lifecycle        lifecycle.hpp        phase, stop reason, restart budget, round, exit codes
//   RendezvousCalls  rendezvous_calls.hpp the handler and its blocking calls
//   WorkerGroup      worker_group.hpp     spawn, output, exit, stop of the local workers
//   Observers        observers.hpp        --event_log and the status record
//   AgentTerminal    agent_terminal.hpp   ptys and the terminal relay for workers
//   StartupTimes     startup_times.hpp    rendezvous, spawn and first-step times per attempt
// agent.cpp decides what each event means for the run (restart, re-form,
// succeed, fail, exit); the parts only report and act.
//
// Everything here runs on the io thread, except the blocking rendezvous calls
// and ProcessRunner's spawner thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "agent_terminal.hpp"
#include "ddp/agent/agent.hpp"
#include "ddp/agent/failure_report.hpp"
#include "ddp/agent/worker_env.hpp"
#include "ddp/store/torch_proxy.hpp"
#include "fence_file.hpp"
#include "file_timer_server.hpp"
#include "health_check.hpp"
#include "lifecycle.hpp"
#include "observers.hpp"
#include "preload_zygote.hpp"
#include "process_runner.hpp"
#include "reform_store.hpp"
#include "rendezvous_calls.hpp"
#include "run_dir.hpp"
#include "startup_times.hpp"
#include "straggler_watch.hpp"
#include "worker_group.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

// A local failure on one line, as the other nodes learn of it: rank, host,
// how it ended and, when known, why (the error file's message, else the last
// stderr line).
std::string describe_failure(const WorkerFailure& f);
// Its parts: how it ended ("exit code 1", "hung, ...; killed") and why (may be empty).
std::string failure_how(const WorkerFailure& f);
std::string failure_why(const WorkerFailure& f);

struct Agent::Impl {
  Impl(AgentConfig c, std::unique_ptr<rdzv::RendezvousHandler> h);
  ~Impl();

  AgentResult run();

  // agent.cpp
  void start_rendezvous();
  void join_rendezvous();
  void announce_rendezvous_start();
  void on_round(const rdzv::RendezvousResult& round);
  void on_round_event(std::int64_t round, rdzv::RoundEvent event, const std::string& detail);
  void fence_while_stopping(rdzv::RoundEvent event, const std::string& detail);
  void on_signal(int sig);
  void spawn_workers();
  void begin_stop(StopReason reason, int sig);
  // A local worker failed while the group runs: a stop for a restart, or
  // with --on_failure=reform a re-form (agent_reform.cpp).
  void on_local_failure();
  // agent_reform.cpp: the failed worker's slot gets a replacement (or, with
  // the restarts spent, the job goes on without it) and the workers re-form.
  void reform_after(const WorkerFailure& f);
  // Asks the store whether the workers are worker SDK trainers (they joined a
  // ddp::ElasticGroup) before the first re-form; falls back to restart if not.
  void probe_workers();
  // Once the store knows: the replacement starts, or the slot is given up,
  // or (below the job's minimum) the job stops.
  void after_reform_writes(const WorkerFailure& f, bool replaced, int restart_count,
                           const ReformStore::Outcome& out);
  // Too few workers left to re-form (reform_stop_line): the final report, the
  // other nodes told, and the job ends with that line.
  void stop_below_minimum();
  void on_all_stopped();
  void after_local_success();
  void poll_all_succeeded();
  void succeed_unconfirmed(const std::string& why);
  void restart_after_remote_failure();
  void fail_for_good(const std::string& reason, bool print = false, ExitCode code = ExitCode::kFailed);
  // Counts a failed attempt against --max_no_progress_restarts; returns the
  // line to stop the job with when the limit is reached, else "".
  std::string judge_progress();
  void finish(int code, const std::string& error = "");
  void finish(ExitCode code, const std::string& error = "") { finish(exit_code(code), error); }
  void write_failure_report(bool final_report);
  // node_exclusion.cpp: counts a local failure against --max_node_failures
  // within --node_failure_window; returns why this node is to be excluded
  // once the limit is reached, else "".
  std::string count_node_failure();
  // Keeps this node's host out of the job's later rounds, tells the other
  // nodes, and ends this agent with exit 6 (one line).
  void exclude_this_node(const std::string& why, const std::string& last_failure);

  // torch_store.cpp: the loopback TCPStore endpoint torch workers get.
  void start_torch_store();
  void point_torch_store(const rdzv::RendezvousResult& r);
  Endpoint torch_store_endpoint() const;
  // agent_liveness.cpp: the channels workers report liveness on.
  void start_liveness();
  // preload.cpp: the --preload zygote, started before the first rendezvous.
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
  std::chrono::milliseconds poll_delay{10};
  std::unique_ptr<rdzv::RendezvousHandler> initial_handler;  // until run() hands it on

  Lifecycle life;
  StartupTimes startup{io};  // rendezvous, spawn and first-step times of the attempt
  Observers observers;
  std::unique_ptr<ProcessRunner> runner;
  std::unique_ptr<PreloadZygote> zygote;  // --preload; reset before the runner
  std::optional<RunDir> run_dir;
  std::unique_ptr<AgentTerminal> terminal;
  std::unique_ptr<WorkerGroup> group;
  // Step times compared across the job (docs/agent.md, "Stragglers named").
  std::unique_ptr<StragglerWatch> stragglers;
  std::unique_ptr<RendezvousCalls> rdzv;  // after io: destroyed before it
  // --on_failure=reform: in effect (until a worker shows it cannot re-form),
  // the agent's writes to the workers' store, the ranks this node's workers
  // went on without, and the line the job stops with when too few are left.
  bool reform = false;
  std::unique_ptr<ReformStore> reform_store;  // after io: destroyed before it
  std::vector<int> lost_ranks;
  std::size_t failures_seen = 0;  // of the group's failures() in attempt failures_attempt
  int failures_attempt = -1;
  std::string reform_stop_line;
  bool elastic_workers = false;  // a worker joined a ddp::ElasticGroup (probe_workers)
  bool probing_workers = false;

  EnvMap base_env;
  EnvMap liveness_env;                          // what workers get of the liveness channels
  std::unique_ptr<FileTimerServer> file_timer;  // TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::string store_lost;                       // the kStoreLost detail, for the exit message
  int signal_received = 0;
  AgentResult result;
  int restarts_announced = 0;
  // This attempt's hang was already reported to the other nodes, before
  // its worker was killed (see WorkerGroup::record_hang).
  bool hang_reported = false;
  int no_progress_restarts = 0;  // restarts in a row after attempts without progress
  std::deque<std::chrono::steady_clock::time_point> node_failures;  // within --node_failure_window
  std::string last_event_detail;  // of the latest round event, for restart/scale reasons
  // An event of the round being joined that came before the round itself
  // (another node's workers failed while this one waited out the fence):
  // acted on as soon as that round is delivered.
  struct EarlyEvent {
    std::int64_t round = 0;
    rdzv::RoundEvent event{};
    std::string detail;
  };
  std::optional<EarlyEvent> early_event;
  std::string final_reason;                             // why fail_for_good ended the run
  std::unique_ptr<store::TorchStoreProxy> torch_store;  // bound before any worker exists
  std::future<void> stale_cgroups;                      // reap_stale_cgroups(), before the first guard starts
  // The fence backstop the guards read; the rendezvous moves its deadline.
  std::shared_ptr<FenceFile> fence = std::make_shared<FenceFile>();
  // Shared with the rendezvous thread, which may outlive us (abandon).
  std::shared_ptr<HealthCheck> health;
  boost::asio::steady_timer health_timer{io};
  int health_failures = 0;  // failed checks in a row before this rendezvous
};

}  // namespace ddp::agent
