#include "failpoints.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::store::server::failpoints {
namespace {

struct Armed {
  Fault fault;
  long skip = 0;
  long times = -1;  // -1: forever
};

std::atomic<bool> g_any{false};
std::mutex g_mu;
std::map<std::string, Armed, std::less<>> g_points;

long parse_count(const std::string& entry, const std::string& text) {
  const auto n = parse_int<long>(text);
  if (!n || *n < 0) throw ConfigError("DDP_FAILPOINTS entry '" + entry + "': bad count '" + text + "'");
  return *n;
}

}  // namespace

Fault check(std::string_view point) {
  if (!g_any.load(std::memory_order_relaxed)) return {};
  std::lock_guard lock(g_mu);
  auto it = g_points.find(point);
  if (it == g_points.end()) return {};
  auto& a = it->second;
  if (a.skip > 0) {
    --a.skip;
    return {};
  }
  if (a.times == 0) return {};
  if (a.times > 0) --a.times;
  return a.fault;
}

void arm(const std::string& spec) {
  std::size_t start = 0;
  while (start < spec.size()) {
    auto end = spec.find(';', start);
    if (end == std::string::npos) end = spec.size();
    const auto entry = spec.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) continue;
    const auto eq = entry.find('=');
    if (eq == std::string::npos) throw ConfigError("DDP_FAILPOINTS entry '" + entry + "': want point=action");
    auto rest = entry.substr(eq + 1);
    Armed a;
    if (auto star = rest.find('*'); star != std::string::npos) {
      a.times = parse_count(entry, rest.substr(star + 1));
      rest.resize(star);
    }
    if (auto at = rest.find('@'); at != std::string::npos) {
      a.skip = parse_count(entry, rest.substr(at + 1));
      rest.resize(at);
    }
    if (rest == "enospc")
      a.fault = {Action::kError, ENOSPC};
    else if (rest == "eio")
      a.fault = {Action::kError, EIO};
    else if (rest == "short")
      a.fault = {Action::kShort, ENOSPC};
    else if (rest == "crash")
      a.fault = {Action::kCrash, 0};
    else if (rest == "throw")
      a.fault = {Action::kThrow, 0};
    else
      throw ConfigError("DDP_FAILPOINTS entry '" + entry +
                        "': action must be enospc, eio, short, crash or throw");
    std::lock_guard lock(g_mu);
    g_points[entry.substr(0, eq)] = a;
  }
  g_any = !g_points.empty();
}

void maybe_throw(std::string_view point) {
  if (check(point).action == Action::kThrow)
    throw std::runtime_error("failpoint " + std::string(point) + ": injected exception");
}

void crash(std::string_view point) {
  std::fprintf(stderr, "failpoint %.*s: crashing\n", static_cast<int>(point.size()), point.data());
  ::_exit(kCrashExitCode);
}

}  // namespace ddp::store::server::failpoints
