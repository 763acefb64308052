#include "failure_record.hpp"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

namespace ddp::agent {
namespace {

// Why these: a screen of text each, enough to act on; the whole report is in
// the node's failure.json.
constexpr std::size_t kMaxText = 4096;
constexpr std::size_t kMaxLine = 512;
constexpr std::size_t kMaxTailLines = 20;
constexpr std::size_t kMaxFrames = 32;
constexpr std::size_t kMaxOtherRanks = 16;

// The end of `s` (a traceback ends with the exception).
std::string tail(const std::string& s, std::size_t max) {
  return s.size() <= max ? s : s.substr(s.size() - max);
}

nlohmann::json lines(const std::vector<std::string>& v, std::size_t max_lines, bool last) {
  nlohmann::json out = nlohmann::json::array();
  const std::size_t n = std::min(v.size(), max_lines);
  const std::size_t from = last ? v.size() - n : 0;
  for (std::size_t i = from; i < from + n; ++i) out.push_back(v[i].substr(0, kMaxLine));
  return out;
}

}  // namespace

std::string failure_record(const FailureReport& report, const WorkerFailure& root, const std::string& summary,
                           const std::string& node_id, std::int64_t round) {
  nlohmann::json r = {
      {"node", node_id},
      {"host", root.host},
      {"round", round},
      {"attempt", report.attempt},
      {"restart_count", report.restart_count},
      {"max_restarts", report.max_restarts},
      {"time", std::chrono::duration<double>(root.time.time_since_epoch()).count()},
      {"rank", root.rank},
      {"local_rank", root.local_rank},
      {"pid", root.pid},
      {"how", root.how()},
      {"summary", summary.substr(0, kMaxText)},
      {"failures", report.failures.size()},
  };
  if (root.error) {
    r["message"] = root.error->message.substr(0, kMaxText);
    r["traceback"] = tail(root.error->traceback, kMaxText);
  }
  r["stderr_tail"] = lines(root.stderr_tail, kMaxTailLines, true);
  if (root.hang) {
    r["hang"] = {{"what", root.hang->what()},
                 {"frames", lines(root.hang->top_frames, kMaxFrames, false)},
                 {"other_ranks", lines(root.hang->other_ranks, kMaxOtherRanks, false)}};
    if (root.hang->top_frames.empty() && !root.hang->stack_note.empty()) {
      r["hang"]["frames"] = nlohmann::json::array({root.hang->stack_note.substr(0, kMaxLine)});
    }
  }
  return r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ddp::agent
