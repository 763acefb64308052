// libFuzzer target: one agent status record as `ddp-store status` reads it
// (node_row, json_input::kStatusRecord), and the same bytes as the daemon's
// job listing reads a status record, a failure report, a stragglers verdict
// and a node record (job_records.hpp). Input: the record's bytes.
// Findings: a crash, a sanitizer report, an exception other than the two
// node_row documents (the daemon's readers throw nothing), or a cell that
// holds a control byte.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "ddp/common/json_input.hpp"
#include "job_records.hpp"
#include "job_status.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  {
    namespace server = ddp::store::server;
    server::StatusFigures figures;
    (void)server::read_status_record("n", bytes, 1.8e9, true, &figures);
    (void)server::read_failure_record("n", bytes);
    (void)server::read_verdict(bytes, true);
    (void)server::read_node_record(bytes);
    (void)server::formed_round(bytes);
    (void)server::reported_failure(bytes);
  }
  try {
    const auto row = ddp::store_cli::node_row(std::string_view(reinterpret_cast<const char*>(data), size));
    for (const auto& cell : row.cells) {
      for (const char c : cell) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) __builtin_trap();
      }
    }
  } catch (const ddp::JsonError&) {
  } catch (const nlohmann::json::type_error&) {
  }
  return 0;
}
