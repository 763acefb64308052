#include "failure_records.hpp"

#include <signal.h>

#include "ddp/store/job_keys.hpp"
#include "guard_protocol.hpp"

namespace ddp::agent {

std::string failure_why(const WorkerFailure& f) {
  if (f.hang || f.oom_killed) return "";  // how() says it all
  std::string why;
  if (f.error && !f.error->message.empty()) {
    why = f.error->message;
  } else if (!f.stderr_tail.empty()) {
    // A program SIGKILLed from outside (the OOM killer, a user, a scheduler)
    // could not say why: its last line is whatever it printed before, not the
    // cause. Unless ddp-guard wrote it: the fence deadline's kill says so.
    const std::string& last = f.stderr_tail.back();
    if (f.signal != SIGKILL || last.rfind(guard::kGuardLinePrefix, 0) == 0) why = last;
  }
  if (const auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
  if (why.size() > 200) why = why.substr(0, 200) + "...";
  return why;
}

std::string failure_how(const WorkerFailure& f) {
  if (!f.hang) return f.how();
  return "hung, " + f.hang->what() + "; killed" + (f.hang->waiting.empty() ? "" : "; " + f.hang->waiting);
}

std::string describe_failure(const WorkerFailure& f) {
  const std::string why = failure_why(f);
  return "rank " + std::to_string(f.rank) + " on " + f.host + ": " + failure_how(f) +
         (why.empty() ? "" : " (" + why + ")");
}

void FailureRecords::record(RendezvousCalls& rdzv, int attempt, std::int64_t round, const WorkerFailure& f,
                            std::function<void()> done) {
  if (recorded_attempt_ == attempt) {
    if (done) done();
    return;
  }
  recorded_attempt_ = attempt;
  FailureRecord r;
  r.node = cfg_.node.node_id;
  r.host = f.host;
  r.round = round;
  r.rank = f.rank;
  r.time_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(f.time.time_since_epoch()).count();
  r.failure = describe_failure(f);
  // On the rendezvous thread, before the report: a node that hears of it can read it.
  rdzv.set_key(store::keys::agent_first_failure_key(cfg_.rendezvous.run_id, cfg_.node.node_id),
               encode_failure_record(r), std::move(done));
}

void FailureRecords::earliest(RendezvousCalls& rdzv, std::int64_t round,
                              std::function<void(std::optional<FailureRecord>)> then) const {
  rdzv.list_values(store::keys::agent_first_failure_prefix(cfg_.rendezvous.run_id),
                   [round, then = std::move(then)](std::vector<std::string> values) {
                     std::vector<FailureRecord> records;
                     for (const auto& v : values) {
                       if (auto r = decode_failure_record(v)) records.push_back(std::move(*r));
                     }
                     then(first_failure(records, round));
                   });
}

}  // namespace ddp::agent
