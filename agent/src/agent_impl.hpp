// The agent's state machine, shared by agent.cpp (rendezvous, restarts,
// signals, exit) and agent_workers.cpp (spawning, output, exits, stopping).
//
// Everything here runs on the io thread, except what is handed to `rdzv_`
// (blocking handler calls) and ProcessRunner's spawner thread.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "blocking_caller.hpp"
#include "ddp/agent/agent.hpp"
#include "ddp/agent/failure_report.hpp"
#include "ddp/agent/worker_env.hpp"
#include "ddp/store/torch_proxy.hpp"
#include "process_runner.hpp"
#include "run_dir.hpp"
#include "terminal_relay.hpp"
#include "worker_output.hpp"
#include "event_log.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

enum class Phase { kRendezvous, kRunning, kStopping, kSucceeded, kClosing, kDone };

// Why the workers are being stopped; decides what happens once they are gone.
enum class StopReason {
  kLocalFailure,     // a local worker failed: spends a restart
  kRemoteFailure,    // another node's workers failed: spends a restart too, so
                     // every node's TORCHELASTIC_RESTART_COUNT stays equal
  kMembership,       // nodes joined or left: re-form without spending a restart
  kStoreLost,        // exit 3
  kJobClosed,        // a joining node found a mistake (e.g. --nnodes): exit 3
  kSignal,           // exit 128+N
};

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool spawned = false;
  bool done = false;
  int wait_status = 0;
  std::string spawn_error;
  std::string error_file;
  std::string stderr_log;
  std::unique_ptr<WorkerOutput> output;
  WorkerTerminal terminal;
};

// Lets the handler's event thread post to the io_context only while it exists.
struct EventSink {
  std::mutex mu;
  boost::asio::io_context* io = nullptr;
};

// The store key of a node's status record: "/<run_id>/agent/status/<node_id>".
std::string status_key(const std::string& run_id, const std::string& node_id);

struct Agent::Impl {
  Impl(AgentConfig c, std::unique_ptr<rdzv::RendezvousHandler> h);
  ~Impl();

  AgentResult run();

  // agent.cpp
  void start_rendezvous();
  void on_round(const rdzv::RendezvousResult& round);
  void on_rendezvous_error(int code, const std::string& message);
  void on_round_event(rdzv::RoundEvent event, const std::string& detail);
  void on_signal(int sig);
  void on_all_stopped();
  void after_local_success();
  void poll_all_succeeded();
  void succeed_unconfirmed(const std::string& why);
  void restart_after_remote_failure();
  void fail_for_good(const std::string& reason, bool print = false);
  void finish(int code, const std::string& error = "");
  void write_failure_report(bool final_report);

  // agent_events.cpp: --event_log lines and the status record in the store.
  void open_observers();
  void emit(const std::string& event, nlohmann::json fields);
  void announce_rendezvous_start();
  void note_spawned(int local_rank, pid_t pid);
  void emit_worker_exit(const Worker& w);
  void emit_finish(int code, const std::string& error);
  void publish_status(const std::string& final_state = "");
  void flush_status();

  // torch_store.cpp: the loopback TCPStore endpoint torch workers get.
  void start_torch_store();
  void point_torch_store(const rdzv::RendezvousResult& r);
  Endpoint torch_store_endpoint() const;
  // agent_terminal.cpp: what workers get of the agent's terminal.
  void open_terminal();
  WorkerTerminal plan_terminal(int local_rank, WorkerOutputOptions& out);
  WorkerStdio open_stdio(Worker& w);
  void on_window_change();

  // agent_workers.cpp
  void spawn_workers();
  void on_spawned(int local_rank, pid_t pid, const std::string& error);
  void on_worker_exit(int local_rank, int wait_status);
  void begin_stop(StopReason reason, int sig);
  void kill_all(int sig);
  int live_workers() const;
  WorkerFailure make_failure(const Worker& w) const;

  AgentConfig cfg;
  std::shared_ptr<spdlog::logger> log;
  boost::asio::io_context io;
  std::shared_ptr<EventSink> sink = std::make_shared<EventSink>();
  boost::asio::signal_set signals{io};
  boost::asio::steady_timer stop_timer{io};
  boost::asio::steady_timer poll_timer{io};
  std::chrono::milliseconds poll_delay{10};
  std::unique_ptr<ProcessRunner> runner;
  std::optional<RunDir> run_dir;
  // Shared with closures on the blocking thread, which may outlive us (abandon).
  std::shared_ptr<rdzv::RendezvousHandler> handler;
  std::unique_ptr<BlockingCaller> rdzv;  // after handler: destroyed first

  EnvMap base_env;
  rdzv::RendezvousResult round;
  Phase phase = Phase::kRendezvous;
  StopReason stop_reason = StopReason::kLocalFailure;
  int stop_signal = SIGTERM;  // what begin_stop sent; late spawns get it too
  int restart_count = 0;
  std::string store_lost;  // the kStoreLost detail, for the exit message
  int attempt = -1;  // index of the current spawn of the worker group
  std::vector<Worker> workers;
  int pending_spawns = 0;
  int succeeded = 0;
  std::vector<WorkerFailure> failures;  // of the current attempt
  int signal_received = 0;
  bool omp_notice_logged = false;
  AgentResult result;
  std::unique_ptr<EventLog> event_log;
  std::unique_ptr<BlockingCaller> status_caller;  // status writes never wait behind a join
  bool have_round = false;
  std::vector<int> deferred_exits;  // local ranks that exited before worker_start was logged
  int restarts_announced = 0;
  std::string last_event_detail;  // of the latest round event, for restart/scale reasons
  std::string final_reason;       // why fail_for_good ended the run
  std::unique_ptr<store::TorchStoreProxy> torch_store;  // bound before any worker exists
  std::unique_ptr<TerminalRelay> relay;
  std::unique_ptr<boost::asio::signal_set> winch;  // SIGWINCH, when workers have ptys
  std::shared_ptr<ConsoleLine> console_line = std::make_shared<ConsoleLine>();
  bool pty_warned = false;
};

}  // namespace ddp::agent
