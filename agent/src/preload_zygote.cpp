#include "preload_zygote.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include "ddp/agent/failure_report.hpp"
#include "ddp/common/installed_file.hpp"
#include "ddp/common/logging.hpp"
#include "zygote_client.hpp"

namespace ddp::agent {

namespace fs = std::filesystem;

namespace {

// How long a spawn waits for a starting zygote before spawning normally:
// its imports (torch on a shared filesystem at scale: tens of seconds).
constexpr std::chrono::seconds kReadyTimeout{300};
// sizeof(sockaddr_un::sun_path) less the terminating NUL.
constexpr std::size_t kMaxSocketPath = 107;

std::string find_zygote_script() {
  return find_installed(fs::path("share") / "ddprun" / "ddp_zygote.py", DDP_ZYGOTE_INSTALL_PATH, R_OK);
}

}  // namespace

const std::string& zygote_script() {
  static const std::string path = find_zygote_script();
  return path;
}

struct PreloadZygote::State : std::enable_shared_from_this<PreloadZygote::State> {
  enum class Phase { kStarting, kReady, kRefused, kStopped };

  ProcessRunner& runner;
  std::string python;
  std::vector<std::string> modules;
  std::string socket_path;
  std::vector<std::string> env;
  std::shared_ptr<spdlog::logger> log;

  std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kStarting;
  int ready_count = 0;                              // how many zygotes were ready so far
  pid_t pid = -1;                                   // io thread only
  int generation = 0;                               // io thread only
  std::string out_line;                             // io thread only
  std::chrono::steady_clock::time_point started{};  // io thread only

  State(ProcessRunner& r, std::string py, std::vector<std::string> m, std::string sock,
        std::vector<std::string> e, std::shared_ptr<spdlog::logger> l)
      : runner(r),
        python(std::move(py)),
        modules(std::move(m)),
        socket_path(std::move(sock)),
        env(std::move(e)),
        log(std::move(l)) {}

  void set_phase(Phase p) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (phase == Phase::kStopped) return;
      phase = p;
    }
    cv.notify_all();
  }

  Phase current() {
    std::lock_guard<std::mutex> lock(mu);
    return phase;
  }

  void refuse(const std::string& why) {
    log->warn("--preload {}: {}; workers start normally", join(), why);
    set_phase(Phase::kRefused);
  }

  std::string join() const {
    std::string s;
    for (const auto& m : modules) s += (s.empty() ? "" : ",") + m;
    return s;
  }

  void start() {
    if (zygote_script().empty()) {
      refuse("ddp_zygote.py not found (looked in share/ddprun beside ddprun and at " +
             std::string(DDP_ZYGOTE_INSTALL_PATH) + "); reinstall ddprun");
      return;
    }
    if (socket_path.size() > kMaxSocketPath) {
      refuse("its socket path " + socket_path + " is longer than " + std::to_string(kMaxSocketPath) +
             " bytes (a Unix socket's limit); give a shorter --log_dir");
      return;
    }
    std::error_code ec;
    fs::remove(socket_path, ec);
    set_phase(Phase::kStarting);
    const int gen = ++generation;
    out_line.clear();
    started = std::chrono::steady_clock::now();
    SpawnSpec spec;
    spec.executable = python;
    spec.args = {"-u", zygote_script(), "--socket", socket_path, "--modules", join()};
    spec.env = env;
    spec.stop_timeout = std::chrono::milliseconds(1000);
    ChildHandlers h;
    auto weak = weak_from_this();
    h.on_output = [weak, gen](StdStream s, std::string_view bytes) {
      auto self = weak.lock();
      if (!self || gen != self->generation) return;
      if (s == StdStream::kErr) {
        // Import warnings and tracebacks: the user's to see, as a worker's would be.
        ssize_t ignored = ::write(2, bytes.data(), bytes.size());
        (void)ignored;
        return;
      }
      self->out_line.append(bytes);
      std::size_t nl = 0;
      while ((nl = self->out_line.find('\n')) != std::string::npos) {
        const std::string line = self->out_line.substr(0, nl);
        self->out_line.erase(0, nl + 1);
        self->on_line(line);
      }
    };
    h.on_exit = [weak, gen](int status) {
      if (auto self = weak.lock(); self && gen == self->generation) self->on_exit(status);
    };
    WorkerStdio stdio;
    stdio.in = WorkerStdio::kNull;
    runner.spawn(
        std::move(spec), std::move(h),
        [weak, gen](pid_t p, const std::string& error) {
          auto self = weak.lock();
          if (!self || gen != self->generation) return;
          self->pid = p;
          if (p < 0) self->refuse("cannot start the zygote: " + error);
        },
        stdio);
  }

  void on_line(const std::string& line) {
    if (line == "ready") {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
      log->info("preload zygote ready pid={} modules={} in {} ms", pid, join(), ms.count());
      {
        std::lock_guard<std::mutex> lock(mu);
        ++ready_count;
      }
      set_phase(Phase::kReady);
    } else if (line.rfind("refused ", 0) == 0) {
      refuse(line.substr(8));
    }
  }

  void on_exit(int status) {
    const Phase p = current();
    if (p == Phase::kStopped || p == Phase::kRefused) return;
    if (p == Phase::kStarting) {
      refuse("the zygote exited before it was ready (" + describe_wait_status(status) + ")");
      return;
    }
    log->warn("preload zygote pid={} exited ({}), with the workers forked from it; starting a new one", pid,
              describe_wait_status(status));
    start();
  }

  int connect() {
    std::unique_lock<std::mutex> lock(mu);
    const auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
    cv.wait_until(lock, deadline, [&] { return phase != Phase::kStarting; });
    if (phase != Phase::kReady) return -1;
    const int seen = ready_count;
    lock.unlock();
    if (const int fd = connect_zygote(socket_path); fd >= 0) return fd;
    // It died and its exit is not reported yet (its guard is still stopping
    // the workers forked from it): wait for the replacement, once.
    lock.lock();
    cv.wait_until(lock, deadline, [&] {
      return phase == Phase::kRefused || phase == Phase::kStopped ||
             (phase == Phase::kReady && ready_count != seen);
    });
    if (phase != Phase::kReady) return -1;
    lock.unlock();
    return connect_zygote(socket_path);
  }
};

PreloadZygote::PreloadZygote(boost::asio::io_context& io, std::string python,
                             std::vector<std::string> modules, fs::path socket_path,
                             std::vector<std::string> env, std::shared_ptr<spdlog::logger> log)
    : runner_(std::make_unique<ProcessRunner>(io)),
      state_(std::make_shared<State>(*runner_, std::move(python), std::move(modules), socket_path.string(),
                                     std::move(env), std::move(log))) {}

PreloadZygote::~PreloadZygote() {
  stop();
  runner_.reset();  // before the state it refers to; kills what is left of the zygote's tree
}

void PreloadZygote::start() { state_->start(); }

void PreloadZygote::stop_forking() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->phase = State::Phase::kStopped;
  }
  state_->cv.notify_all();
}

void PreloadZygote::stop() {
  stop_forking();
  if (state_->pid > 0) state_->runner.signal_group(state_->pid, SIGKILL);
  state_->pid = -1;
}

int PreloadZygote::connect() { return state_->connect(); }

std::function<int()> PreloadZygote::connector() const {
  return [state = std::weak_ptr<State>(state_)] {
    auto s = state.lock();
    return s ? s->connect() : -1;
  };
}

}  // namespace ddp::agent
