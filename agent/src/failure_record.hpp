// A node's failure report as it goes into the store
// (/<run>/agent/failure/<node_id>, docs/operations.md "Status page"): the root
// cause of a failed attempt in one line, and what an operator needs to see why
// (the worker's message, the end of its traceback and stderr, and for a hung
// worker its stack and where the other ranks waited). Cut to a few KiB
// whatever the worker wrote, so a crash loop costs the store little.
//
// Thread-safety: pure.
#pragma once

#include <string>

#include "ddp/agent/failure_report.hpp"

namespace ddp::agent {

// The record's JSON text. `summary` is the one-line cause the agent reports
// to the other nodes ("rank 3 on gpu2: exit code 1 (...)").
std::string failure_record(const FailureReport& report, const WorkerFailure& root, const std::string& summary,
                           const std::string& node_id, std::int64_t round);

}  // namespace ddp::agent
