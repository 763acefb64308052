// The worker group's stack collection: before a hung worker is killed (the
// hung rank's top frames and what the other ranks were waiting in go into
// the failure report) and on demand (SIGURG to ddprun). The full dumps go to
// attempt_<k>/stacks_<n>.txt in the run directory.
#include <signal.h>

#include <fstream>

#include "ddp/common/logging.hpp"
#include "worker_group.hpp"

namespace ddp::agent {

namespace {

// Bounds the whole collection: a hung worker is killed at most this late.
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
  Worker& hung = workers_[static_cast<std::size_t>(local_rank)];
  const auto late = [deadline] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - deadline);
  };
  if (hang_collection_ >= 0) {
    // Another rank's hang is being collected; this one is most likely waiting
    // for it (a collective), and the group stops once that report is out.
    log_->info("worker rank={} also missed its deadline ({}) while rank {}'s stacks are collected", hung.rank,
               info.what(), workers_[static_cast<std::size_t>(hang_collection_)].rank);
    watch_.clear(local_rank);
    return;
  }
  if (stacks_.busy()) {
    info.stack_note = "not collected: another collection was under way";
    kill_hung(hung, std::move(info), late());
    return;
  }
  watch_.clear(local_rank);
  log_->info("worker rank={} {} ({}): collecting the local workers' stacks before killing it", hung.rank,
             info.source == "straggler" ? "was named a straggler" : "missed its deadline", info.what());
  hang_collection_ = local_rank;
  // Two steps, so that the hung worker dies as soon as its own stack is in
  // and the others' stacks still show what they were waiting in: first the
  // hung worker with the Python ones (faulthandler answers in a millisecond,
  // all at once), then the kill, then the native ones, which are frozen
  // (SIGSTOP) before the kill so that losing their peer cannot move them.
  std::vector<StackTarget> first, native;
  for (auto& t : stack_targets()) {
    (t.local_rank == local_rank || !t.python_file.empty() ? first : native).push_back(std::move(t));
  }
  stacks_.collect(std::move(first), kStackBudget,
                  [this, local_rank, att = attempt_, info = std::move(info), late,
                   native = std::move(native)](std::vector<RankStack> stacks) mutable {
                    if (att != attempt_ || state_ != State::kRunning) return;
                    Worker& w = workers_[static_cast<std::size_t>(local_rank)];
                    if (w.done || w.hung) {
                      hang_collection_ = -1;
                      return;  // it exited meanwhile: that exit is its failure
                    }
                    for (const auto& t : native) ::kill(t.pid, SIGSTOP);
                    const auto killed_late = late();
                    // First: other nodes hear of it now. The index stays
                    // valid while the attempt lasts.
                    const auto failure = record_hang(w, std::move(info), killed_late);
                    kill_tree(w);
                    if (native.empty()) {
                      hang_collection_ = -1;
                      HangInfo& hang = *failures_[failure].hang;
                      add_hang_stacks(hang, local_rank, std::move(stacks));
                      report_hang(w, hang, killed_late);
                      return;
                    }
                    // Reported (the group stopped) only once the frozen
                    // workers' stacks are in: stopping would thaw them.
                    auto frozen = native;
                    stacks_.collect(std::move(native), kStackBudget,
                                    [this, local_rank, att, killed_late, failure, stacks = std::move(stacks),
                                     frozen = std::move(frozen)](std::vector<RankStack> more) mutable {
                                      for (const auto& t : frozen) ::kill(t.pid, SIGCONT);
                                      if (att != attempt_) return;
                                      hang_collection_ = -1;
                                      stacks.insert(stacks.end(), more.begin(), more.end());
                                      HangInfo& hang = *failures_[failure].hang;
                                      add_hang_stacks(hang, local_rank, std::move(stacks));
                                      report_hang(workers_[static_cast<std::size_t>(local_rank)], hang,
                                                  killed_late);
                                    });
                  });
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
