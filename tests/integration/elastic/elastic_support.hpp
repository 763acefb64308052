// Helpers of the elastic integration tests: the rendezvous service under test
// (a real ddp-rendezvousd, or with ELASTIC_BACKEND_ETCD one real etcd member),
// and real ddprun agents whose fake_workers dump their env and pids.
#pragma once

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"
#ifdef ELASTIC_BACKEND_ETCD
#include "etcd_cluster.hpp"
#endif

namespace elastic {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using ddp::test::bin;
using ddp::test::Process;
using ddp::test::read_file;
using ddp::test::TempDir;
using ddp::test::wait_until;
using Env = std::map<std::string, std::optional<std::string>>;

// A ddp-rendezvousd on 127.0.0.1. `port` 0 picks a free one; `data_dir` makes
// its state survive a restart on the same port.
struct Daemon {
  Daemon(const TempDir& dir, int fixed_port = 0, const std::string& data_dir = "",
         const std::string& name = "daemon")
      : proc(argv(dir, fixed_port, data_dir, name), dir.path(), {}, name),
        port(ddp::test::wait_for_port_file(dir / (name + ".port"))) {}
  static std::vector<std::string> argv(const TempDir& dir, int port, const std::string& data_dir,
                                       const std::string& name) {
    std::vector<std::string> a{bin("ddp-rendezvousd").string(),
                               "--host",
                               "127.0.0.1",
                               "--port",
                               std::to_string(port),
                               "--port-file",
                               (dir / (name + ".port")).string(),
                               "--log-level",
                               "warn"};
    if (!data_dir.empty()) {
      a.push_back("--data-dir");
      a.push_back(data_dir);
    }
    return a;
  }
  Process proc;
  int port;
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port); }
};

// The service the scenarios run against, and the rdzv_conf that makes them fast.
#ifdef ELASTIC_BACKEND_ETCD
struct Service {
  explicit Service(const TempDir& dir) : etcd((fs::create_directories(dir / "etcd"), dir / "etcd")) {}
  ddp::test::EtcdCluster etcd;
  std::string backend() const { return "etcd"; }
  std::string endpoint() const { return etcd.endpoints_text(); }
  void signal(int sig) { ::kill(etcd.pid(0), sig); }
  static constexpr bool kIsDaemon = false;
  // etcd grants leases in whole seconds, at least ~2 s: the window is 2 s.
  static std::string conf() {
    return "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=30";
  }
};
#else
struct Service {
  explicit Service(const TempDir& dir) : d(dir) {}
  Daemon d;
  std::string backend() const { return "c10d"; }
  std::string endpoint() const { return d.endpoint(); }
  void signal(int sig) { d.proc.signal(sig); }
  static constexpr bool kIsDaemon = true;
  // Keep-alive window 0.6 s.
  static std::string conf() {
    return "last_call_timeout=0.5,keep_alive_interval=0.2,keep_alive_max_attempt=3,join_timeout=30";
  }
};
#endif

struct AgentOptions {
  std::string backend = "c10d";
  std::string endpoint;
  std::string nnodes = "2:2";
  int nproc = 1;
  std::string conf;
  Env env;
  int max_restarts = 3;
  std::string run_id = "job";
  std::vector<std::string> extra;   // more ddprun flags
  std::vector<std::string> worker;  // the program and its arguments; empty: fake_worker
};

// One ddprun agent with its own directory; workers dump their env per rank.
struct Agent {
  Agent(const TempDir& dir, const std::string& name, AgentOptions o) : home(dir / name) {
    fs::create_directories(home / "env");
    o.env["FAKE_ENV_DUMP"] = (home / "env").string();
    o.env["FAKE_PID_FILE"] = (home / "pids").string();
    o.env["PET_NNODES"] = std::nullopt;
    o.env["PET_NPROC_PER_NODE"] = std::nullopt;
    o.env["PET_STANDALONE"] = std::nullopt;
    std::vector<std::string> argv{bin("ddprun").string(),
                                  "--nnodes=" + o.nnodes,
                                  "--nproc_per_node=" + std::to_string(o.nproc),
                                  "--rdzv_backend=" + o.backend,
                                  "--rdzv_endpoint=" + o.endpoint,
                                  "--rdzv_id=" + o.run_id,
                                  "--max_restarts=" + std::to_string(o.max_restarts),
                                  "--log_level=info"};
    if (!o.conf.empty()) argv.push_back("--rdzv_conf=" + o.conf);
    argv.insert(argv.end(), o.extra.begin(), o.extra.end());
    if (o.worker.empty()) o.worker = {bin("fake_worker").string()};
    argv.insert(argv.end(), o.worker.begin(), o.worker.end());
    proc = std::make_unique<Process>(argv, home, o.env, name);
  }
  // The scenarios' usual agent on `svc`.
  Agent(const TempDir& dir, const std::string& name, const Service& svc, const std::string& nnodes, int nproc,
        Env env, int max_restarts = 3)
      : Agent(dir, name,
              AgentOptions{svc.backend(), svc.endpoint(), nnodes, nproc, Service::conf(), std::move(env),
                           max_restarts}) {}

  fs::path home;
  std::unique_ptr<Process> proc;

  std::map<std::string, std::string> worker_env(int rank) const {
    std::map<std::string, std::string> out;
    std::istringstream lines(read_file(home / "env" / ("rank_" + std::to_string(rank) + ".env")));
    std::string line;
    while (std::getline(lines, line)) {
      auto eq = line.find('=');
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
  }
  // Ranks whose latest env dump says WORLD_SIZE == world.
  std::set<int> ranks_in_world(int world) const {
    std::set<int> out;
    if (!fs::exists(home / "env")) return out;
    for (const auto& e : fs::directory_iterator(home / "env")) {
      const auto name = e.path().filename().string();
      if (name.rfind("rank_", 0) != 0) continue;
      const int rank = std::stoi(name.substr(5));
      auto env = worker_env(rank);
      if (env["WORLD_SIZE"] == std::to_string(world)) out.insert(rank);
    }
    return out;
  }
  std::vector<pid_t> started() const {
    std::vector<pid_t> out;
    std::istringstream lines(read_file(home / "pids"));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.find(" start ") != std::string::npos) out.push_back(std::stoi(line));
    }
    return out;
  }
};

inline bool all_dead(const std::vector<pid_t>& pids) {
  for (auto p : pids) {
    if (ddp::test::pid_alive(p)) return false;
  }
  return true;
}

// Ranks, over all of `agents`, whose latest env dump says WORLD_SIZE == world.
inline std::size_t ranks_in_world(int world, std::initializer_list<const Agent*> agents) {
  std::size_t n = 0;
  for (const auto* ag : agents) n += ag->ranks_in_world(world).size();
  return n;
}

// True when each of `agents` runs exactly one rank of a world of `world`.
inline bool one_rank_each(int world, std::initializer_list<const Agent*> agents) {
  for (const auto* ag : agents) {
    if (ag->ranks_in_world(world).size() != 1) return false;
  }
  return true;
}

// SIGTERM to each of `agents` in turn, then waits (30 s each) for them to
// exit: the names of those still running, "" when all exited.
inline std::string stop_agents(std::initializer_list<const Agent*> agents) {
  for (const auto* ag : agents) ag->proc->signal(SIGTERM);
  std::string running;
  for (const auto* ag : agents) {
    if (ag->proc->wait(30s).has_value()) continue;
    if (!running.empty()) running += ", ";
    running.append(ag->home.filename().string());
  }
  return running;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What the two agents of a job show once its store is gone: each exited 3
// (`code_a`, `code_b`), no worker of theirs left, and each log says
// "rendezvous store lost" and `why`.
inline void check_store_lost(const Agent& a, std::optional<int> code_a, const Agent& b,
                             std::optional<int> code_b, const std::string& why) {
  INFO("agent a:\n" << a.proc->err() << "\nagent b:\n" << b.proc->err());
  CHECK(code_a == std::optional<int>(3));
  CHECK(code_b == std::optional<int>(3));
  CHECK(all_dead(a.started()));
  CHECK(all_dead(b.started()));
  for (const auto* ag : {&a, &b}) {
    const auto err = ag->proc->err();
    CHECK(contains(err, "rendezvous store lost"));
    CHECK(contains(err, why));
  }
}

}  // namespace elastic
