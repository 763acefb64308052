// `ddp-store jobs`: one row per ddprun job on the daemon (JOBS request,
// docs/store-protocol.md), derived by the daemon from the keys it holds: run
// id, backend, state, nodes (members, unhealthy, spares, excluded), ranks,
// round, restarts used/max, age and the last failure in one line. A table for
// people (always escaped, like `status`), or with --json an array for scripts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ddp/store/tcp_store.hpp"

namespace ddp::store_cli {

// "42s", "5m12s", "3h04m", "2d03h"; "-" for a negative or unknown age.
std::string age_text(double seconds);

// The table's rows for the jobs' JSON rows as the daemon sends them (run id,
// row), `now` in seconds since the epoch; cells escaped with printable(). A row
// that cannot be read is shown with "unreadable" cells.
std::vector<std::vector<std::string>> job_rows(const std::vector<store::KeyValue>& jobs, double now);

// Prints the table (or the JSON) to stdout; 0, or 1 with a line on stderr
// when `rdzv_id` names no job.
int print_jobs(store::TcpStore& store, const std::string& rdzv_id, bool json);

}  // namespace ddp::store_cli
