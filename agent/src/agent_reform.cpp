// --on_failure=reform (docs/reform.md; docs/agent.md, "Re-forming in place"):
// a failed worker is replaced, or given up, while its siblings keep running,
// and the workers learn of it through their store.
#include <fmt/format.h>
#include <signal.h>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

// What an uncaught ddp::MembershipChanged leaves in the error file (ddp::run).
constexpr std::string_view kMembershipChanged = "ddp::MembershipChanged";

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (const int r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

}  // namespace

void Agent::Impl::on_local_failure() {
  if (!reform) {
    begin_stop(StopReason::kLocalFailure, SIGTERM);
    return;
  }
  // Every record not acted on yet: a hung worker's is made before it is
  // killed, and another failure may be announced before it.
  if (group->attempt() != failures_attempt) {
    failures_attempt = group->attempt();
    failures_seen = 0;
  }
  if (!elastic_workers) {
    // Once per run, before the first re-form: are these SDK trainers at all?
    if (!probing_workers) probe_workers();
    return;
  }
  while (reform && life.is(Phase::kRunning) && failures_seen < group->failures().size()) {
    const WorkerFailure f = group->failures()[failures_seen++];
    if (f.error && f.error->message.find(kMembershipChanged) != std::string::npos) {
      // A trainer that lets the exception end it does not re-form: its
      // siblings would wait for it at every generation.
      log->warn(
          "rank {} did not catch ddp::MembershipChanged: falling back to --on_failure=restart for this run",
          f.rank);
      reform = false;
      begin_stop(StopReason::kLocalFailure, SIGTERM);
      return;
    }
    reform_after(f);
  }
}

void Agent::Impl::probe_workers() {
  probing_workers = true;
  const auto& round = life.round();
  const int attempt = group->attempt();
  const auto current = [this, attempt] { return life.is(Phase::kRunning) && group->attempt() == attempt; };
  reform_store->probe(
      round.store_endpoint, cfg.rendezvous.token, round.worker_prefix + "reform/",
      [this, current](bool joined) {
        probing_workers = false;
        if (!current()) return;
        if (joined) {
          elastic_workers = true;
          on_local_failure();
          return;
        }
        // Torch workers, or any program that never made a ddp::ElasticGroup:
        // its siblings cannot re-form and would wait in their collectives.
        const auto& f = group->failures()[failures_seen];
        log->warn(
            "rank {} failed and no worker joined a ddp::ElasticGroup (not a worker SDK trainer?): falling "
            "back to --on_failure=restart for this run",
            f.rank);
        reform = false;
        begin_stop(StopReason::kLocalFailure, SIGTERM);
      },
      [this, current, endpoint = round.store_endpoint.to_string()](const std::string& m) {
        probing_workers = false;
        if (!current()) return;
        log->error("reform: cannot read the workers' store at {} ({}): restarting every worker instead",
                   endpoint, m);
        begin_stop(StopReason::kLocalFailure, SIGTERM);
      });
}

void Agent::Impl::reform_after(const WorkerFailure& f) {
  write_failure_report(/*final_report=*/false);
  const bool replace = !life.restarts_spent();
  if (replace) life.spend_restart();
  const std::string why = failure_why(f);
  const std::string lost =
      fmt::format("rank {} lost ({}{}{})", f.rank, failure_how(f), why.empty() ? "" : ": ", why);
  if (replace)
    log->warn("reform: {}; starting a replacement ({}/{})", lost, life.restart_count(), cfg.max_restarts);
  const auto& round = life.round();
  ReformStore::Loss loss;
  loss.store = round.store_endpoint;
  loss.token = cfg.rendezvous.token;
  loss.prefix = round.worker_prefix + "reform/";
  loss.slot = f.rank;
  loss.reason = describe_failure(f);
  loss.delta = replace ? 0 : -1;
  loss.min_size = static_cast<std::int64_t>(cfg.rendezvous.min_nodes) * cfg.nproc_per_node - round.world_size;
  const int attempt = group->attempt();
  const auto current = [this, attempt] { return life.is(Phase::kRunning) && group->attempt() == attempt; };
  reform_store->lose(
      std::move(loss),
      [this, f, replace, current, lost, restarts = life.restart_count()](const ReformStore::Outcome& out) {
        if (!current()) return;
        if (!replace && !out.below_min) {
          log->warn("reform: {}; max_restarts={} is spent: the job goes on without it", lost,
                    cfg.max_restarts);
        }
        after_reform_writes(f, replace, restarts, out);
      },
      [this, current, replace, endpoint = round.store_endpoint.to_string()](const std::string& m) {
        if (!current()) return;
        log->error("reform: cannot write to the workers' store at {} ({}): restarting every worker instead",
                   endpoint, m);
        // No replacement started: the restart of every worker spends the
        // restart the replacement had taken, not a second one.
        if (replace) life.refund_restart();
        begin_stop(StopReason::kLocalFailure, SIGTERM);
      });
}

void Agent::Impl::after_reform_writes(const WorkerFailure& f, bool replaced, int restart_count,
                                      const ReformStore::Outcome& out) {
  if (!replaced) lost_ranks.push_back(f.rank);
  const std::int64_t world = life.round().world_size + out.size;
  if (out.below_min) {
    const int min_workers = cfg.rendezvous.min_nodes * cfg.nproc_per_node;
    reform_stop_line = fmt::format(
        "reform: rank{} {} lost and max_restarts={} is spent: {} worker(s) would be left, fewer than the "
        "job's "
        "minimum of {} (--nnodes MIN {} x --nproc_per_node {}); raise --max_restarts or lower the --nnodes "
        "minimum",
        lost_ranks.size() > 1 ? "s" : "", rank_list(lost_ranks), cfg.max_restarts, world, min_workers,
        cfg.rendezvous.min_nodes, cfg.nproc_per_node);
    begin_stop(StopReason::kLocalFailure, SIGTERM);
    return;
  }
  observers.emit("reform", {{"ranks", {f.rank}},
                            {"reason", describe_failure(f)},
                            {"generation", out.generation},
                            {"world_size", world},
                            {"replaced", replaced}});
  if (replaced) {
    group->replace(f.local_rank, restart_count);
  } else {
    group->drop(f.local_rank);
  }
}

void Agent::Impl::stop_below_minimum() {
  write_failure_report(/*final_report=*/true);
  const auto& failures = group->failures();
  const std::string reason =
      describe_failure(failures[FailureReport{"", "", 0, 0, 0, failures}.root_cause()]);
  rdzv->report_failure(reason);
  result.failure = reason;
  fail_for_good(reform_stop_line, /*print=*/true, ExitCode::kFailed);
}

}  // namespace ddp::agent
