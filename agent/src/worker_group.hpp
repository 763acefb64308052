// The local worker group: spawns one attempt's workers with the env contract,
// routes their output, observes their exits, and stops them (signal, grace,
// SIGKILL). It decides nothing about restarts: what it sees goes to the
// agent through WorkerGroupEvents.
//
// Thread-safety: the io thread only; every event runs on it.
#pragma once

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent_terminal.hpp"
#include "culprit_rule.hpp"
#include "ddp/agent/agent_config.hpp"
#include "ddp/agent/failure_report.hpp"
#include "ddp/agent/worker_env.hpp"
#include "file_timer_server.hpp"
#include "hang_watch.hpp"
#include "heartbeat_monitor.hpp"
#include "preload_zygote.hpp"
#include "process_runner.hpp"
#include "run_dir.hpp"
#include "stack_dump.hpp"
#include "worker_output.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

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
  bool hung = false;               // killed for hanging: its failure is already recorded
  bool timer_scopes_full = false;  // warned that it has the most FileTimer scopes ddprun keeps
  std::string python_stack_file;   // its faulthandler dump file; empty: native
  // Its guard saw the kernel's OOM killer end it (oom_watch.hpp).
  bool oom_killed = false;
  std::string memory_peak;  // "memory peak 7.8 GiB"; "" unknown
  std::int64_t memory_peak_bytes = -1;
  // --on_failure=reform: how many times this slot's worker was replaced in
  // the attempt (callbacks of an earlier worker are ignored); whether the
  // slot's replacement waits for the failed worker's exit; whether the slot
  // was given up (no replacement: the job goes on without it).
  int incarnation = 0;
  int replace_with_restart_count = -1;  // >= 0: replace once it exited
  bool dropped = false;

  // It exited 0 (its slot's current worker).
  bool exited_ok() const { return done && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }
};

struct WorkerGroupEvents {
  // A spawn reported back (pid < 0: it failed); the worker's pid is set.
  std::function<void(int local_rank, pid_t pid)> spawn_reported;
  // A worker exited (or could not start), after its last output line.
  std::function<void(const Worker&)> exited;
  // A worker failed while the group was running; failures() has it.
  std::function<void()> failed;
  // Every worker exited 0.
  std::function<void()> succeeded;
  // After stop(): no worker is left and no spawn is pending.
  std::function<void()> stopped;
  // A worker missed a deadline and is being killed (`late`: how long after
  // the deadline); `failed` follows.
  std::function<void(const Worker&, const HangInfo&, std::chrono::milliseconds late)> hung;
  // A hung worker's failure is recorded; it is killed once `recorded` is
  // called (when the job's store has the record: the other nodes' ranks fail
  // within milliseconds of the kill, and must find it there), or after
  // kHangRecordWait.
  std::function<void(const WorkerFailure&, std::function<void()> recorded)> hang_recorded;
  // Workers' heartbeat ages moved on (every few seconds while they beat).
  std::function<void()> heartbeat_ages;
};

// What one attempt's workers are started with besides the config.
struct GroupLaunch {
  const rdzv::RendezvousResult* round = nullptr;
  int restart_count = 0;
  Endpoint torch_store;
  const EnvMap* base_env = nullptr;
  // Set in every worker's env on top of the contract (liveness channels); may be null.
  const EnvMap* extra_env = nullptr;
  // --on_failure=reform in effect: DDP_REFORM=1 in every worker's env.
  bool reform = false;
  // A hot spare taking a lost node's place in a running round: every worker
  // joins the running workers' next generation without state (DDP_REFORM_JOINING=1).
  bool joining = false;
  int base_world = 0;  // > 0 with `joining`: DDP_REFORM_BASE_WORLD
};

class WorkerGroup {
 public:
  WorkerGroup(boost::asio::io_context& io, const AgentConfig& cfg, ProcessRunner& runner,
              const RunDir& run_dir, AgentTerminal& terminal, std::shared_ptr<spdlog::logger> log,
              WorkerGroupEvents events);
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts the next attempt. Throws ConfigError (a log file that cannot be
  // opened) before any worker of it is spawned.
  void start(const GroupLaunch& launch);
  // Sends `sig` to every live worker (and to those still spawning, once they
  // are), SIGKILL after --stop_timeout, then `stopped`. `count_failures`:
  // workers failing on their own meanwhile join failures().
  void stop(int sig, bool count_failures);
  // A signal while stopping decides the outcome: later failures do not count.
  void stop_counting_failures() { count_failures_ = false; }
  // Sends `sig` to every live worker's process group.
  void signal_all(int sig);
  // Window size of the agent's terminal changed: workers' ptys follow.
  void resize_ptys(const winsize& size);
  void cancel_timers();
  // --preload: Python-script workers are forked by `zygote` from now on (null: never).
  void use_zygote(PreloadZygote* zygote) { zygote_ = zygote; }

  // --on_failure=reform: starts a replacement for `local_rank`, whose worker
  // failed, within the running attempt: same RANK, LOCAL_RANK and WORLD_SIZE,
  // DDP_REFORM_JOINING=1, TORCHELASTIC_RESTART_COUNT=`restart_count`, its
  // output where the slot's went (log files appended to), its liveness state
  // fresh. A worker still exiting (a hung one being killed) is replaced once
  // it exited. Nothing happens unless the group runs.
  void replace(int local_rank, int restart_count);
  // --on_failure=reform: the slot's failed worker is not replaced; the group
  // succeeds once every other slot's worker exited 0.
  void drop(int local_rank);

  // Liveness. A torch FileTimer request from a worker (or a process of its tree).
  void on_timer_request(const TimerRequest& r);
  // The requests held while spawns were pending, now that one was reported.
  void replay_early_timer_requests();
  // Collects every live worker's stack into the attempt's log directory (SIGURG to ddprun).
  void dump_stacks();
  // A worker named from outside its deadlines: a straggler
  // (--straggler_action=restart; info.source "straggler"), or a slot that
  // never joined a re-form generation (--on_failure=reform; "reform"). Its
  // stack, then its kill, as a failure of the attempt that names it so.
  // Nothing happens unless it runs and is not being killed already.
  void kill_named(int local_rank, HangInfo info);

  int attempt() const { return attempt_; }
  // Workers of this attempt that exited 0 while it ran.
  int succeeded() const { return succeeded_; }
  int live() const;
  int pending_spawns() const { return pending_spawns_; }
  const std::vector<Worker>& workers() const { return workers_; }
  const std::vector<WorkerFailure>& failures() const { return failures_; }
  const HeartbeatMonitor& heartbeats() const { return *heartbeats_; }

 private:
  enum class State { kIdle, kRunning, kStopping, kSucceeded };

  void on_spawned(int local_rank, pid_t pid, const std::string& error);
  void on_exit(int local_rank, int wait_status);
  void check_stopped();
  void on_deadline(const Deadline& d);
  HeartbeatMonitor::Hooks heartbeat_hooks();  // worker_heartbeats.cpp
  // Kills a hung worker's tree, records it as a failure and reports it.
  void kill_hung(Worker& w, HangInfo info, std::chrono::milliseconds late);
  // The steps of kill_hung: the failure record (timed now, so that a rank
  // failing because of the kill does not become the root cause; the worker
  // is then `hung`: its exit is not a failure of its own), announced through
  // hang_recorded and waited for (after_recorded), SIGKILL to the tree, and
  // the report that stops the group.
  void kill_tree(Worker& w);
  // Returns the record's index in failures_, valid for the rest of the attempt.
  std::size_t record_hang(Worker& w, HangInfo info, std::chrono::milliseconds late);
  // hang_recorded for failures_[failure], then `then` once the record is in
  // the job's store or after kHangRecordWait, whichever comes first; not at
  // all when the attempt ended meanwhile. The worker is hang_collection_
  // until then.
  void after_recorded(std::size_t failure, std::function<void()> then);
  static constexpr std::chrono::seconds kHangRecordWait{1};
  void report_hang(const Worker& w, const HangInfo& hang, std::chrono::milliseconds late);
  // Puts the collected stacks into the hang's record (and the stacks file);
  // `local_rank` is the hung worker's.
  void add_hang_stacks(HangInfo& hang, int local_rank, std::vector<RankStack> stacks);
  // Collects the hung worker's stack (with the Python workers'), records the
  // failure and kills it, then the native workers' stacks (frozen meanwhile),
  // adds them to that record and reports it. Each step is bounded.
  void collect_then_kill(int local_rank, HangInfo info, std::chrono::steady_clock::time_point deadline);
  // The culprit rule's steps: kill the culprit once its stack is in, then
  // the frozen native workers' stacks; or, when every local rank waits for
  // a rank of another node, leave it to that node for kPeerGrace.
  void kill_culprit(int local_rank, HangInfo info, std::chrono::steady_clock::time_point deadline,
                    std::vector<RankStack> stacks, std::vector<StackTarget> native);
  // After kill_culprit's kill: the frozen native workers' stacks, then the report.
  void report_culprit(int local_rank, std::chrono::milliseconds killed_late, std::size_t failure,
                      std::vector<RankStack> stacks, std::vector<StackTarget> native);
  void wait_for_other_node(int local_rank, HangInfo info, std::chrono::steady_clock::time_point deadline,
                           const CulpritVerdict& verdict);
  // What each live local rank was doing: its liveness file's collectives,
  // and for Python ranks whose dump is in `stacks` their Flight Recorder line or stack.
  std::vector<RankActivity> activities(const std::vector<RankStack>& stacks) const;
  // Whether the job has ranks on other nodes (and they had their time).
  OtherNodes other_nodes() const;
  static std::chrono::milliseconds late_since(std::chrono::steady_clock::time_point deadline);
  std::vector<StackTarget> stack_targets() const;
  // Writes attempt_<k>/stacks_<n>.txt; returns its path (empty on failure).
  std::string write_stacks(const std::vector<RankStack>& stacks);
  // The local rank whose worker is `pid` or an ancestor of it; -1 if none.
  int local_rank_of(pid_t pid) const;
  WorkerFailure make_failure(const Worker& w) const;
  // Reads the guard's line naming an OOM kill (oom_watch.hpp) into `w`.
  void note_oom_kill(Worker& w);
  // Sets up `w`'s output (ConfigError when a log file cannot be opened);
  // `append`: a replacement's, after the lines of the worker it replaces.
  void make_output(Worker& w, bool append);
  // Spawns local rank `lr`'s worker (its Worker set up) with `launch_`.
  void spawn(int lr, int restart_count, bool joining);
  void succeed_if_done();

  boost::asio::io_context& io_;
  const AgentConfig& cfg_;
  ProcessRunner& runner_;
  const RunDir& run_dir_;
  AgentTerminal& terminal_;
  std::shared_ptr<spdlog::logger> log_;
  WorkerGroupEvents events_;
  boost::asio::steady_timer stop_timer_;
  HangWatch watch_;
  std::unique_ptr<HeartbeatMonitor> heartbeats_;
  StackCollector stacks_;
  int stack_dumps_ = 0;  // stacks files written in this attempt

  State state_ = State::kIdle;
  int attempt_ = -1;  // index of the current spawn of the worker group
  int rank_offset_ = 0;
  int restart_count_ = 0;
  std::vector<Worker> workers_;
  int pending_spawns_ = 0;
  // FileTimer requests from a pid no worker has yet, while spawns are pending:
  // a fast worker writes before its guard has reported its pid. Looked at
  // again as each spawn is reported (at most kMaxEarlyTimerRequests).
  std::vector<TimerRequest> early_timer_requests_;
  int succeeded_ = 0;
  int dropped_ = 0;  // slots given up in this attempt (--on_failure=reform)
  GroupLaunch launch_;
  std::vector<std::string> cpus_;  // --numa_binding, per local rank
  std::shared_ptr<SharedLog> filtered_out_, filtered_err_;
  std::vector<WorkerFailure> failures_;  // of the current attempt
  int stop_signal_ = SIGTERM;            // what stop() sent; late spawns get it too
  // The local rank whose hang is being collected (stacks, then the report);
  // -1 when none. Other deadlines meanwhile are most likely waiting for it.
  int hang_collection_ = -1;
  // How long the local ranks may wait for a rank of another node (whose own
  // deadline and node act on it) before the first of them is killed instead.
  static constexpr std::chrono::seconds kPeerGrace{5};
  int peer_wait_ = -1;        // the local rank left to another node; -1: none
  bool peer_waited_ = false;  // once per attempt: after the grace, the rule is local
  HangInfo peer_info_;
  std::chrono::steady_clock::time_point peer_deadline_{};
  bool count_failures_ = false;
  bool omp_notice_logged_ = false;
  bool numa_notice_logged_ = false;
  PreloadZygote* zygote_ = nullptr;
};

}  // namespace ddp::agent
