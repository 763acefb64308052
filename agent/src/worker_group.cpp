#include "worker_group.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "ddp/agent/numa_binding.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "guard_protocol.hpp"
#include "oom_watch.hpp"

namespace ddp::agent {

WorkerGroup::WorkerGroup(boost::asio::io_context& io, const AgentConfig& cfg, ProcessRunner& runner,
                         const RunDir& run_dir, AgentTerminal& terminal, std::shared_ptr<spdlog::logger> log,
                         WorkerGroupEvents events)
    : io_(io),
      cfg_(cfg),
      runner_(runner),
      run_dir_(run_dir),
      terminal_(terminal),
      log_(std::move(log)),
      events_(std::move(events)),
      stop_timer_(io),
      watch_(io, [this](const Deadline& d) { on_deadline(d); }),
      stacks_(io) {
  heartbeats_ = std::make_unique<HeartbeatMonitor>(io, cfg_.liveness, run_dir_, log_, heartbeat_hooks());
}

void WorkerGroup::start(const GroupLaunch& launch) {
  ++attempt_;
  hang_collection_ = -1;
  peer_wait_ = -1;
  peer_waited_ = false;
  run_dir_.prepare_attempt(attempt_, cfg_.nproc_per_node);
  watch_.clear_all();
  heartbeats_->start_attempt(attempt_, cfg_.nproc_per_node);
  workers_.clear();
  early_timer_requests_.clear();
  failures_.clear();
  succeeded_ = 0;
  dropped_ = 0;
  stack_dumps_ = 0;
  state_ = State::kRunning;
  launch_ = launch;
  const auto& round = *launch.round;
  rank_offset_ = round.rank_offset;
  restart_count_ = launch.restart_count;

  // torchrun's --duplicate_std*_filters: one file per attempt, every rank's lines.
  filtered_out_.reset();
  filtered_err_.reset();
  if (!cfg_.duplicate_stdout_filters.empty()) {
    filtered_out_ = std::make_shared<SharedLog>(run_dir_.attempt(attempt_) / "filtered_stdout.log");
  }
  if (!cfg_.duplicate_stderr_filters.empty()) {
    filtered_err_ = std::make_shared<SharedLog>(run_dir_.attempt(attempt_) / "filtered_stderr.log");
  }
  // Build every Worker first: output callbacks index into `workers_`, which must
  // not reallocate once spawning starts.
  workers_.resize(static_cast<std::size_t>(cfg_.nproc_per_node));
  for (int lr = 0; lr < cfg_.nproc_per_node; ++lr) {
    Worker& w = workers_[static_cast<std::size_t>(lr)];
    w.local_rank = lr;
    w.rank = round.rank_offset + lr;
    w.error_file = (run_dir_.worker(attempt_, lr) / "error.json").string();
    make_output(w, /*append=*/false);
  }

  cpus_.clear();
  if (cfg_.numa_binding != NumaBinding::kNone) {
    const auto cvd = launch.base_env->find("CUDA_VISIBLE_DEVICES");
    std::string notice;
    cpus_ = machine_numa_binding(cfg_.numa_binding, cfg_.nproc_per_node,
                                 cvd == launch.base_env->end() ? "" : cvd->second, &notice);
    if (!notice.empty() && !numa_notice_logged_) log_->info("{}", notice);
    numa_notice_logged_ = true;
    for (std::size_t lr = 0; lr < cpus_.size(); ++lr) {
      log_->debug("--numa_binding={}: local rank {} on CPUs {}", numa_binding_name(cfg_.numa_binding), lr,
                  cpus_[lr]);
    }
  }
  for (int lr = 0; lr < cfg_.nproc_per_node; ++lr) spawn(lr, launch.restart_count, launch.joining);
}

void WorkerGroup::make_output(Worker& w, bool append) {
  const int lr = w.local_rank;
  const auto dir = run_dir_.worker(attempt_, lr);
  const Std redirect = cfg_.redirects.for_rank(lr);
  const Std tee = cfg_.tee.for_rank(lr);
  const bool console = cfg_.local_ranks_filter.empty() ||
                       std::find(cfg_.local_ranks_filter.begin(), cfg_.local_ranks_filter.end(), lr) !=
                           cfg_.local_ranks_filter.end();
  WorkerOutputOptions out;
  out.rank = w.rank;
  out.prefix = expand_prefix(cfg_.line_prefix_template, w.rank, lr, cfg_.role);
  out.console_out = !has(redirect, Std::kOut) && console;
  out.console_err = !has(redirect, Std::kErr) && console;
  if (has(redirect, Std::kOut) || has(tee, Std::kOut)) out.out_file = dir / "stdout.log";
  if (has(redirect, Std::kErr) || has(tee, Std::kErr)) out.err_file = dir / "stderr.log";
  out.append_files = append;
  out.out_filters = cfg_.duplicate_stdout_filters;
  out.err_filters = cfg_.duplicate_stderr_filters;
  out.filtered_out = filtered_out_;
  out.filtered_err = filtered_err_;
  w.stderr_log = out.err_file.string();
  w.terminal = terminal_.plan(lr, out);
  w.output = std::make_unique<WorkerOutput>(out);  // throws ConfigError
}

void WorkerGroup::spawn(int lr, int restart_count, bool joining) {
  Worker& w = workers_[static_cast<std::size_t>(lr)];
  const auto& launch = launch_;
  WorkerEnvInput in;
  in.local_rank = lr;
  in.local_world_size = cfg_.nproc_per_node;
  in.role = cfg_.role;
  in.restart_count = restart_count;
  in.max_restarts = cfg_.max_restarts;
  in.run_id = cfg_.rendezvous.run_id;
  in.error_file = w.error_file;
  in.token_file = cfg_.token_file.string();
  in.default_omp_threads = cfg_.default_omp_threads;
  in.torch_store = launch.torch_store;
  in.virtual_local_rank = cfg_.virtual_local_rank;
  in.reform = launch.reform;
  in.reform_joining = joining;
  in.reform_base_world = joining ? launch.base_world : 0;
  if (!omp_notice_logged_ && sets_default_omp_threads(*launch.base_env, in)) {
    omp_notice_logged_ = true;
    // As torchrun does (and says); one row of a 100-column terminal.
    log_->info("OMP_NUM_THREADS=1 for each worker (set it to tune)");
  }
  SpawnSpec spec;
  spec.executable = cfg_.argv.at(0);
  spec.args.assign(cfg_.argv.begin() + 1, cfg_.argv.end());
  if (cfg_.local_rank_arg_index >= 0) {
    const auto at =
        std::min<std::size_t>(static_cast<std::size_t>(cfg_.local_rank_arg_index), spec.args.size());
    spec.args.insert(spec.args.begin() + static_cast<std::ptrdiff_t>(at),
                     "--local_rank=" + std::to_string(lr));
  }
  EnvMap env = build_worker_env(*launch.base_env, *launch.round, in);
  if (launch.extra_env != nullptr) {
    for (const auto& [k, v] : *launch.extra_env) env[k] = v;
  }
  heartbeats_->add_env(lr, env);
  if (const auto file = (run_dir_.worker(attempt_, lr) / RunDir::kPythonStacks).string();
      is_python_command(spec.executable) && add_python_stack_hook(env, file)) {
    w.python_stack_file = file;
  }
  spec.env = to_env_strings(env);
  spec.stop_timeout = cfg_.stop_timeout;
  spec.own_session = true;  // as torchrun's: a share of the CPU each (docs/agent-workers.md)
  if (!cpus_.empty()) spec.cpu_affinity = cpu_set_from_list(cpus_[static_cast<std::size_t>(lr)]);
  ZygoteSpawn zygote;
  // The zygote's forks would keep its affinity: bound workers are exec'd.
  if (zygote_ != nullptr && !spec.cpu_affinity && spec.args.size() >= 2) {
    // {"-u", SCRIPT, ARGS...}: the zygote runs it as `python3 -u SCRIPT ARGS...` would.
    zygote.argv.assign(spec.args.begin() + 1, spec.args.end());
    zygote.connect = zygote_->connector();
  }

  // Callbacks of an earlier attempt, or of the worker this one replaced, are stale.
  const auto current = [this, lr, att = attempt_, inc = w.incarnation] {
    return att == attempt_ && inc == workers_[static_cast<std::size_t>(lr)].incarnation;
  };
  ChildHandlers handlers;
  handlers.on_output = [this, lr, current](StdStream s, std::string_view bytes) {
    if (current()) workers_[static_cast<std::size_t>(lr)].output->feed(s, bytes);
  };
  handlers.on_exit = [this, lr, current](int status) {
    if (current()) on_exit(lr, status);
  };
  ++pending_spawns_;
  runner_.spawn(
      std::move(spec), std::move(handlers),
      [this, lr, current](pid_t pid, const std::string& error) {
        if (current()) on_spawned(lr, pid, error);
      },
      terminal_.open_stdio(lr, w.terminal,
                           [this, lr, current](std::string_view bytes) {
                             if (current()) workers_[static_cast<std::size_t>(lr)].output->echo(bytes);
                           }),
      std::move(zygote));
}

void WorkerGroup::replace(int local_rank, int restart_count) {
  if (state_ != State::kRunning || local_rank < 0 || static_cast<std::size_t>(local_rank) >= workers_.size())
    return;
  Worker& w = workers_[static_cast<std::size_t>(local_rank)];
  if (!w.done) {
    w.replace_with_restart_count = restart_count;  // on_exit starts it
    return;
  }
  const int rank = w.rank;
  const int incarnation = w.incarnation + 1;
  const std::string error_file = w.error_file;
  w = Worker{};
  w.local_rank = local_rank;
  w.rank = rank;
  w.incarnation = incarnation;
  w.error_file = error_file;
  // Read into the failure record already; the replacement writes its own.
  std::error_code ignored;
  std::filesystem::remove(error_file, ignored);
  heartbeats_->restart_worker(local_rank);
  watch_.clear(local_rank);
  try {
    make_output(w, /*append=*/true);
  } catch (const ConfigError& e) {
    w.done = true;
    w.spawn_error = e.what();
    w.wait_status = 127 << 8;
    failures_.push_back(make_failure(w));
    events_.failed();
    return;
  }
  spawn(local_rank, restart_count, /*joining=*/true);
}

void WorkerGroup::drop(int local_rank) {
  if (state_ != State::kRunning || local_rank < 0 || static_cast<std::size_t>(local_rank) >= workers_.size())
    return;
  Worker& w = workers_[static_cast<std::size_t>(local_rank)];
  if (w.dropped) return;
  w.dropped = true;
  w.replace_with_restart_count = -1;
  ++dropped_;
  succeed_if_done();
}

void WorkerGroup::succeed_if_done() {
  if (state_ == State::kRunning && succeeded_ + dropped_ >= cfg_.nproc_per_node) {
    state_ = State::kSucceeded;
    events_.succeeded();
  }
}

void WorkerGroup::on_spawned(int local_rank, pid_t pid, const std::string& error) {
  --pending_spawns_;
  Worker& w = workers_[static_cast<std::size_t>(local_rank)];
  if (pid == 0) {  // cancelled by stop() before it started: nothing ran, nothing failed
    w.done = true;
    events_.spawn_reported(local_rank, -1);
    if (state_ == State::kStopping) check_stopped();
    return;
  }
  if (pid >= 0) {
    w.pid = pid;
    w.spawned = true;
  }
  events_.spawn_reported(local_rank, pid);
  if (!early_timer_requests_.empty()) replay_early_timer_requests();
  if (pid < 0) {
    w.done = true;
    w.spawn_error = error;
    w.wait_status = 127 << 8;  // what a shell reports for a command it could not run
    log_->error("cannot start worker local_rank={}: {}", local_rank, error);
    if (state_ == State::kRunning) {
      failures_.push_back(make_failure(w));
      events_.failed();
    } else if (state_ == State::kStopping) {
      check_stopped();
    }
    return;
  }
  if (state_ == State::kStopping) {
    runner_.signal_group(pid, stop_signal_);
  } else if (state_ == State::kRunning && w.incarnation > 0) {
    log_->info("started a replacement rank={} local_rank={} pid={} attempt={}", w.rank, local_rank, pid,
               attempt_);
  } else if (state_ == State::kRunning && pending_spawns_ == 0) {
    std::string pids;
    for (const auto& x : workers_) {
      if (!pids.empty()) pids += ',';
      pids += std::to_string(x.pid);
    }
    // The first start in one short line; a restart says which.
    if (attempt_ == 0) {
      log_->info("started {} workers ranks={}..{} pids={}", workers_.size(), rank_offset_,
                 rank_offset_ + cfg_.nproc_per_node - 1, pids);
    } else {
      log_->info("started {} workers attempt={} restart_count={}/{} ranks={}..{} pids={}", workers_.size(),
                 attempt_, restart_count_, cfg_.max_restarts, rank_offset_,
                 rank_offset_ + cfg_.nproc_per_node - 1, pids);
    }
  }
  if (state_ == State::kRunning) heartbeats_->watch(local_rank);
}

void WorkerGroup::on_exit(int local_rank, int wait_status) {
  Worker& w = workers_[static_cast<std::size_t>(local_rank)];
  w.done = true;
  w.wait_status = wait_status;
  w.output->finish();
  watch_.clear(local_rank);
  note_oom_kill(w);
  if (w.hung) {
    // Recorded when it was killed; its last output is known only now.
    for (auto& f : failures_) {
      if (f.local_rank == local_rank && f.hang) {
        f.stderr_tail.assign(w.output->stderr_tail().begin(), w.output->stderr_tail().end());
      }
    }
  }
  events_.exited(w);
  const bool ok = w.exited_ok();
  if (state_ == State::kRunning) {
    if (w.replace_with_restart_count >= 0) {  // its replacement was waiting for this exit
      replace(local_rank, w.replace_with_restart_count);
      return;
    }
    if (w.hung) return;  // killed for hanging: recorded once the others' stacks are in
    if (!ok) {
      failures_.push_back(make_failure(w));
      log_->warn("worker failed rank={} local_rank={} pid={}: {}", w.rank, w.local_rank, w.pid,
                 failures_.back().how());
      events_.failed();
    } else {
      ++succeeded_;
      succeed_if_done();
    }
    return;
  }
  // Workers that failed on their own while the group was being stopped for a
  // failure count too; those our stop signal ended do not.
  if (state_ == State::kStopping && count_failures_ && !ok && !w.hung &&
      !(WIFSIGNALED(wait_status) &&
        (WTERMSIG(wait_status) == stop_signal_ || WTERMSIG(wait_status) == SIGKILL))) {
    failures_.push_back(make_failure(w));
  }
  if (state_ == State::kStopping) check_stopped();
}

void WorkerGroup::check_stopped() {
  if (live() > 0 || pending_spawns_ > 0) return;
  stop_timer_.cancel();
  state_ = State::kIdle;
  events_.stopped();
}

void WorkerGroup::stop(int sig, bool count_failures) {
  state_ = State::kStopping;
  watch_.clear_all();  // a worker being stopped is not hung
  count_failures_ = count_failures;
  stop_signal_ = sig;
  terminal_.close_input();  // a worker waiting at a prompt reads EOF
  // A worker whose spawn has not reported yet gets `sig` when it does (on_spawned).
  if (const int n = live() + pending_spawns_; n > 0) {
    log_->info("stopping {} workers with {} (SIGKILL after {} ms)", n, signal_name(sig),
               cfg_.stop_timeout.count());
  }
  signal_all(sig);
  // Workers not started yet are not started only to be stopped.
  if (pending_spawns_ > 0) runner_.cancel_spawns();
  stop_timer_.expires_after(cfg_.stop_timeout);
  stop_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || state_ != State::kStopping) return;
    log_->warn("{} workers still running after {} ms: sending SIGKILL", live() + pending_spawns_,
               cfg_.stop_timeout.count());
    signal_all(SIGKILL);
    runner_.kill_unreported();  // a guard stuck before its report must not outlast the grace
  });
  if (live() == 0 && pending_spawns_ == 0) {
    boost::asio::post(io_, [this, att = attempt_] {
      if (att == attempt_ && state_ == State::kStopping) check_stopped();
    });
  }
}

void WorkerGroup::signal_all(int sig) {
  for (const auto& w : workers_) {
    if (w.spawned && !w.done) runner_.signal_group(w.pid, sig);
  }
}

void WorkerGroup::resize_ptys(const winsize& size) {
  for (const auto& w : workers_) {
    if (!w.spawned || w.done || (w.terminal.out_master < 0 && w.terminal.err_master < 0)) continue;
    ::ddp::agent::resize_ptys(w.terminal.out_master, w.terminal.err_master,
                              worker_window(size, w.terminal.prefix_cols));
    // A controlling terminal's resize signals the worker's group (its
    // foreground group); the kernel sends nothing for one that is not.
    if (w.terminal.controlling < 0) runner_.signal_group(w.pid, SIGWINCH);
  }
}

void WorkerGroup::cancel_timers() {
  stop_timer_.cancel();
  watch_.clear_all();
}

int WorkerGroup::live() const {
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.spawned && !w.done; }));
}

WorkerFailure WorkerGroup::make_failure(const Worker& w) const {
  WorkerFailure f;
  f.host = cfg_.node.host;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.pid = w.pid;
  if (WIFSIGNALED(w.wait_status)) {
    f.signal = WTERMSIG(w.wait_status);
  } else {
    f.exit_code = WEXITSTATUS(w.wait_status);
  }
  f.time = std::chrono::system_clock::now();
  f.error_file = w.error_file;
  if (!w.spawn_error.empty()) {
    f.error = ErrorFileContent{w.spawn_error, "", "", ""};
  } else {
    auto read = read_error_file(w.error_file);
    f.error = std::move(read.content);
    f.error_file_problem = std::move(read.problem);
  }
  if (w.output) f.stderr_tail.assign(w.output->stderr_tail().begin(), w.output->stderr_tail().end());
  f.stderr_log = w.stderr_log;
  f.oom_killed = w.oom_killed;
  f.memory_peak = w.memory_peak;
  f.memory_peak_bytes = w.memory_peak_bytes;
  return f;
}

void WorkerGroup::note_oom_kill(Worker& w) {
  if (!WIFSIGNALED(w.wait_status) || WTERMSIG(w.wait_status) != SIGKILL || !w.output) return;
  // The guard's line comes after everything the worker wrote: the last one
  // of the guard's, or none.
  const auto& tail = w.output->stderr_tail();
  for (auto it = tail.rbegin(); it != tail.rend(); ++it) {
    if (it->rfind(guard::kGuardLinePrefix, 0) != 0) continue;
    if (const auto oom = guard::parse_oom_line(*it)) {
      w.oom_killed = true;
      w.memory_peak = oom->peak;
      w.memory_peak_bytes = oom->peak_bytes;
      log_->error("worker rank={} local_rank={} pid={} was killed by the kernel OOM killer{}", w.rank,
                  w.local_rank, w.pid, oom->peak.empty() ? "" : " (" + oom->peak + ")");
    }
    return;
  }
}

}  // namespace ddp::agent
