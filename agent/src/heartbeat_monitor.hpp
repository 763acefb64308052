// Heartbeats and sections of the local workers (docs/agent-liveness.md, "Heartbeats
// and sections"). Each worker gets a liveness file (DDP_LIVENESS_FILE) it
// writes with plain stores, and the run's notify pipe (DDP_LIVENESS_PIPE) it
// writes a byte to only when the agent asked to hear of a change. The agent
// arms HangWatch at the exact next deadline; when it fires, it re-reads the
// file: a worker that beat or changed section since is re-armed at its new
// deadline, one that did not is hung. No polling: the status refresh every
// few seconds only publishes heartbeat ages, it detects nothing.
//
// Thread-safety: the io thread only.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/agent/failure_report.hpp"
#include "ddp/agent/liveness_config.hpp"
#include "ddp/agent/worker_env.hpp"
#include "hang_watch.hpp"
#include "heartbeat_policy.hpp"
#include "run_dir.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

// What `ddp-store status` shows of a worker.
struct HeartbeatStatus {
  std::uint64_t beats = 0;
  double age_s = -1;  // since the latest heartbeat; < 0: none yet
  std::string section;
  double section_s = 0;  // time in the current section
  // Step times (docs/agent-diagnosis.md, "Stragglers"): steps measured so far, and the
  // mean step time over those of the latest status interval; < 0: none yet.
  std::uint64_t steps = 0;
  double step_s = -1;
};

class HeartbeatMonitor {
 public:
  struct Hooks {
    std::function<void(const Deadline&)> arm;
    std::function<void(int local_rank, const std::string& source)> disarm;
    std::function<bool(int local_rank)> running;
    std::function<void(int local_rank, HangInfo, std::chrono::milliseconds late)> hung;
    std::function<void()> refresh_status;  // heartbeat ages changed: republish
  };
  // How often heartbeat ages are republished while workers beat.
  static constexpr std::chrono::seconds kStatusInterval{5};

  HeartbeatMonitor(boost::asio::io_context& io, const LivenessConfig& cfg, const RunDir& run_dir,
                   std::shared_ptr<spdlog::logger> log, Hooks hooks);
  ~HeartbeatMonitor();
  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;

  // Fresh files for the attempt's workers. Throws ConfigError when the run
  // directory refuses them.
  void start_attempt(int attempt, int nproc);
  // DDP_LIVENESS_FILE and DDP_LIVENESS_PIPE for one worker.
  void add_env(int local_rank, EnvMap& env) const;
  // A replacement for `local_rank`'s worker (--on_failure=reform) is about to
  // start: its liveness file and step samples start over.
  void restart_worker(int local_rank);
  // A worker started: ask it for what the agent needs to hear.
  void watch(int local_rank);
  // A "heartbeat" or "section" deadline passed: re-check that worker.
  void on_deadline(const Deadline& d);
  std::optional<HeartbeatStatus> status(int local_rank) const;
  // What the worker reported (its collectives among it); nullopt before the attempt's files exist.
  std::optional<liveness::Snapshot> snapshot(int local_rank) const;
  // Its next heartbeat or section deadline, passed or not; max when none.
  std::chrono::steady_clock::time_point next_deadline(int local_rank) const;
  // What its heartbeats say beside a hang (HangInfo::liveness_note): it beat
  // once and never again, or it still beats although it is stuck (from
  // another thread: its latest beat is far more recent than the moment the
  // rank whose deadline passed, `missed_local_rank`, got stuck); "" otherwise.
  std::string liveness_note(int local_rank, int missed_local_rank) const;
  // Whether any worker of the attempt made progress: beat at least once or
  // completed a section. Read before the next attempt's files replace these.
  bool any_progress() const;

 private:
  struct File {
    void* base = nullptr;
    std::string path;
  };
  void unmap();
  void open_pipe();
  void read_pipe();
  void evaluate(int local_rank, std::chrono::milliseconds late);
  // The worker's snapshot with the longest durations of every local worker.
  liveness::Snapshot read_learned(void* base) const;
  void schedule_status();
  // Samples every worker's step counter: called once per status interval.
  void sample_steps();

  const LivenessConfig& cfg_;
  const RunDir& run_dir_;
  std::shared_ptr<spdlog::logger> log_;
  Hooks hooks_;
  std::vector<File> files_;
  // Per local worker, what sample_steps() saw last: the "step" section's
  // completed count and total, or (for a worker without one) its heartbeats.
  struct StepSample {
    bool from_sections = false;
    std::uint64_t count = 0;
    std::uint64_t total_ns = 0;
    std::uint64_t steps = 0;
    double step_s = -1;
  };
  std::vector<StepSample> step_samples_;
  std::string pipe_path_;
  boost::asio::posix::stream_descriptor pipe_;
  int keep_open_ = -1;
  std::array<char, 256> chunk_{};
  boost::asio::steady_timer status_timer_;
  bool status_scheduled_ = false;
};

}  // namespace ddp::agent
