// Heartbeat and section timeouts (--heartbeat_timeout, --section_timeouts,
// --auto_timeout_factor, --auto_timeout_warmup; docs/agent-liveness.md, "Heartbeats
// and sections"), and what makes a rank a straggler. Everything off by default: a worker is never killed for
// heartbeats or sections unless a timeout applies to it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace ddp::agent {

struct LivenessConfig {
  // Longest gap between heartbeats once a worker has beaten; zero: none.
  std::chrono::milliseconds heartbeat_timeout{0};
  bool heartbeat_auto = false;  // learned from the worker's own heartbeat gaps
  // Fixed section timeouts by name.
  std::map<std::string, std::chrono::milliseconds> section_timeouts;
  // Sections whose timeout is learned: those named `=auto`, or every section
  // without a fixed timeout when `sections_auto`.
  std::set<std::string> auto_sections;
  bool sections_auto = false;
  // A learned timeout: factor x the longest observed duration (or heartbeat
  // gap), after `auto_warmup` completed sections (or gaps), never below
  // `auto_min`.
  double auto_factor = 5.0;
  int auto_warmup = 10;
  std::chrono::milliseconds auto_min{std::chrono::seconds(1)};

  // Stragglers (--straggler_factor, --straggler_steps, --straggler_action;
  // docs/agent-diagnosis.md, "Stragglers"): a rank whose step time is over
  // `straggler_factor` x the job's median for `straggler_steps` steps in a row
  // is named. Factor zero: off.
  enum class StragglerAction : std::uint8_t { kReport = 0, kRestart = 1 };
  double straggler_factor = 2.0;
  int straggler_steps = 10;
  StragglerAction straggler_action = StragglerAction::kReport;

  bool heartbeats_on() const { return heartbeat_timeout.count() > 0 || heartbeat_auto; }
  bool sections_on() const { return !section_timeouts.empty() || !auto_sections.empty() || sections_auto; }
};

}  // namespace ddp::agent
