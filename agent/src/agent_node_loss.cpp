// A lost node under --on_failure=reform (docs/reform.md, "A lost node"): the
// other nodes keep their workers. Once the fence has passed, a waiting hot
// spare takes the lost node's place (its workers join the workers' next
// generation in the lost slots), or, with none and the job's MIN still met,
// the job goes on with a smaller world; else every node rejoins as before.
#include <signal.h>

#include <algorithm>
#include <numeric>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/rdzv/backend.hpp"

namespace ddp::agent {

namespace {

// The global ranks of the departed node's workers ("2-3"): from its rank
// offset as the round's records tell it (with ctl/gone/ for the places given
// up before this node came), else at g x nproc (a place below it whose record
// this node never saw, as when its decider knew no record either).
std::vector<int> node_slots(const rdzv::Departure& d, int fallback_nproc) {
  const int nproc = d.node.node_id.empty() ? fallback_nproc : d.node.local_world_size;
  const int offset = d.rank_offset >= 0 ? d.rank_offset : d.group_rank * nproc;
  std::vector<int> slots(static_cast<std::size_t>(std::max(nproc, 0)));
  std::iota(slots.begin(), slots.end(), offset);
  return slots;
}

std::string slots_text(const std::vector<int>& slots) {
  if (slots.empty()) return "none";
  if (slots.size() == 1) return std::to_string(slots.front());
  return std::to_string(slots.front()) + "-" + std::to_string(slots.back());
}

std::string node_name(const rdzv::Departure& d) {
  return (d.node.node_id.empty() ? std::string("the node") : "node " + d.node.node_id) + " (group rank " +
         std::to_string(d.group_rank) + ")";
}

}  // namespace

void Agent::Impl::watch_departures() {
  if (cfg.on_failure != OnFailure::kReform) return;
  rdzv->on_departure([this](const rdzv::Departure& d) { on_node_departure(d); });
  rdzv->on_newcomer([this](std::int64_t round, const std::string& detail) { on_newcomer(round, detail); });
}

void Agent::Impl::on_node_departure(const rdzv::Departure& d) {
  if (!life.have_round() || d.round != life.round().round) return;
  // This node's workers all succeeded and it waits for the others': as under
  // restart, where the departure ends the round, their success cannot be
  // confirmed any more, and this node's own success stands.
  if (life.is(Phase::kSucceeded)) return succeed_unconfirmed(d.detail);
  if (!life.is(Phase::kRunning)) return;
  // On etcd the workers' store is group rank 0's: nothing re-forms without it.
  const auto backend = rdzv::parse_backend(cfg.rendezvous.backend);
  const bool store_lost = d.group_rank == 0 && backend && rdzv::uses_etcd(*backend);
  if (!reform.active() || store_lost) return settle_node(d, false, false);
  if (reform.workers() == Reform::Workers::kElastic) return settle_reforming(d);
  reform.ask_elastic(
      life.round(),
      [this, d](bool joined) {
        if (!life.is(Phase::kRunning) || d.round != life.round().round) return;
        if (joined) return settle_reforming(d);
        settle_node(d, false, false);
      },
      [this, d](const std::string& m) {
        log->warn("reform: cannot read the workers' store ({}): the job re-forms from the start", m);
        if (life.is(Phase::kRunning) && d.round == life.round().round) settle_node(d, false, false);
      });
}

void Agent::Impl::settle_reforming(const rdzv::Departure& d) {
  const auto settle = [this, d](std::int64_t finished) {
    if (!life.is(Phase::kRunning) || d.round != life.round().round) return;
    if (finished > 0) {
      log->warn(
          "reform: {} lost after {} worker(s) of the job finished (exit 0), which a hot spare's "
          "workers would wait for: no hot spare takes its place",
          node_name(d), finished);
    }
    settle_node(d, true, finished == 0);
  };
  if (group->succeeded() > 0) return settle(group->succeeded());
  reform.finished_count(life.round(), settle, [this, settle](const std::string& m) {
    log->warn("reform: cannot read how many workers finished ({}): offering the place to hot spares", m);
    settle(0);
  });
}

void Agent::Impl::settle_node(const rdzv::Departure& d, bool reforming, bool offer) {
  // The nodes left: the round's members and the nodes that grew it since, less
  // the places given up in it and this one.
  const int members = d.members > 0 ? d.members : life.round().group_world_size;
  const int left = members - reform.nodes_given_up() - 1;
  const bool may_shrink = reforming && left >= cfg.rendezvous.min_nodes;
  const auto slots = node_slots(d, cfg.nproc_per_node);
  if (reforming) {
    log->warn("reform: {} lost ({}); ranks {} are settled after the fence", node_name(d), d.reason,
              slots_text(slots));
  }
  rdzv->settle_place(
      d, reforming && offer, may_shrink,
      [this, d, slots, reforming](const rdzv::Place& p) {
        // A restart's own round event may come first: its line is still due.
        const bool restart = p.kind == rdzv::Place::Kind::kRestart;
        if ((!restart && !life.is(Phase::kRunning)) || d.round != life.round().round) return;
        on_place_settled(d, slots, p, reforming);
      },
      [this, d](const std::string& m) {
        if (!life.is(Phase::kRunning) || d.round != life.round().round) return;
        log->error("reform: cannot settle the place of {}: {}; restarting every worker", node_name(d), m);
        begin_stop(StopReason::kMembership, SIGTERM);
      });
}

void Agent::Impl::on_place_settled(const rdzv::Departure& d, const std::vector<int>& slots,
                                   const rdzv::Place& p, bool reforming) {
  const std::string lost = node_name(d) + " lost";
  switch (p.kind) {
    case rdzv::Place::Kind::kSpare:
      log->warn("reform: {}; hot spare {} takes its place (ranks {})", lost, p.by, slots_text(slots));
      observers.emit("node_lost", {{"group_rank", d.group_rank}, {"ranks", slots}, {"taken_by", p.by}});
      return;
    case rdzv::Place::Kind::kRestart:
      // The ctl/ended marker that decided it ends the round here too.
      log->warn("reform: {}; {}: every node rejoins", lost,
                reforming ? "no hot spare and too few nodes left to go on without it"
                          : "its workers cannot re-form in place");
      return;
    case rdzv::Place::Kind::kShrink:
      break;
  }
  reform.gave_up_node(static_cast<int>(slots.size()));
  if (!p.mine) {
    const std::int64_t world = (d.workers > 0 ? d.workers : reform_base_world()) - reform.workers_given_up();
    log->warn("reform: {}; no hot spare: the job goes on without ranks {}, world size {}", lost,
              slots_text(slots), world);
    return;
  }
  reform.lose_node(
      reform_round(), slots, lost + ": " + d.reason, /*replace=*/false,
      [this, d, slots, lost, round = d.round](const ReformStore::Outcome& out) {
        if (!life.is(Phase::kRunning) || round != life.round().round) return;
        const std::int64_t now = reform_base_world() + out.size;
        if (out.below_min) {
          log->error("reform: {}; {} worker(s) would be left, fewer than the job's minimum: restarting", lost,
                     now);
          return rdzv->report_failure(lost);
        }
        log->warn("reform: {}; no hot spare: the job goes on without ranks {}, world size {}", lost,
                  slots_text(slots), now);
        observers.emit("reform", {{"ranks", slots},
                                  {"reason", lost},
                                  {"generation", out.generation},
                                  {"world_size", now},
                                  {"replaced", false}});
      },
      [this, lost](const std::string& m) {
        log->error("reform: {}; cannot write to the workers' store ({}): restarting every worker", lost, m);
        rdzv->report_failure(lost);
      });
}

void Agent::Impl::take_lost_place() {
  // A node joining a running round, in a lost node's place (a hot spare) or
  // in a new group rank (a newcomer growing it): the workers learn of it
  // through their store, then this node's workers join their next generation.
  const auto& r = life.round();
  std::vector<int> slots(static_cast<std::size_t>(cfg.nproc_per_node));
  std::iota(slots.begin(), slots.end(), r.rank_offset);
  std::string why;
  if (r.grows) {
    why = "node " + cfg.node.node_id + " (group rank " + std::to_string(r.group_rank) +
          ") joined the running job";
    log->warn("reform: this node grows the running job: ranks {} join its workers", slots_text(slots));
  } else {
    why = (r.replaced.node_id.empty() ? std::string("a node") : "node " + r.replaced.node_id) +
          " (group rank " + std::to_string(r.group_rank) + ") lost";
    log->warn("reform: {}; this hot spare takes its place: ranks {} join the running workers", why,
              slots_text(slots));
    why += "; hot spare " + cfg.node.node_id + " took its place";
  }
  taking_place = true;  // round events until the workers start are deferred
  auto done = [this, slots, why, round = r.round](const ReformStore::Outcome& out) {
    taking_place = false;
    if (!life.is(Phase::kRendezvous) || round != life.round().round) return;
    // R/size counts from the world the round began with; WORLD_SIZE covers every slot.
    auto joined = life.round();
    joined_base_world = joined.world_size;
    joined.world_size = static_cast<int>(
        std::max<std::int64_t>(joined.world_size + out.size, joined.rank_offset + cfg.nproc_per_node));
    life.set_round(joined);
    observers.emit("reform", {{"ranks", slots},
                              {"reason", why},
                              {"generation", out.generation},
                              {"world_size", joined_base_world + out.size},
                              {"replaced", true}});
    spawn_workers();
    if (const auto e = round_events.take(round)) on_round_event(e->round, e->event, e->detail);
  };
  auto failed = [this, why](const std::string& m) {
    taking_place = false;
    finish(ExitCode::kRendezvous, "reform: " + why + ": this node cannot write to the workers' store: " + m);
  };
  if (r.grows) return reform.grow_node(r, cfg.nproc_per_node, std::move(done), std::move(failed));
  reform.lose_node(r, slots, why, /*replace=*/true, std::move(done), std::move(failed));
}

void Agent::Impl::on_newcomer(std::int64_t round, const std::string& detail) {
  if (!life.is(Phase::kRunning) || round != life.round().round) return;
  const auto admit = [this, round, detail](bool yes) {
    if (!life.is(Phase::kRunning) || round != life.round().round) return;
    log->info("{}: {}", detail,
              yes ? "admitted into the running job (its workers join at the next step; with no room below "
                    "MAX it waits as a hot spare)"
                  : "every node rejoins to take it in");
    rdzv->admit_newcomers(round, yes, detail, [this](const std::string& m) {
      log->warn("cannot admit a node waiting to join: {}", m);
    });
  };
  if (!reform.active()) return admit(false);
  // A worker that already finished cannot join a grown generation: its
  // job is ending, and, as a finished node, it takes no new nodes (the
  // newcomer waits beside it, and exits 0 when the job has finished).
  if (group->succeeded() > 0) {
    log->info("{}: not admitted, this node's workers are finishing", detail);
    return;
  }
  // Nor on another node: the newcomer's workers would wait for it.
  const auto admit_elastic = [this, round, detail, admit](bool elastic) {
    if (!elastic) return admit(false);
    reform.finished_count(
        life.round(),
        [this, round, detail, admit](std::int64_t finished) {
          if (!life.is(Phase::kRunning) || round != life.round().round) return;
          if (finished == 0) return admit(true);
          log->info("{}: not admitted, {} worker(s) of the job finished (exit 0)", detail, finished);
        },
        [admit](const std::string&) { admit(true); });
  };
  if (reform.workers() == Reform::Workers::kElastic) return admit_elastic(true);
  reform.ask_elastic(life.round(), admit_elastic, [admit](const std::string&) { admit(false); });
}

}  // namespace ddp::agent
