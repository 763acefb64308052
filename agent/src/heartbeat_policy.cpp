#include "heartbeat_policy.hpp"

#include <algorithm>
#include <cmath>

#include "ddp/common/time_bounds.hpp"

namespace ddp::agent {

namespace ch = std::chrono;

namespace {

MonoNs to_ns(ch::milliseconds t) {
  return static_cast<MonoNs>(std::max<std::int64_t>(0, saturating_cast<ch::nanoseconds>(t).count()));
}

// start + timeout on the worker's clock. The worker wrote `start`: near the
// clock's end the sum saturates just short of kNever ("no deadline"), so the
// worker stays watched but is never declared hung for a wrapped deadline.
MonoNs deadline_after(MonoNs start, ch::milliseconds timeout) {
  return std::min(saturating_add(start, to_ns(timeout)), kNever - 1);
}

}  // namespace

ch::milliseconds learned_timeout(const LivenessConfig& cfg, std::uint64_t longest_ns) {
  // The worker writes longest_ns and the user chose the factor: the product
  // may be past any integer, hence the clamp (at most kMaxDuration).
  const double ms = static_cast<double>(longest_ns) / 1e6 * cfg.auto_factor;
  return std::max(cfg.auto_min, clamp_duration(std::ceil(ms), TimeUnit::kMilliseconds));
}

std::optional<ch::milliseconds> section_timeout(const LivenessConfig& cfg, const liveness::SectionStats& s) {
  if (s.name.empty()) return std::nullopt;
  if (const auto it = cfg.section_timeouts.find(s.name); it != cfg.section_timeouts.end()) return it->second;
  if (!cfg.sections_auto && cfg.auto_sections.count(s.name) == 0) return std::nullopt;
  if (s.count < static_cast<std::uint64_t>(std::max(1, cfg.auto_warmup))) return std::nullopt;
  return learned_timeout(cfg, s.max_ns);
}

std::optional<ch::milliseconds> heartbeat_timeout(const LivenessConfig& cfg, const liveness::Snapshot& s) {
  if (s.beat_count == 0) return std::nullopt;  // counts only after the first heartbeat
  if (cfg.heartbeat_timeout.count() > 0) return cfg.heartbeat_timeout;
  if (!cfg.heartbeat_auto) return std::nullopt;
  // n heartbeats are n - 1 gaps.
  if (s.beat_count < static_cast<std::uint64_t>(std::max(1, cfg.auto_warmup)) + 1) return std::nullopt;
  return learned_timeout(cfg, s.max_beat_gap_ns);
}

LivenessPlan plan_liveness(const LivenessConfig& cfg, const liveness::Snapshot& s) {
  LivenessPlan p;
  if (const auto t = heartbeat_timeout(cfg, s)) {
    p.heartbeat_timeout = *t;
    p.heartbeat_learned = cfg.heartbeat_timeout.count() == 0;
    p.heartbeat_deadline = deadline_after(s.last_beat_ns, *t);
  }
  p.notify_beat = cfg.heartbeats_on() && p.heartbeat_deadline == kNever;

  p.section = s.section;
  p.section_seq = s.section_seq;
  if (s.section_slot < s.slots.size()) {
    if (const auto t = section_timeout(cfg, s.slots[s.section_slot])) {
      p.section_timeout = *t;
      p.section_learned = cfg.section_timeouts.count(s.section) == 0;
      p.section_deadline = deadline_after(s.section_enter_ns, *t);
    }
  }
  if (cfg.sections_on()) {
    // A section entered from now on ends no earlier than enter + the shortest
    // timeout known; the agent must hear of it only if that could come before
    // the deadline it already has.
    std::optional<ch::milliseconds> shortest;
    for (const auto& [name, t] : cfg.section_timeouts) shortest = std::min(shortest.value_or(t), t);
    for (const auto& st : s.slots) {
      if (const auto t = section_timeout(cfg, st)) shortest = std::min(shortest.value_or(*t), *t);
    }
    // Nothing armed yet, or no timeout known (auto still warming up): hear of
    // every entry. A section still warming up while another deadline is armed
    // is picked up when that deadline is re-checked.
    const MonoNs armed = std::min(p.heartbeat_deadline, p.section_deadline);
    p.notify_enter_before = armed == kNever || !shortest ? kNever : armed - std::min(armed, to_ns(*shortest));
    for (std::uint32_t i = 0; i < liveness::kMaxSections; ++i) {
      bool matters = true;
      if (i < s.slots.size() && !s.slots[i].name.empty()) {
        const auto& name = s.slots[i].name;
        matters =
            cfg.section_timeouts.count(name) > 0 || cfg.sections_auto || cfg.auto_sections.count(name) > 0;
      }
      if (matters) p.notify_slots |= 1U << i;
    }
  }
  return p;
}

}  // namespace ddp::agent
