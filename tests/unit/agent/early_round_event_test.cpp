// A round that ends before the agent has it: another node's failure reaches
// this node's agent (as a round event) just before the round itself, the order
// a node waiting out a fence meets when a faster node's worker fails at once.
// The agent must start that round's workers and stop them for the restart,
// not run them as if nothing happened (the other nodes would then wait for it
// in the next round until their join timeout).
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "../rdzv/rdzv_harness.hpp"
#include "ddp/agent/agent.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/memory_store.hpp"

using namespace std::chrono_literals;
namespace rdzv = ddp::rdzv;

namespace {

// Node b's real handler, with one step between the handler handing round 0
// over and the agent getting it: `between` runs there, and the hand-over waits
// until the round's first event has gone to the agent.
class EventBeforeRound final : public rdzv::RendezvousHandler {
 public:
  EventBeforeRound(std::unique_ptr<rdzv::RendezvousHandler> inner, std::function<void()> between)
      : inner_(std::move(inner)), between_(std::move(between)) {}

  std::string backend() const override { return inner_->backend(); }
  rdzv::RendezvousResult next_rendezvous() override {
    auto r = inner_->next_rendezvous();
    if (r.round == 0) {
      between_();
      std::unique_lock<std::mutex> lock(mu_);
      event_sent_ = cv_.wait_for(lock, 10s, [this] { return fired_; });
    }
    return r;
  }
  void report_failure(const std::string& reason) override { inner_->report_failure(reason); }
  void report_success() override { inner_->report_success(); }
  bool all_succeeded() override { return inner_->all_succeeded(); }
  void close(const std::string& reason) override { inner_->close(reason); }
  void set_event_callback(rdzv::RoundEventCallback cb) override {
    inner_->set_event_callback([this, cb](std::int64_t round, rdzv::RoundEvent e, const std::string& d) {
      cb(round, e, d);  // posts to the agent
      std::lock_guard<std::mutex> lock(mu_);
      fired_ = true;
      cv_.notify_all();
    });
  }
  std::shared_ptr<ddp::store::Store> store() override { return inner_->store(); }
  rdzv::Exclusion exclude_self(const std::string& why) override { return inner_->exclude_self(why); }

  bool event_sent() {
    std::lock_guard<std::mutex> lock(mu_);
    return event_sent_;
  }

 private:
  std::unique_ptr<rdzv::RendezvousHandler> inner_;
  std::function<void()> between_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool fired_ = false;
  bool event_sent_ = false;
};

// The rdzv tests' two-node c10d job, with a join timeout that a node left
// behind in round 0 makes the other one hit well within the test's wait.
rdzv::RendezvousConfig job_config() {
  auto c = ddp::test::dynamic_config(2, 2, "early_event");
  c.join_timeout = 10s;
  return c;
}

}  // namespace

TEST_CASE("agent: a failure reported before its round reaches the agent stops that round's workers") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  const auto config = job_config();
  auto a = rdzv::create_handler(config, rdzv::NodeSpec{"a", "127.0.0.1", 1}, store);

  // Node a: joins round 0 beside the agent, and its worker "fails" at once.
  auto a_round0 = std::async(std::launch::async, [&] { return a->next_rendezvous(); }).share();
  auto between = [&] {
    REQUIRE(a_round0.wait_for(10s) == std::future_status::ready);
    a->report_failure("rank 0 on a: exited with 1");
  };
  auto b_inner = rdzv::create_handler(config, rdzv::NodeSpec{"b", "127.0.0.1", 1}, store);
  auto b_handler = std::make_unique<EventBeforeRound>(std::move(b_inner), between);
  auto* b_view = b_handler.get();

  ddp::agent::AgentConfig cfg;
  // Round 0's worker would run for a minute; the restarted one succeeds.
  cfg.argv = {"/bin/sh", "-c", "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && exec sleep 60; exit 0"};
  cfg.max_restarts = 1;
  cfg.stop_timeout = 5s;
  cfg.signals_to_handle = {};
  cfg.rendezvous = config;
  cfg.node = rdzv::NodeSpec{"b", "127.0.0.1", 1};
  ddp::agent::Agent agent(cfg, std::move(b_handler));
  auto b_run = std::async(std::launch::async, [&] { return agent.run(); });

  // Node a restarts into round 1: node b must meet it there, long before round
  // 0's worker would have ended by itself.
  rdzv::RendezvousResult a_round1;
  std::string error;
  try {
    a_round0.get();
    a_round1 = a->next_rendezvous();
  } catch (const std::exception& e) {
    error = e.what();
  }
  CHECK(b_view->event_sent());
  CHECK(error == "");
  if (error.empty()) {
    CHECK(a_round1.round == 1);
    a->report_success();
  } else {
    a->close("the test is over");  // ends node b's agent either way
  }
  REQUIRE(b_run.wait_for(30s) == std::future_status::ready);
  const auto result = b_run.get();
  if (error.empty()) CHECK(result.exit_code == 0);
}
