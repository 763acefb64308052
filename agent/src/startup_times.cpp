#include "startup_times.hpp"

#include <boost/asio/post.hpp>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::agent {

namespace {
constexpr const char* kFirstStepDir = "ddp/first_step/";
}  // namespace

StartupTimes::~StartupTimes() {
  if (watch_) watch_->cancel();
}

void StartupTimes::rendezvous_started() {
  if (watch_) watch_->cancel();
  watch_.reset();
  ++attempt_;
  started_ = Clock::now();
  closed_.reset();
  spawned_.reset();
  first_step_.reset();
  reported_.clear();
  on_first_step_ = nullptr;
}

void StartupTimes::rendezvous_done(const rdzv::RendezvousResult& round, int local_world_size,
                                   std::shared_ptr<store::Store> store, std::function<void()> on_first_step) {
  closed_ = Clock::now();
  rank_offset_ = round.rank_offset;
  local_world_size_ = local_world_size;
  on_first_step_ = std::move(on_first_step);
  if (!store) return;
  const std::string prefix = round.worker_prefix + kFirstStepDir;
  const auto attempt = attempt_;
  // Registered before any worker starts, so "changes from now on" misses none.
  auto on_event = [this, attempt, prefix, &io = io_](const store::WatchEvent& ev) {
    if (ev.type != store::EventType::kPut) return;
    const auto parsed = parse_int(std::string_view(ev.key).substr(prefix.size()));
    if (!parsed) return;
    const std::int64_t rank = *parsed;
    boost::asio::post(io, [this, attempt, rank] {
      if (attempt == attempt_ && first_step(rank) && on_first_step_) on_first_step_();
    });
  };
  auto on_error = [](const std::string& why) { log::get("agent")->debug("first-step watch ended: {}", why); };
  try {
    watch_ = store->watch(prefix, 0, on_event, on_error);
  } catch (const Error& e) {
    // Telemetry only: the run goes on without first-step times.
    log::get("agent")->debug("cannot watch {} for first steps: {}", prefix, e.what());
  }
}

void StartupTimes::spawned() {
  spawned_ = Clock::now();
  if (!first_step_ || !on_first_step_) return;
  // Every worker stepped before the agent read the last spawn report (a
  // loaded machine): the first step is told after the caller's "startup".
  boost::asio::post(io_, [this, attempt = attempt_] {
    if (attempt == attempt_ && on_first_step_) on_first_step_();
  });
}

bool StartupTimes::first_step(std::int64_t rank) {
  if (first_step_ || rank < rank_offset_ || rank >= rank_offset_ + local_world_size_) return false;
  if (!reported_.insert(rank).second) return false;
  if (static_cast<int>(reported_.size()) < local_world_size_) return false;
  first_step_ = Clock::now();
  if (watch_) watch_->cancel();
  return spawned_.has_value();  // else spawned() tells it
}

nlohmann::json StartupTimes::seconds(std::optional<Clock::time_point> from,
                                     std::optional<Clock::time_point> to) {
  if (!from || !to) return nullptr;
  return std::chrono::duration<double>(*to - *from).count();
}

nlohmann::json StartupTimes::fields() const {
  return {{"rendezvous_s", seconds(started_, closed_)},
          {"spawn_s", seconds(closed_, spawned_)},
          {"first_step_s", seconds(started_, first_step_)},
          {"first_step_ranks", reported_.size()}};
}

}  // namespace ddp::agent
