// The agent's control flow: rendezvous, round events, signals, restarts and
// the final outcome. The parts it coordinates are listed in agent_impl.hpp.
#include <signal.h>

#include <boost/asio/post.hpp>
#include <fstream>

#include "agent_impl.hpp"
#include "containment.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/rdzv/backend.hpp"
#include "guard_protocol.hpp"

namespace ddp::agent {

namespace asio = boost::asio;

namespace {

// After a signal, how long closing the rendezvous may take before the agent
// exits anyway: a dead store must not keep a Ctrl-C'd agent alive.
constexpr std::chrono::milliseconds kCloseOnSignalTimeout{2000};
// Backoff cap while waiting for the other nodes to report success.
constexpr std::chrono::milliseconds kMaxPollDelay{1000};

const char* event_name(rdzv::RoundEvent e) {
  switch (e) {
    case rdzv::RoundEvent::kRestartRequested:
      return "restart requested";
    case rdzv::RoundEvent::kMembershipChanged:
      return "membership changed";
    case rdzv::RoundEvent::kNodesWaiting:
      return "nodes waiting";
    case rdzv::RoundEvent::kStoreLost:
      return "store lost";
    case rdzv::RoundEvent::kJobClosed:
      return "job closed";
    case rdzv::RoundEvent::kLeaseLost:
      return "lease lost";
  }
  return "unknown";
}

}  // namespace

std::string failure_why(const WorkerFailure& f) {
  if (f.hang) return "";
  std::string why;
  if (f.error && !f.error->message.empty()) {
    why = f.error->message;
  } else if (!f.stderr_tail.empty()) {
    // A program SIGKILLed from outside (the OOM killer, a user, a scheduler)
    // could not say why: its last line is whatever it printed before, not the
    // cause. Unless ddp-guard wrote it: the fence deadline's kill says so.
    const std::string& last = f.stderr_tail.back();
    if (f.signal != SIGKILL || last.rfind(guard::kGuardLinePrefix, 0) == 0) why = last;
  }
  if (const auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
  if (why.size() > 200) why = why.substr(0, 200) + "...";
  return why;
}

std::string failure_how(const WorkerFailure& f) {
  return f.hang ? "hung, " + f.hang->what() + "; killed" : f.how();
}

std::string describe_failure(const WorkerFailure& f) {
  const std::string why = failure_why(f);
  return "rank " + std::to_string(f.rank) + " on " + f.host + ": " + failure_how(f) +
         (why.empty() ? "" : " (" + why + ")");
}

Agent::Impl::Impl(AgentConfig c, std::unique_ptr<rdzv::RendezvousHandler> h)
    : cfg(std::move(c)),
      log(log::get("agent")),
      initial_handler(std::move(h)),
      life(cfg.max_restarts),
      observers(cfg, life) {}

Agent::Impl::~Impl() { rdzv.reset(); }

AgentResult Agent::Impl::run() {
  observers.open();  // a bad --event_log fails before anything connects
  // A walk of the cgroup hierarchy (milliseconds on a big host), done while
  // the first rendezvous runs; waited for before any guard of ours starts.
  stale_cgroups = std::async(std::launch::async, reap_stale_cgroups);
  cfg.rendezvous.on_fence_deadline = [f = fence](std::chrono::steady_clock::time_point t) { f->publish(t); };
  // Runs on the joining thread: the event log is the io thread's.
  cfg.rendezvous.on_spare = [this](std::int64_t round) {
    asio::post(io, [this, round] { observers.emit("spare", {{"waiting_beside_round", round}}); });
  };
  std::shared_ptr<rdzv::RendezvousHandler> handler =
      initial_handler ? std::move(initial_handler) : rdzv::create_handler(cfg.rendezvous, cfg.node);
  rdzv = std::make_unique<RendezvousCalls>(io, handler);
  rdzv->on_event([this](std::int64_t round, rdzv::RoundEvent e, const std::string& detail) {
    on_round_event(round, e, detail);
  });
  rdzv->connect_store();  // while the rest is set up here
  run_dir.emplace(cfg.log_dir, cfg.rendezvous.run_id,
                  cfg.redirects.any() || cfg.tee.any() || !cfg.duplicate_stdout_filters.empty() ||
                      !cfg.duplicate_stderr_filters.empty());
  if (fence->open(run_dir->path() / RunDir::kFence)) set_guard_fence_file(fence->path());
  if (!cfg.log_dir.empty()) log->info("worker logs in {}", run_dir->path().string());
  base_env = current_environment();
  start_liveness();  // a pipe that cannot be made fails before this node joins anything
  reform = cfg.on_failure == OnFailure::kReform;
  if (reform) reform_store = std::make_unique<ReformStore>(io);
  for (int sig : cfg.signals_to_handle) signals.add(sig);
  signals.add(kStackDumpSignal);  // on demand: the workers' stacks into the run directory
  std::function<void(boost::system::error_code, int)> on_sig = [this, &on_sig](boost::system::error_code ec,
                                                                               int sig) {
    if (ec) return;
    on_signal(sig);
    if (!life.done()) signals.async_wait(on_sig);
  };
  signals.async_wait(on_sig);
  runner = std::make_unique<ProcessRunner>(io, /*prestart_guard_server=*/true);
  terminal = std::make_unique<AgentTerminal>(io, cfg, log);
  WorkerGroupEvents events;
  events.spawn_reported = [this](int lr, pid_t pid) { observers.spawn_reported(lr, pid); };
  events.exited = [this](const Worker& w) { observers.worker_exited(w); };
  events.failed = [this] { on_local_failure(); };
  events.succeeded = [this] { after_local_success(); };
  events.hung = [this](const Worker& w, const HangInfo& h, std::chrono::milliseconds late) {
    observers.emit("worker_hang", {{"rank", w.rank},
                                   {"local_rank", w.local_rank},
                                   {"pid", w.pid},
                                   {"source", h.source},
                                   {"scope", h.scope},
                                   {"detail", h.detail},
                                   {"late_ms", late.count()}});
  };
  events.hang_recorded = [this](const WorkerFailure& f) {
    if (reform) return;  // the other nodes' workers learn of it through the store
    hang_reported = true;
    rdzv->report_failure(describe_failure(f), [this](const std::string& m) {
      log->warn("could not report the hang to the other nodes: {}", m);
    });
  };
  events.stopped = [this] {
    if (life.is(Phase::kStopping)) on_all_stopped();
  };
  events.heartbeat_ages = [this] {
    observers.publish_status();
    stragglers->tick();
  };
  StragglerWatch::Hooks straggler_hooks;
  straggler_hooks.emit = [this](const std::string& event, nlohmann::json f) {
    observers.emit(event, std::move(f));
  };
  straggler_hooks.changed = [this] { observers.publish_status(); };
  straggler_hooks.act = [this](const Straggler& s) {
    const int lr = life.have_round() ? s.rank - life.round().rank_offset : -1;
    if (lr < 0 || lr >= cfg.nproc_per_node) return;  // another node's rank: that node acts
    HangInfo info;
    info.source = "straggler";
    info.detail = straggler_detail(s, cfg.liveness.straggler_factor);
    group->kill_straggler(lr, std::move(info));
  };
  stragglers = std::make_unique<StragglerWatch>(io, cfg, life, log, std::move(straggler_hooks));
  stragglers->attach(handler);
  observers.attach_stragglers(*stragglers);
  group = std::make_unique<WorkerGroup>(io, cfg, *runner, *run_dir, *terminal, log, std::move(events));
  observers.attach(handler, *group);
  observers.attach_startup(startup);
  terminal->open([this](const winsize& size) { group->resize_ptys(size); });
  start_torch_store();
  if (!cfg.preload.empty()) stale_cgroups.wait();
  start_preload();

  start_rendezvous();
  io.run();
  if (!observers.flush(result.exit_code == exit_code(ExitCode::kRendezvous))) {
    result.abandon_process = true;
  }

  // Workers are all reaped before finish(); this only matters on an
  // unexpected exit from run(), and then it SIGKILLs what is left.
  group.reset();
  zygote.reset();
  runner.reset();
  boost::system::error_code ignored;
  signals.cancel(ignored);
  signals.clear(ignored);
  if (rdzv->busy() || (reform_store && reform_store->busy())) result.abandon_process = true;
  return result;
}

void Agent::Impl::start_rendezvous() {
  announce_rendezvous_start();
  life.enter(Phase::kRendezvous);
  early_event.reset();
  check_health_then_join();  // agent_health.cpp: join_rendezvous() once healthy
}

void Agent::Impl::join_rendezvous() {
  startup.rendezvous_started();
  log->info("rendezvous backend={} run_id={} restart_count={}/{}", rdzv->handler()->backend(),
            cfg.rendezvous.run_id, life.restart_count(), cfg.max_restarts);
  rdzv->next_round([this](const rdzv::RendezvousResult& r) { on_round(r); },
                   [this](ExitCode code, const std::string& m) {
                     if (!life.done()) finish(code, m);
                   });
}

void Agent::Impl::announce_rendezvous_start() {
  // Called as a new rendezvous begins: the phase still says why the last
  // round ended (the first round has none).
  if (!life.have_round()) return;
  if (life.restart_count() != restarts_announced) {
    restarts_announced = life.restart_count();
    std::string reason = "another node's workers failed";
    const auto& failures = group->failures();
    if (life.is(Phase::kStopping) && life.stop_reason() == StopReason::kLocalFailure && !failures.empty()) {
      const auto& root = failures[FailureReport{"", "", 0, 0, 0, failures}.root_cause()];
      reason = "rank " + std::to_string(root.rank) + " on " + root.host + ": " + root.how();
    } else if (!last_event_detail.empty()) {
      reason += " (" + last_event_detail + ")";
    }
    observers.emit("restart", {{"reason", reason}});
  } else {
    observers.emit("scale",
                   {{"reason", last_event_detail.empty() ? "membership changed" : last_event_detail}});
  }
  observers.publish_status();
}

void Agent::Impl::on_round(const rdzv::RendezvousResult& r) {
  if (!life.is(Phase::kRendezvous)) return;  // a signal ended the run meanwhile
  life.set_round(r);
  observers.emit("rendezvous", {{"group_rank", r.group_rank},
                                {"group_world_size", r.group_world_size},
                                {"world_size", r.world_size},
                                {"rank_offset", r.rank_offset}});
  log->info("rendezvous complete round={} group_rank={}/{} world_size={} rank_offset={} store={}", r.round,
            r.group_rank, r.group_world_size, r.world_size, r.rank_offset, r.store_endpoint.to_string());
  point_torch_store(r);
  // On etcd the workers' store is group rank 0's, not the handler's: no
  // first-step times there (docs/agent.md, "Startup times").
  const auto backend = rdzv::parse_backend(cfg.rendezvous.backend);
  const bool same_store = !(backend && rdzv::uses_etcd(*backend));
  startup.rendezvous_done(r, cfg.nproc_per_node, same_store ? rdzv->handler()->store() : nullptr, [this] {
    observers.emit_startup("first_step");
    observers.publish_status();
  });
  spawn_workers();
  // The round ended before it got here: its workers stop at once, on the same
  // path as an event a moment later (restart accounting, reports, fencing).
  if (early_event && early_event->round == r.round) {
    const EarlyEvent e = std::move(*early_event);
    early_event.reset();
    on_round_event(e.round, e.event, e.detail);
  }
}

void Agent::Impl::spawn_workers() {
  GroupLaunch launch;
  launch.round = &life.round();
  launch.restart_count = life.restart_count();
  launch.torch_store = torch_store_endpoint();
  launch.base_env = &base_env;
  launch.extra_env = &liveness_env;
  launch.reform = reform;
  life.enter(Phase::kRunning);
  if (stale_cgroups.valid()) stale_cgroups.get();
  try {
    hang_reported = false;
    group->start(launch);
  } catch (const ConfigError& e) {
    finish(ExitCode::kConfig, e.what());
  }
}

void Agent::Impl::begin_stop(StopReason reason, int sig) {
  life.begin_stop(reason);
  group->stop(sig, reason == StopReason::kLocalFailure);
}

void Agent::Impl::on_round_event(std::int64_t round, rdzv::RoundEvent event, const std::string& detail) {
  log->info("round event: {}{}{}", event_name(event), detail.empty() ? "" : ": ", detail);
  const std::int64_t current = life.have_round() ? life.round().round : -1;
  if (life.is(Phase::kRendezvous)) {
    // The handler watches a round from just before it hands it over; an
    // event of the last round (stopped already) is stale.
    if (round > current && !early_event) {
      log->info("round {} ended before its workers started: they stop as they start", round);
      early_event = EarlyEvent{round, event, detail};
    }
    return;
  }
  if (round < current) return;  // of a round this node has left
  // The event that decides a stop names its cause; later ones (the failed
  // node leaving) must not replace it.
  if (life.is(Phase::kRunning) || life.is(Phase::kSucceeded)) {
    last_event_detail = std::string(event_name(event)) + (detail.empty() ? "" : ": ") + detail;
  }
  if (life.is(Phase::kRunning)) {
    switch (event) {
      case rdzv::RoundEvent::kRestartRequested:
        begin_stop(StopReason::kRemoteFailure, SIGTERM);
        break;
      case rdzv::RoundEvent::kMembershipChanged:
      case rdzv::RoundEvent::kNodesWaiting:
        begin_stop(StopReason::kMembership, SIGTERM);
        break;
      // The store may count this node gone and the others start their next
      // world: no grace for a checkpoint (docs/rendezvous.md, "Fencing").
      case rdzv::RoundEvent::kStoreLost:
        store_lost = detail;
        begin_stop(StopReason::kStoreLost, SIGKILL);
        break;
      case rdzv::RoundEvent::kLeaseLost:
        begin_stop(StopReason::kMembership, SIGKILL);
        break;
      case rdzv::RoundEvent::kJobClosed:
        begin_stop(StopReason::kJobClosed, SIGTERM);
        break;
    }
  } else if (life.is(Phase::kStopping)) {
    fence_while_stopping(event, detail);
  } else if (life.is(Phase::kSucceeded)) {
    // Our workers are done, but a group's attempt succeeds together: when
    // another node's workers fail, this node rejoins and reruns with them.
    switch (event) {
      case rdzv::RoundEvent::kRestartRequested:
        restart_after_remote_failure();
        break;
      case rdzv::RoundEvent::kMembershipChanged:
        // Usually the node hosting the store finishing first. Like torchrun, a
        // node whose workers succeeded is done; nodes still running re-form
        // (or fail) without it.
        succeed_unconfirmed(detail);
        break;
      case rdzv::RoundEvent::kNodesWaiting:
        break;  // a finished job takes no new nodes
      case rdzv::RoundEvent::kStoreLost:
      case rdzv::RoundEvent::kLeaseLost:
      case rdzv::RoundEvent::kJobClosed:
        succeed_unconfirmed(detail);
        break;
    }
  }
}

void Agent::Impl::fence_while_stopping(rdzv::RoundEvent event, const std::string& detail) {
  // Workers still inside their --stop_timeout (a checkpoint on SIGTERM, or
  // ignoring it) when the store may count this node gone: the grace ends now.
  if (event != rdzv::RoundEvent::kStoreLost && event != rdzv::RoundEvent::kLeaseLost) return;
  log->warn("{} while stopping workers: killing them now", event_name(event));
  group->signal_all(SIGKILL);
  // A signal decides the exit code as before; otherwise the lost store does.
  if (event == rdzv::RoundEvent::kStoreLost && life.stop_reason() != StopReason::kSignal) {
    store_lost = detail;
    life.restop(StopReason::kStoreLost);
  }
}

void Agent::Impl::on_signal(int sig) {
  if (life.done()) return;
  if (sig == kStackDumpSignal) {
    if (group) group->dump_stacks();
    return;
  }
  if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP && sig != SIGQUIT) {
    // A notice for the workers (preemption), not a request to stop.
    log->info("received {}: forwarding to workers", signal_name(sig));
    group->signal_all(sig);
    return;
  }
  if (signal_received != 0) {
    // Only a second Ctrl-C is someone impatient at the terminal; a scheduler
    // or `timeout` may send SIGTERM twice, and the workers' SIGTERM handlers
    // (checkpoints) must get their full --stop_timeout.
    if (sig == SIGINT && signal_received == SIGINT) {
      log->warn("received SIGINT again: killing workers now");
      group->signal_all(SIGKILL);
    } else {
      log->info(
          "received {} again: workers are already stopping (SIGKILL after the stop "
          "timeout; Ctrl-C twice to kill at once)",
          signal_name(sig));
    }
    return;
  }
  signal_received = sig;
  // A spawn still waiting for the zygote's imports starts normally, to be stopped.
  if (zygote) zygote->stop_forking();
  switch (life.phase()) {
    case Phase::kRunning:
      log->info("received {}: forwarding to workers, then stopping them{}", signal_name(sig),
                sig == SIGINT ? " (Ctrl-C again to kill at once)" : "");
      begin_stop(StopReason::kSignal, sig);
      break;
    case Phase::kStopping:
      log->info("received {}: forwarding to workers{}", signal_name(sig),
                sig == SIGINT ? " (Ctrl-C again to kill at once)" : "");
      life.restop(StopReason::kSignal);
      group->stop_counting_failures();
      group->signal_all(sig);
      break;
    default:
      log->info("received {}: exiting", signal_name(sig));
      finish(signal_exit_code(sig));
      break;
  }
}

void Agent::Impl::on_all_stopped() {
  switch (life.stop_reason()) {
    case StopReason::kLocalFailure: {
      if (!reform_stop_line.empty()) {
        stop_below_minimum();
        return;
      }
      const auto& failures = group->failures();
      const bool spent = life.restarts_spent();
      const std::string stalled = spent ? "" : judge_progress();
      const bool final_report = spent || !stalled.empty();
      write_failure_report(final_report);
      const auto& root = failures[FailureReport{"", "", 0, 0, 0, failures}.root_cause()];
      const std::string reason = describe_failure(root);
      if (final_report) {
        // The other nodes' only news of what failed: report it before closing.
        // Closing follows; if the report fails the other nodes see the job end
        // without a cause.
        if (!hang_reported) rdzv->report_failure(reason);
        result.failure = reason;
        if (!stalled.empty()) {
          fail_for_good(stalled, /*print=*/true, ExitCode::kNoProgress);
        } else {
          fail_for_good("workers failed and max_restarts=" + std::to_string(cfg.max_restarts) + " is spent");
        }
        return;
      }
      if (const std::string why = count_node_failure(); !why.empty()) {
        exclude_this_node(why, reason);
        return;
      }
      life.spend_restart();
      log->warn("restarting workers ({}/{}) after failure of {}", life.restart_count(), cfg.max_restarts,
                reason);
      if (!hang_reported) {
        rdzv->report_failure(reason, [this](const std::string& m) {
          log->warn("could not report the failure to the other nodes: {}", m);
        });
      }
      start_rendezvous();
      return;
    }
    case StopReason::kRemoteFailure:
      restart_after_remote_failure();
      return;
    case StopReason::kMembership:
      log->info("re-forming the group (no restart spent)");
      start_rendezvous();
      return;
    case StopReason::kStoreLost:
      finish(ExitCode::kRendezvous, "rendezvous store lost (" + store_lost + "); workers killed");
      return;
    case StopReason::kJobClosed:
      // last_event_detail is "job closed: <why>".
      finish(last_event_detail.find(rdzv::kClosedByExclusion) != std::string::npos ? ExitCode::kExcluded
                                                                                   : ExitCode::kRendezvous,
             "rendezvous of run_id=" + cfg.rendezvous.run_id + " was closed by another node: " +
                 last_event_detail.substr(last_event_detail.find(": ") + 2) + "; workers stopped");
      return;
    case StopReason::kSignal: {
      life.enter(Phase::kClosing);
      const int code = signal_exit_code(signal_received);
      rdzv->close("agent on " + cfg.node.host + " stopped by " + signal_name(signal_received),
                  [this, code] { finish(code); });
      poll_timer.expires_after(kCloseOnSignalTimeout);
      poll_timer.async_wait([this, code](boost::system::error_code ec) {
        if (!ec) finish(code);
      });
      return;
    }
  }
}

void Agent::Impl::after_local_success() {
  life.enter(Phase::kSucceeded);
  log->info("all {} local workers succeeded", group->workers().size());
  rdzv->report_success([this] { poll_all_succeeded(); },
                       [this](const std::string& m) {
                         if (life.is(Phase::kSucceeded)) {
                           succeed_unconfirmed("cannot report success: " + m);
                         }
                       });
}

void Agent::Impl::poll_all_succeeded() {
  if (!life.is(Phase::kSucceeded)) return;
  rdzv->all_succeeded(
      [this](bool all) {
        if (!life.is(Phase::kSucceeded)) return;
        if (all) {
          // The handler is the exit barrier: the node hosting the store keeps
          // it up until the other nodes have seen this and left.
          finish(ExitCode::kOk);
          return;
        }
        // No "all done" event exists; the other nodes' workers may run for hours,
        // so back off to one store read per second.
        poll_timer.expires_after(poll_delay);
        poll_delay = std::min(poll_delay * 2, kMaxPollDelay);
        poll_timer.async_wait([this](boost::system::error_code ec) {
          if (!ec) poll_all_succeeded();
        });
      },
      [this](const std::string& m) {
        if (life.is(Phase::kSucceeded)) succeed_unconfirmed(m);
      });
}

void Agent::Impl::succeed_unconfirmed(const std::string& why) {
  // torchrun's exit barrier does the same: this node's workers succeeded, and a
  // store that vanished afterwards (often: the hosting node finished first)
  // does not turn that into a failure. A node still running sees the loss itself.
  log->warn(
      "this node's workers succeeded, but the other nodes' success could not be "
      "confirmed: {}",
      why);
  finish(ExitCode::kOk);
}

void Agent::Impl::restart_after_remote_failure() {
  // Every node spends a restart on a failure anywhere, so all nodes agree on
  // TORCHELASTIC_RESTART_COUNT.
  const std::string stalled = life.restarts_spent() ? "" : judge_progress();
  if (!stalled.empty()) {
    fail_for_good(stalled, /*print=*/true, ExitCode::kNoProgress);
  } else if (!life.restarts_spent()) {
    life.spend_restart();
    log->warn("restarting workers ({}/{}) after another node's failure", life.restart_count(),
              cfg.max_restarts);
    start_rendezvous();
  } else {
    // The only line on this node saying what went wrong: name the node,
    // rank and cause the failing node reported through the store.
    if (const auto at = last_event_detail.find(rdzv::kReportedFailure); at != std::string::npos) {
      result.failure = last_event_detail.substr(at + rdzv::kReportedFailure.size());
    }
    fail_for_good("another node's workers failed and max_restarts=" + std::to_string(cfg.max_restarts) +
                      " is spent (" + last_event_detail + ")",
                  /*print=*/true);
  }
}

void Agent::Impl::fail_for_good(const std::string& reason, bool print, ExitCode code) {
  final_reason = reason;
  life.enter(Phase::kClosing);
  // The job failed either way; the exit code says so.
  rdzv->close(reason, [this, reason, print, code] { finish(code, print ? reason : ""); });
}

std::string Agent::Impl::judge_progress() {
  if (group->heartbeats().any_progress()) {
    no_progress_restarts = 0;
    return "";
  }
  if (!cfg.max_no_progress_restarts) return "";
  const int limit = *cfg.max_no_progress_restarts;
  if (no_progress_restarts >= limit) {
    return std::to_string(no_progress_restarts + 1) +
           " attempts in a row ended without progress (no heartbeat, no completed section): not restarting "
           "again (--max_no_progress_restarts=" +
           std::to_string(limit) + ")";
  }
  ++no_progress_restarts;
  log->warn(
      "the attempt ended without progress (no heartbeat, no completed section): {}/{} restarts without "
      "progress",
      no_progress_restarts, limit);
  return "";
}

void Agent::Impl::write_failure_report(bool final_report) {
  FailureReport report{cfg.rendezvous.run_id, cfg.role,         group->attempt(),
                       life.restart_count(),  cfg.max_restarts, group->failures()};
  const auto path = run_dir->attempt(group->attempt()) / "failure.json";
  {
    std::ofstream out(path, std::ios::trunc);
    out << render_json(report);
  }
  if (!final_report) return;
  run_dir->keep();
  write_fully(2, render_text(report) + interpreter_hint(report, cfg.argv.front()) +
                     "failure report: " + path.string() + "\n");
}

void Agent::Impl::finish(int code, const std::string& error) {
  if (life.done()) return;
  life.enter(Phase::kDone);
  result.exit_code = code;
  result.error = error;
  observers.finished(code, error.empty() ? final_reason : error);
  if (code != 0 && run_dir && run_dir->is_temp()) run_dir->keep();
  if (code == 0) log->info("run succeeded");
  if (group) group->cancel_timers();
  if (health) health->cancel();  // a --health_check command still running
  poll_timer.cancel();
  io.stop();
}

Agent::Agent(AgentConfig config, std::unique_ptr<rdzv::RendezvousHandler> handler)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(handler))) {}

Agent::~Agent() = default;

AgentResult Agent::run() { return impl_->run(); }

}  // namespace ddp::agent
