#include "ddp/telemetry.hpp"

#include <atomic>
#include <chrono>
#include <string>

#include "ddp/store/store.hpp"

namespace ddp {

void report_first_step(const Context& ctx) {
  // One process is one worker of one attempt: a restart is a new process.
  static std::atomic<bool> reported{false};
  if (!ctx.store || reported.exchange(true)) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  try {
    ctx.store->set(ctx.store_prefix + "ddp/first_step/" + std::to_string(ctx.rank), std::to_string(now));
  } catch (const std::exception&) {
    // Telemetry only: training goes on without the figure.
  }
}

}  // namespace ddp
