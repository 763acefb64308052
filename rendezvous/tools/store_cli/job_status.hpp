// `ddp-store status --rdzv_id ID`: the table of a ddprun job's nodes, read live
// from the status records the agents publish under /<ID>/agent/status/, then
// how many worker keys each round holds under /<ID>/worker/round_<k>/.
#pragma once

#include <string>

#include "ddp/store/store.hpp"

namespace ddp::store_cli {

// Prints the table to stdout; returns 0, or 1 (and a line on stderr) when the
// store holds no node of that job.
int print_job_status(store::Store& store, const std::string& rdzv_id);

}  // namespace ddp::store_cli
