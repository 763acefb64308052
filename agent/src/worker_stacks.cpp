// The worker group's stack collection: before a hung worker is killed (the
// hung rank's top frames and what the other ranks were waiting in go into
// the failure report) and on demand (SIGURG to ddprun). The full dumps go to
// attempt_<k>/stacks_<n>.txt in the run directory.
#include <signal.h>

#include <algorithm>
#include <fstream>

#include "ddp/common/logging.hpp"
#include "worker_group.hpp"

namespace ddp::agent {

namespace {

// Bounds each step of a collection: a hung worker is killed at most this
// late (twice, when a native culprit's stack is taken after the others').
constexpr std::chrono::milliseconds kStackBudget{3000};

std::string waiting_in(const RankStack& s) {
  return "[rank " + std::to_string(s.target.rank) +
         "] waiting in: " + (s.top_frames.empty() ? s.note : s.top_frames.front());
}

}  // namespace

std::vector<StackTarget> WorkerGroup::stack_targets() const {
  std::vector<StackTarget> out;
  for (const auto& w : workers_) {
    if (!w.spawned || w.done || w.hung) continue;
    out.push_back({w.rank, w.local_rank, w.pid, w.python_stack_file});
  }
  return out;
}

std::string WorkerGroup::write_stacks(const std::vector<RankStack>& stacks) {
  const auto path = run_dir_.attempt(attempt_) / ("stacks_" + std::to_string(stack_dumps_++) + ".txt");
  std::ofstream out(path);
  out << render_stacks(stacks);
  if (!out) {
    log_->warn("cannot write the workers' stacks to {}", path.string());
    return "";
  }
  return path.string();
}

void WorkerGroup::collect_then_kill(int local_rank, HangInfo info,
                                    std::chrono::steady_clock::time_point deadline) {
  Worker& missed = workers_[static_cast<std::size_t>(local_rank)];
  if (hang_collection_ >= 0) {
    // Another rank's hang is being collected; this one is most likely waiting
    // for it (a collective), and the group stops once that report is out.
    log_->info("worker rank={} also missed its deadline ({}) while rank {}'s stacks are collected",
               missed.rank, info.what(), workers_[static_cast<std::size_t>(hang_collection_)].rank);
    watch_.clear(local_rank);
    return;
  }
  if (peer_wait_ >= 0) return;  // every local rank waits for another node's: it has a while to act
  if (stacks_.busy()) {
    info.stack_note = "not collected: another collection was under way";
    kill_hung(missed, std::move(info), late_since(deadline));
    return;
  }
  watch_.clear(local_rank);
  const bool straggler = info.source == "straggler";
  const bool unjoined = info.source == "reform";
  log_->info("worker rank={} {} ({}): collecting the local workers' stacks before killing it", missed.rank,
             straggler  ? "was named a straggler"
             : unjoined ? "never joined the re-form"
                        : "missed its deadline",
             info.what());
  hang_collection_ = local_rank;
  // The culprit as far as the rule can tell already (the SDK's counts in the
  // liveness files): its stack is taken at once, its main thread only if it
  // is native, with every Python worker's (faulthandler answers within a
  // millisecond, all at once; their stacks and the Flight Recorder decide
  // for torch workers). The other native workers, the one whose deadline
  // passed among them, are frozen (SIGSTOP) before the kill, so that losing
  // their peer cannot move them, and taken after it.
  // A straggler, or a slot that never joined a re-form: named already, no
  // culprit rule.
  const bool named = straggler || unjoined;
  const int guess =
      named ? local_rank : decide_culprit(local_rank, activities({}), other_nodes()).culprit_local_rank;
  std::vector<StackTarget> first, native;
  for (auto& t : stack_targets()) {
    // The other ranks wait in the re-form for this one: their stacks say
    // nothing new, and freezing them to take them would make them wait longer.
    if (unjoined && t.local_rank != guess) continue;
    const bool now = t.local_rank == guess || !t.python_file.empty();
    t.main_thread_only = t.local_rank == guess;  // killed once it is in: the fast kind
    (now ? first : native).push_back(std::move(t));
  }
  stacks_.collect(
      std::move(first), kStackBudget,
      [this, local_rank, att = attempt_, info = std::move(info), deadline, named,
       native = std::move(native)](std::vector<RankStack> stacks) mutable {
        if (att != attempt_ || state_ != State::kRunning) return;
        hang_collection_ = -1;
        const auto verdict = named ? CulpritVerdict{local_rank, false, "", ""}
                                   : decide_culprit(local_rank, activities(stacks), other_nodes());
        if (verdict.remote) {
          wait_for_other_node(local_rank, std::move(info), deadline, verdict);
          return;
        }
        const int c = verdict.culprit_local_rank;
        Worker& w = workers_[static_cast<std::size_t>(c)];
        if (w.done || w.hung) return;  // it exited meanwhile: that exit is its failure
        info.waiting = verdict.waiting;
        info.culprit_rule = verdict.why;
        if (c != local_rank) info.missed_rank = workers_[static_cast<std::size_t>(local_rank)].rank;
        if (info.liveness_note.empty() && !named)
          info.liveness_note = heartbeats_->liveness_note(c, local_rank);
        const bool have = std::any_of(stacks.begin(), stacks.end(),
                                      [c](const RankStack& s) { return s.target.local_rank == c; });
        if (!have) {
          // A native culprit the first guess missed (Python and
          // native ranks side by side): its stack first, then the kill.
          std::vector<StackTarget> rest, mine;
          for (auto& t : native) {
            t.main_thread_only = t.local_rank == c;
            (t.local_rank == c ? mine : rest).push_back(std::move(t));
          }
          native = std::move(rest);
          hang_collection_ = c;
          stacks_.collect(std::move(mine), kStackBudget,
                          [this, c, att, info = std::move(info), deadline, stacks = std::move(stacks),
                           native = std::move(native)](std::vector<RankStack> more) mutable {
                            if (att != attempt_ || state_ != State::kRunning) return;
                            hang_collection_ = -1;
                            stacks.insert(stacks.end(), more.begin(), more.end());
                            kill_culprit(c, std::move(info), deadline, std::move(stacks), std::move(native));
                          });
          return;
        }
        kill_culprit(c, std::move(info), deadline, std::move(stacks), std::move(native));
      });
}

void WorkerGroup::kill_culprit(int local_rank, HangInfo info, std::chrono::steady_clock::time_point deadline,
                               std::vector<RankStack> stacks, std::vector<StackTarget> native) {
  Worker& w = workers_[static_cast<std::size_t>(local_rank)];
  if (w.done || w.hung) return;
  std::erase_if(native, [&](const StackTarget& t) {
    const Worker& o = workers_[static_cast<std::size_t>(t.local_rank)];
    return t.local_rank == local_rank || o.done || o.hung;
  });
  for (const auto& t : native) ::kill(t.pid, SIGSTOP);
  const auto killed_late = late_since(deadline);
  // First: other nodes hear of it now. The index stays valid while the
  // attempt lasts.
  const auto failure = record_hang(w, std::move(info), killed_late);
  after_recorded(failure, [this, local_rank, killed_late, failure, stacks = std::move(stacks),
                           native = std::move(native)]() mutable {
    kill_tree(workers_[static_cast<std::size_t>(local_rank)]);
    report_culprit(local_rank, killed_late, failure, std::move(stacks), std::move(native));
  });
}

void WorkerGroup::report_culprit(int local_rank, std::chrono::milliseconds killed_late, std::size_t failure,
                                 std::vector<RankStack> stacks, std::vector<StackTarget> native) {
  const Worker& w = workers_[static_cast<std::size_t>(local_rank)];
  if (native.empty()) {
    HangInfo& hang = *failures_[failure].hang;
    add_hang_stacks(hang, local_rank, std::move(stacks));
    report_hang(w, hang, killed_late);
    return;
  }
  // Reported (the group stopped) only once the frozen workers' stacks are
  // in: stopping would thaw them.
  hang_collection_ = local_rank;
  auto frozen = native;
  stacks_.collect(std::move(native), kStackBudget,
                  [this, local_rank, att = attempt_, killed_late, failure, stacks = std::move(stacks),
                   frozen = std::move(frozen)](std::vector<RankStack> more) mutable {
                    for (const auto& t : frozen) ::kill(t.pid, SIGCONT);
                    if (att != attempt_) return;
                    hang_collection_ = -1;
                    stacks.insert(stacks.end(), more.begin(), more.end());
                    HangInfo& hang = *failures_[failure].hang;
                    add_hang_stacks(hang, local_rank, std::move(stacks));
                    report_hang(workers_[static_cast<std::size_t>(local_rank)], hang, killed_late);
                  });
}

void WorkerGroup::wait_for_other_node(int local_rank, HangInfo info,
                                      std::chrono::steady_clock::time_point deadline,
                                      const CulpritVerdict& verdict) {
  // Every local rank waits in a collective on a rank of another node; that
  // node's own deadline names and kills it, and its report stops this node
  // too. Killing a rank here first would name the wrong one.
  peer_wait_ = local_rank;
  peer_waited_ = true;
  peer_info_ = std::move(info);
  peer_deadline_ = deadline;
  log_->warn("worker rank={} missed its deadline, but {}: leaving it to that node for {} s",
             workers_[static_cast<std::size_t>(local_rank)].rank, verdict.waiting, kPeerGrace.count());
  Deadline d;
  d.local_rank = local_rank;
  d.source = "peer";
  d.at = std::chrono::steady_clock::now() + kPeerGrace;
  watch_.arm(d);
}

std::vector<RankActivity> WorkerGroup::activities(const std::vector<RankStack>& stacks) const {
  std::vector<RankActivity> out;
  for (const auto& w : workers_) {
    if (!w.spawned || w.done || w.hung) continue;
    RankActivity a;
    a.rank = w.rank;
    a.local_rank = w.local_rank;
    a.deadline = std::min(watch_.earliest(w.local_rank), heartbeats_->next_deadline(w.local_rank));
    // The SDK counts its collectives in the liveness file.
    if (const auto s = heartbeats_->snapshot(w.local_rank); s && s->collectives_published) {
      a.issued = s->coll_issued;
      a.evidence = "liveness file";
      if (s->coll_issued > s->coll_completed) {
        a.where = RankActivity::Where::kWaiting;
        a.seq = s->coll_completed + 1;
        a.op = liveness::collective_name(s->coll_waiting_kind);
      } else {
        a.where = RankActivity::Where::kOutside;
      }
    }
    // torch: the Flight Recorder's counts, else where its main thread is.
    for (const auto& st : stacks) {
      if (st.target.local_rank != w.local_rank || st.target.python_file.empty() || st.top_frames.empty())
        continue;
      if (st.flight_recorder) {
        a.issued = st.issued;
        a.evidence = "Flight Recorder";
        if (st.issued > st.completed) {
          a.where = RankActivity::Where::kWaiting;
          a.seq = st.completed + 1;
          a.op = st.torch_call.empty() ? "a collective" : st.torch_call;
        } else {
          a.where = RankActivity::Where::kOutside;
        }
      } else if (a.where == RankActivity::Where::kUnknown) {
        a.evidence = "stack";
        a.where = st.torch_call.empty() ? RankActivity::Where::kOutside : RankActivity::Where::kWaiting;
        a.op = st.torch_call;
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

OtherNodes WorkerGroup::other_nodes() const {
  if (launch_.round == nullptr || launch_.round->world_size <= static_cast<int>(workers_.size())) {
    return OtherNodes::kNone;
  }
  return peer_waited_ ? OtherNodes::kSilent : OtherNodes::kYes;
}

std::chrono::milliseconds WorkerGroup::late_since(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - deadline);
}

void WorkerGroup::add_hang_stacks(HangInfo& hang, int local_rank, std::vector<RankStack> stacks) {
  hang.stacks_file = write_stacks(stacks);
  for (const auto& s : stacks) {
    if (s.target.local_rank == local_rank) {
      hang.top_frames = s.top_frames;
      hang.stack_note = s.note;
    } else {
      hang.other_ranks.push_back(waiting_in(s));
    }
  }
}

void WorkerGroup::dump_stacks() {
  if (state_ != State::kRunning || stacks_.busy()) {
    log_->info("stack dump requested: {}", stacks_.busy() ? "one is under way" : "no workers are running");
    return;
  }
  log_->info("stack dump requested: collecting the local workers' stacks");
  stacks_.collect(stack_targets(), kStackBudget, [this, att = attempt_](std::vector<RankStack> stacks) {
    if (att != attempt_) return;
    const auto file = write_stacks(stacks);
    for (const auto& s : stacks) log_->info("{}", waiting_in(s));
    if (!file.empty()) log_->info("workers' stacks written to {}", file);
  });
}

}  // namespace ddp::agent
