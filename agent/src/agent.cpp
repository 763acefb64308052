// The agent's control flow: rendezvous, round events, stops and the policy
// that decides what each ending leads to. The parts it coordinates are listed
// in agent_impl.hpp.
#include <signal.h>

#include <fstream>

#include "agent_impl.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/printable.hpp"
#include "ddp/rdzv/backend.hpp"
#include "stack_dump.hpp"

namespace ddp::agent {

Agent::Impl::Impl(AgentConfig c, std::unique_ptr<rdzv::RendezvousHandler> h)
    : cfg(std::move(c)),
      log(log::get("agent")),
      initial_handler(std::move(h)),
      life(cfg.max_restarts),
      observers(cfg, life) {}

Agent::Impl::~Impl() { rdzv.reset(); }

AgentResult Agent::Impl::run() {
  observers.open();  // a bad --event_log fails before anything connects
  // While the first rendezvous runs; waited for before any guard of ours starts.
  services.reap_stale_cgroups();
  set_up();  // agent_setup.cpp: the handler, the run directory, the workers' services
  for (int sig : cfg.signals_to_handle) signals.add(sig);
  signals.add(kStackDumpSignal);  // on demand: the workers' stacks into the run directory
  std::function<void(boost::system::error_code, int)> on_sig = [this, &on_sig](boost::system::error_code ec,
                                                                               int sig) {
    if (ec) return;
    on_signal(sig);
    if (!life.done()) signals.async_wait(on_sig);
  };
  signals.async_wait(on_sig);
  make_parts();  // agent_setup.cpp: the runner, the terminal, the worker group
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
  if (rdzv->busy() || reform.busy()) result.abandon_process = true;
  return result;
}

void Agent::Impl::start_rendezvous() {
  announce_rendezvous_start();
  life.enter(Phase::kRendezvous);
  round_events.forget();
  check_health_then_join();  // agent_health.cpp: join_rendezvous() once healthy
}

void Agent::Impl::join_rendezvous() {
  startup.rendezvous_started();
  // A standalone node's rendezvous is with itself: nothing to tell a user at
  // the default level (the start-up output is the workers' start).
  const bool alone = rdzv->handler()->backend() == "standalone";
  log->log(alone ? spdlog::level::debug : spdlog::level::info,
           "rendezvous backend={} run_id={} restart_count={}/{}", rdzv->handler()->backend(),
           cfg.rendezvous.run_id, life.restart_count(), cfg.max_restarts);
  rdzv->next_round([this](const rdzv::RendezvousResult& r) { on_round(r); },
                   [this](ExitCode code, const std::string& m) {
                     if (life.done()) return;
                     if (code != ExitCode::kOk) return finish(code, m);
                     // The job finished while this node waited to join it.
                     log->warn("{}", m);
                     final_reason = m;
                     finish(code);
                   });
}

void Agent::Impl::announce_rendezvous_start() {
  // Called as a new rendezvous begins: the phase still says why the last
  // round ended (the first round has none).
  if (!life.have_round()) return;
  if (life.restart_count() != restarts_announced) {
    restarts_announced = life.restart_count();
    std::string reason = "another node's workers failed";
    if (life.is(Phase::kStopping) && life.stop_reason() == StopReason::kLocalFailure &&
        !group->failures().empty()) {
      const auto& root = root_failure();
      reason = "rank " + std::to_string(root.rank) + " on " + root.host + ": " + root.how();
    } else if (!round_events.last().empty()) {
      reason += " (" + round_events.last() + ")";
    }
    observers.emit("restart", {{"reason", reason}});
  } else {
    observers.emit("scale", {{"reason", round_events.last().empty()
                                            ? rdzv::event_name(rdzv::RoundEvent::kMembershipChanged)
                                            : round_events.last()}});
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
  log->log(rdzv->handler()->backend() == "standalone" ? spdlog::level::debug : spdlog::level::info,
           "rendezvous complete round={} group_rank={}/{} world_size={} rank_offset={} store={}", r.round,
           r.group_rank, r.group_world_size, r.world_size, r.rank_offset, r.store_endpoint.to_string());
  services.point_torch_store(r);
  // On etcd the workers' store is group rank 0's, not the handler's: no
  // first-step times there (docs/agent.md, "Startup times").
  const auto backend = rdzv::parse_backend(cfg.rendezvous.backend);
  const bool same_store = !(backend && rdzv::uses_etcd(*backend));
  startup.rendezvous_done(r, cfg.nproc_per_node, same_store ? rdzv->handler()->store() : nullptr, [this] {
    observers.emit_startup("first_step");
    observers.publish_status();
  });
  joined_base_world = 0;
  reform.begin_round();
  if (r.takes_place) return take_lost_place();  // agent_node_loss.cpp: spawns once the workers know
  spawn_workers();
  // The round ended before it got here: its workers stop at once, on the same
  // path as an event a moment later (restart accounting, reports, fencing).
  if (const auto e = round_events.take(r.round)) on_round_event(e->round, e->event, e->detail);
}

void Agent::Impl::spawn_workers() {
  GroupLaunch launch;
  launch.round = &life.round();
  launch.restart_count = life.restart_count();
  launch.torch_store = services.torch_store_endpoint();
  launch.base_env = &services.base_env();
  launch.extra_env = &services.liveness_env();
  launch.reform = reform.active();
  launch.joining = life.round().takes_place;
  launch.base_world = joined_base_world;
  life.enter(Phase::kRunning);
  services.cgroups_reaped();
  try {
    records.set_reported(false);
    group->start(launch);
  } catch (const ConfigError& e) {
    return finish(ExitCode::kConfig, e.what());
  }
  if (reform.active()) watch_reform_stalls();
}

void Agent::Impl::begin_stop(StopReason reason, int sig) {
  life.begin_stop(reason);
  group->stop(sig, reason == StopReason::kLocalFailure);
}

void Agent::Impl::on_round_event(std::int64_t round, rdzv::RoundEvent event, const std::string& detail) {
  log->info("round event: {}{}{}", rdzv::event_name(event), detail.empty() ? "" : ": ", detail);
  const std::int64_t current = life.have_round() ? life.round().round : -1;
  if (life.is(Phase::kRendezvous)) {
    // The handler watches a round from just before it hands it over; an
    // event of the last round (stopped already) is stale.
    if ((round > current || (round == current && taking_place)) && round_events.defer(round, event, detail)) {
      log->info("round {} ended before its workers started: they stop as they start", round);
    }
    return;
  }
  if (round < current) return;  // of a round this node has left
  // The event that decides a stop names its cause; later ones (the failed
  // node leaving) must not replace it.
  if (life.is(Phase::kRunning) || life.is(Phase::kSucceeded)) {
    round_events.decided(event, detail);
  }
  if (life.is(Phase::kRunning) && records.reported() && event != rdzv::RoundEvent::kStoreLost &&
      event != rdzv::RoundEvent::kLeaseLost) {
    // This node reported a hang and is taking its other workers' stacks (at
    // most the stack budget); the other nodes stop for it, and the one
    // hosting the store may leave first. The local failure decides this
    // node's stop once the stacks are in; a lost store or lease still stops
    // it at once (fencing).
    log->info("round event while this node's hang report is completed: {}: the hang decides",
              rdzv::event_name(event));
    return;
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
        round_events.store_lost(detail);
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
        after_remote_failure();
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
  log->warn("{} while stopping workers: killing them now", rdzv::event_name(event));
  group->signal_all(SIGKILL);
  // A signal decides the exit code as before; otherwise the lost store does.
  if (event == rdzv::RoundEvent::kStoreLost && life.stop_reason() != StopReason::kSignal) {
    round_events.store_lost(detail);
    life.restop(StopReason::kStoreLost);
  }
}

// The policy: what each way an attempt ends leads to.
//   a local worker fails    restart: every local worker stops (kLocalFailure)
//                           reform:  its slot is replaced (restarts left) or given up, the workers
//                                    re-form; workers that cannot: restart, for the rest of the run
//   the workers stopped     local failure   -> next_after_failure(local)
//                           remote failure  -> next_after_failure(remote)
//                           below the re-form minimum -> exit 1, the job ends
//                           membership      -> rendezvous again, no restart spent
//                           store lost      -> exit 3
//                           job closed      -> exit 3, or 6 when closed by exclusions
//                           a signal        -> close the rendezvous, exit 128+N
//   after a failure         restarts spent -> exit 1; no progress -> exit 4; the node's
//                           failure limit (local only) -> excluded, exit 6; else a restart
void Agent::Impl::on_local_failure() {
  if (!reform.active()) return begin_stop(StopReason::kLocalFailure, SIGTERM);
  if (reform.workers() == Reform::Workers::kUnknown)
    return probe_workers();  // once, before the first re-form
  if (reform.workers() == Reform::Workers::kProbing) return;
  while (reform.active() && life.is(Phase::kRunning)) {
    const WorkerFailure* next = reform.next(group->attempt(), group->failures());
    if (next == nullptr) return;
    const WorkerFailure f = *next;
    reform.take();
    if (uncaught_membership_change(f)) {
      // The loss it could not re-form after started a replacement, which
      // spent a restart; the restart of every worker stops it and takes its
      // place: one restart for the failure, as under restart.
      if (reform.replaced_in(group->attempt()) > 0) life.refund_restart();
      return fall_back_to_restart("rank " + std::to_string(f.rank) + " did not catch ddp::MembershipChanged");
    }
    if (group->succeeded() > 0) {
      return restart_for_finished(loss_text(f) + " after " + std::to_string(group->succeeded()) +
                                      " of this node's workers finished (exit 0), which cannot re-form",
                                  /*refund=*/false);
    }
    reform_after(f);
  }
}

void Agent::Impl::on_all_stopped() {
  switch (life.stop_reason()) {
    case StopReason::kLocalFailure:
      return reform.stop_line().empty() ? after_local_failure() : stop_below_minimum();
    case StopReason::kRemoteFailure:
      return after_remote_failure();
    case StopReason::kMembership:
      log->info("re-forming the group (no restart spent)");
      return start_rendezvous();
    case StopReason::kStoreLost:
      return finish(ExitCode::kRendezvous,
                    "rendezvous store lost (" + round_events.store_lost() + "); workers killed");
    case StopReason::kJobClosed:  // round_events.last() is "job closed: <why>"
      return finish(round_events.last().find(rdzv::kClosedByExclusion) != std::string::npos
                        ? ExitCode::kExcluded
                        : ExitCode::kRendezvous,
                    "rendezvous of run_id=" + cfg.rendezvous.run_id + " was closed by another node: " +
                        round_events.last().substr(round_events.last().find(": ") + 2) + "; workers stopped");
    case StopReason::kSignal:
      return close_after_signal();
  }
}

// Every node spends a restart on a failure anywhere, so all nodes agree on
// TORCHELASTIC_RESTART_COUNT. `why`: the limit's line.
Agent::Impl::AfterFailure Agent::Impl::next_after_failure(bool local, std::string& why) {
  if (life.restarts_spent()) return AfterFailure::kFailSpent;
  why = limits.judge_progress(group->heartbeats().any_progress(), *log);
  if (!why.empty()) return AfterFailure::kFailNoProgress;
  if (local) why = limits.count_node_failure(std::chrono::steady_clock::now());
  return why.empty() ? AfterFailure::kRestart : AfterFailure::kExclude;
}

void Agent::Impl::after_local_failure() {
  std::string why;
  const AfterFailure next = next_after_failure(/*local=*/true, why);
  const bool final_report = next == AfterFailure::kFailSpent || next == AfterFailure::kFailNoProgress;
  write_failure_report(final_report);
  const WorkerFailure& root = root_failure();
  const std::string reason = describe_failure(root);
  if (next == AfterFailure::kExclude) return exclude_this_node(why, reason);
  if (next == AfterFailure::kRestart) {
    life.spend_restart();
    log->warn("restarting workers ({}/{}) after failure of {}", life.restart_count(), cfg.max_restarts,
              reason);
    if (!records.reported()) {
      rdzv->report_failure(reason, [this](const std::string& m) {
        log->warn("could not report the failure to the other nodes: {}", m);
      });
    }
    return start_rendezvous();
  }
  // The other nodes' only news of what failed: report it before closing.
  // Closing follows; if the report fails the other nodes see the job end
  // without a cause.
  if (!records.reported()) rdzv->report_failure(reason);
  result.failure = reason;
  const auto root_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(root.time.time_since_epoch()).count();
  const std::string stalled = next == AfterFailure::kFailNoProgress ? why : "";
  records.earliest(
      *rdzv, life.have_round() ? life.round().round : -1,
      [this, stalled, root_ms](std::optional<FailureRecord> first) {
        // Another node's failure came before this node's: that is the job's
        // first, whichever node reported first.
        if (first && first->node != cfg.node.node_id && first->time_unix_ms < root_ms) {
          result.failure = first->failure;
          write_fully(2, "ddprun: error: the job's first failure was on another node, at " +
                             failure_time_text(first->time_unix_ms) + ": " + first->failure + "\n");
        }
        if (!stalled.empty()) {
          fail_for_good(stalled, /*print=*/true, ExitCode::kNoProgress);
        } else {
          fail_for_good("workers failed and max_restarts=" + std::to_string(cfg.max_restarts) + " is spent");
        }
      });
}

void Agent::Impl::after_remote_failure() {
  std::string why;
  const AfterFailure next = next_after_failure(/*local=*/false, why);
  if (next == AfterFailure::kFailNoProgress) return fail_for_good(why, /*print=*/true, ExitCode::kNoProgress);
  if (next == AfterFailure::kRestart) {
    life.spend_restart();
    log->warn("restarting workers ({}/{}) after another node's failure", life.restart_count(),
              cfg.max_restarts);
    return start_rendezvous();
  }
  // The only line on this node saying what went wrong: name the node, rank
  // and cause of the job's first failure by the nodes' own times, else what
  // the first node to report said through the store.
  records.earliest(
      *rdzv, life.have_round() ? life.round().round : -1, [this](std::optional<FailureRecord> first) {
        std::string detail = round_events.last();
        if (first) {
          detail = "node " + first->node + std::string(rdzv::kReportedFailure) + first->failure +
                   "; the job's first failure, at " + failure_time_text(first->time_unix_ms);
          result.failure = first->failure;
        } else if (const auto at = round_events.last().find(rdzv::kReportedFailure);
                   at != std::string::npos) {
          result.failure = round_events.last().substr(at + rdzv::kReportedFailure.size());
        }
        fail_for_good("another node's workers failed and max_restarts=" + std::to_string(cfg.max_restarts) +
                          " is spent (" + detail + ")",
                      /*print=*/true);
      });
}

void Agent::Impl::fail_for_good(const std::string& reason, bool print, ExitCode code) {
  final_reason = reason;
  life.enter(Phase::kClosing);
  // The job failed either way; the exit code says so.
  rdzv->close(reason, [this, reason, print, code] { finish(code, print ? reason : ""); });
}

const WorkerFailure& Agent::Impl::root_failure() const {
  const auto& failures = group->failures();
  return failures[FailureReport{"", "", 0, 0, 0, failures}.root_cause()];
}

void Agent::Impl::write_failure_report(bool final_report) {
  FailureReport report{cfg.rendezvous.run_id, cfg.role,         group->attempt(),
                       life.restart_count(),  cfg.max_restarts, group->failures()};
  const auto path = run_dir->attempt(group->attempt()) / "failure.json";
  {
    std::ofstream out(path, std::ios::trunc);
    out << render_json(report);
  }
  const auto& root = report.failures[report.root_cause()];
  observers.publish_failure(report, root, describe_failure(root));
  if (!final_report) return;
  run_dir->keep();
  // The report quotes the workers' error files and last lines: escaped where
  // a terminal would act on them (failure.json keeps them as they were).
  write_fully(2, terminal_safe(render_text(report) + interpreter_hint(report, cfg.argv.front()) +
                               "failure report: " + path.string() + "\n"));
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
  health.cancel();  // a --health_check command still running
  poll_timer.cancel();
  io.stop();
}

Agent::Agent(AgentConfig config, std::unique_ptr<rdzv::RendezvousHandler> handler)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(handler))) {}

Agent::~Agent() = default;

AgentResult Agent::run() { return impl_->run(); }

}  // namespace ddp::agent
