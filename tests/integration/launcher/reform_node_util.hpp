// The steps the tests of a lost node under --on_failure=reform share
// (docs/reform.md, "A lost node"): agents of ddp-example-train-reform on one
// ddp-rendezvousd, and what their output says.
#pragma once

#include <catch2/catch.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "launcher_test_util.hpp"
#include "reform_trainer.hpp"

namespace ddp::test::launcher::reform_node {

using namespace std::chrono_literals;

inline std::vector<std::string> trainer(const TempDir& dir) { return reform_trainer(dir); }

// ddprun's argv for one agent of a c10d job of `nnodes` nodes, `nproc` workers on this one, in reform mode.
inline std::vector<std::string> node(const TempDir& dir, const LocalDaemon& daemon, const std::string& name,
                                     const std::string& nnodes = "1:2", const std::string& last_call = "30",
                                     int nproc = 2) {
  std::vector<std::string> args = {
      "--nnodes=" + nnodes,
      "--nproc_per_node=" + std::to_string(nproc),
      "--rdzv_backend=c10d",
      "--rdzv_endpoint=" + daemon.endpoint,
      "--rdzv_id=job",
      "--rdzv_conf=join_timeout=60,last_call_timeout=" + last_call + ",keep_alive_interval=0.5",
      "--local_addr=" + name,
      "--on_failure=reform",
      "--max_restarts=0",
      "--no_python"};
  for (auto& a : trainer(dir)) args.push_back(a);
  return ddprun_argv(args);
}

inline EnvOverrides info_env() { return clean_env({{"DDP_LOG_LEVEL", "info"}}); }

inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

inline double final_loss(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(final loss ([0-9.]+) after)"))) FAIL("no final loss line");
  return std::stod(m[1]);
}

// The pids of "slot S pid P start:" lines.
inline std::set<std::string> starts(const std::string& out) {
  std::set<std::string> pids;
  const std::regex line(R"(slot \d+ pid (\d+) start:)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it)
    pids.insert((*it)[1]);
  return pids;
}

// Two nodes of a --nnodes=`nnodes` job (MIN at most 2, MAX 3) training (the
// round closes with them after its 2 s last call), then a third node that
// joins them while they run.
struct GrowingJob {
  TempDir dir;
  LocalDaemon daemon{dir};
  std::optional<Process> a, b, c;
  std::set<std::string> before;  // a's and b's worker pids before c came
  explicit GrowingJob(const std::string& nnodes = "1:3") {
    REQUIRE(daemon.port > 0);
    a.emplace(node(dir, daemon, "nodea", nnodes, "2"), dir.path(), info_env(), "nodea");
    b.emplace(node(dir, daemon, "nodeb", nnodes, "2"), dir.path(), info_env(), "nodeb");
    REQUIRE(wait_until([&] { return count(a->out() + b->out(), "epoch 1/6") > 0; }, 60s));
    before = starts(a->out() + b->out());
    REQUIRE(before.size() == 4);
    c.emplace(node(dir, daemon, "nodec", nnodes, "2"), dir.path(), info_env(), "nodec");
  }
  // Whether a's and b's workers re-formed with c's ranks (world 6) within 60 s.
  bool wait_grown() {
    return wait_until([&] { return count(a->out() + b->out(), "world 6 (lost slots -, new slots 4,5)") > 0; },
                      std::chrono::seconds(60));
  }
};

}  // namespace ddp::test::launcher::reform_node
