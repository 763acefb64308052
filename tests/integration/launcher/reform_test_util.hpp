// The steps the --on_failure=reform tests share: the fake workers' pid
// lines, the workers' store's reform keys, and a standalone re-form job.
#pragma once

#include <signal.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/store/job_keys.hpp"
#include "launcher_test_util.hpp"

namespace ddp::test::launcher::reform {

using namespace std::chrono_literals;

// FAKE_PID_FILE lines of `rank` that say `what` ("start", "exit"): their pids.
inline std::vector<pid_t> pids_of(const fs::path& pid_file, int rank, const std::string& what) {
  std::vector<pid_t> out;
  std::istringstream lines(read_file(pid_file));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    pid_t pid = 0;
    int r = -1;
    std::string w;
    if (in >> pid >> r >> w && r == rank && w == what) out.push_back(pid);
  }
  return out;
}

// Waits until `rank` has started `n` times; returns the latest pid (-1 on timeout).
inline pid_t wait_for_start(const fs::path& pid_file, int rank, std::size_t n) {
  pid_t pid = -1;
  wait_until(
      [&] {
        const auto p = pids_of(pid_file, rank, "start");
        if (p.size() < n) return false;
        pid = p.back();
        return true;
      },
      15s);
  return pid;
}

// `ddp-store list` of the job's reform keys (store/job_keys.hpp), as key
// (after keys::reform_prefix) -> value.
struct ReformKeys : std::map<std::string, std::string> {
  // Relative to keys::reform_prefix, hence "" as the prefix.
  std::string generation() { return (*this)[ddp::store::keys::reform_generation_key("")]; }
  std::string size() { return (*this)[ddp::store::keys::reform_size_key("")]; }
  std::string lost(int slot) { return (*this)[ddp::store::keys::reform_lost_key("", slot)]; }
};

inline ReformKeys reform_keys(const TempDir& dir, const std::string& endpoint, const std::string& prefix) {
  const std::string root = ddp::store::keys::reform_prefix(prefix);
  const auto r = run({bin("ddp-store").string(), "--endpoint", endpoint, "list", root}, dir.path());
  ReformKeys out;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) continue;
    out[line.substr(root.size(), tab - root.size())] = line.substr(tab + 1);
  }
  return out;
}

// `ddprun --standalone --on_failure=reform` over `nproc` fake workers, each
// in a ddp::ElasticGroup, running `sleep_ms` and logging to dir/pids, their
// env dumped in `dir`; `flags` go before the program.
inline Process standalone_reform_job(const TempDir& dir, int nproc, const std::string& sleep_ms,
                                     std::vector<std::string> flags) {
  std::vector<std::string> args = {"--standalone", "--nproc_per_node=" + std::to_string(nproc),
                                   "--on_failure=reform"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--no_python", bin("fake_worker").string()});
  return Process(ddprun_argv(args), dir.path(),
                 clean_env({{"FAKE_PID_FILE", (dir / "pids").string()},
                            {"FAKE_ELASTIC_JOIN", "1"},
                            {"FAKE_ENV_DUMP", dir.path().string()},
                            {"FAKE_SLEEP_MS", sleep_ms}}),
                 "ddprun");
}

}  // namespace ddp::test::launcher::reform
