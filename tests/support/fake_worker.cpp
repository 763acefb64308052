// A stand-in training worker for launcher tests; its behaviour comes from env:
//   FAKE_ONLY_RANK=r        the behaviours marked * apply to RANK r only; other
//                           ranks exit 0, or hang with FAKE_OTHERS_HANG=1
//   FAKE_PID_FILE=path      append "<pid> <rank> start <unix_ns>" once set up,
//                           and "<pid> <rank> exit <unix_ns>" just before exiting
//   FAKE_ENV_DUMP=dir       write dir/rank_<RANK>.env: its env as KEY=VALUE
//                           lines, then "FDS=0,1,2" (its open fds), then "ARGS=..."
//   FAKE_PRINT=N            N lines to stdout and N to stderr
//   FAKE_IGNORE_SIGTERM=1 * ignore SIGTERM
//   FAKE_IGNORE_SIGINT=1  * ignore SIGINT
//   FAKE_ERROR_MESSAGE=m  * write a torch @record error file to TORCHELASTIC_ERROR_FILE
//   FAKE_ERROR_TYPE=t       with extraInfo.error_type t, as ddp::run writes it
//   FAKE_BAD_ERROR_FILE=x * leave a hostile TORCHELASTIC_ERROR_FILE instead: nested:N
//                           ({"message": N nested arrays}), bytes:N (N bytes of valid
//                           JSON) or fifo (a named pipe nobody writes to)
//   FAKE_CRASH=segv|abort * die by SIGSEGV / SIGABRT
//   FAKE_EXIT=N           * exit code (default 0)
//   FAKE_FAIL_ON_RESTART_BELOW=K * fail (FAKE_EXIT or 1) while
//                           TORCHELASTIC_RESTART_COUNT < K, then succeed
//   FAKE_HANG=1           * never exit on its own
//   FAKE_TICK_FILE=path   * while hanging, append "<GROUP_WORLD_SIZE> <RANK>
//                           <CLOCK_MONOTONIC ns>" every 10 ms: which world
//                           was still writing when (fencing tests)
//   FAKE_SLEEP_MS=n         sleep before exiting
//   FAKE_FIRST_SLEEP_MS=n   sleep this long instead in the first attempt
//                           (TORCHELASTIC_RESTART_COUNT 0)
//   FAKE_OTHERS_SLEEP_MS=n  with FAKE_ONLY_RANK, the other ranks sleep this long
//                           instead (still running while rank r fails)
//   FAKE_ELASTIC_JOIN=1     before anything else, count itself into the first
//                           generation of --on_failure=reform as a
//                           ddp::ElasticGroup does (add 1 to
//                           store::keys::reform_joined_key(R, 0)), so that the
//                           agent takes it for a worker SDK trainer
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include "ddp/common/endpoint.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/tcp_store.hpp"

extern char** environ;

namespace {

std::string env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

long long unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void pid_line(const std::string& what) {
  const auto path = env("FAKE_PID_FILE");
  if (path.empty()) return;
  const std::string line = std::to_string(::getpid()) + " " + env("RANK", "-1") + " " + what + " " +
                           std::to_string(unix_ns()) + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // One write with O_APPEND: lines of concurrent workers never interleave.
  [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());
  ::close(fd);
}

[[noreturn]] void tick_forever(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  char head[64];
  std::snprintf(head, sizeof(head), "%s %s ", env("GROUP_WORLD_SIZE", "-1").c_str(),
                env("RANK", "-1").c_str());
  while (true) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    char line[128];
    const int len = std::snprintf(line, sizeof(line), "%s%lld\n", head,
                                  static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
    [[maybe_unused]] auto n = ::write(fd, line, static_cast<std::size_t>(len));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string open_fds() {
  std::string out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  const int own = ::dirfd(dir);
  while (auto* ent = ::readdir(dir)) {
    if (ent->d_name[0] == '.') continue;
    const int fd = std::atoi(ent->d_name);
    if (fd == own) continue;
    out.append(out.empty() ? "" : ",").append(std::to_string(fd));
  }
  ::closedir(dir);
  return out;
}

void dump_env(const std::string& dir, int argc, char** argv) {
  const std::string path = dir + "/rank_" + env("RANK", "x") + ".env";
  const std::string fds = open_fds();  // before opening the dump file
  {
    std::ofstream out(path + ".tmp");
    for (char** e = environ; *e != nullptr; ++e) out << *e << '\n';
    out << "FDS=" << fds << '\n';
    out << "ARGS=";
    for (int i = 1; i < argc; ++i) out << (i > 1 ? " " : "") << argv[i];
    out << '\n';
  }
  std::rename((path + ".tmp").c_str(), path.c_str());  // readers see a whole file
}

void write_error_file(const std::string& message) {
  const auto path = env("TORCHELASTIC_ERROR_FILE");
  if (path.empty()) return;
  std::ofstream out(path);
  // torch.distributed.elastic's @record layout.
  out << "{\"message\": {\"message\": \"" << message
      << "\", \"extraInfo\": {\"py_callstack\": \"Traceback (most recent call last):\\n  File "
         "\\\"train.py\\\", line 7, in main\\n    step()\\n"
      << message << "\", \"timestamp\": \"" << std::time(nullptr) << "\"";
  if (const auto type = env("FAKE_ERROR_TYPE"); !type.empty()) out << ", \"error_type\": \"" << type << "\"";
  out << "}}}\n";
}

void write_bad_error_file(const std::string& how) {
  const auto path = env("TORCHELASTIC_ERROR_FILE");
  if (path.empty()) return;
  const auto colon = how.find(':');
  const std::size_t n = colon == std::string::npos ? 0 : std::strtoul(how.c_str() + colon + 1, nullptr, 10);
  if (how == "fifo") {
    ::mkfifo(path.c_str(), 0600);
    return;
  }
  std::ofstream out(path);
  if (how.rfind("nested:", 0) == 0) {
    out << "{\"message\": " << std::string(n, '[') << std::string(n, ']') << "}";
  } else if (how.rfind("bytes:", 0) == 0) {
    out << "{\"message\": \"" << std::string(n > 16 ? n - 16 : 0, 'x') << "\"}\n";
  }
}

[[noreturn]] void finish(int code) {
  pid_line("exit");
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  if (env("FAKE_ELASTIC_JOIN") == "1") {
    ddp::store::TcpStoreOptions options;
    options.endpoint = ddp::parse_endpoint(env("DDP_STORE_ENDPOINT"), "DDP_STORE_ENDPOINT");
    namespace keys = ddp::store::keys;
    ddp::store::TcpStore(options).add(
        keys::reform_joined_key(keys::reform_prefix(env("DDP_STORE_PREFIX")), 0), 1);
  }
  const bool applies = env("FAKE_ONLY_RANK").empty() || env("FAKE_ONLY_RANK") == env("RANK");
  if (applies && env("FAKE_IGNORE_SIGTERM") == "1") ::signal(SIGTERM, SIG_IGN);
  if (applies && env("FAKE_IGNORE_SIGINT") == "1") ::signal(SIGINT, SIG_IGN);
  if (const auto dir = env("FAKE_ENV_DUMP"); !dir.empty()) dump_env(dir, argc, argv);
  pid_line("start");

  const int lines = std::atoi(env("FAKE_PRINT", "0").c_str());
  for (int i = 0; i < lines; ++i) {
    std::printf("out %d of rank %s\n", i, env("RANK", "?").c_str());
    std::fprintf(stderr, "err %d of rank %s\n", i, env("RANK", "?").c_str());
  }
  std::fflush(stdout);

  const bool first_attempt = env("TORCHELASTIC_RESTART_COUNT", "0") == "0";
  std::string sleep_ms = first_attempt && !env("FAKE_FIRST_SLEEP_MS").empty() ? env("FAKE_FIRST_SLEEP_MS")
                                                                              : env("FAKE_SLEEP_MS", "0");
  if (!applies && !env("FAKE_OTHERS_SLEEP_MS").empty()) sleep_ms = env("FAKE_OTHERS_SLEEP_MS");
  if (const int ms = std::atoi(sleep_ms.c_str()); ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  if (!applies) {
    if (env("FAKE_OTHERS_HANG") == "1") {
      while (true) ::pause();
    }
    finish(0);
  }
  if (const auto msg = env("FAKE_ERROR_MESSAGE"); !msg.empty()) write_error_file(msg);
  if (const auto how = env("FAKE_BAD_ERROR_FILE"); !how.empty()) write_bad_error_file(how);
  if (const auto k = env("FAKE_FAIL_ON_RESTART_BELOW"); !k.empty()) {
    const int restart = std::atoi(env("TORCHELASTIC_RESTART_COUNT", "0").c_str());
    if (restart < std::atoi(k.c_str())) finish(std::atoi(env("FAKE_EXIT", "1").c_str()));
    finish(0);
  }
  if (const auto crash = env("FAKE_CRASH"); !crash.empty()) {
    std::fflush(stdout);
    std::fflush(stderr);
    pid_line("exit");
    if (crash == "abort") std::abort();
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  }
  if (env("FAKE_HANG") == "1") {
    if (const auto path = env("FAKE_TICK_FILE"); !path.empty()) tick_forever(path);
    while (true) ::pause();
  }
  finish(std::atoi(env("FAKE_EXIT", "0").c_str()));
}
