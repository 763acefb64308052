// Heartbeats and sections (docs/agent-liveness.md, "Heartbeats and sections"): the real
// ddprun running the example trainer, which heartbeats every step inside a
// "step" section and stalls one rank on demand.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <sstream>
#include <thread>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> trainer(const TempDir& dir, std::vector<std::string> extra) {
  std::vector<std::string> args = {bin("ddp-example-train").string(),
                                   "--epochs",
                                   "1",
                                   "--dataset-size",
                                   "512",
                                   "--checkpoint",
                                   (dir / "ckpt").string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The trainer with 50 ms steps whose rank `rank` stalls at step `step`.
std::vector<std::string> stalling_trainer(const TempDir& dir, int rank, int step) {
  return trainer(dir, {"--step-sleep-ms", "50", "--stall-rank", std::to_string(rank), "--stall-at-step",
                       std::to_string(step)});
}

// ddprun --standalone with two local workers, `flags`, and the trainer (native).
RunResult two_local_ranks(const TempDir& dir, const std::vector<std::string>& flags,
                          const std::vector<std::string>& trainer_args) {
  return ddprun(
      concat(concat({"--standalone", "--nproc_per_node=2"}, flags), concat({"--no_python"}, trainer_args)),
      dir);
}

// What ddprun's log says of a rank that hung in its "step" section, once.
void check_hung_in_step(const std::string& err, int rank) {
  const auto r = std::to_string(rank);
  CHECK_THAT(err, Catch::Contains("worker hung rank=" + r + " local_rank=" + r));
  CHECK_THAT(err, Catch::Contains("section 'step' expired"));
  CHECK(count_lines(err, "worker hung") == 1);
}

// Two nodes of one job (node0, node1) on 127.0.0.1, one worker each, with
// `flags`; rank 1 (node1's worker) stalls at step 3. Both are waited for.
struct TwoNodes {
  TwoNodes(const TempDir& dir, const std::vector<std::string>& flags) {
    const int port = free_port();
    auto node = [&](int rank) {
      return ddprun_argv(concat(concat(concat(static_node_flags(rank, 2, port),
                                              {"--nproc_per_node=1", "--rdzv_conf=join_timeout=30"}),
                                       flags),
                                concat({"--no_python"}, stalling_trainer(dir, 1, 3))));
    };
    Process a(node(0), dir.path(), clean_env({}), "node_a");
    Process b(node(1), dir.path(), clean_env({}), "node_b");
    code_b = b.wait(60s);
    code_a = a.wait(60s);
    err_a = a.err();
    err_b = b.err();
  }
  std::optional<int> code_a;
  std::optional<int> code_b;
  std::string err_a;
  std::string err_b;
};

}  // namespace

TEST_CASE(
    "a rank stalled past its section timeout is killed, named with its section, and a restart finishes") {
  TempDir dir;
  auto r =
      two_local_ranks(dir, {"--max_restarts=1", "--section_timeouts", "step=2"}, stalling_trainer(dir, 1, 3));
  INFO(r.err);
  CHECK(r.code == 0);
  check_hung_in_step(r.err, 1);
  CHECK_THAT(r.err, Catch::Contains("restarting workers (1/1) after failure of rank 1"));
}

TEST_CASE("without restarts the failure report names the hung rank and its section") {
  TempDir dir;
  auto r = two_local_ranks(dir, {"--section_timeouts", "step=2,checkpoint=60"}, stalling_trainer(dir, 0, 2));
  INFO(r.err);
  CHECK(r.code == 1);
  // The report's root cause is the hung rank, with what it was doing.
  CHECK_THAT(r.err, Catch::Contains("Root cause (first failure)"));
  CHECK_THAT(r.err, Catch::Contains("rank       : 0 (local_rank 0)"));
  CHECK_THAT(r.err, Catch::Contains("hang       : section 'step' expired"));
  // Where it was (eu-stack, a native worker), and what the other rank, whose
  // own step then outlasts its timeout too, was waiting in; only rank 0 is
  // blamed.
  CHECK_THAT(r.err, Catch::Contains("stuck at   :\n") && Catch::Contains("train("));
  CHECK_THAT(r.err, Catch::Contains("[rank 1] waiting in: "));
  CHECK(count_lines(r.err, "worker hung") == 1);
}

TEST_CASE("auto section timeouts learn the normal step and then catch a stall of ten steps") {
  TempDir dir;
  // 16 steps of ~400 ms per rank; after the warm-up of 10 the timeout is about
  // 5 x 400 ms, and rank 1 stalls for 4 s at the end of step 13. (With 200 ms
  // steps, a normal step on a 2-core host under a load of 10 once outlasted
  // its learned 1 s, and the stall, which only the first attempt has, never came.)
  auto r = two_local_ranks(dir, {"--max_restarts=1", "--section_timeouts", "auto"},
                           trainer(dir, {"--dataset-size", "1024", "--step-sleep-ms", "400", "--stall-rank",
                                         "1", "--stall-at-step", "13", "--stall-seconds", "4"}));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("worker hung rank=1 local_rank=1"));
  CHECK_THAT(r.err, Catch::Contains("section 'step' expired"));
  CHECK_THAT(r.err, Catch::Contains("learned from 12 runs"));
}

TEST_CASE("heartbeats are off by default: a stalled worker that heartbeats is not killed") {
  TempDir dir;
  auto r = two_local_ranks(
      dir, {}, trainer(dir, {"--stall-rank", "1", "--stall-at-step", "2", "--stall-seconds", "1.5"}));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, !Catch::Contains("hung"));
}

TEST_CASE("a worker that never heartbeats is not killed for it, even with timeouts set") {
  TempDir dir;
  auto r = ddprun({"--standalone", "--nproc_per_node=2", "--heartbeat_timeout=0.2", "--section_timeouts",
                   "step=0.2", "--no_python", bin("fake_worker").string()},
                  dir, {{"FAKE_SLEEP_MS", "1500"}});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, !Catch::Contains("hung"));
}

TEST_CASE("a hang on one node restarts the other node too, within the restart budget") {
  TempDir dir;
  const TwoNodes job(dir, {"--max_restarts=1", "--section_timeouts", "step=2"});
  INFO("node A:\n" << job.err_a << "node B:\n" << job.err_b);
  CHECK(job.code_b == std::optional<int>(0));
  CHECK(job.code_a == std::optional<int>(0));
  CHECK_THAT(job.err_b, Catch::Contains("worker hung rank=1"));
  // Node A's workers were healthy; they restarted because node B's hung.
  CHECK(count_lines(job.err_a, "worker hung") == 0);
  CHECK(count_lines(job.err_a, "started 1 workers attempt=1") == 1);
  CHECK_THAT(job.err_b, Catch::Contains("restarting workers (1/1) after failure of rank 1 on node1: hung"));
}

TEST_CASE("with no restarts left a hang on one node fails both nodes, and the hung node's report names it") {
  TempDir dir;
  const TwoNodes job(dir, {"--heartbeat_timeout=2"});
  INFO("node A:\n" << job.err_a << "node B:\n" << job.err_b);
  CHECK(job.code_b == std::optional<int>(1));
  CHECK(job.code_a == std::optional<int>(1));
  CHECK_THAT(job.err_b, Catch::Contains("hang       : heartbeat missed"));
  CHECK(count_lines(job.err_a, "started 1 workers") == 1);
}

TEST_CASE("ddp-store status shows each rank's heartbeat age") {
  TempDir dir;
  const LocalDaemon daemon(dir);
  const std::string& endpoint = daemon.endpoint;
  Process job(ddprun_argv(concat(
                  {"--nnodes=1", "--nproc_per_node=2", "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint,
                   "--rdzv_id=hbjob", "--stop_timeout=2", "--no_python"},
                  trainer(dir, {"--epochs", "100000", "--step-sleep-ms", "20"}))),
              dir.path(), clean_env({}), "job");
  RunResult table;
  const bool shown = wait_for_status(dir, endpoint, "hbjob", table, [](const std::string& out) {
    return out.find("r0 ") != std::string::npos && out.find("r1 ") != std::string::npos;
  });
  INFO(table.out << table.err << job.err());
  REQUIRE(shown);
  CHECK_THAT(table.out, Catch::Contains("HEARTBEAT"));
  CHECK_THAT(table.out, Catch::Matches("(.|\n)*r0 [0-9]+\\.[0-9]s.*, r1 [0-9]+\\.[0-9]s(.|\n)*"));
  // The record is republished every few seconds while the workers beat,
  // with a newer heartbeat count, though no lifecycle event happens.
  const auto beats = [&] {
    const auto kv =
        run({bin("ddp-store").string(), "--endpoint", endpoint, "list", "/hbjob/agent/status/"}, dir.path());
    const auto at = kv.out.find("\"heartbeats\":");
    return at == std::string::npos ? -1L : std::stol(kv.out.substr(at + 13));
  };
  const long first = beats();
  CHECK(first > 0);
  CHECK(wait_until([&] { return beats() > first; }, 30s));
  job.signal(SIGTERM);
  CHECK(job.wait(20s).has_value());
}

TEST_CASE("a Python worker writing the liveness file by hand is watched the same way") {
  // worker_sdk/examples/ddp_liveness.py: the documented layout, no C++ SDK.
  TempDir dir;
  write_file(dir / "train.py",
             "import os, sys, time\n"
             "sys.path.insert(0, sys.argv[1])\n"
             "import ddp_liveness as live\n"
             "for step in range(40):\n"
             "    with live.section('step'):\n"
             "        live.heartbeat()\n"
             "        time.sleep(0.02)\n"
             "        if step == 5 and os.environ['RANK'] == '1':\n"
             "            time.sleep(3600)\n");
  auto r = ddprun(
      {"--standalone", "--nproc_per_node=2", "--section_timeouts", "step=1", "--python", "/usr/bin/python3",
       (dir / "train.py").string(), (source_dir() / "worker_sdk" / "examples").string()},
      dir);
  INFO(r.err);
  CHECK(r.code == 1);
  check_hung_in_step(r.err, 1);
}

namespace {

// User plus system CPU time of a process, from /proc/PID/stat.
std::chrono::milliseconds cpu_time(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string f;
  long long ticks = 0;
  for (int i = 3; fields >> f && i <= 15; ++i) {
    if (i >= 14) ticks += std::stoll(f);  // utime, stime
  }
  return std::chrono::milliseconds(ticks * 1000 / ::sysconf(_SC_CLK_TCK));
}

}  // namespace

TEST_CASE("a heartbeat time near the clock's end in a liveness file does not make the agent spin") {
  // A deadline past int64 nanoseconds used to become a time in the past: the
  // agent's timer fired, found the worker alive, re-armed it, fired again.
  TempDir dir;
  write_file(dir / "w.py",
             "import mmap, os, struct, time\n"
             "m = mmap.mmap(os.open(os.environ['DDP_LIVENESS_FILE'], os.O_RDWR), 4096)\n"
             "struct.pack_into('<Q', m, 24, 2**63 + 5)  # last heartbeat\n"
             "struct.pack_into('<Q', m, 16, 1)          # heartbeat count\n"
             "os.write(os.open(os.environ['DDP_LIVENESS_PIPE'], os.O_WRONLY | os.O_NONBLOCK), b'x')\n"
             "print('beat', flush=True)\n"
             "while not os.path.exists(os.path.join(os.path.dirname(__file__), 'go')):\n"
             "    time.sleep(0.02)\n");
  Process job(ddprun_argv({"--standalone", "--nproc_per_node=1", "--heartbeat_timeout=5", "--no_python",
                           "/usr/bin/python3", (dir / "w.py").string()}),
              dir.path(), clean_env({}), "ddprun");
  REQUIRE(wait_until([&] { return job.out().find("[rank 0]:beat") != std::string::npos; }, 20s));
  // Past the agent's own start (slow in a sanitized build), then over 3 s:
  // idle, the agent uses next to no CPU; spinning, a core's worth, or half
  // of one on a machine as busy as CI's.
  std::this_thread::sleep_for(1s);
  const auto before = cpu_time(job.pid());
  CHECK_FALSE(wait_until([&] { return cpu_time(job.pid()) - before > 1000ms; }, 3s));
  write_file(dir / "go", "");
  CHECK(job.wait(20s) == 0);
  INFO(job.err());
  CHECK_THAT(job.err(), !Catch::Contains("worker hung"));
}
