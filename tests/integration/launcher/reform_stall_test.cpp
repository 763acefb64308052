// --on_failure=reform when a re-form cannot complete on its own
// (docs/reform.md, "A slot that never joins"): the real ddprun running
// ddp-example-train-reform, whose slot 3 SIGKILLs itself after step 10 while
// slot 1 SIGSTOPs itself in the re-form that starts, a second after the
// others (a survivor that stops, or is stuck in the kernel, during a re-form).
#include <signal.h>

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

namespace {

// The trainer over one epoch of 2048 samples, its checkpoint in `dir`: the
// program and its flags, after ddprun's own.
std::vector<std::string> one_epoch_trainer(const TempDir& dir) {
  return {bin("ddp-example-train-reform").string(),
          "--epochs",
          "1",
          "--dataset-size",
          "2048",
          "--checkpoint",
          (dir / "ckpt").string()};
}

// `ddprun --standalone --nproc_per_node=4 --on_failure=reform FLAGS` over the
// trainer (2 epochs of 16 steps) with slot 3 killed after step 10 and slot 1
// stopped in the re-form that follows. DDP_REFORM_TIMEOUT is 30 s unless
// `env` says otherwise: without a remedy, the other members' joins time out then.
RunResult kill_3_stop_1(const TempDir& dir, std::vector<std::string> flags, EnvOverrides env) {
  std::vector<std::string> args = {"--standalone", "--nproc_per_node=4", "--on_failure=reform"};
  args.insert(args.end(), flags.begin(), flags.end());
  for (const std::string& a :
       {std::string("--no_python"), bin("ddp-example-train-reform").string(), std::string("--epochs"),
        std::string("2"), std::string("--dataset-size"), std::string("2048"), std::string("--checkpoint"),
        (dir / "ckpt").string(), std::string("--kill-every"), std::string("10"), std::string("--kills"),
        std::string("1"), std::string("--kill-rank"), std::string("3"), std::string("--stop-rank"),
        std::string("1")}) {
    args.push_back(a);
  }
  if (env.count("DDP_REFORM_TIMEOUT") == 0) env["DDP_REFORM_TIMEOUT"] = "30";
  return ddprun(args, dir, env);
}

// The --event_log's "reform" events, in order.
std::vector<nlohmann::json> reform_events(const fs::path& log) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(read_file(log));
  for (std::string line; std::getline(lines, line);) {
    auto e = nlohmann::json::parse(line);
    if (e.at("event") == "reform") out.push_back(e);
  }
  return out;
}

}  // namespace

TEST_CASE("reform: a survivor stopped during a re-form is killed and replaced, and the job completes") {
  TempDir dir;
  const auto events = dir / "events.jsonl";
  const RunResult r = kill_3_stop_1(dir, {"--max_restarts=2", "--event_log", events.string()},
                                    {{"DDP_REFORM_STALL_TIMEOUT", "5"}});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("slot 1 pid ") && Catch::Contains(": SIGSTOP in the re-form"));
  // One restart each for the killed slot and the stopped one, no more.
  CHECK(count_lines(r.err, "starting a replacement (1/2)") == 1);
  CHECK(count_lines(r.err, "reform: rank 1 lost (hung, reform not joined (generation 1, which slot(s) ") ==
        1);
  CHECK(count_lines(r.err, "; starting a replacement (2/2)") == 1);
  CHECK(count_lines(r.err, "worker hung rank=") == 1);
  CHECK_THAT(r.out, Catch::Contains("after 2 epochs, 32 steps, 2 re-forms, 0 restarts"));
  // The healthy survivors kept their processes.
  const auto start = trainer_slot_pids(r.out, "start"), end = trainer_slot_pids(r.out, "end");
  for (int slot : {0, 2}) CHECK(end.at(slot) == start.at(slot));
  for (int slot : {1, 3}) CHECK(end.at(slot) != start.at(slot));
  const auto reforms = reform_events(events);
  REQUIRE(reforms.size() == 2);
  CHECK(reforms[1].at("ranks") == nlohmann::json::array({1}));
  CHECK_THAT(reforms[1].at("reason").get<std::string>(), Catch::Contains("reform not joined (generation 1"));
}

TEST_CASE("reform: a survivor stopped during a re-form with the restarts spent is the rank the job ends on") {
  TempDir dir;
  // No DDP_REFORM_STALL_TIMEOUT: half the reform timeout of 10 s is used.
  const RunResult r = kill_3_stop_1(dir, {"--max_restarts=1"}, {{"DDP_REFORM_TIMEOUT", "10"}});
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK(count_lines(r.err, "ddprun: error:") == 1);
  CHECK_THAT(r.err, Catch::Contains("ddprun: error: reform: rank 1 lost and max_restarts=1 is spent: 3 "
                                    "worker(s) would be left, fewer than the job's minimum of 4"));
  // The failure report names it and why.
  CHECK_THAT(r.err, Catch::Contains("hung, reform not joined (generation 1"));
}

TEST_CASE("reform: a rank waiting inside a re-form for a stopped one is not killed as hung") {
  TempDir dir;
  // The stopped slot misses its heartbeats and is killed for that; the
  // others, whose last heartbeat came a second before its own, heartbeat
  // while they wait for it in the re-form.
  const RunResult r = kill_3_stop_1(dir, {"--max_restarts=2", "--heartbeat_timeout=3"}, {});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.err, "worker hung rank=") == 1);
  CHECK(count_lines(r.err, "worker hung rank=1 ") == 1);
  CHECK(count_lines(r.err, "reform: rank 1 lost (hung, heartbeat missed") == 1);
  CHECK_THAT(r.out, Catch::Contains("after 2 epochs, 32 steps, 2 re-forms, 0 restarts"));
  const auto start = trainer_slot_pids(r.out, "start"), end = trainer_slot_pids(r.out, "end");
  for (int slot : {0, 2}) CHECK(end.at(slot) == start.at(slot));
}

namespace {

// `ddprun --standalone --nproc_per_node=4 --on_failure=reform --max_restarts=1`
// over one epoch of the trainer whose slot 1 exits 1 once the training is
// done (--fail-at-end), with `extra` trainer flags. DDP_REFORM_TIMEOUT is 20 s:
// a re-form that waits for finished slots ends then.
RunResult fail_at_end(const TempDir& dir, const std::vector<std::string>& extra, EnvOverrides env) {
  std::vector<std::string> args = {"--standalone", "--nproc_per_node=4", "--on_failure=reform",
                                   "--max_restarts=1", "--no_python"};
  const auto trainer = one_epoch_trainer(dir);
  args.insert(args.end(), trainer.begin(), trainer.end());
  args.insert(args.end(), {"--fail-at-end", "1"});
  args.insert(args.end(), extra.begin(), extra.end());
  env["DDP_REFORM_TIMEOUT"] = "20";
  return ddprun(args, dir, env);
}

}  // namespace

TEST_CASE("reform: a rank that fails after its siblings finished restarts every worker, no replacement") {
  TempDir dir;
  // Slot 1 exits 1 2 s after slots 0, 2, 3 exit 0: a replacement would
  // wait for them in a generation they never join.
  const RunResult r = fail_at_end(dir, {}, {});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("slot 1 pid ") && Catch::Contains(": exit 1 after the training"));
  CHECK(count_lines(r.err,
                    "reform: rank 1 lost (exit code 1) after 3 of this node's workers finished (exit "
                    "0), which cannot re-form: restarting every worker") == 1);
  CHECK(count_lines(r.err, "restarting workers (1/1) after failure of rank 1") == 1);
  CHECK_THAT(r.err, !Catch::Contains("starting a replacement"));
  CHECK_THAT(r.out, Catch::Contains("after 1 epochs, 16 steps, 0 re-forms, 1 restarts"));
}

TEST_CASE("reform: a re-form left waiting for ranks that finished restarts every worker at its stall") {
  TempDir dir;
  // Slot 1 exits 1 at once, its siblings a second later (4 s before the
  // stall, which would kill live slots that never joined), after its
  // replacement joined generation 1: they never join it, and its stall names them.
  const RunResult r = fail_at_end(dir, {"--end-sleep-ms", "1000"}, {{"DDP_REFORM_STALL_TIMEOUT", "5"}});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.err, "reform: rank 1 lost (exit code 1); starting a replacement (1/1)") == 1);
  CHECK(count_lines(r.err, "reform: generation 1 waits for rank ") == 1);
  CHECK_THAT(r.err, Catch::Contains(", which finished (exit 0) and cannot re-form: restarting every worker"));
  // The restart takes the replacement's place: one restart for the failure.
  CHECK(count_lines(r.err, "restarting workers (1/1) after failure of rank 1") == 1);
  CHECK_THAT(r.err, !Catch::Contains("worker hung"));
  CHECK_THAT(r.out, Catch::Contains("after 1 epochs, 16 steps, 0 re-forms, 1 restarts"));
}

TEST_CASE(
    "reform: a rank that fails after a rank on another node finished restarts the job, no replacement") {
  TempDir dir;
  LocalDaemon daemon(dir);
  REQUIRE(daemon.port > 0);
  // Two nodes of one worker each: rank 0 exits 0 on one, and 2 s later
  // rank 1 exits 1 on the other, whose agent sees no finished sibling of its
  // own: R/finished tells it.
  const auto node = [&](const std::string& name) {
    return ddprun_argv({"--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=" + daemon.endpoint, "--rdzv_id=job", "--local_addr=" + name,
                        "--on_failure=reform", "--max_restarts=1", "--no_python",
                        bin("ddp-example-train-reform").string(), "--epochs", "1", "--dataset-size", "2048",
                        "--checkpoint", (dir / "ckpt").string(), "--fail-at-end", "1"});
  };
  const EnvOverrides env = clean_env({{"DDP_REFORM_TIMEOUT", "20"}});
  Process a(node("nodea"), dir.path(), env, "nodea");
  Process b(node("nodeb"), dir.path(), env, "nodeb");
  const auto code_a = a.wait(std::chrono::seconds(60));
  const auto code_b = b.wait(std::chrono::seconds(60));
  const std::string err = a.err() + b.err(), out = a.out() + b.out();
  INFO(out << err);
  CHECK(code_a == std::optional<int>(0));
  CHECK(code_b == std::optional<int>(0));
  CHECK_THAT(out, Catch::Contains(": exit 1 after the training (--fail-at-end)"));
  CHECK(count_lines(err,
                    "reform: rank 1 lost (exit code 1) after 1 worker(s) of the job finished (exit 0), "
                    "which cannot re-form: restarting every worker") == 1);
  CHECK_THAT(err, !Catch::Contains("starting a replacement"));
  CHECK(count_lines(err, "restarting workers (1/1)") == 2);  // both nodes, one restart
  CHECK_THAT(out, Catch::Contains(" 0 re-forms, 1 restarts"));
}

namespace {

// ddprun's argv for one agent of a c10d job of one worker per node on
// `daemon`, in reform mode, over one epoch of the trainer whose slots
// `linger_slots` ("1,2") spend `linger_ms` in their teardown after it.
std::vector<std::string> linger_node(const TempDir& dir, const LocalDaemon& daemon, const std::string& name,
                                     const std::string& nnodes, const std::string& last_call,
                                     const std::string& linger_slots, const std::string& linger_ms) {
  std::vector<std::string> args = {
      "--nnodes=" + nnodes,   "--nproc_per_node=1",
      "--rdzv_backend=c10d",  "--rdzv_endpoint=" + daemon.endpoint,
      "--rdzv_id=job",        "--rdzv_conf=last_call_timeout=" + last_call + ",keep_alive_interval=0.5",
      "--local_addr=" + name, "--on_failure=reform",
      "--max_restarts=1",     "--no_python"};
  const auto trainer = one_epoch_trainer(dir);
  args.insert(args.end(), trainer.begin(), trainer.end());
  args.insert(args.end(), {"--linger-slots", linger_slots, "--linger-ms", linger_ms});
  return ddprun_argv(args);
}

}  // namespace

TEST_CASE(
    "reform: a node lost after a rank on another node finished gives its place up instead of offering it to "
    "a hot spare") {
  TempDir dir;
  LocalDaemon daemon(dir);
  REQUIRE(daemon.port > 0);
  // Three nodes of one worker each (MIN 1) and a hot spare. The training
  // ends: rank 0 exits 0 at once, ranks 1 and 2 stay 6 s in their teardown,
  // and rank 1's node is killed meanwhile. A spare's worker would wait for
  // rank 0, which never joins again, until its re-form timed out.
  const auto node = [&](const std::string& name) {
    return linger_node(dir, daemon, name, "1:3", "30", "1,2", "6000");
  };
  const EnvOverrides env = clean_env({{"DDP_REFORM_TIMEOUT", "60"}, {"DDP_REFORM_STALL_TIMEOUT", "30"}});
  std::vector<std::unique_ptr<Process>> nodes;
  for (const char* name : {"nodea", "nodeb", "nodec"})
    nodes.push_back(std::make_unique<Process>(node(name), dir.path(), env, name));
  const auto running = [&](int rank) -> Process* {
    for (auto& p : nodes)
      if (p->out().find(" start: rank " + std::to_string(rank) + " of 3") != std::string::npos)
        return p.get();
    return nullptr;
  };
  REQUIRE(wait_until([&] { return running(0) && running(1) && running(2); }, 60s));
  Process s(node("nodes"), dir.path(), env, "nodes");
  REQUIRE(wait_until([&] { return s.err().find("hot spare") != std::string::npos; }, 30s));
  Process& first = *running(0);
  Process& lost = *running(1);
  Process& last = *running(2);
  // Rank 0 exited 0, and its agent counted it in R/finished.
  REQUIRE(wait_until([&] { return first.err().find("all 1 local workers succeeded") != std::string::npos; },
                     60s));
  std::this_thread::sleep_for(200ms);
  lost.signal(SIGKILL);
  CHECK(lost.wait(10s).has_value());
  const auto code_first = first.wait(60s);
  const auto code_last = last.wait(60s);
  // The job's end is the spare's: it exits with the job, at once.
  const auto code_s = s.wait(10s);
  INFO("rank 0's node:\n"
       << first.err() << "rank 2's node:\n"
       << last.err() << last.out() << "spare:\n"
       << s.err() << s.out());
  CHECK(code_first == std::optional<int>(0));
  CHECK(code_last == std::optional<int>(0));
  CHECK(code_s == std::optional<int>(0));
  CHECK(s.out().find(" start: rank") == std::string::npos);
  CHECK(count_lines(last.err(),
                    "lost after 1 worker(s) of the job finished (exit 0), which a hot spare's "
                    "workers would wait for: no hot spare takes its place") == 1);
  CHECK(count_lines(last.err(), "no hot spare: the job goes on without ranks 1, world size 2") == 1);
  CHECK_THAT(s.err(), Catch::Contains("run_id=job finished while this node waited "));
}

TEST_CASE(
    "reform: a hot spare whose workers wait for a rank that finished after it took the place restarts the "
    "job at the stall") {
  TempDir dir;
  LocalDaemon daemon(dir);
  REQUIRE(daemon.port > 0);
  // Two nodes of one worker and a hot spare. Both ranks end the training
  // and spend 4 s in their teardown; rank 1's node is killed at once. No
  // worker has finished yet, so the spare takes the place, and its rank 1
  // waits in generation 1 for rank 0, which exits 0 meanwhile. Before, it
  // waited for DDP_REFORM_TIMEOUT (60 s here).
  const auto node = [&](const std::string& name) {
    return linger_node(dir, daemon, name, "1:2", "2", "0,1", "4000");
  };
  const EnvOverrides env = clean_env({{"DDP_REFORM_TIMEOUT", "60"}, {"DDP_REFORM_STALL_TIMEOUT", "5"}});
  Process a(node("nodea"), dir.path(), env, "nodea");
  Process b(node("nodeb"), dir.path(), env, "nodeb");
  REQUIRE(
      wait_until([&] { return (a.out() + b.out()).find(" start: rank 1 of 2") != std::string::npos; }, 60s));
  Process s(node("nodes"), dir.path(), env, "nodes");
  REQUIRE(wait_until([&] { return s.err().find("hot spare") != std::string::npos; }, 30s));
  const bool a_first = a.out().find(" start: rank 0 of 2") != std::string::npos;
  Process& first = a_first ? a : b;
  Process& lost = a_first ? b : a;
  REQUIRE(wait_until(
      [&] {
        return first.out().find(" end: rank 0 of 2") != std::string::npos &&
               lost.out().find(" end: rank 1 of 2") != std::string::npos;
      },
      60s));
  lost.signal(SIGKILL);
  CHECK(lost.wait(10s).has_value());
  const auto code_s = s.wait(40s);
  const auto code_first = first.wait(10s);
  INFO("spare exit " << (code_s ? *code_s : -1) << "\nrank 0's node:\n"
                     << first.err() << first.out() << "spare:\n"
                     << s.err() << s.out());
  CHECK(code_s == std::optional<int>(0));
  CHECK(code_first == std::optional<int>(0));
  CHECK_THAT(s.err(), Catch::Contains("this hot spare takes its place: ranks 1 join the running workers"));
  CHECK(count_lines(s.err(),
                    "reform: generation 1 waits for slots that cannot all join: 1 worker(s) of the job "
                    "finished (exit 0): restarting every worker") == 1);
  // Both nodes spent the one restart: their workers agree on TORCHELASTIC_RESTART_COUNT.
  CHECK(count_lines(first.err() + s.err(), "restarting workers (1/1)") == 2);
  CHECK_THAT(first.out() + s.out(), Catch::Contains(" 0 re-forms, 1 restarts"));
}
