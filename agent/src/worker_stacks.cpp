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
  if (stacks_.busy()) {
    info.stack_note = "not collected: another collection was under way";
    kill_hung(hung, std::move(info), late());
    return;
  }
  watch_.clear(local_rank);
  log_->info(
      "worker rank={} missed its deadline ({}): collecting the local workers' stacks before killing it",
      hung.rank, info.what());
  stacks_.collect(stack_targets(), kStackBudget,
                  [this, local_rank, att = attempt_, info = std::move(info),
                   late](std::vector<RankStack> stacks) mutable {
                    if (att != attempt_ || state_ != State::kRunning) return;
                    Worker& w = workers_[static_cast<std::size_t>(local_rank)];
                    if (w.done || w.hung) return;  // it exited meanwhile: that exit is its failure
                    info.stacks_file = write_stacks(stacks);
                    for (const auto& s : stacks) {
                      if (s.target.local_rank == local_rank) {
                        info.top_frames = s.top_frames;
                        info.stack_note = s.note;
                      } else {
                        info.other_ranks.push_back(waiting_in(s));
                      }
                    }
                    kill_hung(w, std::move(info), late());
                  });
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
