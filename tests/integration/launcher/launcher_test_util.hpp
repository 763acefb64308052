// Helpers for the ddprun integration tests.
#pragma once

#include <sys/types.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace ddp::test::launcher {

using EnvOverrides = std::map<std::string, std::optional<std::string>>;

// Debian's interpreter, where python3-torch (1.13) lives: what the tests whose
// workers run Python pass to --python unless they ask for another.
inline constexpr const char* kPython = "/usr/bin/python3";

// Whether `python` imports torch.distributed. Without it a torch case is
// skipped (false, after a "SKIP:" warning), except under CI, where it fails.
inline bool have_torch(const TempDir& dir, const std::string& python = kPython) {
  if (run({python, "-c", "import torch.distributed"}, dir.path()).code == 0) return true;
  const std::string why =
      python +
      " cannot import torch (apt install python3-torch; scripts/setup.sh installs torch 2.x into .venv)";
  if (std::getenv("CI") != nullptr) FAIL(why);
  WARN("SKIP: " << why);
  return false;
}

// ddprun's argv; --log-level=warn keeps lifecycle lines out of assertions on
// output unless a test asks for them.
inline std::vector<std::string> ddprun_argv(std::vector<std::string> args) {
  args.insert(args.begin(), bin("ddprun").string());
  return args;
}

// The test's env minus what would change ddprun's behaviour behind its back
// (DDP_SLURM=0: the suite may itself run inside a Slurm job).
inline EnvOverrides clean_env(EnvOverrides extra) {
  EnvOverrides env = {{"OMP_NUM_THREADS", std::nullopt},      {"PET_NPROC_PER_NODE", std::nullopt},
                      {"PET_NNODES", std::nullopt},           {"PET_STANDALONE", std::nullopt},
                      {"CUDA_VISIBLE_DEVICES", std::nullopt}, {"DDP_SLURM", "0"},
                      {"DDP_GUARD_SERVER", std::nullopt}};
  for (auto& [k, v] : extra) env[k] = v;
  return env;
}

inline RunResult ddprun(std::vector<std::string> args, const TempDir& dir, EnvOverrides env = {}) {
  return run(ddprun_argv(std::move(args)), dir.path(), clean_env(std::move(env)), std::chrono::seconds(60));
}

// The flags of node `rank` of a static job of `nnodes` nodes on 127.0.0.1:`port`,
// each node naming itself "node<rank>" (the name failure reports show).
inline std::vector<std::string> static_node_flags(int rank, int nnodes, int port) {
  return {"--nnodes=" + std::to_string(nnodes), "--node_rank=" + std::to_string(rank),
          "--master_addr=127.0.0.1", "--master_port=" + std::to_string(port),
          "--local_addr=node" + std::to_string(rank)};
}

// fake_worker's FAKE_ENV_DUMP file as a map (plus FDS and ARGS).
inline std::map<std::string, std::string> read_env_dump(const fs::path& path) {
  std::map<std::string, std::string> out;
  std::istringstream lines(read_file(path));
  std::string line;
  while (std::getline(lines, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

inline int count_lines(const std::string& text, const std::string& needle) {
  int n = 0;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(needle) != std::string::npos) ++n;
  }
  return n;
}

// A ddp-rendezvousd on 127.0.0.1 with a free port (logging warnings only) for
// c10d jobs: its log is daemon.{out,err} in `dir`.
struct LocalDaemon {
  explicit LocalDaemon(const TempDir& dir)
      : proc({bin("ddp-rendezvousd").string(), "--host", "127.0.0.1", "--port", "0", "--port-file",
              (dir / "daemon.port").string(), "--log-level", "warn"},
             dir.path(), {}, "daemon"),
        port(wait_for_port_file(dir / "daemon.port")),
        endpoint("127.0.0.1:" + std::to_string(port)) {}
  Process proc;
  int port;  // -1 when it did not start (wait_for_port_file timed out)
  std::string endpoint;
};

// Pids of FAKE_PID_FILE "start" lines.
inline std::vector<pid_t> started_pids(const std::string& text) {
  std::vector<pid_t> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(" start ") != std::string::npos) out.push_back(std::stoi(line));
  }
  return out;
}

// `ddp-store status` of job `rdzv_id` on the store at `endpoint`: the table an
// operator sees.
inline RunResult store_status(const TempDir& dir, const std::string& endpoint, const std::string& rdzv_id) {
  return run({bin("ddp-store").string(), "--endpoint", endpoint, "status", "--rdzv_id", rdzv_id}, dir.path());
}

// store_status, again until it succeeds with a table that `shown` accepts
// (true) or `timeout` passes (false); `table` is the last one it got.
inline bool wait_for_status(const TempDir& dir, const std::string& endpoint, const std::string& rdzv_id,
                            RunResult& table, const std::function<bool(const std::string&)>& shown,
                            std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  return wait_until(
      [&] {
        table = store_status(dir, endpoint, rdzv_id);
        return table.code == 0 && shown(table.out);
      },
      timeout);
}

// slot -> pid, from ddp-example-train-reform's "slot S pid P start|end:" lines
// (the first of each slot: its original process at start).
inline std::map<int, long> trainer_slot_pids(const std::string& out, const std::string& when) {
  std::map<int, long> found;
  const std::regex line("slot ([0-9]+) pid ([0-9]+) " + when + ":");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it) {
    found.emplace(std::stoi((*it)[1]), std::stol((*it)[2]));
  }
  return found;
}

}  // namespace ddp::test::launcher
