#include "reform.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "ddp/store/job_keys.hpp"
#include "failure_records.hpp"

namespace ddp::agent {

namespace {

// The error file's type of an uncaught ddp::MembershipChanged (ddp::run writes
// extraInfo.error_type; the message is the program's, and is not searched).
constexpr std::string_view kMembershipChanged = "ddp::MembershipChanged";

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (const int r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

// The fewest workers --nnodes MIN nodes of `round` can run: MIN x the
// smallest --nproc_per_node among its nodes (this one's, where all run one).
std::int64_t fewest_workers(const AgentConfig& cfg, const rdzv::RendezvousResult& round) {
  int nproc = cfg.nproc_per_node;
  for (const auto& n : round.nodes)
    if (!n.node_id.empty() && n.local_world_size > 0) nproc = std::min(nproc, n.local_world_size);
  return static_cast<std::int64_t>(cfg.rendezvous.min_nodes) * nproc;
}

}  // namespace

bool uncaught_membership_change(const WorkerFailure& f) {
  return f.error && f.error->error_type == kMembershipChanged;
}

std::string loss_text(const WorkerFailure& f) {
  const std::string why = failure_why(f);
  return fmt::format("rank {} lost ({}{}{})", f.rank, failure_how(f), why.empty() ? "" : ": ", why);
}

Reform::Reform(boost::asio::io_context& io, const AgentConfig& cfg)
    : cfg_(cfg), active_(cfg.on_failure == OnFailure::kReform) {
  if (active_) store_ = std::make_unique<ReformStore>(io);
}

const WorkerFailure* Reform::next(int attempt, const std::vector<WorkerFailure>& failures) {
  if (attempt != attempt_) {
    attempt_ = attempt;
    seen_ = 0;
    replaced_ = 0;
  }
  return seen_ < failures.size() ? &failures[seen_] : nullptr;
}

void Reform::finished_count(const rdzv::RendezvousResult& round, std::function<void(std::int64_t)> done,
                            std::function<void(const std::string&)> failed) {
  store_->finished_count(round.store_endpoint, cfg_.rendezvous.token,
                         store::keys::reform_prefix(round.worker_prefix), std::move(done), std::move(failed));
}

void Reform::ask_elastic(const rdzv::RendezvousResult& round, std::function<void(bool)> done,
                         std::function<void(const std::string&)> failed) {
  store_->probe(
      round.store_endpoint, cfg_.rendezvous.token, store::keys::reform_prefix(round.worker_prefix),
      [this, done = std::move(done)](bool joined) {
        if (joined) workers_ = Workers::kElastic;
        done(joined);
      },
      std::move(failed));
}

void Reform::fall_back() {
  active_ = false;
  if (store_) store_->unwatch();
}

void Reform::watch(const rdzv::RendezvousResult& round, std::function<void(std::int64_t)> stalled,
                   std::function<void(const std::string&)> failed) {
  store_->watch_stalled(round.store_endpoint, cfg_.rendezvous.token,
                        store::keys::reform_prefix(round.worker_prefix), std::move(stalled),
                        std::move(failed));
}

void Reform::joined(const rdzv::RendezvousResult& round, std::int64_t generation,
                    std::function<void(std::optional<std::vector<int>>, std::int64_t)> done,
                    std::function<void(const std::string&)> failed) {
  store_->joined(round.store_endpoint, cfg_.rendezvous.token, store::keys::reform_prefix(round.worker_prefix),
                 generation, std::move(done), std::move(failed));
}

void Reform::finished(const rdzv::RendezvousResult& round) {
  store_->finished(round.store_endpoint, cfg_.rendezvous.token,
                   store::keys::reform_prefix(round.worker_prefix));
}

void Reform::probe(const rdzv::RendezvousResult& round, std::function<void(bool)> done,
                   std::function<void(const std::string&)> failed) {
  workers_ = Workers::kProbing;
  store_->probe(
      round.store_endpoint, cfg_.rendezvous.token, store::keys::reform_prefix(round.worker_prefix),
      [this, done = std::move(done)](bool joined) {
        workers_ = joined ? Workers::kElastic : Workers::kUnknown;
        done(joined);
      },
      [this, failed = std::move(failed)](const std::string& m) {
        workers_ = Workers::kUnknown;
        failed(m);
      });
}

ReformStore::Loss Reform::writes_to(const rdzv::RendezvousResult& round) const {
  ReformStore::Loss out;
  out.store = round.store_endpoint;
  out.token = cfg_.rendezvous.token;
  out.prefix = store::keys::reform_prefix(round.worker_prefix);
  return out;
}

void Reform::lose(const rdzv::RendezvousResult& round, const WorkerFailure& f, bool replace,
                  std::function<void(const ReformStore::Outcome&)> done,
                  std::function<void(const std::string&)> failed) {
  ReformStore::Loss loss = writes_to(round);
  loss.slots = {f.rank};
  loss.reason = describe_failure(f);
  loss.delta = replace ? 0 : -1;
  loss.unless_finished = true;
  min_workers_ = fewest_workers(cfg_, round);
  loss.min_size = min_workers_ - round.world_size;
  store_->lose(std::move(loss), noting_generation(std::move(done)), std::move(failed));
}

void Reform::lose_node(const rdzv::RendezvousResult& round, std::vector<int> slots, std::string reason,
                       bool replace, std::function<void(const ReformStore::Outcome&)> done,
                       std::function<void(const std::string&)> failed) {
  ReformStore::Loss loss = writes_to(round);
  loss.delta = replace ? 0 : -static_cast<int>(slots.size());
  loss.slots = std::move(slots);
  loss.reason = std::move(reason);
  loss.min_size = fewest_workers(cfg_, round) - round.world_size;
  store_->lose(std::move(loss), noting_generation(std::move(done)), std::move(failed));
}

void Reform::grow_node(const rdzv::RendezvousResult& round, int nproc,
                       std::function<void(const ReformStore::Outcome&)> done,
                       std::function<void(const std::string&)> failed) {
  ReformStore::Loss grow = writes_to(round);
  grow.delta = nproc;
  grow.min_size = std::numeric_limits<std::int64_t>::min();
  store_->lose(std::move(grow), noting_generation(std::move(done)), std::move(failed));
}

std::function<void(const ReformStore::Outcome&)> Reform::noting_generation(
    std::function<void(const ReformStore::Outcome&)> done) {
  return [this, done = std::move(done)](const ReformStore::Outcome& out) {
    if (out.generation > 0) began_ = out.generation;
    done(out);
  };
}

void Reform::written(const WorkerFailure& f, bool replaced, const ReformStore::Outcome& out,
                     std::int64_t world) {
  if (!replaced) lost_.push_back(f.rank);
  if (!out.below_min) return;
  // In a job whose nodes run different counts, the smallest one's.
  const std::int64_t nproc = min_workers_ / std::max(1, cfg_.rendezvous.min_nodes);
  stop_line_ = fmt::format(
      "reform: rank{} {} lost and max_restarts={} is spent: {} worker(s) would be left, fewer than the "
      "job's "
      "minimum of {} (--nnodes MIN {} x --nproc_per_node {}); raise --max_restarts or lower the --nnodes "
      "minimum",
      lost_.size() > 1 ? "s" : "", rank_list(lost_), cfg_.max_restarts, world, min_workers_,
      cfg_.rendezvous.min_nodes, nproc);
}

}  // namespace ddp::agent
