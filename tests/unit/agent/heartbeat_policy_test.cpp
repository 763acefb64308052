// What the agent makes of a worker's liveness file: which timeouts apply,
// what they learn, and when it asks the worker to notify it.
#include "heartbeat_policy.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/time_bounds.hpp"

using namespace ddp::agent;
using namespace std::chrono_literals;
namespace lv = ddp::liveness;

namespace {

constexpr std::uint64_t kMs = 1'000'000;

lv::Snapshot in_section(const std::string& name, std::uint64_t enter_ns, std::uint64_t count,
                        std::uint64_t max_ns) {
  lv::Snapshot s;
  s.slots.push_back({name, count, max_ns, count * max_ns});
  s.section_slot = 0;
  s.section = name;
  s.section_enter_ns = enter_ns;
  s.section_seq = 2 * (count + 1);
  return s;
}

}  // namespace

TEST_CASE("with nothing configured no deadline is armed and nothing is asked of the worker") {
  LivenessConfig cfg;
  lv::Snapshot s = in_section("step", 1000 * kMs, 50, 10 * kMs);
  s.beat_count = 10;
  s.last_beat_ns = 1000 * kMs;
  const auto p = plan_liveness(cfg, s);
  CHECK(p.heartbeat_deadline == kNever);
  CHECK(p.section_deadline == kNever);
  CHECK_FALSE(p.notify_beat);
  CHECK(p.notify_enter_before == 0);
}

TEST_CASE("the heartbeat timeout starts counting at the first heartbeat") {
  LivenessConfig cfg;
  cfg.heartbeat_timeout = 5s;
  lv::Snapshot s;
  auto p = plan_liveness(cfg, s);
  CHECK(p.heartbeat_deadline == kNever);
  CHECK(p.notify_beat);  // the agent must hear of the first one
  s.beat_count = 1;
  s.last_beat_ns = 7000 * kMs;
  p = plan_liveness(cfg, s);
  CHECK(p.heartbeat_deadline == 12000 * kMs);
  CHECK_FALSE(p.notify_beat);
  CHECK_FALSE(p.heartbeat_learned);
}

TEST_CASE("a fixed section timeout applies to that section only") {
  LivenessConfig cfg;
  cfg.section_timeouts["checkpoint"] = 600s;
  auto p = plan_liveness(cfg, in_section("step", 100 * kMs, 3, kMs));
  CHECK(p.section_deadline == kNever);
  CHECK(p.notify_enter_before == kNever);  // nothing armed: hear of entries...
  CHECK((p.notify_slots & 1U) == 0);       // ...but not of "step", which has no timeout
  CHECK((p.notify_slots & 2U) != 0);       // an unclaimed slot may be "checkpoint"
  p = plan_liveness(cfg, in_section("checkpoint", 100 * kMs, 0, 0));
  CHECK((p.notify_slots & 1U) != 0);
  CHECK(p.section_deadline == 100 * kMs + 600'000 * kMs);
  CHECK(p.section == "checkpoint");
  // A later entry cannot end before the armed deadline: no notification needed.
  CHECK(p.notify_enter_before == 100 * kMs);
}

TEST_CASE("auto section timeouts apply after the warm-up, factor times the longest, at least the minimum") {
  LivenessConfig cfg;
  cfg.sections_auto = true;
  cfg.auto_warmup = 10;
  cfg.auto_factor = 5.0;
  auto p = plan_liveness(cfg, in_section("step", 0, 9, 300 * kMs));
  CHECK(p.section_deadline == kNever);
  CHECK(p.notify_enter_before == kNever);  // still learning: every entry is news
  p = plan_liveness(cfg, in_section("step", 0, 10, 300 * kMs));
  CHECK(p.section_timeout == 1500ms);
  CHECK(p.section_learned);
  CHECK(p.section_deadline == 1500 * kMs);
  // Short sections get the floor.
  p = plan_liveness(cfg, in_section("step", 0, 10, 10 * kMs));
  CHECK(p.section_timeout == 1s);
  // A fixed timeout wins over auto for its section.
  cfg.section_timeouts["step"] = 30s;
  p = plan_liveness(cfg, in_section("step", 0, 10, 300 * kMs));
  CHECK(p.section_timeout == 30s);
  CHECK_FALSE(p.section_learned);
}

TEST_CASE("only the sections named =auto learn when auto is not given for all") {
  LivenessConfig cfg;
  cfg.auto_sections.insert("step");
  cfg.auto_warmup = 2;
  CHECK(section_timeout(cfg, {"step", 2, 400 * kMs, 0}) == std::optional(2000ms));
  CHECK_FALSE(section_timeout(cfg, {"eval", 2, 400 * kMs, 0}));
}

TEST_CASE("an auto heartbeat timeout learns from the gaps between heartbeats") {
  LivenessConfig cfg;
  cfg.heartbeat_auto = true;
  cfg.auto_warmup = 3;
  lv::Snapshot s;
  s.beat_count = 3;  // two gaps
  s.last_beat_ns = 100 * kMs;
  s.max_beat_gap_ns = 400 * kMs;
  CHECK_FALSE(heartbeat_timeout(cfg, s));
  CHECK(plan_liveness(cfg, s).notify_beat);
  s.beat_count = 4;
  CHECK(heartbeat_timeout(cfg, s) == std::optional(2000ms));
  const auto p = plan_liveness(cfg, s);
  CHECK(p.heartbeat_deadline == 2100 * kMs);
  CHECK(p.heartbeat_learned);
}

TEST_CASE("a section entered before the armed deadline minus the shortest timeout must be notified") {
  LivenessConfig cfg;
  cfg.heartbeat_timeout = 60s;
  cfg.section_timeouts["step"] = 10s;
  lv::Snapshot s;
  s.beat_count = 1;
  s.last_beat_ns = 0;
  // Only the heartbeat deadline (60 s) is armed; a step entered before 50 s
  // could run out first.
  const auto p = plan_liveness(cfg, s);
  CHECK(p.heartbeat_deadline == 60'000 * kMs);
  CHECK(p.notify_enter_before == 50'000 * kMs);
}

TEST_CASE("times a worker writes near the clock's end give deadlines that saturate, never wrap") {
  LivenessConfig cfg;
  cfg.heartbeat_timeout = 5s;
  cfg.section_timeouts["step"] = 30s;
  lv::Snapshot s = in_section("step", kNever - 5, 1, kMs);
  s.beat_count = 1;
  s.last_beat_ns = kNever - 1000;
  const auto p = plan_liveness(cfg, s);
  // Wrapped, these would be a few seconds after the clock's start: "hung" at once.
  CHECK(p.heartbeat_deadline >= s.last_beat_ns);
  CHECK(p.section_deadline >= s.section_enter_ns);
  // Still deadlines (the worker is watched), not "none".
  CHECK(p.heartbeat_deadline != kNever);
  CHECK(p.section_deadline != kNever);
}

TEST_CASE("a learned timeout from a huge gap or factor is capped at the longest duration") {
  LivenessConfig cfg;
  CHECK(learned_timeout(cfg, UINT64_MAX) == ddp::kMaxDuration);
  cfg.auto_factor = 1e300;
  CHECK(learned_timeout(cfg, 10 * kMs) == ddp::kMaxDuration);
  cfg.auto_factor = 5;
  cfg.heartbeat_auto = true;
  cfg.auto_warmup = 1;
  lv::Snapshot s;
  s.beat_count = 5;
  s.last_beat_ns = 1000 * kMs;
  s.max_beat_gap_ns = UINT64_MAX;  // milliseconds x 1e6 would overflow as nanoseconds
  const auto p = plan_liveness(cfg, s);
  CHECK(p.heartbeat_timeout == ddp::kMaxDuration);
  CHECK(p.heartbeat_deadline > s.last_beat_ns);
}
