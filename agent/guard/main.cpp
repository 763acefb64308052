// ddp-guard: started by ddprun's agent, never by hand. Wiring only: parse the
// command line the agent built (guard_protocol.hpp), run the guard.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ddp/common/exit_code.hpp"
#include "ddp/common/parse.hpp"
#include "guard.hpp"
#include "guard_protocol.hpp"
#include "guard_server.hpp"

namespace {

bool take(const char* arg, const char* flag, long* value) {
  const std::size_t n = std::strlen(flag);
  if (std::strncmp(arg, flag, n) != 0) return false;
  const auto v = ddp::parse_int<long>(arg + n);
  if (v) *value = *v;
  return v.has_value();
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "ddp-guard: %s\nusage: ddp-guard [--stop-timeout-ms=N] [--info-fd=N] [--agent-pid=N] "
               "[--fence-file=PATH] "
               "{-- /abs/path/to/worker [args...] | --adopt-pid=N | --serve-fd=N}\n(started by ddprun for "
               "each worker; see "
               "docs/agent-workers.md)\n",
               why);
  std::exit(ddp::exit_code(ddp::ExitCode::kConfig));
}

}  // namespace

int main(int argc, char** argv) {
  ddp::guard::GuardOptions o;
  int serve_fd = -1;
  int i = 1;
  for (; i < argc; ++i) {
    long v = 0;
    if (std::strcmp(argv[i], "--") == 0) {
      ++i;
      break;
    }
    if (take(argv[i], ddp::guard::kStopTimeoutFlag, &v) && v >= 0) {
      o.stop_timeout = std::chrono::milliseconds(v);
    } else if (take(argv[i], ddp::guard::kInfoFdFlag, &v) && v >= 0) {
      o.info_fd = static_cast<int>(v);
    } else if (take(argv[i], ddp::guard::kAgentPidFlag, &v) && v > 0) {
      o.agent_pid = static_cast<pid_t>(v);
    } else if (take(argv[i], ddp::guard::kServeFdFlag, &v) && v >= 0 && v <= 65535) {
      serve_fd = static_cast<int>(v);
    } else if (take(argv[i], ddp::guard::kAdoptPidFlag, &v) && v > 0) {
      o.adopt_pid = static_cast<pid_t>(v);
    } else if (std::strncmp(argv[i], ddp::guard::kFenceFileFlag, std::strlen(ddp::guard::kFenceFileFlag)) ==
               0) {
      o.fence_file = argv[i] + std::strlen(ddp::guard::kFenceFileFlag);
    } else {
      usage((std::string("unknown or malformed option '") + argv[i] + "'").c_str());
    }
  }
  if (serve_fd >= 0) {
    if (i < argc || o.adopt_pid > 0 || o.agent_pid <= 0) usage("--serve-fd takes --agent-pid and no worker");
    ddp::guard::run_guard_server(serve_fd, o.agent_pid);
  }
  if (o.adopt_pid > 0) {
    if (i < argc) usage("--adopt-pid takes no worker command");
    ddp::guard::run_guard(o);
  }
  if (i >= argc) usage("no worker command after '--'");
  if (argv[i][0] != '/') usage("the worker's path must be absolute");
  o.argv.assign(argv + i, argv + argc);
  ddp::guard::run_guard(o);
}
