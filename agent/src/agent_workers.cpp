// The agent's workers: spawn with the env contract, route output, observe
// exits, stop (signal, grace, SIGKILL).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "agent_impl.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace asio = boost::asio;

void Agent::Impl::spawn_workers() {
  ++attempt;
  try {
    run_dir->prepare_attempt(attempt, cfg.nproc_per_node);
  } catch (const ConfigError& e) {
    finish(2, e.what());
    return;
  }
  workers.clear();
  failures.clear();
  succeeded = 0;
  phase = Phase::kRunning;

  const auto console_ok = [&](int lr) {
    return cfg.local_ranks_filter.empty() ||
           std::find(cfg.local_ranks_filter.begin(), cfg.local_ranks_filter.end(), lr) !=
               cfg.local_ranks_filter.end();
  };
  // Build every Worker first: output callbacks index into `workers`, which must
  // not reallocate once spawning starts.
  workers.resize(static_cast<std::size_t>(cfg.nproc_per_node));
  for (int lr = 0; lr < cfg.nproc_per_node; ++lr) {
    Worker& w = workers[static_cast<std::size_t>(lr)];
    w.local_rank = lr;
    w.rank = round.rank_offset + lr;
    const auto dir = run_dir->worker(attempt, lr);
    w.error_file = (dir / "error.json").string();
    const Std redirect = cfg.redirects.for_rank(lr);
    const Std tee = cfg.tee.for_rank(lr);
    WorkerOutputOptions out;
    out.rank = w.rank;
    out.prefix = expand_prefix(cfg.line_prefix_template, w.rank, lr, cfg.role);
    out.console_out = !has(redirect, Std::kOut) && console_ok(lr);
    out.console_err = !has(redirect, Std::kErr) && console_ok(lr);
    if (has(redirect, Std::kOut) || has(tee, Std::kOut)) out.out_file = dir / "stdout.log";
    if (has(redirect, Std::kErr) || has(tee, Std::kErr)) out.err_file = dir / "stderr.log";
    w.stderr_log = out.err_file.string();
    w.terminal = plan_terminal(lr, out);
    try {
      w.output = std::make_unique<WorkerOutput>(out);
    } catch (const ConfigError& e) {
      finish(2, e.what());
      return;
    }
  }

  for (int lr = 0; lr < cfg.nproc_per_node; ++lr) {
    Worker& w = workers[static_cast<std::size_t>(lr)];
    WorkerEnvInput in;
    in.local_rank = lr;
    in.local_world_size = cfg.nproc_per_node;
    in.role = cfg.role;
    in.restart_count = restart_count;
    in.max_restarts = cfg.max_restarts;
    in.run_id = cfg.rendezvous.run_id;
    in.error_file = w.error_file;
    in.token_file = cfg.token_file.string();
    in.default_omp_threads = cfg.default_omp_threads;
    in.torch_store = torch_store_endpoint();
    if (!omp_notice_logged && sets_default_omp_threads(base_env, in)) {
      omp_notice_logged = true;
      log->info("setting OMP_NUM_THREADS=1 for each worker to avoid overloading the machine; "
                "set it yourself to tune");
    }
    SpawnSpec spec;
    spec.executable = cfg.argv.at(0);
    spec.args.assign(cfg.argv.begin() + 1, cfg.argv.end());
    if (cfg.local_rank_arg_index >= 0) {
      const auto at = std::min<std::size_t>(static_cast<std::size_t>(cfg.local_rank_arg_index),
                                            spec.args.size());
      spec.args.insert(spec.args.begin() + static_cast<std::ptrdiff_t>(at),
                       "--local_rank=" + std::to_string(lr));
    }
    spec.env = to_env_strings(build_worker_env(base_env, round, in));
    spec.stop_timeout = cfg.stop_timeout;

    ChildHandlers handlers;
    handlers.on_output = [this, lr, att = attempt](StdStream s, std::string_view bytes) {
      if (att == attempt) workers[static_cast<std::size_t>(lr)].output->feed(s, bytes);
    };
    handlers.on_exit = [this, lr, att = attempt](int status) {
      if (att == attempt) on_worker_exit(lr, status);
    };
    ++pending_spawns;
    runner->spawn(std::move(spec), std::move(handlers),
                  [this, lr, att = attempt](pid_t pid, const std::string& error) {
                    if (att == attempt) on_spawned(lr, pid, error);
                  },
                  open_stdio(w));
  }
}

void Agent::Impl::on_spawned(int local_rank, pid_t pid, const std::string& error) {
  --pending_spawns;
  note_spawned(local_rank, pid);
  Worker& w = workers[static_cast<std::size_t>(local_rank)];
  if (pid < 0) {
    w.done = true;
    w.spawn_error = error;
    w.wait_status = 127 << 8;  // what a shell reports for a command it could not run
    log->error("cannot start worker local_rank={}: {}", local_rank, error);
    if (phase == Phase::kRunning) {
      failures.push_back(make_failure(w));
      begin_stop(StopReason::kLocalFailure, SIGTERM);
    } else if (phase == Phase::kStopping && live_workers() == 0 && pending_spawns == 0) {
      on_all_stopped();
    }
    return;
  }
  w.pid = pid;
  w.spawned = true;
  if (phase == Phase::kStopping) {
    runner->signal_group(pid, stop_signal);
  } else if (phase == Phase::kRunning && pending_spawns == 0) {
    std::string pids;
    for (const auto& x : workers) pids += (pids.empty() ? "" : ",") + std::to_string(x.pid);
    log->info("started {} workers attempt={} restart_count={}/{} ranks={}..{} pids={}",
              workers.size(), attempt, restart_count, cfg.max_restarts, round.rank_offset,
              round.rank_offset + cfg.nproc_per_node - 1, pids);
  }
}

void Agent::Impl::on_worker_exit(int local_rank, int wait_status) {
  Worker& w = workers[static_cast<std::size_t>(local_rank)];
  w.done = true;
  w.wait_status = wait_status;
  w.output->finish();
  emit_worker_exit(w);
  const bool ok = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
  if (phase == Phase::kRunning) {
    if (!ok) {
      failures.push_back(make_failure(w));
      log->warn("worker failed rank={} local_rank={} pid={}: {}", w.rank, w.local_rank, w.pid,
                failures.back().how());
      begin_stop(StopReason::kLocalFailure, SIGTERM);
    } else if (++succeeded == cfg.nproc_per_node) {
      after_local_success();
    }
    return;
  }
  // Workers that failed on their own while the group was being stopped for a
  // failure count too; those our stop signal ended do not.
  if (phase == Phase::kStopping && stop_reason == StopReason::kLocalFailure && !ok &&
      !(WIFSIGNALED(wait_status) &&
        (WTERMSIG(wait_status) == stop_signal || WTERMSIG(wait_status) == SIGKILL))) {
    failures.push_back(make_failure(w));
  }
  if (phase == Phase::kStopping && live_workers() == 0 && pending_spawns == 0) on_all_stopped();
}

void Agent::Impl::begin_stop(StopReason reason, int sig) {
  phase = Phase::kStopping;
  stop_reason = reason;
  stop_signal = sig;
  if (relay) relay->close_pipe();  // a worker waiting at a prompt reads EOF
  if (live_workers() > 0) {
    log->info("stopping {} workers with {} (SIGKILL after {} ms)", live_workers(),
              signal_name(sig), cfg.stop_timeout.count());
  }
  kill_all(sig);
  stop_timer.expires_after(cfg.stop_timeout);
  stop_timer.async_wait([this](boost::system::error_code ec) {
    if (ec || phase != Phase::kStopping) return;
    log->warn("{} workers still running after {} ms: sending SIGKILL", live_workers(),
              cfg.stop_timeout.count());
    kill_all(SIGKILL);
  });
  if (live_workers() == 0 && pending_spawns == 0) {
    asio::post(io, [this, att = attempt] {
      if (att == attempt && phase == Phase::kStopping) on_all_stopped();
    });
  }
}

void Agent::Impl::kill_all(int sig) {
  for (const auto& w : workers) {
    if (w.spawned && !w.done) runner->signal_group(w.pid, sig);
  }
}

int Agent::Impl::live_workers() const {
  return static_cast<int>(std::count_if(workers.begin(), workers.end(),
                                        [](const Worker& w) { return w.spawned && !w.done; }));
}

WorkerFailure Agent::Impl::make_failure(const Worker& w) const {
  WorkerFailure f;
  f.host = cfg.node.host;
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
    f.error = ErrorFileContent{w.spawn_error, "", ""};
  } else {
    f.error = read_error_file(w.error_file);
  }
  if (w.output) f.stderr_tail.assign(w.output->stderr_tail().begin(), w.output->stderr_tail().end());
  f.stderr_log = w.stderr_log;
  return f;
}

}  // namespace ddp::agent
