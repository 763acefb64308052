// How a local failure is told, and this node's part in naming the job's first
// failure (docs/agent.md, "Failure report"): each node records the first
// failure of a failed attempt in the job's store with its own time, before it
// reports it; a node ending the job names the earliest of the round from
// those records. FailureRecords also knows whether the attempt's failure was
// reported to the other nodes already (a hang is, before its worker is killed).
//
// Thread-safety: the io thread only; store calls go through RendezvousCalls.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ddp/agent/agent_config.hpp"
#include "ddp/agent/failure_report.hpp"
#include "rendezvous_calls.hpp"

namespace ddp::agent {

// A local failure on one line, as the other nodes learn of it: rank, host,
// how it ended and, when known, why (the error file's message, else the last
// stderr line).
std::string describe_failure(const WorkerFailure& f);
// Its parts: how it ended ("exit code 1", "hung, ...; killed") and why (may be empty).
std::string failure_how(const WorkerFailure& f);
std::string failure_why(const WorkerFailure& f);

class FailureRecords {
 public:
  explicit FailureRecords(const AgentConfig& cfg) : cfg_(cfg) {}

  // The attempt's first local failure into the job's store (FailureRecord),
  // once per attempt, before it is reported to the other nodes; then `done`
  // on the io thread (at once when the attempt's failure is recorded already).
  void record(RendezvousCalls& rdzv, int attempt, std::int64_t round, const WorkerFailure& f,
              std::function<void()> done = {});
  // The job's earliest failure of `round` by the nodes' records (none when
  // they cannot be read), then `then` on the io thread.
  void earliest(RendezvousCalls& rdzv, std::int64_t round,
                std::function<void(std::optional<FailureRecord>)> then) const;

  // Whether this attempt's failure was told to the other nodes already (a
  // hang, before its worker was killed: WorkerGroup::record_hang).
  bool reported() const { return reported_; }
  void set_reported(bool reported) { reported_ = reported; }

 private:
  const AgentConfig& cfg_;
  int recorded_attempt_ = -1;  // the attempt whose failure is in the store
  bool reported_ = false;
};

}  // namespace ddp::agent
