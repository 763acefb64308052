// torchrun's own elastic agent (torch.distributed.run, --rdzv_backend=c10d)
// with ddp-rendezvousd as its rendezvous store gives the same outcome as with
// the store torchrun hosts itself (the first node's agent, is_host=1): 2 and 3
// nodes, a node joining a running job, a worker failure with and without
// --max_restarts, kill -9 of an agent and of a whole node. Each scenario runs
// through both stores; the outcome (every node's exit code, the world size and
// restart count each of its workers saw, the ranks of each world, each world's
// all_reduce) must be the expected one through each, hence the same.
//
// Labels torch2 (the .venv python with torch 2.x, through DDP_TEST_PYTHON)
// and torch (Debian's torch 1.13, its torchrun through
// scripts/torchrun_compat.py). Both stores' jobs of a scenario run at once.
// The worker is torchrun_worker.py; docs/rendezvous.md ("torchrun 2.x through
// ddp-rendezvousd") explains why each scenario is shaped the way it is.
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "test_support.hpp"
#include "torch_support.hpp"

using namespace ddp::test;
using namespace ddp::test::torch;
using namespace std::chrono_literals;

namespace {

enum class StoreKind { kOwn, kDaemon };

constexpr char kRunId[] = "trdzv";  // every job's --rdzv_id (each has its own store)

const char* describe(StoreKind k) {
  return k == StoreKind::kOwn ? "torchrun's own store" : "ddp-rendezvousd";
}

// torchrun starts each worker in a session of its own, so a torchrun killed by
// a test (or by Process's destructor) leaves its workers running. Every process
// of a job carries a ProcessTag in its environment, and its destructor
// SIGKILLs whatever still carries it.

// One worker result line of torchrun_worker.py.
struct Result {
  int pid = 0;
  int world = 0;
  int rank = 0;
  int restart = 0;
  bool ok = false;
};

std::vector<Result> parse_results(const std::string& out) {
  static const std::regex re(
      R"(trdzv node=\S+ pid=([0-9]+) world=([0-9]+) rank=([0-9]+) group_rank=[0-9]+ sum=-?[0-9]+ )"
      R"(restart=([0-9]+) (ok|WRONG))");
  std::vector<Result> found;
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    const auto& m = *it;
    found.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4]), m[5] == "ok"});
  }
  return found;
}

bool is_torch2() {
  static const bool v2 = [] {
    TempDir dir;
    auto r = run({python(), "-c", "import torch; print(torch.__version__.split('.')[0])"}, dir.path());
    return r.code == 0 && std::stoi(r.out) >= 2;
  }();
  return v2;
}

// How a scenario runs its workers.
struct Setup {
  std::string mode;  // torchrun_worker.py's WORKER_MODE: once, hold or loop
  // torchrun 2.x's default: group rank 0's agent hosts the workers' TCPStore
  // for its whole life (TORCHELASTIC_USE_AGENT_STORE). False sets torch's
  // opt-out, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: rank 0's worker hosts a
  // fresh one each round. The shared one keeps every round's keys, and torch
  // 2.x's workers put no round or attempt prefix on theirs, so in a re-formed
  // world a rank may read the old world's Gloo address of another rank and
  // fail to connect ("Connection refused" to a dead worker's port), now and
  // then, whatever the rendezvous store: the scenarios that re-form a world
  // use the opt-out, the others torch's default.
  bool shared_agent_store = true;
};

// Process's constructor counts its children in a static; the two jobs of a
// scenario start processes from two threads.
std::mutex spawn_mutex;

// A scenario's failure: wait_results and friends throw it (Catch's macros are
// for the test's own thread), through_both reports it with the logs.
struct ScenarioError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One torchrun job: its nodes are torchrun processes with one worker each, on
// 127.0.0.1, rendezvousing through `kind`. Used by one thread.
class Job {
 public:
  Job(StoreKind kind, Setup setup) : kind_(kind), setup_(std::move(setup)) {
    if (kind_ == StoreKind::kDaemon) {
      std::lock_guard<std::mutex> lock(spawn_mutex);
      daemon_ = std::make_unique<Process>(
          std::vector<std::string>{bin("ddp-rendezvousd").string(), "--host", "127.0.0.1", "--port", "0",
                                   "--port-file", (dir_ / "port").string(), "--log-level", "warn"},
          dir_.path(), Env{}, "daemon");
    }
    // Through its own store, the first node's torchrun binds the port (is_host=1).
    port_ = kind_ == StoreKind::kDaemon ? wait_for_port_file(dir_ / "port") : free_port();
    if (port_ <= 0) throw ScenarioError("ddp-rendezvousd wrote no port\n" + logs());
  }

  // Starts node `name`: a torchrun process with --nnodes=`nnodes` and one worker.
  void start(const std::string& name, const std::string& nnodes, int max_restarts, Env extra = {}) {
    // Tight timeouts (seconds; torch reads whole ones). keep_alive_max_attempt
    // stays above 2: torchrun renews its heartbeat only once it is an interval
    // old, on a timer of one interval, so one can be two intervals old; with a
    // window of two, a node finds its own heartbeat expired, drops itself from
    // its copy of the state and never renews it again (a newcomer then takes
    // every member for dead and waits alone, through either store).
    std::string conf =
        "join_timeout=30,last_call_timeout=1,close_timeout=5,keep_alive_interval=1,keep_alive_max_attempt=4";
    // Through the daemon torchrun finds the endpoint's host is this machine,
    // tries to bind the port, finds it taken and connects, as it would to a
    // daemon on another machine.
    if (kind_ == StoreKind::kOwn) conf += nodes_.empty() ? ",is_host=1" : ",is_host=0";
    std::vector<std::string> argv{python()};
    if (is_torch2()) {
      argv.insert(argv.end(), {"-m", "torch.distributed.run"});
    } else {
      argv.push_back((source_dir() / "scripts/torchrun_compat.py").string());
    }
    argv.insert(argv.end(),
                {"--nnodes=" + nnodes, "--nproc_per_node=1", "--rdzv_backend=c10d",
                 "--rdzv_endpoint=127.0.0.1:" + std::to_string(port_), std::string("--rdzv_id=") + kRunId,
                 "--max_restarts=" + std::to_string(max_restarts), "--monitor_interval=0.1",
                 "--rdzv_conf=" + conf, script("torchrun_worker.py")});
    Env env = {{"OMP_NUM_THREADS", "1"},
               {"PET_NPROC_PER_NODE", std::nullopt},
               {"PET_NNODES", std::nullopt},
               {"PET_STANDALONE", std::nullopt},
               {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", std::nullopt},
               {"PYTHONUNBUFFERED", "1"},
               {"NODE_NAME", name},
               {"WORKER_MODE", setup_.mode},
               {"HOLD_FILE", (dir_ / "release").string()},
               tag_.env()};
    if (!setup_.shared_agent_store) env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1";
    for (auto& [k, v] : extra) env[k] = v;
    std::lock_guard<std::mutex> lock(spawn_mutex);
    nodes_[name] = std::make_unique<Process>(argv, dir_.path(), env, name);
  }

  Process& node(const std::string& name) { return *nodes_.at(name); }
  std::string out(const std::string& name) const { return nodes_.at(name)->out(); }
  std::vector<Result> results(const std::string& name) const { return parse_results(out(name)); }
  std::size_t count(const std::string& name) const { return results(name).size(); }

  // Waits until node `name` printed `n` result lines; throws after `timeout`
  // or when the job's time is up.
  void wait_results(const std::string& name, std::size_t n, std::chrono::milliseconds timeout = 60s) const {
    if (!wait_until([&] { return count(name) >= n; }, std::min(timeout, time_left())))
      throw ScenarioError("node " + name + " printed no result line " + std::to_string(n) + " within " +
                          std::to_string(std::min(timeout, time_left()).count()) + " ms");
  }

  // What is left of the job's time (kJobTime from its start); at least 1 ms.
  std::chrono::milliseconds time_left() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }

  // An outcome line: whether node `name`'s output holds `text`.
  std::string saw(const std::string& name, const std::string& text) const {
    return name + (out(name).find(text) != std::string::npos ? " printed " : " did not print ") + text + "\n";
  }

  // Lets hold- and loop-mode workers finish.
  void release() { write_file(dir_ / "release", ""); }

  // What a user sees, once every node exited (or the job's time is up): per node its
  // exit code and each worker's "w<world> r<restart>", in order; per world
  // size the ranks that reported it; whether every all_reduce was right; and
  // whether any process of the job (workers included) is left.
  std::string outcome() {
    std::ostringstream s;
    std::map<int, std::vector<int>> ranks;
    bool sums_ok = true;
    for (auto& [name, proc] : nodes_) {
      const auto code = proc->wait(time_left());
      s << name << ": exit " << (code ? std::to_string(*code) : "none (still running)") << ";";
      for (const auto& r : results(name)) {
        s << " w" << r.world << " r" << r.restart;
        ranks[r.world].push_back(r.rank);
        sums_ok = sums_ok && r.ok;
      }
      s << "\n";
    }
    for (auto& [world, rs] : ranks) {
      std::sort(rs.begin(), rs.end());
      s << "world " << world << " ranks";
      for (int r : rs) s << " " << r;
      s << "\n";
    }
    s << (sums_ok ? "all_reduce sums right" : "an all_reduce sum WRONG") << "\n";
    s << (wait_until([&] { return tag_.alive().empty(); }, 10s) ? "no process left" : "processes left")
      << "\n";
    return s.str();
  }

  // The keys of torchrun's rendezvous state in the daemon ("" through its own store).
  std::string daemon_keys() const {
    if (kind_ != StoreKind::kDaemon) return "";
    std::lock_guard<std::mutex> lock(spawn_mutex);
    return run({bin("ddp-store").string(), "--endpoint", "127.0.0.1:" + std::to_string(port_), "list",
                std::string("/torch.rendezvous.") + kRunId},
               dir_.path(), {}, 10s)
        .out;
  }

  std::string logs() const {
    std::string all = std::string("through ") + describe(kind_) + "\n";
    for (auto& [name, proc] : nodes_)
      all += "--- " + name + " stdout\n" + proc->out() + "--- " + name + " stderr\n" + proc->err();
    if (daemon_) all += "--- daemon stderr\n" + daemon_->err();
    return all;
  }

 private:
  using Clock = std::chrono::steady_clock;
  // A scenario's own bound: a job that hangs ends (its nodes killed by their
  // Process destructors, its workers by tag_) well before ctest's TIMEOUT,
  // which would leave them all running. Each scenario takes 10-30 s.
  static constexpr auto kJobTime = std::chrono::seconds(120);

  StoreKind kind_;
  Setup setup_;
  Clock::time_point deadline_ = Clock::now() + kJobTime;
  TempDir dir_;
  ProcessTag tag_;  // after dir_: destroyed first, before the files go
  std::unique_ptr<Process> daemon_;
  int port_ = 0;
  std::map<std::string, std::unique_ptr<Process>> nodes_;  // by name: outcome() lists them in order
};

using Scenario = std::function<std::string(Job&)>;

// Runs `scenario` through torchrun's own store and through ddp-rendezvousd,
// two jobs at once (one thread each: one job's waits overlap the other's
// torch imports); each outcome must be `expected`, hence the two the same.
void through_both(const Setup& setup, const std::string& expected, const Scenario& scenario) {
  is_torch2();  // once, before the threads
  struct Run {
    std::string outcome, logs, error, keys;
    double seconds = 0;
  };
  std::map<StoreKind, Run> runs = {{StoreKind::kOwn, {}}, {StoreKind::kDaemon, {}}};
  std::vector<std::thread> threads;
  for (auto& [kind, r] : runs) {
    threads.emplace_back([&setup, &scenario, kind = kind, &r = r] {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        Job job(kind, setup);
        try {
          r.outcome = scenario(job);
          r.keys = job.daemon_keys();
        } catch (const std::exception& e) {
          r.error = e.what();
        }
        r.logs = job.logs();
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& [kind, r] : runs) {
    INFO("through " << describe(kind) << " (" << r.seconds << " s)\n" << r.logs);
    CHECK(r.error == "");
    CHECK(r.outcome == expected);
    // Through the daemon, its keys show torchrun used it.
    if (kind == StoreKind::kDaemon)
      CHECK_THAT(r.keys, Catch::Contains(std::string("/torch.rendezvous.") + kRunId));
  }
  CHECK(runs[StoreKind::kDaemon].outcome == runs[StoreKind::kOwn].outcome);
}

}  // namespace

TEST_CASE("torchrun forms one world of 3 nodes through ddp-rendezvousd as through its own store", "[core]") {
  if (!have_torch()) return;
  through_both({"once"},
               "A: exit 0; w3 r0\nB: exit 0; w3 r0\nC: exit 0; w3 r0\nworld 3 ranks 0 1 2\nall_reduce sums "
               "right\nno process left\n",
               [](Job& job) {
                 for (const char* n : {"A", "B", "C"}) job.start(n, "3", 0);
                 return job.outcome();
               });
}

TEST_CASE("a node joining a running torchrun job re-forms the world without spending a restart") {
  if (!have_torch()) return;
  through_both({"hold", false},
               "A: exit 0; w2 r0 w3 r0\nB: exit 0; w2 r0 w3 r0\nC: exit 0; w3 r0\nworld 2 ranks 0 1\n"
               "world 3 ranks 0 1 2\nall_reduce sums right\nno process left\n",
               [](Job& job) {
                 job.start("A", "2:3", 0);
                 job.start("B", "2:3", 0);
                 job.wait_results("A", 1);
                 job.wait_results("B", 1);
                 job.start("C", "2:3", 0);
                 job.wait_results("A", 2);
                 job.wait_results("B", 2);
                 job.wait_results("C", 1);
                 job.release();
                 return job.outcome();
               });
}

// B's worker exits 3 after the first all_reduce. A's worker is in the next
// collective (loop mode): it loses its peer and fails too, so both exit 1.
TEST_CASE(
    "a failed torchrun worker without restarts fails the job through ddp-rendezvousd as through its own "
    "store") {
  if (!have_torch()) return;
  through_both(
      {"loop"},
      "A: exit 1; w2 r0\nB: exit 1; w2 r0\nworld 2 ranks 0 1\nall_reduce sums right\nno process left\n"
      "B printed trdzv-fail node=B\nA printed trdzv-peer-lost node=A\n",
      [](Job& job) {
        job.start("A", "2", 0);
        job.start("B", "2", 0, {{"FAIL_AT_RESTART", "0"}});
        auto outcome = job.outcome();  // first: the nodes have exited
        return outcome + job.saw("B", "trdzv-fail node=B") + job.saw("A", "trdzv-peer-lost node=A");
      });
}

// B's worker fails once. A's holds (no collective), so it stays healthy: A's
// agent sees B waiting to rejoin and restarts its workers as for a membership
// change, without spending a restart. Only B's workers see
// TORCHELASTIC_RESTART_COUNT=1. (With A's worker in a collective, A's agent
// spends a restart or not depending on whether it sees its worker fail or B
// waiting first: torchrun's race, not a store's.)
TEST_CASE(
    "a failed torchrun worker restarts with --max_restarts through ddp-rendezvousd as through its own "
    "store") {
  if (!have_torch()) return;
  through_both(
      {"hold", false},
      "A: exit 0; w2 r0 w2 r0\nB: exit 0; w2 r0 w2 r1\nworld 2 ranks 0 0 1 1\nall_reduce sums right\n"
      "no process left\nB printed trdzv-fail node=B rank=1 restart=0\n",
      [](Job& job) {
        job.start("A", "2", 1);
        job.start("B", "2", 1, {{"FAIL_AT_RESTART", "0"}});
        job.wait_results("A", 2);
        job.wait_results("B", 2);
        job.release();
        auto outcome = job.outcome();
        return outcome + job.saw("B", "trdzv-fail node=B rank=1 restart=0");
      });
}

namespace {

// A (--nnodes=1:2) forms a world of 1; B joins and the world re-forms at 2
// (A's agent sees B waiting). Staggered on purpose: started together, A would
// close a world of 1 anyway whenever B's torch import outlasts the last call.
// Returns B's worker's pid.
int form_two(Job& job) {
  job.start("A", "1:2", 1);
  job.wait_results("A", 1);
  job.start("B", "1:2", 1);
  job.wait_results("A", 2);
  job.wait_results("B", 1);
  return job.results("B").back().pid;
}

// After B's worker is gone: A's worker loses its peer, A spends its restart,
// and once B's heartbeat is stale (keep_alive_interval x
// keep_alive_max_attempt) the world re-forms at 1, within the bound.
std::string reform_and_finish(Job& job) {
  job.wait_results("A", 3, 45s);
  job.release();
  auto outcome = job.outcome();
  return outcome + job.saw("A", "trdzv-peer-lost node=A");
}

const char* const kReformed =
    "A: exit 0; w1 r0 w2 r0 w1 r1\nB: exit 137; w2 r0\nworld 1 ranks 0 0\nworld 2 ranks 0 1\n"
    "all_reduce sums right\nno process left\nA printed trdzv-peer-lost node=A\n";

}  // namespace

TEST_CASE("kill -9 of a torchrun node (agent and workers) re-forms the world without it", "[core]") {
  if (!have_torch()) return;
  through_both({"loop", false}, kReformed, [](Job& job) {
    const int worker = form_two(job);
    job.node("B").signal(SIGKILL);
    ::kill(worker, SIGKILL);
    return reform_and_finish(job);
  });
}
