// --on_failure=reform (docs/reform.md; docs/agent-recovery.md, "Re-forming in place"):
// what the agent decides on what Reform reports. A failed worker is replaced,
// or given up, while its siblings keep running, and the workers learn of it
// through their store.
#include <signal.h>

#include <algorithm>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

void Agent::Impl::probe_workers() {
  const int attempt = group->attempt();
  const auto current = [this, attempt] { return life.is(Phase::kRunning) && group->attempt() == attempt; };
  reform.probe(
      life.round(),
      [this, current](bool joined) {
        if (!current()) return;
        if (joined) return on_local_failure();
        // Torch workers, or any program that never made a ddp::ElasticGroup:
        // its siblings cannot re-form and would wait in their collectives.
        const WorkerFailure* f = reform.next(group->attempt(), group->failures());
        fall_back_to_restart("rank " + std::to_string(f ? f->rank : -1) +
                             " failed and no worker joined a ddp::ElasticGroup (not a worker SDK trainer?)");
      },
      [this, current, endpoint = life.round().store_endpoint.to_string()](const std::string& m) {
        if (!current()) return;
        log->error("reform: cannot read the workers' store at {} ({}): restarting every worker instead",
                   endpoint, m);
        begin_stop(StopReason::kLocalFailure, SIGTERM);
      });
}

void Agent::Impl::fall_back_to_restart(const std::string& why) {
  log->warn("{}: falling back to --on_failure=restart for this run", why);
  reform.fall_back();
  rdzv->on_departure(nullptr);  // a lost node ends the round again
  rdzv->on_newcomer(nullptr);   // and a newcomer
  begin_stop(StopReason::kLocalFailure, SIGTERM);
}

void Agent::Impl::restart_for_finished(const std::string& why, bool refund) {
  log->warn("reform: {}: restarting every worker", why);
  if (refund) life.refund_restart();
  // A hot spare that took a lost node's place has no failure of its own: it
  // restarts as for another node's, and every node spends the one restart
  // (the round ends with restart_requested), so their restart counts agree.
  begin_stop(group->failures().empty() ? StopReason::kRemoteFailure : StopReason::kLocalFailure, SIGTERM);
}

void Agent::Impl::reform_after(const WorkerFailure& f) {
  write_failure_report(/*final_report=*/false);
  const bool replace = !life.restarts_spent();
  if (replace) {
    life.spend_restart();
    reform.replacing();
  }
  const std::string lost = loss_text(f);
  const int attempt = group->attempt();
  const auto current = [this, attempt] { return life.is(Phase::kRunning) && group->attempt() == attempt; };
  reform.lose(
      reform_round(), f, replace,
      [this, f, replace, current, lost, restarts = life.restart_count()](const ReformStore::Outcome& out) {
        if (!current()) return;
        if (out.finished > 0) {
          // Workers of the job exited 0 (on another node, or here meanwhile):
          // nothing was written, and no replacement starts.
          return restart_for_finished(lost + " after " + std::to_string(out.finished) +
                                          " worker(s) of the job finished (exit 0), which cannot re-form",
                                      replace);
        }
        if (replace)
          log->warn("reform: {}; starting a replacement ({}/{})", lost, restarts, cfg.max_restarts);
        if (!replace && !out.below_min) {
          log->warn("reform: {}; max_restarts={} is spent: the job goes on without it", lost,
                    cfg.max_restarts);
        }
        const std::int64_t world = reform_base_world() + out.size;
        reform.written(f, replace, out, world);
        if (out.below_min) return begin_stop(StopReason::kLocalFailure, SIGTERM);  // stop_below_minimum
        observers.emit("reform", {{"ranks", {f.rank}},
                                  {"reason", describe_failure(f)},
                                  {"generation", out.generation},
                                  {"world_size", world},
                                  {"replaced", replace}});
        if (replace) {
          group->replace(f.local_rank, restarts);
        } else {
          group->drop(f.local_rank);
        }
      },
      [this, current, replace, endpoint = life.round().store_endpoint.to_string()](const std::string& m) {
        if (!current()) return;
        log->error("reform: cannot write to the workers' store at {} ({}): restarting every worker instead",
                   endpoint, m);
        // No replacement started: the restart of every worker spends the
        // restart the replacement had taken, not a second one.
        if (replace) life.refund_restart();
        begin_stop(StopReason::kLocalFailure, SIGTERM);
      });
}

void Agent::Impl::watch_reform_stalls() {
  const int attempt = group->attempt();
  reform.watch(
      life.round(),
      [this, attempt](std::int64_t g) {
        if (reform.active() && life.is(Phase::kRunning) && group->attempt() == attempt) on_reform_stalled(g);
      },
      [this, endpoint = life.round().store_endpoint.to_string()](const std::string& m) {
        log->warn(
            "reform: cannot watch the workers' store at {} for re-forms that stall ({}): a slot that never "
            "joins one is left to the workers' DDP_REFORM_TIMEOUT",
            endpoint, m);
      });
}

void Agent::Impl::on_reform_stalled(std::int64_t g) {
  // A member of generation g waited its stall timeout: the local slots still
  // missing from g's members, while g is current and not full, are killed
  // (their stacks first) and replaced as failures of their own.
  const int attempt = group->attempt();
  reform.joined(
      life.round(), g,
      [this, attempt, g](const std::optional<std::vector<int>>& joined, std::int64_t finished_workers) {
        if (!joined || !reform.active() || !life.is(Phase::kRunning) || group->attempt() != attempt) return;
        std::string members;
        for (const int s : *joined) members += (members.empty() ? "" : ", ") + std::to_string(s);
        // A finished slot never joins: g waits for it in vain. The node whose
        // failure, or whose taking of a lost node's place, began the re-form
        // restarts the job; the restart takes the place of the replacement
        // that joined g.
        std::string why;
        for (const Worker& w : group->workers()) {
          if (why.empty() && w.exited_ok() && !w.dropped &&
              std::find(joined->begin(), joined->end(), w.rank) == joined->end())
            why = "generation " + std::to_string(g) + " waits for rank " + std::to_string(w.rank) +
                  ", which finished (exit 0) and cannot re-form";
        }
        if (why.empty() && finished_workers > 0) {  // on other nodes
          why = "generation " + std::to_string(g) +
                " waits for slots that cannot all join: " + std::to_string(finished_workers) +
                " worker(s) of the job finished (exit 0)";
        }
        if (!why.empty() && (!group->failures().empty() || reform.began(g)))
          return restart_for_finished(why, reform.replaced_in(group->attempt()) > 0);
        for (const Worker& w : group->workers()) {
          if (!w.spawned || w.done || w.hung || w.dropped) continue;
          if (std::find(joined->begin(), joined->end(), w.rank) != joined->end()) continue;
          HangInfo info;
          info.source = "reform";
          info.detail = "generation " + std::to_string(g) + ", which slot(s) " +
                        (members.empty() ? std::string("none") : members) +
                        " joined and waited past DDP_REFORM_STALL_TIMEOUT for it";
          group->kill_named(w.local_rank, std::move(info));
        }
      },
      [this](const std::string& m) { log->warn("reform: cannot read a stalled re-form's members: {}", m); });
}

void Agent::Impl::stop_below_minimum() {
  write_failure_report(/*final_report=*/true);
  const std::string reason = describe_failure(root_failure());
  rdzv->report_failure(reason);
  result.failure = reason;
  fail_for_good(reform.stop_line(), /*print=*/true, ExitCode::kFailed);
}

}  // namespace ddp::agent
