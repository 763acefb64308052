#include "heartbeat_monitor.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/time_bounds.hpp"

namespace ddp::agent {

namespace lv = ddp::liveness;
namespace ch = std::chrono;

namespace {

constexpr const char* kFileEnv = "DDP_LIVENESS_FILE";
constexpr const char* kPipeEnv = "DDP_LIVENESS_PIPE";
// The section whose completions are a worker's steps (docs/agent-diagnosis.md, "Stragglers").
constexpr std::string_view kStepSection = "step";

MonoNs mono_now() {
  return static_cast<MonoNs>(
      ch::duration_cast<ch::nanoseconds>(ch::steady_clock::now().time_since_epoch()).count());
}

// A deadline past int64 nanoseconds (the worker wrote its times) is the
// clock's end: as a negative time it would be due at once, and the timer would
// fire, find the worker alive, re-arm and fire again without end.
ch::steady_clock::time_point to_steady(MonoNs ns) {
  if (ns > static_cast<MonoNs>(std::numeric_limits<ch::nanoseconds::rep>::max())) {
    return ch::steady_clock::time_point::max();
  }
  return ch::steady_clock::time_point(
      saturating_cast<ch::steady_clock::duration>(ch::nanoseconds(static_cast<ch::nanoseconds::rep>(ns))));
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string secs(ch::milliseconds t) { return secs(static_cast<double>(t.count()) / 1000.0); }

double ns_to_s(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }

}  // namespace

HeartbeatMonitor::HeartbeatMonitor(boost::asio::io_context& io, const LivenessConfig& cfg,
                                   const RunDir& run_dir, std::shared_ptr<spdlog::logger> log, Hooks hooks)
    : cfg_(cfg),
      run_dir_(run_dir),
      log_(std::move(log)),
      hooks_(std::move(hooks)),
      pipe_(io),
      status_timer_(io) {}

HeartbeatMonitor::~HeartbeatMonitor() {
  unmap();
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (keep_open_ >= 0) ::close(keep_open_);
  if (!pipe_path_.empty()) {
    std::error_code ec;
    std::filesystem::remove(pipe_path_, ec);
  }
}

void HeartbeatMonitor::unmap() {
  for (auto& f : files_) {
    if (f.base != nullptr) ::munmap(f.base, lv::kFileSize);
  }
  files_.clear();
}

void HeartbeatMonitor::open_pipe() {
  const auto path = run_dir_.path() / RunDir::kLivenessPipe;
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (::mkfifo(path.c_str(), 0600) != 0) {
    throw ConfigError("--log_dir: cannot create the liveness pipe " + path.string() + ": " +
                      std::strerror(errno));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  // Our own writer end: workers that exit never leave the reader at EOF.
  keep_open_ = fd >= 0 ? ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC) : -1;
  if (fd < 0 || keep_open_ < 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw ConfigError("--log_dir: cannot open the liveness pipe " + path.string() + ": " + why);
  }
  pipe_path_ = path.string();
  pipe_.assign(fd);
  read_pipe();
}

void HeartbeatMonitor::read_pipe() {
  pipe_.async_read_some(boost::asio::buffer(chunk_), [this](boost::system::error_code ec, std::size_t) {
    if (ec == boost::asio::error::operation_aborted) return;
    if (ec) {
      log_->warn("liveness pipe {}: read failed: {}; heartbeats are checked at their deadlines only",
                 pipe_path_, ec.message());
      return;
    }
    // Any byte: some worker changed what the agent asked about. Which one
    // does not matter, checking every file is cheap.
    for (std::size_t lr = 0; lr < files_.size(); ++lr) evaluate(static_cast<int>(lr), ch::milliseconds(0));
    read_pipe();
  });
}

void HeartbeatMonitor::start_attempt(int attempt, int nproc) {
  if (pipe_path_.empty()) open_pipe();
  unmap();
  for (int lr = 0; lr < nproc; ++lr) {
    const auto path = run_dir_.worker(attempt, lr) / RunDir::kLivenessFile;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    void* base = MAP_FAILED;
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(lv::kFileSize)) == 0) {
      base = ::mmap(nullptr, lv::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    if (base == MAP_FAILED) {
      throw ConfigError("--log_dir: cannot create the liveness file " + path.string() + ": " + why);
    }
    lv::init_header(base);
    files_.push_back({base, path.string()});
  }
  step_samples_.assign(files_.size(), StepSample{});
  schedule_status();
}

void HeartbeatMonitor::add_env(int local_rank, EnvMap& env) const {
  env[kFileEnv] = files_.at(static_cast<std::size_t>(local_rank)).path;
  env[kPipeEnv] = pipe_path_;
}

void HeartbeatMonitor::restart_worker(int local_rank) {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= files_.size()) return;
  // The failed worker is gone: nothing else writes the file meanwhile.
  void* base = files_[static_cast<std::size_t>(local_rank)].base;
  std::memset(base, 0, lv::kFileSize);
  lv::init_header(base);
  step_samples_[static_cast<std::size_t>(local_rank)] = StepSample{};
}

void HeartbeatMonitor::watch(int local_rank) {
  evaluate(local_rank, ch::milliseconds(0));
  schedule_status();
}

void HeartbeatMonitor::on_deadline(const Deadline& d) { evaluate(d.local_rank, ch::milliseconds(0)); }

lv::Snapshot HeartbeatMonitor::read_learned(void* base) const {
  auto s = lv::read_snapshot(base);
  if (!cfg_.heartbeat_auto && !cfg_.sections_auto && cfg_.auto_sections.empty()) return s;
  // Learned timeouts are the node's, not each worker's: the longest section
  // (and heartbeat gap) any local worker saw. Ranks waiting in a collective
  // on a hung one then have the same timeout as it, and it, having entered
  // its section first, is the one whose deadline passes first.
  for (const auto& other : files_) {
    if (other.base == base) continue;
    const auto o = lv::read_snapshot(other.base);
    s.max_beat_gap_ns = std::max(s.max_beat_gap_ns, o.max_beat_gap_ns);
    for (auto& mine : s.slots) {
      for (const auto& theirs : o.slots) {
        if (!mine.name.empty() && theirs.name == mine.name)
          mine.max_ns = std::max(mine.max_ns, theirs.max_ns);
      }
    }
  }
  return s;
}

void HeartbeatMonitor::evaluate(int local_rank, ch::milliseconds) {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= files_.size()) return;
  if (!hooks_.running(local_rank)) return;
  if (!cfg_.heartbeats_on() && !cfg_.sections_on()) return;
  void* const base = files_[static_cast<std::size_t>(local_rank)].base;
  auto s = read_learned(base);
  auto p = plan_liveness(cfg_, s);
  // Ask first, then look again: a change racing with the request is either
  // seen here or notified by the worker.
  lv::u32(base, lv::kOffNotifyBeat).store(p.notify_beat ? 1 : 0);
  lv::u32(base, lv::kOffNotifySlots).store(p.notify_slots);
  lv::u64(base, lv::kOffNotifyEnterBefore).store(p.notify_enter_before);
  s = read_learned(base);
  p = plan_liveness(cfg_, s);
  lv::u32(base, lv::kOffNotifyBeat).store(p.notify_beat ? 1 : 0);
  lv::u32(base, lv::kOffNotifySlots).store(p.notify_slots);
  lv::u64(base, lv::kOffNotifyEnterBefore).store(p.notify_enter_before);

  const MonoNs now = mono_now();
  const auto late = [&](MonoNs deadline) {
    return ch::duration_cast<ch::milliseconds>(ch::nanoseconds(now - deadline));
  };
  if (p.heartbeat_deadline <= now) {
    HangInfo info;
    info.source = "heartbeat";
    info.detail = "no heartbeat for " + secs(ns_to_s(now - s.last_beat_ns)) + ", timeout " +
                  secs(p.heartbeat_timeout) + (p.heartbeat_learned ? " learned" : "");
    hooks_.hung(local_rank, std::move(info), late(p.heartbeat_deadline));
    return;
  }
  if (p.section_deadline <= now) {
    HangInfo info;
    info.source = "section";
    info.scope = p.section;
    info.detail =
        "in it for " + secs(ns_to_s(now - s.section_enter_ns)) + ", timeout " + secs(p.section_timeout);
    if (p.section_learned) {
      const auto& st = s.slots[s.section_slot];
      info.detail +=
          " learned from " + std::to_string(st.count) + " runs of at most " + secs(ns_to_s(st.max_ns));
    }
    hooks_.hung(local_rank, std::move(info), late(p.section_deadline));
    return;
  }
  const auto arm = [&](const char* source, MonoNs at, const std::string& detail) {
    if (at == kNever) {
      hooks_.disarm(local_rank, source);
      return;
    }
    Deadline d;
    d.local_rank = local_rank;
    d.source = source;
    d.at = to_steady(at);
    d.detail = detail;
    hooks_.arm(d);
  };
  arm("heartbeat", p.heartbeat_deadline, "timeout " + secs(p.heartbeat_timeout));
  arm("section", p.section_deadline, p.section + " timeout " + secs(p.section_timeout));
}

std::optional<HeartbeatStatus> HeartbeatMonitor::status(int local_rank) const {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= files_.size()) return std::nullopt;
  const auto s = lv::read_snapshot(files_[static_cast<std::size_t>(local_rank)].base);
  if (s.beat_count == 0 && s.section_seq == 0) return std::nullopt;
  const MonoNs now = mono_now();
  HeartbeatStatus st;
  st.beats = s.beat_count;
  if (s.beat_count > 0) st.age_s = ns_to_s(now > s.last_beat_ns ? now - s.last_beat_ns : 0);
  st.section = s.section;
  if (!s.section.empty()) st.section_s = ns_to_s(now > s.section_enter_ns ? now - s.section_enter_ns : 0);
  if (static_cast<std::size_t>(local_rank) < step_samples_.size()) {
    st.steps = step_samples_[static_cast<std::size_t>(local_rank)].steps;
    st.step_s = step_samples_[static_cast<std::size_t>(local_rank)].step_s;
  }
  return st;
}

std::optional<lv::Snapshot> HeartbeatMonitor::snapshot(int local_rank) const {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= files_.size()) return std::nullopt;
  return lv::read_snapshot(files_[static_cast<std::size_t>(local_rank)].base);
}

ch::steady_clock::time_point HeartbeatMonitor::next_deadline(int local_rank) const {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= files_.size()) {
    return ch::steady_clock::time_point::max();
  }
  if (!cfg_.heartbeats_on() && !cfg_.sections_on()) return ch::steady_clock::time_point::max();
  const auto p = plan_liveness(cfg_, read_learned(files_[static_cast<std::size_t>(local_rank)].base));
  const MonoNs at = std::min(p.heartbeat_deadline, p.section_deadline);
  return at == kNever ? ch::steady_clock::time_point::max() : to_steady(at);
}

std::string HeartbeatMonitor::liveness_note(int local_rank, int missed_local_rank) const {
  const auto in_range = [this](int lr) { return lr >= 0 && static_cast<std::size_t>(lr) < files_.size(); };
  if (!cfg_.heartbeats_on() || !in_range(local_rank) || !in_range(missed_local_rank)) return "";
  const auto s = read_learned(files_[static_cast<std::size_t>(local_rank)].base);
  if (s.beat_count == 0) return "";
  const MonoNs now = mono_now();
  const double age = ns_to_s(now > s.last_beat_ns ? now - s.last_beat_ns : 0);
  if (s.beat_count == 1) {
    return "it heartbeat once (" + secs(age) +
           " ago) and never again: --heartbeat_timeout counts from the first heartbeat, so heartbeat in "
           "every step, not once at the start";
  }
  // How long the rank whose deadline passed has been stuck: since its latest
  // heartbeat, or in its current section.
  const auto m = lv::read_snapshot(files_[static_cast<std::size_t>(missed_local_rank)].base);
  MonoNs since = now;
  if (m.beat_count > 0) since = std::min(since, m.last_beat_ns);
  if (!m.section.empty()) since = std::min(since, m.section_enter_ns);
  const double stuck = ns_to_s(now > since ? now - since : 0);
  if (stuck > 0 && age < stuck / 2) {
    return "it still heartbeats (the latest " + secs(age) +
           " ago) while it is stuck: its heartbeats come from a thread other than the stuck one, so they "
           "cannot tell that it hangs";
  }
  return "";
}

bool HeartbeatMonitor::any_progress() const {
  for (const auto& f : files_) {
    if (f.base == nullptr) continue;
    const auto s = lv::read_snapshot(f.base);
    if (s.beat_count > 0) return true;
    for (const auto& slot : s.slots) {
      if (slot.count > 0) return true;
    }
  }
  return false;
}

void HeartbeatMonitor::sample_steps() {
  for (std::size_t lr = 0; lr < files_.size() && lr < step_samples_.size(); ++lr) {
    auto& m = step_samples_[lr];
    const auto s = lv::read_snapshot(files_[lr].base);
    const lv::SectionStats* step = nullptr;
    for (const auto& slot : s.slots) {
      if (slot.name == kStepSection && slot.count > 0) step = &slot;
    }
    // A completed "step" section is a step; a worker without one steps from
    // heartbeat to heartbeat (its first sample is only where counting starts).
    std::uint64_t count = s.beat_count;
    std::uint64_t total_ns = s.last_beat_ns;
    if (step != nullptr) {
      count = step->count;
      total_ns = step->total_ns;
      if (!m.from_sections) m = StepSample{.from_sections = true};
    } else if (m.from_sections || count == 0) {
      continue;
    } else if (m.count == 0) {
      m.count = count;
      m.total_ns = total_ns;
      continue;
    }
    if (count > m.count && total_ns >= m.total_ns) {
      m.step_s = ns_to_s(total_ns - m.total_ns) / static_cast<double>(count - m.count);
      m.steps += count - m.count;
    }
    m.count = count;
    m.total_ns = total_ns;
  }
}

void HeartbeatMonitor::schedule_status() {
  if (status_scheduled_) return;
  status_scheduled_ = true;
  status_timer_.expires_after(kStatusInterval);
  status_timer_.async_wait([this](boost::system::error_code ec) {
    status_scheduled_ = false;
    if (ec) return;
    bool any_running = false;
    bool any_reporting = false;
    for (std::size_t lr = 0; lr < files_.size(); ++lr) {
      if (!hooks_.running(static_cast<int>(lr))) continue;
      any_running = true;
      if (status(static_cast<int>(lr))) any_reporting = true;
    }
    if (any_reporting) sample_steps();
    if (any_reporting && hooks_.refresh_status) hooks_.refresh_status();
    // Stops with the attempt's workers; start_attempt starts it again.
    if (any_running) schedule_status();
  });
}

}  // namespace ddp::agent
