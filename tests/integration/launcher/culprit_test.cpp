// Who hung (docs/agent-diagnosis.md, "Who hung: the culprit rule"): the example trainer
// (worker SDK, which counts its collectives in the liveness file) with one
// rank stalled in the compute of a step, before the all-reduces the other
// ranks then wait in, and coming late into that step, so that the waiting
// ranks' deadlines pass first. The rank killed and named must be the stalled
// one, every time, whichever it is; and across nodes, the node of the
// stalled rank acts while the other one waits for it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The trainer whose rank `rank` stalls in the compute of step 5, 300 ms late into it.
std::vector<std::string> stalling_trainer(const TempDir& dir, int rank) {
  return {"--no_python",     bin("ddp-example-train").string(),
          "--epochs",        "1",
          "--dataset-size",  "4096",
          "--step-sleep-ms", "10",
          "--stall-rank",    std::to_string(rank),
          "--stall-at-step", "5",
          "--stall-in",      "compute",
          "--stall-late-ms", "300",
          "--checkpoint",    (dir / ("ckpt" + std::to_string(rank))).string()};
}

// The root cause of the attempt's failure.json under `log_dir` (one run id).
nlohmann::json root_cause(const fs::path& log_dir) {
  for (const auto& run : fs::directory_iterator(log_dir)) {
    const auto file = run.path() / "attempt_0" / "failure.json";
    if (fs::exists(file)) return nlohmann::json::parse(read_file(file))["root_cause"];
  }
  return nullptr;
}

// Ten runs of three local ranks with `flags`, the stalled rank the lowest,
// the middle and the highest in turn: how many named and killed it alone.
void ten_of_ten(const std::vector<std::string>& flags) {
  const int order[] = {0, 1, 2, 0, 1, 2, 0, 1, 2, 1};
  int right = 0;
  std::string wrong;
  for (int i = 0; i < 10; ++i) {
    TempDir dir;
    const int hung = order[i];
    const auto r = ddprun(
        concat(concat({"--standalone", "--nproc_per_node=3", "--log_dir", (dir / "logs").string()}, flags),
               stalling_trainer(dir, hung)),
        dir);
    const auto h = std::to_string(hung);
    const auto root = root_cause(dir / "logs");
    const bool ok = r.code == 1 && count_lines(r.err, "worker hung") == 1 &&
                    r.err.find("worker hung rank=" + h + " local_rank=" + h) != std::string::npos &&
                    r.err.find("wait in all_reduce #") != std::string::npos &&
                    r.err.find(" for rank " + h + "\n") != std::string::npos && root.is_object() &&
                    root["rank"] == hung &&
                    root["hang"]["waiting"].get<std::string>().find("for rank " + h) != std::string::npos;
    if (ok) {
      ++right;
    } else {
      wrong += "run " + std::to_string(i) + " (rank " + h + " stalled), exit " + std::to_string(r.code) +
               ":\n" + r.err + "\n";
    }
  }
  INFO(wrong);
  CHECK(right == 10);
}

}  // namespace

TEST_CASE(
    "with section timeouts the stalled rank is named and killed, not the ranks waiting for it, 10 of 10") {
  ten_of_ten({"--section_timeouts", "step=2"});
}

TEST_CASE(
    "with a heartbeat timeout the stalled rank is named and killed, not the ranks waiting for it, 10 of 10") {
  ten_of_ten({"--heartbeat_timeout", "2"});
}

TEST_CASE("the report says what the other ranks wait in and how the culprit was told apart") {
  TempDir dir;
  const auto r = ddprun(concat({"--standalone", "--nproc_per_node=3", "--section_timeouts", "step=2"},
                               stalling_trainer(dir, 1)),
                        dir);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("rank       : 1 (local_rank 1)"));
  CHECK_THAT(r.err, Catch::Contains("  waiting    : ranks 0, 2 wait in all_reduce #"));
  CHECK_THAT(r.err, Catch::Contains(" for rank 1\n"));
  CHECK_THAT(r.err, Catch::Contains("  culprit    : rank ") &&
                        Catch::Contains("rank 1 is in no collective (liveness file"));
  CHECK_THAT(r.err, Catch::Contains("which waits for it"));
}

namespace {

// Two nodes of two ranks (static rendezvous on 127.0.0.1); rank 3, node1's
// second, stalls in compute. `flags1` are node1's deadline flags.
struct TwoNodes {
  TwoNodes(const TempDir& dir, const std::vector<std::string>& flags1) {
    const int port = free_port();
    auto node = [&](int rank, const std::vector<std::string>& flags) {
      return ddprun_argv(concat(concat(concat(static_node_flags(rank, 2, port),
                                              {"--nproc_per_node=2", "--rdzv_conf=join_timeout=30"}),
                                       flags),
                                stalling_trainer(dir, 3)));
    };
    Process a(node(0, {"--section_timeouts", "step=2"}), dir.path(), clean_env({}), "node0");
    Process b(node(1, flags1), dir.path(), clean_env({}), "node1");
    code_b = b.wait(90s);
    code_a = a.wait(90s);
    err_a = a.err();
    err_b = b.err();
  }
  std::optional<int> code_a, code_b;
  std::string err_a, err_b;
};

}  // namespace

TEST_CASE("ranks waiting for a rank of another node are left to that node, which names and kills it") {
  TempDir dir;
  TwoNodes job(dir, {"--section_timeouts", "step=2"});
  INFO("node0:\n" << job.err_a << "\nnode1:\n" << job.err_b);
  CHECK(job.code_a == std::optional<int>(1));
  CHECK(job.code_b == std::optional<int>(1));
  // node0's ranks 0 and 1 wait in the all-reduce: it kills neither.
  CHECK(count_lines(job.err_a, "worker hung") == 0);
  CHECK_THAT(job.err_a,
             Catch::Contains("wait in all_reduce #") && Catch::Contains("for a rank on another node"));
  // node1 kills rank 3, and says that its rank 2 waits for it.
  CHECK(count_lines(job.err_b, "worker hung") == 1);
  CHECK_THAT(job.err_b, Catch::Contains("worker hung rank=3 local_rank=1"));
  CHECK_THAT(job.err_b, Catch::Contains("rank 2 waits in all_reduce #"));
  // The healthy node's last line names the hung rank on node1.
  CHECK_THAT(job.err_a, Catch::Contains("rank 3 on node1: hung, section 'step' expired"));
}

TEST_CASE(
    "when the other node names nobody, the first local rank to miss is killed after a grace, saying why") {
  TempDir dir;
  // node1 watches nothing: its stalled rank 3 is never named there.
  TwoNodes job(dir, {});
  INFO("node0:\n" << job.err_a << "\nnode1:\n" << job.err_b);
  CHECK(job.code_a == std::optional<int>(1));
  CHECK(count_lines(job.err_a, "worker hung") == 1);
  CHECK_THAT(job.err_a, Catch::Contains("leaving it to that node for 5 s"));
  CHECK_THAT(job.err_a, Catch::Contains("no other node named the rank they wait for in time"));
}

namespace {

// A directory holding `timeout` (the stack collector runs each debugger under
// it) and, when `eu_stack` is given, an eu-stack script with that body.
fs::path tools(const TempDir& dir, const std::string& eu_stack) {
  const auto d = dir / "tools";
  fs::create_directories(d);
  fs::create_symlink("/usr/bin/timeout", d / "timeout");
  if (!eu_stack.empty()) {
    write_file(d / "eu-stack", "#!/bin/sh\n" + eu_stack + "\n");
    fs::permissions(d / "eu-stack", fs::perms::owner_all);
  }
  return d;
}

}  // namespace

TEST_CASE("without eu-stack or gdb the report says so in one line and the hung rank is still killed") {
  TempDir dir;
  const auto r = ddprun(concat({"--standalone", "--nproc_per_node=3", "--section_timeouts", "step=2"},
                               stalling_trainer(dir, 2)),
                        dir, {{"PATH", tools(dir, "").string()}});
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("worker hung rank=2 local_rank=2"));
  CHECK_THAT(r.err, Catch::Contains("  stuck at   : no native stack: install elfutils (eu-stack) or gdb"));
}

namespace {

// The pid of the example trainer's rank `rank` whose command line holds `mark`; -1 if none.
pid_t trainer_pid(int rank, const std::string& mark) {
  const std::string want = "RANK=" + std::to_string(rank);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto cmdline = read_file(e.path() / "cmdline");
    if (cmdline.find("ddp-example-train") == std::string::npos || cmdline.find(mark) == std::string::npos)
      continue;
    const auto environ = read_file(e.path() / "environ");
    if (environ.find(std::string("\0") + want + '\0') != std::string::npos ||
        environ.rfind(want + '\0', 0) == 0)
      return std::stoi(name);
  }
  return -1;
}

}  // namespace

TEST_CASE(
    "a worker another debugger holds: the report says ptrace was refused, in one line, and it is killed") {
  TempDir dir;
  Process job(ddprun_argv(concat({"--standalone", "--nproc_per_node=3", "--section_timeouts", "step=2"},
                                 stalling_trainer(dir, 2))),
              dir.path(), clean_env({}), "ddprun");
  // Once rank 2 stalls (2 s before its deadline), a tracer seizes it: no
  // second tracer (eu-stack, gdb) may attach then.
  REQUIRE(wait_until([&] { return job.out().find("rank 2: stalling in the compute") != std::string::npos; },
                     60s));
  const pid_t pid = trainer_pid(2, (dir / "ckpt2").string());
  REQUIRE(pid > 0);
  Process tracer({"/usr/bin/python3", "-c",
                  "import ctypes, sys, time\n"
                  "libc = ctypes.CDLL(None, use_errno=True)\n"
                  "if libc.ptrace(0x4206, int(sys.argv[1]), 0, 0) != 0: sys.exit('PTRACE_SEIZE failed')\n"
                  "print('seized', flush=True)\n"
                  "time.sleep(600)\n",
                  std::to_string(pid)},
                 dir.path(), {}, "tracer");
  REQUIRE(
      wait_until([&] { return tracer.out().find("seized") != std::string::npos || !tracer.running(); }, 30s));
  REQUIRE(tracer.out().find("seized") != std::string::npos);
  const auto code = job.wait(90s);
  INFO(job.err());
  CHECK(code == std::optional<int>(1));
  CHECK_THAT(job.err(), Catch::Contains("worker hung rank=2 local_rank=2"));
  CHECK_THAT(job.err(),
             Catch::Contains("  stuck at   : cannot attach to the worker (ptrace: Operation not permitted)"));
}

TEST_CASE("a debugger that never finishes costs the stack, not the kill: the report names the time-out") {
  TempDir dir;
  const auto r = ddprun(concat({"--standalone", "--nproc_per_node=3", "--section_timeouts", "step=2"},
                               stalling_trainer(dir, 0)),
                        dir, {{"PATH", tools(dir, "exec /bin/sleep 600").string()}});
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("worker hung rank=0 local_rank=0"));
  CHECK_THAT(r.err, Catch::Contains("  stuck at   : eu-stack did not finish within"));
  CHECK(count_lines(r.err, "worker hung") == 1);
}
