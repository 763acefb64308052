// `ddp-store status --rdzv_id ID`: the table of a ddprun job's nodes, read live
// from the status records the agents publish under /<ID>/agent/status/, then
// how many worker keys each round holds under /<ID>/worker/round_<k>/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::store_cli {

// One node's row of the table.
struct NodeRow {
  std::int64_t round = 0;
  std::int64_t group_rank = 0;
  std::vector<std::string> cells;  // NODE ... UPDATED
};

// The row of one status record, its cells escaped with printable(). Anyone with access to the store can write
// one, so it is read within json_input::kStatusRecord: throws JsonError when
// it breaks that bound or is not JSON, nlohmann's type_error when a field has
// the wrong type.
NodeRow node_row(std::string_view record);

// Prints `header` and `rows` as left-aligned columns two spaces apart (the
// tables of `status` and `jobs`).
void print_columns(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// Prints the table to stdout; returns 0, or 1 (and a line on stderr) when the
// store holds no node of that job.
int print_job_status(store::Store& store, const std::string& rdzv_id);

}  // namespace ddp::store_cli
