// The channels workers report liveness on, opened once per run before any
// worker starts: torch's FileTimer pipe (docs/agent.md, "Hangs").
#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

constexpr const char* kEnableFileTimer = "TORCHELASTIC_ENABLE_FILE_TIMER";
constexpr const char* kTimerFile = "TORCHELASTIC_TIMER_FILE";

}  // namespace

void Agent::Impl::start_liveness() {
  const auto enabled = base_env.find(kEnableFileTimer);
  if (enabled != base_env.end() && enabled->second == "1") {
    const auto given = base_env.find(kTimerFile);
    std::filesystem::path path = given != base_env.end() && !given->second.empty()
                                     ? std::filesystem::path(given->second)
                                     : run_dir->path() / RunDir::kTimerPipe;
    file_timer = std::make_unique<FileTimerServer>(
        io, path, [this](const TimerRequest& r) { group->on_timer_request(r); });
    liveness_env[kTimerFile] = path.string();
    log->info("serving torch FileTimer requests at {}", path.string());
  }
}

}  // namespace ddp::agent
