// ddprun: parse -> configure logging -> run the agent -> exit code.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "ddp/agent/agent.hpp"
#include "ddp/agent/worker_env.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/exit_code.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/printable.hpp"
#include "ddp/common/std_fds.hpp"
#include "ddp/launcher/launch_options.hpp"
#include "remote_streams.hpp"
#include "ssh_launch.hpp"

namespace {
// How long a --hosts agent tries to reach the launcher's store.
constexpr std::chrono::seconds kHandedStoreConnectTimeout{30};
}  // namespace

int main(int argc, char** argv) {
  ddp::open_closed_std_fds();
  // A closed console (`ddprun ... | head`) must not kill the agent and, through
  // the parent-death signal, the training; worker output is then dropped.
  std::signal(SIGPIPE, SIG_IGN);
  // One agent of a --hosts job: its ssh -tt terminal merges stdout and
  // stderr, so stderr lines go tagged (remote_streams.hpp), before any
  // thread starts and until the last line is out.
  const bool remote_agent = std::getenv(ddp::launcher::kRemoteAgentVar.data()) != nullptr;
  std::optional<ddp::launcher::StderrChannel> remote_stderr;
  if (remote_agent) remote_stderr.emplace();
  try {
    const std::vector<std::string> args(argv, argv + argc);
    const auto parsed = ddp::launcher::parse_command_line(args, ddp::agent::current_environment());
    // --print-config included: it prints and launches nothing.
    if (parsed.kind != ddp::launcher::ParseOutcome::Kind::kRun) {
      std::cout << parsed.text;
      return 0;
    }
    ddp::log::setup(parsed.options.log_level, "ddprun");
    for (const auto& w : parsed.warnings) ddp::log::get("ddprun")->warn("{}", w);
    // The store a ddprun agent hosts is an implementation detail of the run:
    // its start and stop lines are for --log_level debug; its warnings stay.
    if (auto store_log = ddp::log::get("store.server"); store_log->level() == spdlog::level::info) {
      store_log->set_level(spdlog::level::warn);
    }
    const auto env = ddp::agent::current_environment();
    // A person at a terminal sees "waiting for nodes" update in place; a log
    // file, journald or a remote agent's ssh session gets plain lines.
    if (::isatty(STDERR_FILENO) != 0 && env.count("JOURNAL_STREAM") == 0 &&
        env.count(std::string(ddp::launcher::kRemoteAgentVar)) == 0) {
      ddp::log::enable_status_line();
    }
    if ((!parsed.options.hosts.empty() || !parsed.options.hostfile.empty()) &&
        env.count(std::string(ddp::launcher::kRemoteAgentVar)) == 0) {
      return ddp::launcher::run_over_ssh(parsed.options, args, env);
    }
    auto config = ddp::launcher::translate_options(parsed.options, ddp::launcher::current_host());
    if (remote_agent) {
      // The launcher's store listens before any host is reached: one that
      // does not answer is an address this host cannot reach.
      config.rendezvous.handed_store = {"--local_addr of the launching ddprun", kHandedStoreConnectTimeout};
    }
    // torchrun puts its --signals_to_handle in its own environment, so its
    // workers inherit it; theirs and ours then see the same value.
    ::setenv("TORCHELASTIC_SIGNALS_TO_HANDLE", parsed.options.signals_to_handle.c_str(), 1);
    ddp::agent::Agent agent(std::move(config));
    const auto result = agent.run();
    if (!result.error.empty())
      std::cerr << "ddprun: error: " << ddp::terminal_safe(result.error) << std::endl;
    // The launcher names the failed worker from this, whichever host ends first.
    if (remote_stderr && !result.failure.empty())
      remote_stderr->send(ddp::launcher::kCauseChannel, result.failure);
    if (result.abandon_process) {
      // A rendezvous call is still blocked in another thread; no workers exist.
      std::fflush(nullptr);
      if (remote_stderr) remote_stderr->close();
      std::_Exit(result.exit_code);
    }
    return result.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "ddprun: error: " << ddp::terminal_safe(e.what()) << std::endl;
    return ddp::exit_code_of(e);
  }
}
