// ddp-bench heartbeat: what ddp::heartbeat() and a ddp::Section enter/exit
// cost a worker (docs/performance.md, "Heartbeats"). The bench plays the
// agent: it creates a liveness file as ddprun does and points
// DDP_LIVENESS_FILE at it, with no notify request pending (the steady state
// of a job whose deadlines are armed); --disabled leaves it unset, as
// outside ddprun.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "bench.hpp"
#include "bench_cli.hpp"
#include "ddp/common/liveness_file.hpp"
#include "ddp/heartbeat.hpp"

namespace {

namespace lv = ddp::liveness;

double ns_per_call(long calls, const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) fn();
  const auto took =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  return took / static_cast<double>(calls);
}

int run(int argc, char** argv) {
  CLI::App app{"Cost of ddp::heartbeat() and of a ddp::Section enter+exit, in ns per call"};
  long calls = 10'000'000;
  bool disabled = false;
  app.add_option("--calls", calls, "calls per measurement")->check(CLI::Range(1L, 1'000'000'000L));
  app.add_flag("--disabled", disabled, "no liveness file: the cost outside ddprun");
  if (const auto code = ddp::bench::parse_flags(app, argc, argv)) return *code;

  const auto path =
      std::filesystem::temp_directory_path() / ("ddp-bench-liveness-" + std::to_string(::getpid()));
  void* base = nullptr;
  if (!disabled) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, lv::kFileSize) != 0) {
      std::fprintf(stderr, "ddp-bench heartbeat: cannot create %s\n", path.c_str());
      return 1;
    }
    base = ::mmap(nullptr, lv::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED) return 1;
    lv::init_header(base);
    ::setenv("DDP_LIVENESS_FILE", path.c_str(), 1);
    ::unsetenv("DDP_LIVENESS_PIPE");
  } else {
    ::unsetenv("DDP_LIVENESS_FILE");
  }
  ddp::heartbeat();  // maps the file once
  const double beat = ns_per_call(calls, [] { ddp::heartbeat(); });
  const double section = ns_per_call(calls / 4 + 1, [] { ddp::Section s("step"); });
  std::printf("liveness=%s calls=%ld heartbeat_ns=%.1f section_enter_exit_ns=%.1f\n", disabled ? "off" : "on",
              calls, beat, section);
  if (base != nullptr) {
    const auto snap = lv::read_snapshot(base);
    std::printf("file beats=%llu step_sections=%llu\n", static_cast<unsigned long long>(snap.beat_count),
                snap.slots.empty() ? 0ULL : static_cast<unsigned long long>(snap.slots[0].count));
    ::munmap(base, lv::kFileSize);
    std::filesystem::remove(path);
  }
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("heartbeat", "cost of ddp::heartbeat() and ddp::Section per call", run);
