#include "error_file.hpp"

#include <execinfo.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

namespace ddp::detail {

std::string error_file_json(const std::string& message, const std::string& stack, long long timestamp,
                            const std::string& error_type) {
  nlohmann::json j;
  j["message"]["message"] = message;
  j["message"]["extraInfo"]["py_callstack"] = stack;
  j["message"]["extraInfo"]["timestamp"] = std::to_string(timestamp);
  if (!error_type.empty()) j["message"]["extraInfo"]["error_type"] = error_type;
  // Replace invalid UTF-8 (from an exception's what()) instead of throwing.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string current_stack(int skip_frames) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  std::unique_ptr<char*, decltype(&std::free)> symbols(backtrace_symbols(frames, n), &std::free);
  std::string out;
  for (int i = skip_frames; i < n; ++i) {
    out.append("#").append(std::to_string(i - skip_frames)).append(" ");
    out.append(symbols ? symbols.get()[i] : "?").append("\n");
  }
  return out;
}

bool write_error_file(const std::string& path, const std::string& json) {
  std::ofstream out(path, std::ios::trunc);
  out << json;
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace ddp::detail
