// libFuzzer target: a worker's TORCHELASTIC_ERROR_FILE as the agent reads it
// (read_error_file, json_input::kErrorFile) and then renders it in the failure
// report, text and JSON; the same bytes as another node's failure record
// (decode_failure_record: nullopt or a record that encodes back to one).
// Input: the file's bytes. Findings: a crash, a sanitizer report or any
// exception.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "ddp/agent/failure_report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("fuzz_error_file." + std::to_string(::getpid()) + ".json");
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  auto read = ddp::agent::read_error_file(path);
  std::filesystem::remove(path);
  ddp::agent::FailureReport report;
  ddp::agent::WorkerFailure f;
  f.exit_code = 1;
  f.error_file = path.string();
  f.error = std::move(read.content);
  f.error_file_problem = std::move(read.problem);
  f.stderr_tail = {"Traceback (most recent call last):", "  File \"train.py\", line 7"};
  report.failures = {f, f};
  (void)ddp::agent::render_text(report);
  (void)ddp::agent::render_json(report);
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (const auto record = ddp::agent::decode_failure_record(text)) {
    const auto again = ddp::agent::decode_failure_record(ddp::agent::encode_failure_record(*record));
    if (!again || again->failure != record->failure || again->time_unix_ms != record->time_unix_ms)
      __builtin_trap();
  }
  return 0;
}
